"""`sweep reconcile`: terminate the remote sandboxes dead controllers left, and nothing else."""
from __future__ import annotations

import click

from sweep.cli.common import campaign_option, next_step


@click.command("reconcile")
@campaign_option
@click.option("--dry-run", is_flag=True, help="Say what would be terminated; change nothing.")
def reconcile(campaign: str | None, dry_run: bool) -> None:
    """Terminate orphaned remote sandboxes and settle their receipts.

    Every remote sandbox has a receipt in runs/<run>/sandboxes/ written before it was created.
    For each provider with open receipts this lists the provider's sandboxes tagged with this
    campaign and terminates one only when its tags match an open receipt of this campaign AND that
    receipt's job is no longer in the scheduler's queue. Sandboxes of other campaigns, ours without
    a receipt, and those of running jobs are never touched. If the queue cannot be read (UNKNOWN),
    nothing is terminated. Exit 0 when every open receipt of a dead job was settled; exit 1 when
    something stays uncertain (a provider error, an unconfirmed terminate): run it again.
    """
    from sweep.campaign import Campaign, find_campaign
    from sweep.providers import get_sandbox_provider
    from sweep.providers.receipts import reconcile as do_reconcile
    d = find_campaign(campaign)
    c = Campaign.load(d)
    snap = c.scheduler().queue()
    rep = do_reconcile(d, c.file.campaign_id, queue_known=snap.known, live_jobs=set(snap.jobs),
                       queue_error=snap.error, dry_run=dry_run,
                       provider_for=lambda name, opts: get_sandbox_provider(name, **opts))
    if rep.refused:
        click.echo(f"refused: {rep.refused}")
        raise SystemExit(1)
    verb = "would terminate" if dry_run else "terminated"
    for label, names in ((verb, rep.terminated), ("terminate not confirmed", rep.unconfirmed),
                         ("receipt settled, sandbox already gone", rep.settled_gone),
                         ("left alone: its job still runs", rep.left_live),
                         ("left alone: this campaign's tag but no matching receipt", rep.left_unowned),
                         ("unreadable receipt (left alone)", rep.unreadable), ("provider error", rep.errors)):
        for name in names:
            click.echo(f"{label}: {name}")
    if not any((rep.terminated, rep.unconfirmed, rep.settled_gone, rep.left_live, rep.left_unowned,
                rep.unreadable, rep.errors)):
        click.echo("nothing to reconcile: no open sandbox receipt")
    if rep.cleared_marker:
        click.echo("marker cleared: the tick admits runs again")
    if rep.uncertain:
        next_step(f"sweep reconcile --campaign {d}   (again, once the provider answers)")
        raise SystemExit(1)
    if dry_run and rep.terminated:
        next_step(f"sweep reconcile --campaign {d}   (to terminate them)")
    else:
        next_step(f"sweep status --campaign {d}")
