from __future__ import annotations

import click

from sweep.cli.common import campaign_option, next_step


@click.command("scrontab")
@campaign_option
@click.option("--print", "mode", flag_value="print", default=True, help="Print the entry (default).")
@click.option("--install", "mode", flag_value="install",
              help="Merge the entry into your scrontab (other lines kept; idempotent).")
@click.option("--remove", "mode", flag_value="remove", help="Remove this campaign's entry only.")
@click.option("--scrontab-bin", envvar="SWEEP_SCRONTAB", default=None, metavar="PATH",
              help="The scrontab client to use (default: scrontab on PATH; env SWEEP_SCRONTAB).")
def scrontab(campaign: str | None, mode: str, scrontab_bin: str | None) -> None:
    """Print, install or remove the scrontab entry that runs `sweep tick` every interval.

    The entry carries #SCRON options from the plan's [scrontab] settings (job name, partition,
    qos, account, time limit, output file) and absolute paths, because Slurm runs it with your
    login environment, not this shell's.
    """
    from sweep.campaign import Campaign, find_campaign
    from sweep import scrontab as sc
    d = find_campaign(campaign)
    handle = Campaign.load(d)
    c = handle.file
    if mode == "print":
        click.echo(sc.render_entry(handle), nl=False)
        next_step(f"sweep scrontab --install --campaign {d}")
    elif mode == "install":
        sc.install(handle, scrontab_bin)
        click.echo(f"installed: `sweep tick` for {d} runs {sc.schedule(c.settings.tick.interval_minutes)} "
                   f"as Slurm job {c.tick_job_name}")
        next_step(f"sweep status --campaign {d}   (the last-tick age shows the entry is alive)")
    else:
        removed = sc.remove(c, scrontab_bin)
        click.echo("removed this campaign's scrontab entry" if removed else "no entry for this campaign was installed")
        next_step(f"sweep status --campaign {d}")
