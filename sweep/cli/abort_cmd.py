from __future__ import annotations

import click

from sweep.cli.common import campaign_option, next_step


@click.command("abort")
@click.argument("run_id", metavar="RUN")
@campaign_option
@click.option("--reason", "-r", default=None, help="Why (kept in the run's history).")
@click.option("--wait", "wait_s", type=float, default=120.0, show_default=True,
              help="Seconds to wait for the cancelled job to leave the queue.")
def abort(run_id: str, campaign: str | None, reason: str | None, wait_s: float) -> None:
    """Stop a queued or active run for good: it ends `blocked: aborted`.

    For an active run: cancels its job (scancel; the controller stops its sessions on SIGTERM),
    waits until the scheduler no longer lists it, reaps the dead holder's lease, then ends the
    run. Refused (exit 3, nothing changed) for a run that has already ended. Waits for a running
    tick to finish, so it never races one. `sweep retry RUN` re-admits an aborted run.
    """
    from sweep.campaign import find_campaign
    from sweep.operate import abort_run
    d = find_campaign(campaign)
    done = abort_run(d, run_id, reason=reason, wait_s=wait_s)
    from sweep import textsafe
    click.echo(textsafe.block(done.message))
    next_step(f"sweep show {run_id} --campaign {d}")
