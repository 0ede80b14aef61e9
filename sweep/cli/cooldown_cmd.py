from __future__ import annotations

import click

from sweep.cli.common import campaign_option, next_step


@click.command("clear-cooldown")
@click.argument("roles", nargs=-1, metavar="[ROLE]...")
@click.option("--family", default=None, type=click.Choice(["anthropic", "openai"]),
              help="Also every role of this key family (a bad key parks the whole family).")
@campaign_option
@click.option("--reason", "-r", default=None, help="Why (kept on the stamp and in each released run's history).")
def clear_cooldown(roles: tuple[str, ...], family: str | None, campaign: str | None, reason: str | None) -> None:
    """End a role's or a key family's cooldown now, after fixing its key.

    The stamp is kept, expired: one canary run goes first, as after any cooldown, and its success
    clears it. Queued runs parked for those roles are released, each with a `cooldown_cleared`
    event. Waits for a running tick to finish, so it never races one.
    """
    from sweep.campaign import find_campaign
    from sweep.operate import clear_cooldown as clear
    d = find_campaign(campaign)
    done = clear(d, list(roles), family=family, reason=reason)
    from sweep import textsafe
    click.echo(textsafe.block(done.message))
    next_step(f"sweep tick --campaign {d}   (admits the canary), then sweep status --campaign {d}")
