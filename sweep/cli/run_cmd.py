from __future__ import annotations

import click

from sweep.cli.common import campaign_option, next_step


@click.command("run")
@campaign_option
@click.option("--interval", "interval_s", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
              help="Seconds between ticks.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=None,
              help="Stop after this many seconds even if runs remain (they stay resumable).")
def run(campaign: str | None, interval_s: float, timeout_s: float | None) -> None:
    """Tick a local-backend campaign until every run that can end has ended.

    One ordinary tick every --interval seconds, a line for each run that ends and whenever the
    counts change. It stops when nothing is active and every queued run is either admitted and
    ended or held for good (e.g. it needs more GPUs than the plan allows), or when the campaign
    is drained. Ctrl-C leaves the campaign resumable: the local controllers go on in their own
    sessions, and `sweep run` again goes on from the files. A Slurm campaign is ticked by scrontab
    instead (`sweep scrontab --install`).
    """
    from runstate.errors import ConfigError
    from sweep.campaign import Campaign, find_campaign
    from sweep.drive import drive_campaign

    where = find_campaign(campaign)
    loaded = Campaign.load(where)
    backend = loaded.settings.scheduler.backend
    if backend != "local":
        raise ConfigError(f"`sweep run` ticks local-backend campaigns; this one's backend is {backend!r}",
                          field="scheduler.backend",
                          hint=f"tick it from scrontab: sweep scrontab --install --campaign {where}")
    try:
        result = drive_campaign(where, echo=click.echo, pause_s=interval_s, timeout_s=timeout_s)
    except KeyboardInterrupt:
        click.echo("interrupted: the campaign is as the last tick left it; active runs go on in the background")
        next_step(f"sweep run --campaign {where}   (to go on), or `sweep status --campaign {where}`")
        raise SystemExit(130) from None
    summary = ", ".join(f"{k} {v}" for k, v in result.counts.items() if v)
    click.echo(f"{result.reason} after {result.duration_s:.1f}s: {summary}")
    if result.stuck:
        click.echo(f"held for good: {', '.join(result.stuck[:10])}"
                   + (f" and {len(result.stuck) - 10} more" if len(result.stuck) > 10 else "")
                   + " (see `sweep status` for why)")
    if result.reason == "breaker":
        next_step("fix what the cause names (`sweep show RUN` of one of them), then "
                  f"`sweep undrain --ack CAUSE --campaign {where}` and `sweep run` again")
    elif result.reason == "drained":
        next_step(f"sweep undrain --campaign {where}, then `sweep run` again")
    elif result.reason == "timeout":
        next_step(f"sweep run --campaign {where}   (to go on)")
    else:
        next_step(f"sweep report --campaign {where}   (or `sweep export DIR --campaign {where}`)")
