"""The tick's scrontab entry: render it, merge it into the user's scrontab, remove it.

The entry is a block between two marker comments carrying the campaign id, so `--install` replaces
only our block (idempotent, other lines untouched) and `--remove` deletes only it. Slurm runs a
scrontab line with the user's login environment, so every path in it is absolute. Slurm's parser
rejects a step of 1 (`*/1`), so a one-minute interval is written `* * * * *`.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from runstate.errors import ConfigError, SchedulerError
from runstate.paths import CampaignPaths
from sweep.models.plan import CampaignFile

if TYPE_CHECKING:
    from sweep.campaign import Campaign

CALL_TIMEOUT_S = 30


def _markers(campaign: CampaignFile) -> tuple[str, str]:
    return (f"# sweep:{campaign.campaign_id} begin", f"# sweep:{campaign.campaign_id} end")


def schedule(interval_minutes: int) -> str:
    return "* * * * *" if interval_minutes == 1 else f"*/{interval_minutes} * * * *"


def render_entry(handle: Campaign, python: str | None = None) -> str:
    campaign, campaign_dir = handle.file, Path(handle.dir).resolve()
    python = python or sys.executable
    for what, value in (("campaign directory", str(campaign_dir)), ("python", python)):
        if "%" in value or "\n" in value:   # cron turns % into a newline
            raise ConfigError(f"{what} {value!r} contains '%' or a newline, which a crontab line cannot hold")
    s = campaign.settings
    begin, end = _markers(campaign)
    lines = [f"{begin} (campaign {s.name} at {campaign_dir}; managed by `sweep scrontab`)",
             f"#SCRON --job-name={campaign.tick_job_name}",
             f"#SCRON --time={s.scrontab.time}",
             f"#SCRON --mem={s.scrontab.mem}",
             f"#SCRON --output={shlex.quote(str(CampaignPaths(campaign_dir).tick_log))}",
             "#SCRON --open-mode=append"]
    for opt in ("partition", "qos", "account"):
        value = getattr(s.scrontab, opt)
        if value:
            lines.append(f"#SCRON --{opt}={value}")
    cmd = " ".join(shlex.quote(x) for x in [python, "-m", "sweep", "tick", "--quiet",
                                            "--campaign", str(campaign_dir)])
    lines.append(f"{schedule(s.tick.interval_minutes)} {cmd}")
    lines.append(end)
    return "\n".join(lines) + "\n"


def strip_block(text: str, campaign: CampaignFile) -> str:
    begin, end = _markers(campaign)
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith(begin):
            inside = True
            continue
        if inside and line.startswith(end):
            inside = False
            continue
        if not inside:
            out.append(line)
    while out and not out[-1].strip():
        out.pop()
    return "\n".join(out) + ("\n" if out else "")


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=CALL_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise SchedulerError(f"{argv[0]} not found", hint="install Slurm's scrontab client, or set "
                             "SWEEP_SCRONTAB to its path (Debian bookworm lacks it; see docs/operations.md)") from None
    except subprocess.TimeoutExpired:
        raise SchedulerError(f"{argv[0]} did not answer within {CALL_TIMEOUT_S}s (is slurmctld up?)") from None


def scrontab_bin() -> str:
    return os.environ.get("SWEEP_SCRONTAB") or "scrontab"


def current_crontab(binary: str) -> str:
    r = _run([binary, "-l"])
    if r.returncode == 0:
        return r.stdout
    if "no crontab" in (r.stderr + r.stdout).lower():
        return ""
    raise SchedulerError(f"scrontab -l failed (rc {r.returncode}): {r.stderr.strip() or r.stdout.strip()}")


def _install_text(binary: str, text: str) -> None:
    with tempfile.NamedTemporaryFile("w", prefix="sweep-scrontab-", suffix=".txt", delete=False) as f:
        f.write(text)
        name = f.name
    try:
        r = _run([binary, name]) if text.strip() else _run([binary, "-r"])
    finally:
        os.unlink(name)
    if r.returncode != 0:
        raise SchedulerError(f"scrontab refused the entry (rc {r.returncode}): "
                             f"{(r.stderr or r.stdout).strip()}")


def install(handle: Campaign, binary: str | None = None) -> str:
    binary = binary or scrontab_bin()
    merged = strip_block(current_crontab(binary), handle.file)
    entry = render_entry(handle)
    text = (merged + ("\n" if merged else "") + entry)
    _install_text(binary, text)
    return entry


def remove(campaign: CampaignFile, binary: str | None = None) -> bool:
    binary = binary or scrontab_bin()
    current = current_crontab(binary)
    remaining = strip_block(current, campaign)
    if remaining == current or (remaining.strip() == current.strip()):
        return False
    _install_text(binary, remaining)
    return True
