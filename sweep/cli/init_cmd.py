from __future__ import annotations

import click

from sweep.cli.common import next_step


def _say_isolation(isolation: str) -> None:
    """Probe the sandbox here too: a missing bwrap shows now, not as parked runs later (the
    controller probes again at every start, on the node that runs the sessions)."""
    if isolation == "none":
        click.echo("WARNING: isolation = \"none\": sessions and trials will run UNSANDBOXED", err=True)
        return
    from sweep.providers.local.bwrap import ProbeInconclusive, probe_bwrap
    try:
        exe, why = probe_bwrap()
    except ProbeInconclusive as exc:
        click.echo(f"WARNING: the sandbox could not be checked here: {exc}", err=True)
        return
    if exe is None:
        click.echo(f"WARNING: isolation = \"bwrap\" is required but unusable on this host: {why}; runs will "
                   "park with this reason on any node where it stays unusable", err=True)


@click.command("init")
@click.argument("plan", type=click.Path(dir_okay=False, path_type=str))
@click.option("--campaign", "-c", "campaign", metavar="DIR", required=True,
              help="Directory to create for the campaign (0700).")
def init(plan: str, campaign: str) -> None:
    """Create a campaign directory from PLAN (TOML, or JSON for *.json).

    Validates the plan (errors name the file and the field), freezes its settings into
    campaign.toml, copies the role manifests, and writes one queued run per candidate. Running it
    again with the same plan is a no-op; with a changed plan it refuses.
    """
    from pathlib import Path

    from sweep.campaign import init_campaign
    result = init_campaign(Path(plan), Path(campaign))
    c = result.campaign
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    where = Path(campaign).resolve()
    if result.created:
        click.echo(f"created campaign {c.settings.name} ({c.campaign_id}) at {where}: "
                   f"{c.candidate_count} runs queued, backend {c.settings.scheduler.backend}")
    elif result.runs_written:
        click.echo(f"campaign {c.settings.name} already initialised; completed {result.runs_written} "
                   "runs a crashed init had not written")
    else:
        click.echo(f"campaign {c.settings.name} already initialised with this plan; nothing to do")
    _say_isolation(c.settings.isolation)
    for name, provider in sorted(c.settings.providers.items()):
        if provider.agent_key_in_sandbox:
            click.echo(f"WARNING: [providers.{name}] agent_key_in_sandbox = true: agent solver sessions on {name} "
                       "will hold their model KEY IN the remote SANDBOX (no relay meters or hides it); their cost "
                       "is self-reported", err=True)
    if c.settings.scheduler.backend == "local":
        next_step(f"sweep run --campaign {where}   (ticks on this machine until every run has ended)")
    else:
        next_step(f"sweep tick --campaign {where}   (then `sweep scrontab --install --campaign {where}` "
                  "to tick every minute)")
