from __future__ import annotations

import sys

import click


@click.command("controller")
@click.argument("run_id")
@click.option("--campaign", "-c", "campaign", metavar="DIR", envvar="SWEEP_CAMPAIGN", required=True,
              help="The campaign directory.")
@click.option("--token", required=True, help="The submission token the tick put in the lease.")
def controller(run_id: str, campaign: str, token: str) -> None:
    """Run one run's controller: what `sweep tick` submits as a job.

    Checks that this job holds the run's lease and runs the frozen runtime, then carries the run
    from its recorded phase to an ending (or a clean checkpoint), heartbeating the lease. Not meant
    to be run by hand: it needs SWEEP_JOB_ID, which the scheduler sets.
    """
    from pathlib import Path

    from runstate.models import validate_run_id
    from sweep.controller import run_controller
    try:
        validate_run_id(run_id)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="RUN_ID") from None
    code = run_controller(Path(campaign), run_id, token)
    sys.exit(code)
