from __future__ import annotations

import sys

import click

from sweep.cli.common import campaign_option, next_step


@click.command("doctor")
@campaign_option
@click.option("--no-network", is_flag=True, help="Skip the model endpoint reachability check.")
def doctor(campaign: str | None, no_network: bool) -> None:
    """Check the agent CLIs the campaign's roles use, and (on Slurm) the lanes, before paying for anything.

    For every role played by claude-code or codex: the CLI is installed and runs inside the
    sandbox, its version is in the tested range, the key family's secret is present, and (unless
    --no-network) the model endpoint accepts connections. Exits 1 on any error.
    """
    from sweep.campaign import find_campaign, load_campaign
    from sweep.runtimes.preflight import check_agent_runtimes
    d = find_campaign(campaign)
    camp = load_campaign(d)
    candidates = _candidates(d)
    findings = check_agent_runtimes(camp.settings, candidates, reach=not no_network, roles_dir=d / "roles")
    if not findings:
        click.echo("no role of this campaign uses an agent CLI (claude-code, codex): nothing to check")
    from sweep import textsafe
    for f in findings:
        click.echo(textsafe.line(f"{f.level:5}  {f.where}: {f.message}"))     # quotes the CLIs' output
    errors = [f for f in findings if f.level == "error"]
    sched = camp.settings.scheduler
    if sched.backend != "local":
        # the same one sinfo + one scontrol as init: lanes against the cluster, and MessageTimeout
        from sweep.scheduler.slurm.preflight import ask_cluster, check_lanes, check_message_timeout
        facts = ask_cluster(timeout=min(20.0, sched.call_timeout_seconds))
        gpus = [c.options.gpus for c in candidates if c.options.gpus > 0]
        lane_findings = check_lanes(sched, bool(gpus), max(gpus, default=0), facts) + \
            check_message_timeout(sched.call_timeout_seconds, facts)
        for lf in lane_findings:
            click.echo(f"{lf.level:5}  {lf.field}: {lf.message}")
        if not lane_findings:
            click.echo(f"ok     scheduler: lanes match the cluster's partitions and GRES; "
                       f"MessageTimeout {facts.message_timeout_s or 10:g} s < call_timeout_seconds "
                       f"{sched.call_timeout_seconds:g} s")
        errors += [lf for lf in lane_findings if lf.level == "error"]  # type: ignore[misc]  # counted only
    if errors:
        click.echo(f"{len(errors)} error(s): fix them before `sweep tick`", err=True)
        sys.exit(1)
    next_step(f"sweep tick --campaign {d}")


def _candidates(d):
    from runstate.files import read_model
    from runstate.paths import RunPaths
    from sweep.models.plan import FrozenCandidate
    out = []
    runs = d / "runs"
    if runs.is_dir():
        for rdir in sorted(runs.iterdir()):
            fc = read_model(RunPaths.at(rdir).candidate, FrozenCandidate).value
            if fc is not None:
                out.append(fc.candidate)
    return out
