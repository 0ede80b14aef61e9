from __future__ import annotations

import click

from sweep.cli.common import campaign_option, next_step


@click.command("drain")
@campaign_option
@click.option("--reason", "-r", default=None, help="Why (shown by `sweep status`).")
def drain(campaign: str | None, reason: str | None) -> None:
    """Stop admitting runs, latched until `sweep undrain`.

    Running controllers finish their current phase and stop at a checkpoint. `sweep status` says
    when the campaign is fully drained (no active job, no held lease): then it is safe to change the
    runtime (`sweep runtime freeze`).
    """
    from runstate.markers import request_drain
    from sweep.campaign import find_campaign, load_campaign
    d = find_campaign(campaign)
    load_campaign(d)
    request_drain(d, reason)
    click.echo(f"drain requested for {d}: no run will be admitted until `sweep undrain`")
    next_step(f"sweep status --campaign {d}   (wait for 'drained')")


@click.command("undrain")
@campaign_option
def undrain(campaign: str | None) -> None:
    """Remove the drain marker: the next tick admits runs again."""
    from runstate.markers import clear_drain
    from sweep.campaign import find_campaign, load_campaign
    d = find_campaign(campaign)
    load_campaign(d)
    removed = clear_drain(d)
    click.echo("drain removed" if removed else "campaign was not draining")
    next_step(f"sweep tick --campaign {d}")
