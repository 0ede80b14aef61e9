"""`sweep report`: the campaign as one static HTML page with plots (no server, no network, no script).

Everything comes from the campaign's files (state.json, events.jsonl, spend.json, candidate.json, each read
through its model), like `sweep status`. The plots are inline SVG drawn here; the page loads nothing (its
Content-Security-Policy forbids every fetch) and runs no JavaScript. Every text that comes from a
pull request or an agent (titles, reasons, details) is HTML-escaped; run ids are validated names.

Each plotted datum is an SVG element with class `datum`, so a test (or a curious human) can count
what a plot shows in the DOM.
"""
from __future__ import annotations

import html
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runstate.files import read_model
from runstate.models import RunState, SpendLedger
from runstate.paths import RunPaths
from runstate.runs import list_runs, read_events, run_dir
from sweep.models.plan import FrozenCandidate

COLORS = {"verified": "#2e7d32", "generated_unverified": "#f9a825", "blocked": "#c62828",
          "cpu": "#1565c0", "gpu": "#6a1b9a", "spend": "#00838f", "phase": "#5d4037"}
W, H = 760, 260            # plot size (px)
PAD_L, PAD_R, PAD_T, PAD_B = 60, 20, 20, 40
ACTIVE_ENDS = {"ended", "requeued", "attempt_failed", "parked", "stopped"}


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


@dataclass
class Data:
    name: str
    campaign_id: str
    target: int
    cap: float | None
    runs: dict = field(default_factory=dict)          # run_id -> {outcome, reason, lane, title, spent}
    endings: list = field(default_factory=list)       # (ts, outcome, run_id)
    spend: list = field(default_factory=list)         # (ts, usd)
    lanes: list = field(default_factory=list)         # (start, end, lane, run_id)
    phases: list = field(default_factory=list)        # (seconds, phase, run_id)
    role_spend: dict = field(default_factory=dict)    # role -> USD (settled actuals + open reservations)
    wall: list = field(default_factory=list)          # (seconds admitted -> ended, run_id)
    max_parallel: int = 0
    max_gpu_parallel: int = 0
    first: float = 0.0
    last: float = 0.0
    warnings: list = field(default_factory=list)      # what the plan knowingly gave up (isolation, keys)


def collect(campaign_dir: Path, now: float | None = None) -> Data:
    from sweep.campaign import load_campaign
    campaign_dir = Path(campaign_dir).resolve()
    campaign = load_campaign(campaign_dir)
    s = campaign.settings
    now = time.time() if now is None else now
    data = Data(s.name, campaign.campaign_id, s.target_verified, s.max_spend_usd,
                max_parallel=s.max_parallel, max_gpu_parallel=s.max_gpu_parallel)
    if s.isolation == "none":
        data.warnings.append("UNSANDBOXED: the plan sets isolation = \"none\"; sessions and trials ran without "
                             "the sandbox.")
    data.warnings += [f"KEY IN SANDBOX: agent solver sessions on {name} held their model key inside the remote "
                      f"sandbox, where no relay meters or hides it (the plan sets [providers.{name}] "
                      "agent_key_in_sandbox = true); their cost is self-reported."
                      for name, p in sorted(s.providers.items()) if p.agent_key_in_sandbox]
    listing = list_runs(campaign_dir)
    stamps: list[float] = []
    for run_id, rec in listing.records.items():
        rdir = run_dir(campaign_dir, run_id)
        frozen = read_model(RunPaths.at(rdir).candidate, FrozenCandidate).value    # None: unreadable, no title
        data.runs[run_id] = {"state": rec.state.value, "outcome": rec.outcome.value if rec.outcome else None,
                             "reason": rec.reason, "cause": rec.cause, "lane": rec.lane, "spent": rec.spent_usd,
                             "title": (frozen.candidate.title if frozen else None) or _source_title(rdir),
                             "rewards": _rollout_rewards(rdir)}
        events, _ = read_events(rdir)
        admitted_at = next((ev.ts for ev in events if ev.kind in ("admitted", "adopted")), None)
        open_since: float | None = None
        started: dict[str, float] = {}
        last_end = None
        for ev in events:
            stamps.append(ev.ts)
            if ev.kind in ("admitted", "adopted"):
                open_since = ev.ts
            elif open_since is not None and (ev.kind in ACTIVE_ENDS or ev.from_state == "active"):
                data.lanes.append((open_since, ev.ts, rec.lane, run_id))
                open_since = None
            if ev.kind == "ended":
                last_end = ev.ts
            if ev.kind == "phase_started" and ev.phase:
                started[ev.phase] = ev.ts
            elif ev.kind == "phase_done" and ev.phase in started:
                data.phases.append((ev.ts - started.pop(ev.phase), ev.phase, run_id))
        if open_since is not None and rec.state is RunState.active:
            data.lanes.append((open_since, now, rec.lane, run_id))
        if rec.state is RunState.ended and rec.outcome is not None:
            data.endings.append((last_end if last_end is not None else rec.updated, rec.outcome.value, run_id))
            if admitted_at is not None and last_end is not None:
                data.wall.append((last_end - admitted_at, run_id))
            stamps.append(last_end if last_end is not None else rec.updated)
        ledger = read_model(RunPaths.at(rdir).spend, SpendLedger).value        # None: none yet, or unreadable
        for entry in ledger.entries if ledger else []:
            usd = entry.actual_usd if entry.status == "settled" else entry.reserved_usd
            if usd is not None and math.isfinite(usd) and usd >= 0 and math.isfinite(entry.at):
                data.spend.append((entry.at, usd))
                stamps.append(entry.at)
                role = (entry.what or "other").split()[0]
                data.role_spend[role] = data.role_spend.get(role, 0.0) + usd
    data.endings.sort()
    data.spend.sort()
    data.phases.sort(reverse=True)
    data.wall.sort(reverse=True)
    stamps = [t for t in stamps if math.isfinite(t)]
    data.first = min(stamps) if stamps else now
    data.last = max(max(stamps) if stamps else now, data.first + 1.0)
    return data


