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
    from runstate.errors import ConfigError
    d = find_campaign(campaign)
    from runstate.paths import CampaignPaths
    target = Path(out) if out else CampaignPaths(d).html_report
    if target.is_dir():
        raise ConfigError(f"{target} is a directory; --out takes the HTML file to write",
                          field="--out", hint=f"e.g. --out {target / 'report.html'}")
    if not target.parent.is_dir():
        raise ConfigError(f"the directory {target.parent} does not exist", field="--out",
                          hint=f"mkdir -p {target.parent}, or give another --out")
    path = write_report(d, target)
    click.echo(f"wrote {path}")
    next_step(f"open {path} in a browser (it works offline)")
