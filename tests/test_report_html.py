"""`sweep report`: one static HTML file, rendered by a real headless Chromium.

The campaign is the real demo (real runs, events and evidence), with spend entries added to its
ledgers (the oracle runtimes cost nothing) and a hostile pull-request title planted in one run's
candidate. Chromium renders the file offline: its DOM (--dump-dom) must hold data marks in every
plot and no script, and its screenshot must not be blank.
"""
from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import time
import zlib
from pathlib import Path

import pytest

from runstate import run_dir
from runstate.files import write_model_atomic
from runstate.models import SpendEntry, SpendLedger
from tests.campaigns import demo_copy, sweep

HOSTILE = "<script>document.title='pwned'</script></svg><img src=x onerror=alert(1)>&amp; \"quoted\""
PLOTS = ("endings", "causes", "solve_rates", "verified_per_hour", "spend", "lanes", "failures", "slowest_phases")


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, Path]:
    root = demo_copy(tmp_path_factory, "report").parent
    d = root / "demo" / "campaign"
    now = time.time()
    for i, run_id in enumerate(("fix-clamp", "passes-before", "flaky-test")):
        write_model_atomic(run_dir(d, run_id) / "spend.json", SpendLedger(run_id=run_id, entries=[
            SpendEntry(op_id=f"000{k}-x", what="session", reserved_usd=0.5, actual_usd=0.25 * (i + k + 1),
                       status="settled", at=now - 300 + 60 * i + 10 * k) for k in range(2)]))
    cand_path = run_dir(d, "no-tests") / "candidate.json"
    cand = json.loads(cand_path.read_text())
    cand["candidate"]["title"] = HOSTILE
    cand_path.write_text(json.dumps(cand))
    # a local candidate whose plan gave no title: the report takes the head commit's subject
    cand_path = run_dir(d, "passes-before") / "candidate.json"
    cand = json.loads(cand_path.read_text())
    cand["candidate"]["title"] = None
    cand_path.write_text(json.dumps(cand))
    out = root / "report.html"
    r = sweep("report", "--campaign", str(d), "--out", str(out))
    assert str(out) in r.stdout
    return d, out


def test_the_file_is_static_and_escapes_pr_text(report):
    _, out = report
    text = out.read_text()
    assert "<script" not in text.lower() and "<img" not in text.lower()
    assert "&lt;script&gt;document.title=&#x27;pwned&#x27;&lt;/script&gt;" in text
    assert "&amp;amp;" in text and "&quot;quoted&quot;" in text
    fetching = re.findall(r"<[a-zA-Z][^<>]*\s(?:src|href)\s*=[^<>]*>", text)
    assert fetching == [], fetching                          # no element fetches anything
    assert "default-src 'none'" in text
    for plot in PLOTS:
        assert f'data-plot="{plot}"' in text


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGBA/RGB bytes) from a PNG, with the stdlib only."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and color in (2, 6), (depth, color)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, [bytes(r[i:i + 3]) for r in rows for i in range(0, stride, bpp)]


@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_headless_chromium_renders_every_plot_with_data(report, tmp_path):
    _, out = report
    browser = _chromium()
    base = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
            f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars"]
    dom = subprocess.run([*base, "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert "<script" not in html.lower() and "pwned" not in re.findall(r"<title>(.*?)</title>", html)[0]
    for plot in PLOTS:
        start = html.index(f'data-plot="{plot}"')
        svg = html[start:html.index("</svg>", start)]
        marks = svg.count('class="datum"')
        assert marks >= 1, f"plot {plot} has no data in the rendered DOM"
    assert html[html.index('data-plot="endings"'):].count('class="datum"') >= 4
    shot = tmp_path / "report.png"
    r = subprocess.run([*base, f"--screenshot={shot}", "--window-size=1000,2400", out.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    width, height, pixels = _png_pixels(shot.read_bytes())
    assert (width, height) == (1000, 2400)
    white = sum(1 for p in pixels if p == b"\xff\xff\xff")
    colors = {p for p in pixels}
    assert len(colors) > 50, f"only {len(colors)} colours: a blank page?"
    assert white < 0.97 * len(pixels), "the screenshot is almost all white"
    # the plots' own colours made it to the screen (verified green, spend teal)
    assert any(abs(p[0] - 0x2e) < 12 and abs(p[1] - 0x7d) < 12 and abs(p[2] - 0x32) < 12 for p in colors)
    assert any(abs(p[0] - 0x00) < 12 and abs(p[1] - 0x83) < 12 and abs(p[2] - 0x8f) < 12 for p in colors)


def test_an_empty_campaign_reports_without_plots_of_nothing(tmp_path):
    from tests.campaigns import payload_plan, write_plan
    d = tmp_path / "camp"
    sweep("init", str(write_plan(tmp_path / "plan.json", payload_plan(2))), "--campaign", str(d))
    sweep("report", "--campaign", str(d))
    text = (d / "report.html").read_text()
    assert "no run has ended yet" in text and 'class="datum"' not in text


def test_the_report_has_the_figures_to_steer_by(report):
    d, out = report
    page = out.read_text()
    steer = page[page.index('<table class="steer">'):]
    steer = steer[:steer.index("</table>")]
    # three runs spent 0.25+0.5, 0.5+0.75, 0.75+1.0 = 3.75 USD, one run is verified
    assert "<td>cost per verified task</td><td>3.7500 USD</td>" in steer
    assert "<td>  of which session</td><td>3.7500 USD</td>" in steer
    assert "solve rate over tasks with rollouts" in steer
    # time in phase per role, with the p90 next to the median
    phases = page[page.index('<table class="phases">'):]
    assert "<th>p90 s</th>" in phases and "<td>gates</td><td>-</td>" in phases and "<td>author</td><td>author</td>" in phases
    assert '<table class="slowest">' in page
    # endings by cause: the demo's causes, not its reasons
    causes = page[page.index('data-plot="causes"'):]
    causes = causes[:causes.index("</svg>")]
    assert "passes_before_fix" in causes and "flaky_reference" in causes
    # the lanes plot draws the plan's max_parallel
    lanes = page[page.index('data-plot="lanes"'):]
    assert "<title>max_parallel 2</title>" in lanes[:lanes.index("</svg>")]


def test_count_axes_have_whole_number_ticks_and_full_width_plots(report):
    _, out = report
    page = out.read_text()
    for plot in ("endings", "causes", "lanes", "verified_per_hour"):
        svg = page[page.index(f'data-plot="{plot}"'):]
        svg = svg[:svg.index("</svg>")]
        labels = re.findall(r'text-anchor="end" font-size="11">([^<]*)</text>', svg)
        numeric = [x for x in labels if re.fullmatch(r"[0-9.]+", x)]
        assert numeric and all(re.fullmatch(r"[0-9]+", x) for x in numeric), (plot, numeric)
        assert 'width="100%"' in page[page.index(f'data-plot="{plot}"') - 200:page.index(f'data-plot="{plot}"') + 200]
    assert " 1 runs" not in page


def test_a_local_candidate_without_a_title_shows_its_commit_subject(report):
    d, out = report
    page = out.read_text()
    row = page[page.index("<td>passes-before</td>"):]
    row = row[:row.index("</tr>")]
    subject = json.loads((run_dir(d, "passes-before") / "source.json").read_text())["title"]
    assert subject and f"<td>{subject}</td>" in row
