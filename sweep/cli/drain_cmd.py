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
@click.option("--ack", "ack", metavar="CAUSE", default=None,
              help="Acknowledge the circuit breaker's trip on CAUSE (after fixing what it names): "
                   "the breaker's streaks restart and the next tick admits runs again.")
def undrain(campaign: str | None, ack: str | None) -> None:
    """Remove the drain marker (and, with --ack CAUSE, a tripped circuit breaker): the next tick
    admits runs again."""
    from runstate.breaker import acknowledge, tripped
    from runstate.markers import clear_drain
    from sweep.campaign import find_campaign, load_campaign
    d = find_campaign(campaign)
    load_campaign(d)
    if ack is not None:
        import getpass
        try:
            who = getpass.getuser()
        except Exception:  # noqa: BLE001 - no passwd entry in some containers
            who = str(__import__("os").getuid())
        trip = acknowledge(d, ack, who=who)
        click.echo(f"circuit breaker acknowledged: {trip.cause} (tripped after {trip.count} runs in lane {trip.lane})")
        # a role cooling down for the same cause (a config park) is over too: the operator fixed it
        from runstate.markers import read_outage
        from runstate.models import COOLDOWN_KEYS
        from sweep.operate import clear_cooldown
        roles = [r for r in COOLDOWN_KEYS if (s := read_outage(d, r).value) is not None and ack in (s.detail or "")]
        if roles:
            clear_cooldown(d, roles, reason=f"circuit breaker acknowledged: {ack}")
            click.echo(f"cooldown ended for {', '.join(roles)} (it was for {ack}): one canary run goes first")
    removed = clear_drain(d)
    click.echo("drain removed" if removed else "campaign was not draining")
    left = tripped(d)
    if left is not None:
        click.echo(f"the circuit breaker still stops admission: {left.cause}; `sweep undrain --ack {left.cause}` "
                   "once it is fixed")
    next_step(f"sweep tick --campaign {d}")
