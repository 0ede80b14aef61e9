"""Options and helpers shared by the verbs (kept import-light)."""
from __future__ import annotations

import click

campaign_option = click.option(
    "--campaign", "-c", "campaign", metavar="DIR", envvar="SWEEP_CAMPAIGN", default=None,
    help="The campaign directory (default: $SWEEP_CAMPAIGN, else the current directory).")


def next_step(text: str) -> None:
    click.echo(f"next: {text}")
