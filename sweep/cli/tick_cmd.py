from __future__ import annotations

import click

from sweep.cli.common import campaign_option, next_step


@click.command("tick")
@campaign_option
@click.option("--quiet", "-q", is_flag=True, help="Print nothing unless something failed.")
@click.option("--full", is_flag=True,
              help="Read every run's files, ignoring the ended-runs index, and rebuild the index "
                   "from them (the index is a cache; this is never needed for correctness).")
def tick(campaign: str | None, quiet: bool, full: bool) -> None:
    """Observe, plan and act once, then exit (run it every minute from scrontab).

    Reads the campaign's files and calls the scheduler's queue exactly once; reconciles runs whose
    controller vanished, reaps stale leases, admits queued runs within the limits, and writes
    tick.json. Ended runs listed in the ended-runs index (ended-index.jsonl) are not re-read while
    their state.json is unchanged (one stat each). A second concurrent tick exits 0 at once. Exits
    non-zero only when the campaign itself is unusable.
    """
    from sweep.campaign import find_campaign
    from sweep.tick import run_tick
    outcome = run_tick(find_campaign(campaign), full=full)
    if not quiet or (outcome.report and outcome.report.errors):
        from sweep import textsafe
        click.echo(textsafe.block(outcome.message))     # tick errors may quote files and Slurm
    if not quiet:
        next_step("sweep status   (what the tick did and why runs wait)")
