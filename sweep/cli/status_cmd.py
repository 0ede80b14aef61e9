from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

import click

from sweep.cli.common import campaign_option, next_step

if TYPE_CHECKING:
    from runstate.lease import LeaseView
    from runstate.models import RunRecord


@click.command("status")
@campaign_option
@click.option("--json", "as_json", is_flag=True, help="Print the status as one JSON object.")
@click.option("--watch", "-w", is_flag=True, help="Refresh until Ctrl-C (reads files only; never calls Slurm).")
@click.option("--interval", type=click.FloatRange(min=0.2), default=2.0, show_default=True,
              help="Seconds between refreshes with --watch.")
@click.option("--state", type=click.Choice(["queued", "active", "ended"]), default=None,
              help="List only runs in this state.")
@click.option("--outcome", type=click.Choice(["verified", "generated_unverified", "blocked"]), default=None,
              help="List only ended runs with this outcome.")
@click.option("--lane", type=click.Choice(["cpu", "gpu"]), default=None, help="List only runs of this lane.")
@click.option("--all", "show_all", is_flag=True,
              help="List every run (queued and verified too), without the 20-row cut.")
def status(campaign: str | None, as_json: bool, watch: bool, interval: float, state: str | None,
           outcome: str | None, lane: str | None, show_all: bool) -> None:
    """Show the campaign from its files (never calls Slurm).

    Last tick age (with a warning past three intervals), drain state, counts per state and outcome,
    active runs with job id, lane, phase and attempts, role cooldowns, held and failing runs. On a
    terminal, progress bars toward target_verified and spend against the cap; plain text when piped.
    """
    import sys
    import time

    from sweep import textsafe
    from sweep.campaign import find_campaign
    from sweep.status import StatusReport, collect_status, filter_status, render_status
    d = find_campaign(campaign)
    tty = sys.stdout.isatty()

    limit = 10**9 if show_all else 20
    # the human view without filters shows at most `limit` ended runs per outcome: it need not
    # build a row for each of 90,000 ended runs (the counts are whole either way)
    capped = not as_json and not show_all and state is None and outcome is None and lane is None

    def snapshot() -> StatusReport:
        st = collect_status(d, include_queued=show_all or state == "queued",
                            ended_limit=limit if capped else None)
        st = filter_status(st, state=state, outcome=outcome, lane=lane)
        if show_all:
            st.show_verified = True
        return st

    if as_json and not watch:
        import orjson
        click.echo(textsafe.json_text(orjson.dumps(snapshot().as_json(), option=orjson.OPT_INDENT_2).decode()))
        return
    if watch:
        import shutil
        try:
            while True:
                st = snapshot()
                if as_json:
                    import orjson
                    click.echo(textsafe.json_text(orjson.dumps(st.as_json()).decode()))
                else:
                    width = shutil.get_terminal_size((80, 24)).columns
                    text = render_status(st, limit, progress=tty, width=width)
                    stamp = time.strftime("%H:%M:%S")
                    if tty:   # redraw in place: home, clear; the text itself has no escapes
                        click.echo("\x1b[H\x1b[2J" + text
                                   + f"\n\nrefreshed {stamp} every {interval:g}s; Ctrl-C to stop")
                    else:
                        click.echo(f"--- {stamp}\n{text}\n")
                sys.stdout.flush()
                time.sleep(interval)
        except KeyboardInterrupt:
            click.echo("")
            return
    st = snapshot()
    import shutil
    click.echo(render_status(st, limit, progress=tty, width=shutil.get_terminal_size((80, 24)).columns))
    if st.drain and st.drain["drained"]:
        next_step(f"sweep runtime freeze --campaign {d}, then sweep undrain --campaign {d}")
    elif st.counts["queued"] + st.counts["active"] == 0 and (Path(d) / "eval.json").exists():
        next_step(f"sweep eval report --campaign {d}   (the evaluation's per-arm rates and paired comparisons)")
    elif st.counts["queued"] + st.counts["active"] == 0:
        next_step(f"sweep export DATASET_DIR --campaign {d}   (the verified tasks as a Harbor dataset), "
                  f"or sweep report --campaign {d}")
    else:
        next_step(f"sweep show RUN_ID --campaign {d}   (one run's history), or sweep status --watch")


def _show_sessions(rdir: Path) -> None:
    """One line per role session: runtime, status, sandbox and network (from its own records:
    argv.json, written before launch, and result.json, written at its end, each read through its
    model; one that does not read is named on the line)."""
    from runstate.files import read_model
    from runstate.paths import RunPaths
    from sweep.models.evidence import SessionLaunch, SessionRecord
    root = RunPaths.at(rdir).sessions
    dirs = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    if not dirs:
        return
    click.echo("sessions:")
    for sdir in dirs:
        launched = read_model(sdir / "argv.json", SessionLaunch)
        ended = read_model(sdir / "result.json", SessionRecord)
        launch, result = launched.value, ended.value
        isolation = (result.isolation if result else "") or (launch.isolation if launch else "") or "?"
        loud = "  UNSANDBOXED" if isolation == "none" else ""
        net = result.network if result and result.network is not None else (launch.network if launch else None)
        network = net if isinstance(net, str) else "?"
        endpoints = ", ".join(result.endpoints if result and result.endpoints else launch.endpoints if launch else [])
        loud += "  HOST NETWORK" if network == "host" else ""
        loud += "  KEY IN SANDBOX (cost self-reported)" if result and result.key_in_sandbox else ""
        if result and result.network_allow:     # a remote provider's allow list (docs/providers.md)
            endpoints += (", " if endpoints else "") + "allow " + " ".join(result.network_allow)
        runtime = (result.runtime if result else "") or (launch.runtime if launch else "") or "?"
        status = (result.status if result else None) or "running?"
        unreadable = [f"{name} unreadable ({loaded.problem})" for name, loaded in
                      (("argv.json", launched), ("result.json", ended)) if loaded.problem and not loaded.missing]
        click.echo(f"  {sdir.name:<16} {runtime:<8} {status:<12} "
                   f"isolation {isolation}  network {network}" + (f" ({endpoints})" if endpoints else "") + loud
                   + "".join(f"  {u}" for u in unreadable))