def _source_title(rdir: Path) -> str | None:
    """A local candidate has no title in the plan: the head commit's subject, as intake recorded it."""
    from sweep.models.evidence import SourceEvidence
    src = read_model(RunPaths.at(rdir).source, SourceEvidence).value
    return (src.title or None) if src is not None else None


def _rollout_rewards(rdir: Path) -> list[float]:
    """The rewards of the newest solve evidence's rollouts (None, a rollout that gave none, is a 0)."""
    from sweep.models.evidence import SolveEvidence
    files = sorted((rdir / "evidence").glob("solve-r*.json")) if (rdir / "evidence").is_dir() else []
    for path in reversed(files):
        ev = read_model(path, SolveEvidence).value
        if ev is not None:
            return [float(r.reward or 0.0) for r in ev.rollouts]
    return []


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


# ---- drawing ---------------------------------------------------------------------------------------

def _fmt_t(ts: float, span: float) -> str:
    fmt = "%H:%M:%S" if span < 3 * 3600 else "%m-%d %H:%M"
    return time.strftime(fmt, time.localtime(ts))


class Axes:
    def __init__(self, name: str, x0: float, x1: float, y1: float, *, x_is_time: bool = True, y_label: str = "",
                 integer: bool = False):
        self.name, self.x0, self.x1 = name, x0, max(x1, x0 + 1e-9)
        self.y1 = y1 if y1 > 0 else 1.0
        self.integer = integer             # a count: ticks on whole numbers only
        if integer:
            self.step = max(1, math.ceil(self.y1 / 4))
            self.y1 = float(self.step * math.ceil(self.y1 / self.step))
        self.parts: list[str] = []
        self.x_is_time = x_is_time
        self.y_label = y_label

    def x(self, v: float) -> float:
        return PAD_L + (v - self.x0) / (self.x1 - self.x0) * (W - PAD_L - PAD_R)

    def y(self, v: float) -> float:
        return H - PAD_B - v / self.y1 * (H - PAD_T - PAD_B)

    def frame(self) -> None:
        p = self.parts
        p.append(f'<line x1="{PAD_L}" y1="{H - PAD_B}" x2="{W - PAD_R}" y2="{H - PAD_B}" stroke="#444"/>')
        p.append(f'<line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{H - PAD_B}" stroke="#444"/>')
        ticks = ([self.step * k for k in range(int(self.y1 / self.step) + 1)] if self.integer
                 else [self.y1 * i / 4 for i in range(5)])
        for v in ticks:
            yy = self.y(v)
            label = f"{v:.0f}" if self.integer else (f"{v:.2f}" if self.y1 < 10 and v != int(v) else f"{v:.0f}")
            p.append(f'<line x1="{PAD_L}" y1="{yy:.1f}" x2="{W - PAD_R}" y2="{yy:.1f}" stroke="#eee"/>')
            p.append(f'<text x="{PAD_L - 6}" y="{yy + 4:.1f}" text-anchor="end" font-size="11">{esc(label)}</text>')
        if self.x_is_time:
            span = self.x1 - self.x0
            for i in range(5):
                v = self.x0 + span * i / 4
                anchor = "start" if i == 0 else "end" if i == 4 else "middle"    # no label cut at an edge
                p.append(f'<text x="{self.x(v):.1f}" y="{H - PAD_B + 16}" text-anchor="{anchor}" font-size="11">'
                         f'{esc(_fmt_t(v, span))}</text>')
        if self.y_label:
            p.append(f'<text x="14" y="{PAD_T + (H - PAD_T - PAD_B) / 2:.0f}" font-size="11" '
                     f'transform="rotate(-90 14 {PAD_T + (H - PAD_T - PAD_B) / 2:.0f})" text-anchor="middle">'
                     f'{esc(self.y_label)}</text>')

    def svg(self, legend: Sequence[tuple[str, str]] = ()) -> str:
        items = []
        for i, (label, color) in enumerate(legend):
            lx = PAD_L + 10 + i * 170
            items.append(f'<rect x="{lx}" y="4" width="10" height="10" fill="{color}"/>'
                         f'<text x="{lx + 14}" y="13" font-size="11">{esc(label)}</text>')
        return (f'<svg xmlns="http://www.w3.org/2000/svg" data-plot="{esc(self.name)}" width="100%" '
                f'viewBox="0 0 {W} {H}" role="img">' + "".join(self.parts) + "".join(items) + "</svg>")


