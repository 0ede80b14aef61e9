from __future__ import annotations

import click

from sweep.cli.common import next_step


@click.command("demo")
@click.argument("directory", default="sweep-demo", required=False)
@click.option("--timeout", default=180, show_default=True, help="Give up after this many seconds.")
@click.option("--isolation", type=click.Choice(["bwrap", "none"]), default=None,
              help="Sandbox for the demo's sessions and trials. Default: bwrap where it works here, "
                   "else none (the demo's own sample PRs run unsandboxed, and every report says so).")
def demo(directory: str, timeout: int, isolation: str | None) -> None:
    """Run a sample campaign end to end on this machine (no Slurm needed).

    Builds five pull requests in real git repositories under DIRECTORY (default ./sweep-demo):
    one that becomes a verified task, one without tests, one whose test already passes, one with a
    flaky test, and one that needs a GPU. Then it initialises a campaign on the local backend with
    the deterministic oracle runtimes and ticks until every run that can end has ended.
    """
    from pathlib import Path

    from sweep.demo import demo_isolation, run_demo
    from sweep.status import collect_status, render_status
    if isolation is None:
        isolation, why = demo_isolation()
        if isolation == "none":
            click.echo(f"WARNING: {why}: the demo runs its own sample PRs UNSANDBOXED (isolation = \"none\" "
                       "in its plan; every report says so). Install bubblewrap for the sandbox; a campaign "
                       "of your own requires it unless its plan says isolation = \"none\".", err=True)
    campaign = run_demo(Path(directory), echo=click.echo, timeout_s=timeout, isolation=isolation)
    click.echo("")
    click.echo(render_status(collect_status(campaign)))
    click.echo("")
    click.echo(f"reports: {campaign}/runs/<run>/report.md   task bundles: {campaign}/runs/<run>/task/")
    next_step(f"sweep show fix-clamp --campaign {campaign}   (one run's history); "
              "then write your own plan and run `sweep init PLAN --campaign DIR`")