@click.command("show")
@click.argument("run_id")
@campaign_option
@click.option("--json", "as_json", is_flag=True, help="Print record, lease and events as JSON.")
def show(run_id: str, campaign: str | None, as_json: bool) -> None:
    """Show one run: its record, its lease and its event history."""
    import datetime

    import orjson

    from runstate.errors import ConfigError
    from runstate.lease import read_lease
    from runstate.models import validate_run_id
    from runstate.runs import load_record, read_events, run_dir
    from sweep import textsafe
    from sweep.campaign import find_campaign, load_campaign

    def say(text: str) -> None:
        # record, lease and events hold text from PRs, tests and agents: escaped, one line each
        click.echo(textsafe.line(text))

    d = find_campaign(campaign)
    load_campaign(d)
    try:
        validate_run_id(run_id)
    except ValueError as exc:
        raise ConfigError(str(exc), field="RUN_ID") from None
    rdir = run_dir(d, run_id)
    from runstate.runs import run_dir_problem
    problem = run_dir_problem(rdir)
    if problem:        # the tick and status skip it with the same words: show does not follow it either
        raise ConfigError(f"run {run_id}: {problem}", path=rdir)
    loaded = load_record(rdir)
    if loaded.missing:
        raise ConfigError(f"no run {run_id!r} in this campaign", path=d)
    lease = read_lease(rdir)
    events, skipped = read_events(rdir)
    if as_json:
        click.echo(textsafe.json_text(orjson.dumps({
            "record": loaded.value.model_dump(mode="json") if loaded.value else None,
            "problem": loaded.problem,
            "lease": lease.lease.model_dump(mode="json") if lease and lease.lease else None,
            "events": [e.model_dump(mode="json") for e in events]}, option=orjson.OPT_INDENT_2).decode()))
        return
    _show_record(say, run_id, loaded.value, loaded.problem)
    _show_lease(say, lease)
    _show_sessions(rdir)
    say("events:")
    for e in events:
        when = datetime.datetime.fromtimestamp(e.ts).isoformat(timespec="seconds")
        detail = " ".join((e.detail or "").split())
        phase = f"[{e.phase}] " if e.phase else ""
        say(f"  {when}  {e.kind:<16} {phase}{detail[:200]}")
    if skipped:
        say(f"  ({skipped} unreadable event lines skipped)")
    next_step(f"sweep status --campaign {d}")


def _show_record(say: Callable[[str], None], run_id: str, r: RunRecord | None, problem: str | None) -> None:
    """The run's record: the why first, then state, counters, lane and job, holds and the last error."""
    if r is None:
        say(f"state.json: {problem}")
        return
    if r.cause:                     # the why first: a code of docs/controller.md's vocabulary
        what = "ended" if r.outcome else "last failure"
        say(f"cause ({what}): {r.cause}" + (f" — {r.cause_detail}" if r.cause_detail else ""))
    end = f" {r.outcome.value}" + (f":{r.reason}" if r.reason else "") if r.outcome else ""
    say(f"{run_id}: {r.state.value}{end}  phase {r.phase}  attempts {r.attempts}/"
        f"{r.max_attempts}  interruptions {r.interruptions}/{r.max_interruptions}  "
        f"lane {r.lane}{'x' + str(r.gpus) if r.gpus else ''}  job {r.job_id or '-'}")
    if r.interrupted_by:
        say("interrupted by: " + ", ".join(f"{cause} {n}" for cause, n in sorted(r.interrupted_by.items()))
            + " (not counted as attempts)")
    if r.pending_interruption:
        p = r.pending_interruption
        say(f"waiting for requeued job {p.get('job_id')}: {p.get('cause')} ({p.get('detail')})")
    if r.checkpoints:
        say("finished phases: " + ", ".join(r.finished_phases))
    if r.hold_reason:
        say(f"held: {r.hold_reason}")
    if r.last_error:
        say(f"last error: {r.last_error}")


def _show_lease(say: Callable[[str], None], lease: LeaseView | None) -> None:
    """Who holds the run's lease and when it last beat (or that it has none, or a corrupt one)."""
    import datetime

    if lease is None:
        say("lease: none")
    elif lease.lease is None:
        say(f"lease: corrupt ({lease.problem})")
    else:
        ls = lease.lease
        say(f"lease: {ls.holder} {ls.job_id or ''} token {ls.token}, heartbeat "
            f"{datetime.datetime.fromtimestamp(ls.heartbeat_at).isoformat(timespec='seconds')}")
