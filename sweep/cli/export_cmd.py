from __future__ import annotations

import click

from sweep.cli.common import campaign_option, next_step


@click.command("export")
@click.argument("out_dir", metavar="DIR")
@campaign_option
@click.option("--format", "fmt", type=click.Choice(["harbor"]), default="harbor", show_default=True,
              help="Dataset format (Harbor task directories).")
@click.option("--include-unverified", is_flag=True,
              help="Also export the tasks that are not verified (generated_unverified runs, and verified runs "
                   "whose exported image cannot run their test command) into DIR/unverified/, a dataset of its own.")
@click.option("--base-image", default=None, metavar="NAME:TAG@sha256:DIGEST",
              help="Base image of every task's Dockerfile; must be pinned by digest (default: see docs/export.md).")
@click.option("--verifier-network", type=click.Choice(["no-network", "public"]), default="no-network",
              show_default=True,
              help="The network of the verifier's own container. Harbor's docker and podman environments need "
                   "their egress sidecar for no-network; public is for a host that cannot run it (docs/export.md).")
def export(out_dir: str, campaign: str | None, fmt: str, include_unverified: bool, base_image: str | None,
           verifier_network: str) -> None:
    """Export the campaign's verified tasks as a Harbor dataset in DIR.

    One directory per run (named by the run id) with task.toml, instruction, environment
    (the image the gates verified in, or one derived from the test command's language), tests and
    solution, then DIR/dataset.toml, README.md and tasks.jsonl. Re-running adds only what is new; a
    task already in DIR with different content is reported as a collision and never overwritten (exit 1).
    """
    from pathlib import Path

    from sweep.campaign import find_campaign
    from sweep.export import DEFAULT_BASE_IMAGE, export_campaign
    d = find_campaign(campaign)
    report = export_campaign(d, Path(out_dir), include_unverified=include_unverified,
                             base_image=base_image or DEFAULT_BASE_IMAGE, verifier_network=verifier_network)
    click.echo(f"exported to {report.out}: {len(report.added)} added, {len(report.unchanged)} unchanged, "
               f"{len(report.collisions)} collisions, {len(report.skipped)} skipped")
    for run_id in report.added:
        click.echo(f"  added      {run_id}")
    for line in report.unverified:
        click.echo(f"  unverified {line}")
    for line in report.skipped:
        click.echo(f"  skipped    {line}")
    for line in report.collisions:
        click.echo(f"  COLLISION  {line}", err=True)
    next_step(f"harbor run -p {report.out} -a oracle   (or -p {report.out}/<run_id>; see docs/export.md)")
    if not report.ok:
        from runstate.errors import SweepError
        raise SweepError(f"{len(report.collisions)} task(s) collide with different content already in {report.out}",
                         hint="nothing was overwritten; export into a new directory or remove those tasks")