def _empty(name: str, why: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" data-plot="{esc(name)}" width="{W}" height="60" '
            f'viewBox="0 0 {W} 60"><text x="{PAD_L}" y="35" font-size="13" fill="#777">{esc(why)}</text></svg>')


def plot_endings(d: Data) -> str:
    if not d.endings:
        return _empty("endings", "no run has ended yet")
    ax = Axes("endings", d.first, d.last, max(1, len(d.endings)), y_label="runs ended (cumulative)", integer=True)
    ax.frame()
    for outcome in ("verified", "generated_unverified", "blocked"):
        pts, n = [(d.first, 0)], 0
        for ts, out, _ in d.endings:
            if out == outcome:
                n += 1
                pts.append((ts, n - 1))
                pts.append((ts, n))
        pts.append((d.last, n))
        path = " ".join(f"{ax.x(t):.1f},{ax.y(v):.1f}" for t, v in pts)
        ax.parts.append(f'<polyline points="{path}" fill="none" stroke="{COLORS[outcome]}" stroke-width="2"/>')
        for ts, out, run_id in d.endings:
            if out == outcome:
                v = sum(1 for t2, o2, _ in d.endings if o2 == outcome and t2 <= ts)
                ax.parts.append(f'<circle class="datum" cx="{ax.x(ts):.1f}" cy="{ax.y(v):.1f}" r="3.5" '
                                f'fill="{COLORS[outcome]}"><title>{esc(run_id)}: {esc(outcome)}</title></circle>')
    return ax.svg([(o, COLORS[o]) for o in ("verified", "generated_unverified", "blocked")])


