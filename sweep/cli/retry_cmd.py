from __future__ import annotations

import click

from sweep.cli.common import campaign_option, next_step


@click.command("retry")
@click.argument("run_id", metavar="RUN")
@campaign_option
@click.option("--reason", "-r", default=None, help="Why (kept in the run's history and checkpoints).")
def retry(run_id: str, campaign: str | None, reason: str | None) -> None:
    """Re-admit an ended blocked or generated_unverified run with fresh attempts.

    The run goes back to queued at intake with attempts 0; its earlier bundles, evidence and
    sessions stay on disk and the retry is recorded in its history (`sweep show RUN`). Refused
    (exit 3, nothing changed) for a verified, queued or active run. Waits for a running tick to
    finish, so it never races one.
    """
    from sweep.campaign import find_campaign
    from sweep.operate import retry_run
    d = find_campaign(campaign)
    done = retry_run(d, run_id, reason=reason)
    from sweep import textsafe
    click.echo(textsafe.block(done.message))
    next_step(f"sweep tick --campaign {d}   (admits it), then sweep show {run_id} --campaign {d}")
