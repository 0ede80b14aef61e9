from __future__ import annotations

import click

from sweep.cli.common import campaign_option, next_step


@click.command("status")
@campaign_option
@click.option("--json", "as_json", is_flag=True, help="Print the status as one JSON object.")
def status(campaign: str | None, as_json: bool) -> None:
    """Show the campaign from its files (never calls Slurm).

    Last tick age (with a warning past three intervals), drain state, counts per state and outcome,
    active runs with job id, lane, phase and attempts, role cooldowns, held and failing runs.
    """
    from sweep import textsafe
    from sweep.campaign import find_campaign
    from sweep.status import collect_status, render_status
    d = find_campaign(campaign)
    st = collect_status(d)
    if as_json:
        import orjson
        click.echo(textsafe.json_text(orjson.dumps(st, option=orjson.OPT_INDENT_2).decode()))
        return
    click.echo(render_status(st))
    if st["drain"] and st["drain"]["drained"]:
        next_step(f"sweep runtime freeze --campaign {d}, then sweep undrain --campaign {d}")
    elif st["counts"]["queued"] + st["counts"]["active"] == 0:
        next_step(f"look at the results in {d}/runs/*/report.md, or sweep show RUN_ID --campaign {d}")
    else:
        next_step(f"sweep show RUN_ID --campaign {d}   (one run's history)")


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
    if loaded.value is None:
        say(f"state.json: {loaded.problem}")
    else:
        r = loaded.value
        end = f" {r.outcome.value}" + (f":{r.reason}" if r.reason else "") if r.outcome else ""
        say(f"{run_id}: {r.state.value}{end}  phase {r.phase.value}  attempts {r.attempts}/"
            f"{r.max_attempts}  lane {r.lane}{'x' + str(r.gpus) if r.gpus else ''}  "
            f"job {r.job_id or '-'}")
        if r.checkpoints:
            say("finished phases: " + ", ".join(r.finished_phases))
        if r.hold_reason:
            say(f"held: {r.hold_reason}")
        if r.last_error:
            say(f"last error: {r.last_error}")
    if lease is None:
        say("lease: none")
    elif lease.lease is None:
        say(f"lease: corrupt ({lease.problem})")
    else:
        ls = lease.lease
        say(f"lease: {ls.holder} {ls.job_id or ''} token {ls.token}, heartbeat "
            f"{datetime.datetime.fromtimestamp(ls.heartbeat_at).isoformat(timespec='seconds')}")
    say("events:")
    for e in events:
        when = datetime.datetime.fromtimestamp(e.ts).isoformat(timespec="seconds")
        detail = " ".join((e.detail or "").split())
        phase = f"[{e.phase}] " if e.phase else ""
        say(f"  {when}  {e.kind:<16} {phase}{detail[:200]}")
    if skipped:
        say(f"  ({skipped} unreadable event lines skipped)")
    next_step(f"sweep status --campaign {d}")