def plot_verified_per_hour(d: Data) -> str:
    verified = [ts for ts, out, _ in d.endings if out == "verified"]
    if not verified:
        return _empty("verified_per_hour", "no run is verified yet")
    start = math.floor(d.first / 3600) * 3600
    hours = max(1, math.ceil((d.last - start) / 3600))
    counts = [0] * hours
    for ts in verified:
        counts[min(hours - 1, int((ts - start) // 3600))] += 1
    slots = max(hours, (W - PAD_L - PAD_R) / 60.0)          # a lone hour is one bar wide, not the whole plot
    ax = Axes("verified_per_hour", 0, slots, max(counts), x_is_time=False, y_label="verified", integer=True)
    ax.frame()
    bw = min(60.0, (W - PAD_L - PAD_R) / hours)
    for i, n in enumerate(counts):
        label = time.strftime("%m-%d %H:00", time.localtime(start + i * 3600))
        if hours <= 24 or i % max(1, hours // 12) == 0:
            ax.parts.append(f'<text x="{ax.x(i + 0.5):.1f}" y="{H - PAD_B + 16}" text-anchor="middle" '
                            f'font-size="10">{esc(label)}</text>')
        if n:
            ax.parts.append(f'<rect class="datum" x="{ax.x(i) + 2:.1f}" y="{ax.y(n):.1f}" '
                            f'width="{max(1, bw - 4):.1f}" height="{ax.y(0) - ax.y(n):.1f}" '
                            f'fill="{COLORS["verified"]}"><title>{esc(label)}: {n} verified</title></rect>')
    return ax.svg()


def plot_spend(d: Data) -> str:
    if not d.spend:
        return _empty("spend", "no spend recorded yet")
    total = sum(usd for _, usd in d.spend)
    top = max(total, d.cap or 0.0) or 1.0
    ax = Axes("spend", d.first, d.last, top, y_label="USD (cumulative)")
    ax.frame()
    pts, acc = [(d.first, 0.0)], 0.0
    for ts, usd in d.spend:
        pts.append((ts, acc))
        acc += usd
        pts.append((ts, acc))
    pts.append((d.last, acc))
    path = " ".join(f"{ax.x(t):.1f},{ax.y(v):.1f}" for t, v in pts)
    ax.parts.append(f'<polyline points="{path}" fill="none" stroke="{COLORS["spend"]}" stroke-width="2"/>')
    acc = 0.0
    for ts, usd in d.spend:
        acc += usd
        ax.parts.append(f'<circle class="datum" cx="{ax.x(ts):.1f}" cy="{ax.y(acc):.1f}" r="3" '
                        f'fill="{COLORS["spend"]}"><title>+{usd:.4f} USD</title></circle>')
    legend = [(f"spent {acc:.2f} USD", COLORS["spend"])]
    if d.cap:
        yy = ax.y(d.cap)
        ax.parts.append(f'<line x1="{PAD_L}" y1="{yy:.1f}" x2="{W - PAD_R}" y2="{yy:.1f}" stroke="#c62828" '
                        'stroke-dasharray="6 4"/>')
        legend.append((f"cap {d.cap:.2f} USD", "#c62828"))
    return ax.svg(legend)


def plot_lanes(d: Data) -> str:
    if not d.lanes:
        return _empty("lanes", "no run was ever active")
    edges = sorted({t for s, e, _, _ in d.lanes for t in (s, e)})
    series = {}
    for lane in ("cpu", "gpu"):
        series[lane] = [(t, sum(1 for s, e, ln, _ in d.lanes if ln == lane and s <= t < e)) for t in edges]
    top = max(max(v for pts in series.values() for _, v in pts), d.max_parallel) or 1
    ax = Axes("lanes", d.first, d.last, top, y_label="active runs", integer=True)
    ax.frame()
    for limit, color, label in ((d.max_parallel, "#444", "max_parallel"),
                                (d.max_gpu_parallel, COLORS["gpu"], "max_gpu_parallel")):
        if limit and (label == "max_parallel" or any(ln == "gpu" for _, _, ln, _ in d.lanes)):
            yy = ax.y(limit)
            ax.parts.append(f'<line x1="{PAD_L}" y1="{yy:.1f}" x2="{W - PAD_R}" y2="{yy:.1f}" stroke="{color}" '
                            f'stroke-dasharray="4 4"><title>{label} {limit}</title></line>')
    for lane, pts in series.items():
        if not any(v for _, v in pts):
            continue
        line, prev = [], 0
        for t, v in pts:
            line += [(t, prev), (t, v)]
            prev = v
        path = " ".join(f"{ax.x(t):.1f},{ax.y(v):.1f}" for t, v in line)
        ax.parts.append(f'<polyline points="{path}" fill="none" stroke="{COLORS[lane]}" stroke-width="2"/>')
    for s, e, lane, run_id in d.lanes:
        ax.parts.append(f'<rect class="datum" x="{ax.x(s):.1f}" y="{H - PAD_B - 6 - (8 if lane == "gpu" else 0)}" '
                        f'width="{max(1.0, ax.x(e) - ax.x(s)):.1f}" height="5" fill="{COLORS[lane]}" opacity="0.5">'
                        f'<title>{esc(run_id)} on {esc(lane)}: {e - s:.0f}s</title></rect>')
    return ax.svg([("cpu lane", COLORS["cpu"]), ("gpu lane", COLORS["gpu"]), (f"max_parallel {d.max_parallel}", "#444")])


def _hbars(name: str, rows: list[tuple[str, float, str]], unit: str) -> str:
    """Horizontal bars: (label, value, color); labels are escaped."""
    if not rows:
        return _empty(name, "nothing to show")
    top = max(v for _, v, _ in rows) or 1.0
    row_h, label_w = 22, 300
    height = PAD_T + row_h * len(rows) + 10
    parts = []
    for i, (label, value, color) in enumerate(rows):
        y = PAD_T + i * row_h
        unit_of = unit[:-1] if value == 1 and unit.endswith("s") and len(unit) > 1 else unit   # 1 run, 2 runs
        width = (W - label_w - 80) * value / top
        short = label if len(label) <= 48 else label[:47] + "…"
        parts.append(f'<text x="{label_w - 8}" y="{y + 14}" text-anchor="end" font-size="11">{esc(short)}'
                     f'<title>{esc(label)}</title></text>')
        parts.append(f'<rect class="datum" x="{label_w}" y="{y + 3}" width="{max(1.0, width):.1f}" '
                     f'height="{row_h - 6}" fill="{color}"><title>{esc(label)}: {value:g} {esc(unit_of)}</title></rect>')
        parts.append(f'<text x="{label_w + max(1.0, width) + 6:.1f}" y="{y + 14}" font-size="11">'
                     f'{esc(f"{value:.1f}" if isinstance(value, float) and value != int(value) else f"{value:g}")} '
                     f'{esc(unit_of)}</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" data-plot="{esc(name)}" width="100%" '
            f'viewBox="0 0 {W} {height}">' + "".join(parts) + "</svg>")


def plot_failures(d: Data) -> str:
    counts: dict[str, int] = {}
    color: dict[str, str] = {}
    for run in d.runs.values():
        if run["outcome"] in ("generated_unverified", "blocked"):
            key = f"{run['outcome']}: {run['cause'] or run['reason'] or '(no reason)'}"
            counts[key] = counts.get(key, 0) + 1
            color[key] = COLORS[run["outcome"]]
    rows = sorted(((k, float(v), color[k]) for k, v in counts.items()), key=lambda r: -r[1])[:20]
    if not rows:
        return _empty("failures", "no run ended without being verified")
    return _hbars("failures", rows, "runs")


def plot_causes_over_time(d: Data, top_n: int = 6) -> str:
    """Endings short of verified, cumulative, one line per cause (the most frequent ones)."""
    ends = [(ts, d.runs[rid]["cause"] or d.runs[rid]["reason"] or "(none)", rid)
            for ts, out, rid in d.endings if out != "verified"]
    if not ends:
        return _empty("causes", "no run ended without being verified")
    totals: dict[str, int] = {}
    for _, cause, _ in ends:
        totals[cause] = totals.get(cause, 0) + 1
    shown = sorted(totals, key=lambda c: (-totals[c], c))[:top_n]
    palette = ["#c62828", "#f9a825", "#6a1b9a", "#1565c0", "#5d4037", "#00838f"]
    ax = Axes("causes", d.first, d.last, max(totals[c] for c in shown), y_label="runs (cumulative)", integer=True)
    ax.frame()
    for cause, color in zip(shown, palette, strict=False):
        pts, n = [(d.first, 0)], 0
        for ts, c, rid in ends:
            if c == cause:
                n += 1
                pts += [(ts, n - 1), (ts, n)]
                ax.parts.append(f'<circle class="datum" cx="{ax.x(ts):.1f}" cy="{ax.y(n):.1f}" r="3" fill="{color}">'
                                f'<title>{esc(rid)}: {esc(cause)}</title></circle>')
        pts.append((d.last, n))
        path = " ".join(f"{ax.x(t):.1f},{ax.y(v):.1f}" for t, v in pts)
        ax.parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
    return ax.svg([(f"{c} {totals[c]}", col) for c, col in zip(shown, palette, strict=False)])


def plot_solve_rates(d: Data) -> str:
    """How many tasks the blind rollouts solved all, some or none of the time."""
    rates = [sum(r["rewards"]) / len(r["rewards"]) for r in d.runs.values() if r["rewards"]]
    if not rates:
        return _empty("solve_rates", "no rollout has been recorded yet")
    buckets = [("solved by every rollout", sum(1 for x in rates if x >= 1.0)),
               ("solved by some rollouts", sum(1 for x in rates if 0.0 < x < 1.0)),
               ("solved by none", sum(1 for x in rates if x <= 0.0))]
    colors = [COLORS["verified"], COLORS["generated_unverified"], COLORS["blocked"]]
    return _hbars("solve_rates", [(label, float(n), c) for (label, n), c in zip(buckets, colors, strict=True) if n], "tasks")


def _steering_table(d: Data) -> str:
    """The figures to steer a campaign by: cost per verified task (total and per role), solve rate."""
    verified = sum(1 for r in d.runs.values() if r["outcome"] == "verified")
    spent = sum(usd for _, usd in d.spend)
    per = (lambda usd: f"{usd / verified:.4f} USD") if verified else (lambda usd: "— (none verified yet)")
    rows = [("verified tasks", str(verified)), ("spent", f"{spent:.4f} USD"), ("cost per verified task", per(spent))]
    rows += [(f"  of which {role}", per(usd)) for role, usd in sorted(d.role_spend.items())]
    rates = [sum(r["rewards"]) / len(r["rewards"]) for r in d.runs.values() if r["rewards"]]
    if rates:
        rows.append(("solve rate over tasks with rollouts", f"{statistics.mean(rates):.2f} "
                     f"(median {statistics.median(rates):.2f}, {len(rates)} task{'' if len(rates) == 1 else 's'})"))
    body = "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in rows)
    return f'<table class="steer">{body}</table>'


def _role_phase_table(d: Data) -> str:
    """Time in phase per role: median and p90 of each phase's finished runs."""
    from runstate.phases import PHASE_TABLE
    roles = {row.phase: row.role for row in PHASE_TABLE.rows}
    by_phase: dict[str, list[float]] = {}
    for seconds, phase, _ in d.phases:
        by_phase.setdefault(phase, []).append(seconds)
    order = [row.phase for row in PHASE_TABLE.rows if row.phase in by_phase] + \
        sorted(p for p in by_phase if p not in roles)
    rows = "".join(f"<tr><td>{esc(p)}</td><td>{esc(roles.get(p) or '-')}</td><td>{len(by_phase[p])}</td>"
                   f"<td>{statistics.median(by_phase[p]):.1f}</td><td>{_percentile(by_phase[p], 0.9):.1f}</td>"
                   f"<td>{max(by_phase[p]):.1f}</td></tr>" for p in order)
    return ('<table class="phases"><tr><th>phase</th><th>role</th><th>runs</th><th>median s</th><th>p90 s</th>'
            "<th>max s</th></tr>" + rows + "</table>" if rows else "")


def _slowest_runs_table(d: Data, n: int = 10) -> str:
    rows = "".join(f"<tr><td>{esc(rid)}</td><td>{secs:.1f}</td><td>{esc(d.runs[rid]['outcome'] or '')}</td>"
                   f"<td>{esc(d.runs[rid]['title'] or '')}</td></tr>" for secs, rid in d.wall[:n])
    return ('<table class="slowest"><tr><th>run</th><th>admitted to ended, s</th><th>outcome</th><th>PR title</th></tr>'
            + rows + "</table>" if rows else "<p>no run has ended yet</p>")


def plot_slowest_phases(d: Data, n: int = 12) -> str:
    rows = [(f"{run_id} · {phase}", round(seconds, 1), COLORS["phase"]) for seconds, phase, run_id in d.phases[:n]]
    if not rows:
        return _empty("slowest_phases", "no phase has finished yet")
    return _hbars("slowest_phases", rows, "s")


def _runs_table(d: Data, limit: int = 500) -> str:
    rows = []
    for run_id, r in sorted(d.runs.items())[:limit]:
        ending = r["outcome"] or r["state"]
        why = r["cause"] or r["reason"] or ""
        rows.append(f'<tr class="{esc(ending)}"><td>{esc(run_id)}</td><td>{esc(ending)}</td>'
                    f"<td>{esc(why)}</td><td>{esc(r['lane'])}</td><td>{r['spent']:.4f}</td>"
                    f"<td>{esc(r['title'] or '')}</td></tr>")
    left = len(d.runs) - limit
    more = f"<p>... and {left} more run{'' if left == 1 else 's'}</p>" if left > 0 else ""
    return ("<table><tr><th>run</th><th>state / outcome</th><th>cause</th><th>lane</th><th>USD</th>"
            "<th>PR title</th></tr>" + "".join(rows) + "</table>" + more)


def _page_head(title: str, extra_css: str = "") -> str:
    """The page up to <body>: no script, nothing fetched (the CSP allows inline style and data:
    images only), one style sheet for both pages; `title` is escaped here."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<title>{esc(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; background: #fff; }}
section {{ margin: 18px 0 28px; max-width: 1100px; }}
svg {{ display: block; max-width: 1100px; height: auto; }}
h1 {{ font-size: 22px; }} h2 {{ font-size: 16px; margin-bottom: 6px; }}
table {{ border-collapse: collapse; font-size: 12px; margin-top: 8px; }}
td, th {{ border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }}
{extra_css}.meta {{ color: #555; font-size: 13px; }}
</style></head>
<body>"""


def render(d: Data, generated_at: float | None = None) -> str:
    generated_at = time.time() if generated_at is None else generated_at
    counts: dict[str, int] = {}
    for r in d.runs.values():
        key = r["outcome"] or r["state"]
        counts[key] = counts.get(key, 0) + 1
    summary = " · ".join(f"{esc(k)} {v}" for k, v in sorted(counts.items()))
    spent = sum(usd for _, usd in d.spend)
    sections = [
        ("To steer by", _steering_table(d)),
        ("Endings over time", plot_endings(d)),
        ("Endings short of verified, by cause", plot_causes_over_time(d)),
        ("Solve rate of the blind rollouts", plot_solve_rates(d)),
        ("Verified per hour", plot_verified_per_hour(d)),
        ("Spend over time", plot_spend(d)),
        ("Lane occupancy", plot_lanes(d)),
        ("Failure reasons", plot_failures(d)),
        ("Time in phase per role", _role_phase_table(d)),
        ("Slowest phases", plot_slowest_phases(d)),
        ("Slowest runs", _slowest_runs_table(d)),
    ]
    body = "".join(f"<section><h2>{esc(title)}</h2>{svg}</section>" for title, svg in sections)
    rows = (f"tr.verified td:nth-child(2) {{ color: {COLORS['verified']}; }}\n"
            f"tr.blocked td:nth-child(2) {{ color: {COLORS['blocked']}; }}\n"
            "tr.generated_unverified td:nth-child(2) { color: #b07d00; }\n"
            "p.warn { color: #b00020; }\n")
    return _page_head(f"sweep report: {d.name}", rows) + f"""
<h1>Campaign {esc(d.name)} <span class="meta">({esc(d.campaign_id)})</span></h1>
<p class="meta">{len(d.runs)} run{'' if len(d.runs) == 1 else 's'}: {summary}. Target {d.target} verified. Spent {spent:.2f} USD
{f'of a {d.cap:.2f} USD cap' if d.cap else '(no campaign cap)'}.
From {esc(_fmt_t(d.first, 1e9))} to {esc(_fmt_t(d.last, 1e9))}; written {esc(_fmt_t(generated_at, 1e9))} by
<code>sweep report</code>, from the campaign's files.</p>
{"".join(f'<p class="warn"><strong>{esc(w)}</strong></p>' for w in d.warnings)}
{body}
<section><h2>Runs</h2>{_runs_table(d)}</section>
</body></html>
"""


def write_report(campaign_dir: Path, out: Path) -> Path:
    from runstate.files import write_atomic
    data = collect(campaign_dir)
    out = Path(out)
    write_atomic(out, render(data).encode("utf-8"), mode=0o644)
    return out


# ---- an evaluation (`sweep eval report --html`, docs/eval.md) ------------------------------------------

def _num(x: float | None, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


def plot_arm_rates(summary: dict) -> str:
    """Each arm's pass rate as a bar with its 95 % Wilson interval as a whisker."""
    arms = [a for a in summary["arms"] if a["pass_rate"] is not None]
    if not arms:
        return _empty("arm_rates", "no cell has ended yet")
    row_h, label_w, width = 26, 160, W - 160 - 80
    parts = []
    for i, a in enumerate(arms):
        y = PAD_T + i * row_h
        lo, hi = a["ci95"]
        parts.append(f'<text x="{label_w - 8}" y="{y + 15}" text-anchor="end" font-size="11">{esc(a["arm"])}</text>')
        parts.append(f'<rect class="datum" x="{label_w}" y="{y + 4}" width="{max(1.0, width * a["pass_rate"]):.1f}" '
                     f'height="{row_h - 8}" fill="{COLORS["verified"]}"><title>{esc(a["arm"])}: {a["solved"]} of '
                     f'{a["cells"]} solved, rate {a["pass_rate"]:.2f}, 95% CI [{lo:.2f}, {hi:.2f}]</title></rect>')
        parts.append(f'<line x1="{label_w + width * lo:.1f}" y1="{y + row_h / 2:.1f}" x2="{label_w + width * hi:.1f}" '
                     f'y2="{y + row_h / 2:.1f}" stroke="#222" stroke-width="2"/>')
        parts.append(f'<text x="{label_w + width + 8}" y="{y + 15}" font-size="11">{a["pass_rate"]:.2f} '
                     f'[{lo:.2f}, {hi:.2f}]</text>')
    height = PAD_T + row_h * len(arms) + 10
    return (f'<svg xmlns="http://www.w3.org/2000/svg" data-plot="arm_rates" width="100%" '
            f'viewBox="0 0 {W} {height}">' + "".join(parts) + "</svg>")


def _eval_arms_table(summary: dict) -> str:
    ks = [str(k) for k in range(1, summary["repeats"] + 1)]
    head = "".join(f"<th>pass@{k}</th>" for k in ks)
    rows = "".join(
        f'<tr><td>{esc(a["arm"])}</td><td>{a["cells"]}</td><td>{a["solved"]}</td><td>{_num(a["pass_rate"])}</td>'
        f'<td>[{_num(a["ci95"][0])}, {_num(a["ci95"][1])}]</td>'
        + "".join(f'<td>{_num(a["pass_at_k"].get(k))}</td>' for k in ks)
        + f'<td>{_num(a["cost_per_solved_usd"], ".4f")}</td><td>{_num(a["median_s"], ".1f")}</td></tr>'
        for a in summary["arms"])
    return ('<table class="arms"><tr><th>arm</th><th>cells</th><th>solved</th><th>pass rate</th><th>95% CI (Wilson)</th>'
            f"{head}<th>USD per solved</th><th>median s</th></tr>{rows}</table>")


def _eval_paired_table(summary: dict) -> str:
    if not summary["paired"]:
        return "<p>one arm: nothing to compare</p>"
    rows = "".join(
        f'<tr><td>{esc(p["first"])}</td><td>{esc(p["second"])}</td><td>{p["tasks"]}</td><td>{p["both"]}</td>'
        f'<td>{p["first_only"]}</td><td>{p["second_only"]}</td><td>{p["neither"]}</td><td>{p["effect"]:+.2f}</td>'
        f'<td>{p["p_value"]:.3g}</td></tr>' for p in summary["paired"])
    return ('<table class="paired"><tr><th>first</th><th>second</th><th>tasks</th><th>both</th><th>only first</th>'
            "<th>only second</th><th>neither</th><th>effect</th><th>p (exact McNemar)</th></tr>" + rows + "</table>")


def _eval_tasks_table(summary: dict, limit: int = 2000) -> str:
    arms = [a["arm"] for a in summary["arms"]]
    rows = []
    for task, by_arm in list(summary["per_task"].items())[:limit]:
        cells = "".join(f'<td>{by_arm[a]["solved"]}/{by_arm[a]["ended"]}</td>' for a in arms)
        rows.append(f"<tr><td>{esc(task)}</td>{cells}<td>{esc(', '.join(summary['solved_by'][task]) or '-')}</td></tr>")
    left = len(summary["per_task"]) - limit
    more = f"<p>... and {left} more task{'' if left == 1 else 's'}</p>" if left > 0 else ""
    return ('<table class="tasks"><tr><th>task</th>' + "".join(f"<th>{esc(a)}: solved/ended</th>" for a in arms)
            + "<th>solved by</th></tr>" + "".join(rows) + "</table>" + more)


def _eval_faults_table(summary: dict) -> str:
    rows = "".join(f"<tr><td>{esc(f['cell_id'])}</td><td>{esc(f['arm'])}</td><td>{esc(f['task_id'])}</td>"
                   f"<td>{esc(str(f['after_tool_calls']))}</td><td>{'yes' if f['resumed'] else 'no'}</td>"
                   f"<td>{'yes' if f['solved'] else 'no'}</td></tr>" for f in summary["faults"])
    return ("<table><tr><th>cell</th><th>arm</th><th>task</th><th>after tool calls</th><th>resumed</th>"
            f"<th>solved</th></tr>{rows}</table>")


def render_eval(summary: dict, name: str, generated_at: float | None = None) -> str:
    """The evaluation's report (sweep/eval/report.py's summary) as one static page, like the campaign's."""
    generated_at = time.time() if generated_at is None else generated_at
    sections = [("Pass rate per arm, with its 95% interval", plot_arm_rates(summary)),
                ("Per arm", _eval_arms_table(summary)),
                ("Paired comparisons on the same tasks (a task is an arm's when it solved most of its repeats)",
                 _eval_paired_table(summary)),
                ("Per task", _eval_tasks_table(summary))]
    if summary.get("faults"):
        sections.append(("Cells interrupted by the plan's faults (" + (
            "left out of the figures above" if summary.get("faults_excluded") else "counted in the figures above")
            + ")", _eval_faults_table(summary)))
    body = "".join(f"<section><h2>{esc(title)}</h2>{part}</section>" for title, part in sections)
    return _page_head(f"sweep evaluation: {name}") + f"""
<h1>Evaluation {esc(name)}</h1>
<p class="meta">{summary['ended']} of {summary['cells']} cells ended, {summary['repeats']} repeat{'' if summary['repeats'] == 1
        else 's'} per arm and task; manifest sha256 {esc(summary['manifest_sha256'])}. Written
{esc(_fmt_t(generated_at, 1e9))} by <code>sweep eval report --html</code>, from the cells' results.</p>
{body}
</body></html>
"""


def write_eval_report(eval_dir: Path, out: Path, summary: dict | None = None) -> Path:
    from runstate.files import write_atomic
    from sweep.eval.cells import load_frozen
    from sweep.eval.report import collect as collect_eval
    summary = collect_eval(Path(eval_dir)) if summary is None else summary
    out = Path(out)
    write_atomic(out, render_eval(summary, load_frozen(Path(eval_dir)).plan.name).encode("utf-8"), mode=0o644)
    return out
