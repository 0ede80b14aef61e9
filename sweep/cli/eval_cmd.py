"""`sweep eval`: evaluation campaigns (docs/eval.md)."""
from __future__ import annotations

import click


@click.group("eval")
def eval_group() -> None:
    """Evaluate solver arms x repeats over a Harbor dataset (docs/eval.md)."""


@eval_group.command("init")
@click.argument("plan", type=click.Path(dir_okay=False))
@click.option("--campaign", "campaign", required=True, type=click.Path(file_okay=False),
              help="The evaluation's directory (new; the same plan again is a no-op).")
def init(plan: str, campaign: str) -> None:
    """Freeze the evaluation plan and its assignment manifest into --campaign DIR."""
    from pathlib import Path

    from sweep.eval.cells import init_eval
    frozen, manifest, created = init_eval(Path(plan), Path(campaign))
    verb = "created" if created else "unchanged"
    click.echo(f"{verb} {campaign}: {len(manifest.cells)} cells ({len({c.task_id for c in manifest.cells})} tasks x "
               f"{len(manifest.arms)} arms x {manifest.repeats} repeats), manifest sha256 {frozen.manifest_sha256}")


@eval_group.command("run")
@click.option("--campaign", "campaign", required=True, type=click.Path(file_okay=False, exists=True))
def run(campaign: str) -> None:
    """Tick a local evaluation until no cell can still end: its cells without a result run as runs
    of the campaign (one controller job each, max_parallel at a time), in manifest order."""
    from pathlib import Path

    from sweep.drive import drive_eval
    ran, done, stopped = drive_eval(Path(campaign).resolve())
    click.echo(f"ran {ran} cells ({done} had ended before)")
    if stopped:
        click.echo(f"stopped: {stopped}", err=True)
        raise SystemExit(1)


@eval_group.command("report")
@click.option("--campaign", "campaign", required=True, type=click.Path(file_okay=False, exists=True))
@click.option("--json", "as_json", is_flag=True, help="The figures as JSON.")
@click.option("--html", "html_out", default=None, metavar="FILE", type=click.Path(dir_okay=False),
              help="Also write them as one static HTML page (no script, loads nothing) to FILE.")
@click.option("--exclude-faults", is_flag=True,
              help="Compute the figures without the cells the plan's faults interrupted.")
def report(campaign: str, as_json: bool, html_out: str | None, exclude_faults: bool) -> None:
    """Per-arm pass rates with 95% intervals, pass@k, cost per solved task, median time, and paired
    comparisons of the arms on the same tasks; which cells had an injected fault."""
    from pathlib import Path

    from sweep.eval.report import collect, render
    summary = collect(Path(campaign), exclude_faults=exclude_faults)
    if html_out is not None:
        from runstate.errors import ConfigError
        from sweep.report_html import write_eval_report
        if not Path(html_out).parent.is_dir():
            raise ConfigError(f"the directory {Path(html_out).parent} does not exist", field="--html")
        write_eval_report(Path(campaign), Path(html_out), summary)
        click.echo(f"wrote {html_out}", err=as_json)
    if as_json:
        import json
        click.echo(json.dumps(summary, indent=2))
    else:
        click.echo(render(summary))
