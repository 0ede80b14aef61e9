from __future__ import annotations

import sys

import click

from sweep.cli.common import campaign_option, next_step


@click.command("doctor")
@campaign_option
@click.option("--no-network", is_flag=True, help="Skip the model endpoint reachability check.")
def doctor(campaign: str | None, no_network: bool) -> None:
    """Check the job environment, the test commands, the agent CLIs and (on Slurm) the lanes, before paying.

    The environment: the PATH sessions and trials get, each declared toolchain, and each test
    command run once on its base checkout in the sandbox (readiness), in the job's environment
    and, without a declared one, in a scrontab-like login environment too (`env -i`, login
    PATH), naming the difference.

    For every role played by claude-code or codex: the CLI is installed and runs inside the
    sandbox, its version is in the tested range, the key family's secret is present, and (unless
    --no-network) the model endpoint accepts connections. Exits 1 on any error.
    """
    from runstate.paths import CampaignPaths
    from sweep.campaign import find_campaign, load_campaign
    from sweep.runtimes.preflight import check_agent_runtimes
    d = find_campaign(campaign)
    camp = load_campaign(d)
    candidates = _candidates(d)
    from sweep import textsafe
    from sweep.readiness import environment_report
    env_lines = environment_report(camp.settings, candidates)
    for line in env_lines:
        click.echo(textsafe.line(f"{line.level:5}  {line.where}: {line.message}"))
    findings = check_agent_runtimes(camp.settings, candidates, reach=not no_network, roles_dir=CampaignPaths(d).roles)
    if not findings:
        click.echo("no role of this campaign uses an agent CLI (claude-code, codex): nothing to check")
    for f in findings:
        click.echo(textsafe.line(f"{f.level:5}  {f.where}: {f.message}"))     # quotes the CLIs' output
    errors = [f for f in findings if f.level == "error"] + [e for e in env_lines if e.level == "error"]
    sched = camp.settings.scheduler
    from sweep.scheduler import backend
    chosen = backend(sched.backend)
    if chosen.uses_lanes:
        # the same preflight as init (the scheduler contract; on Slurm one sinfo + one scontrol)
        gpus = [c.options.gpus for c in candidates if c.options.gpus > 0]
        checked = chosen.preflight(sched, bool(gpus), max(gpus, default=0))
        for lf in checked.findings:
            click.echo(f"{lf.level:5}  {lf.field}: {lf.message}")
        if checked.checked:
            click.echo(f"ok     scheduler: {checked.checked}")
        errors += [lf for lf in checked.findings if lf.level == "error"]  # type: ignore[misc]  # counted only
    if errors:
        click.echo(f"{len(errors)} error(s): fix them before `sweep tick`", err=True)
        sys.exit(1)
    next_step(f"sweep tick --campaign {d}")


def _candidates(d):
    from runstate.files import read_model
    from runstate.paths import CampaignPaths, RunPaths
    from sweep.models.plan import FrozenCandidate
    out = []
    runs = CampaignPaths(d).runs
    if runs.is_dir():
        for rdir in sorted(runs.iterdir()):
            fc = read_model(RunPaths.at(rdir).candidate, FrozenCandidate).value
            if fc is not None:
                out.append(fc.candidate)
    return out
