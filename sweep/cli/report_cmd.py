from __future__ import annotations

import click

from sweep.cli.common import campaign_option, next_step


@click.command("report")
@campaign_option
@click.option("--out", "-o", "out", default=None, metavar="FILE",
              help="Where to write the HTML (default: <campaign>/report.html).")
def report(campaign: str | None, out: str | None) -> None:
    """Write the campaign as one static HTML file: endings over time, verified per hour, spend,
    lane occupancy, failure reasons, slowest phases, and every run.

    No server and no network: the plots are inline SVG, the page loads nothing and runs no script.
    Reads only the campaign's files (no Slurm calls). PR titles and reasons are HTML-escaped.
    """
    from pathlib import Path

    from sweep.campaign import find_campaign
    from sweep.report_html import write_report
    d = find_campaign(campaign)
    path = write_report(d, Path(out) if out else d / "report.html")
    click.echo(f"wrote {path}")
    next_step(f"open {path} in a browser (it works offline)")
