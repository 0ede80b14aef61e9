from __future__ import annotations

import click

from sweep.cli.common import campaign_option, next_step


@click.group("runtime")
def runtime() -> None:
    """Freeze or show the runtime (wheel + sha256) that controller jobs run."""


@runtime.command("freeze")
@campaign_option
@click.option("--wheel", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A built sweep wheel (default: build one from this installation's source tree).")
@click.option("--force", is_flag=True, help="Freeze even though the campaign is not drained.")
def freeze_cmd(campaign: str | None, wheel: str | None, force: bool) -> None:
    """Copy a sweep wheel into the campaign; controller jobs then run exactly that code.

    Do it on a drained campaign (`sweep drain`, wait for `sweep status` to say drained): a job
    that started on the previous runtime refuses to continue on a different one.
    """
    from pathlib import Path

    from runstate.errors import SweepError
    from sweep.campaign import find_campaign, load_campaign
    from sweep.frozen import freeze
    from sweep.status import collect_status
    d = find_campaign(campaign)
    load_campaign(d)
    st = collect_status(d)
    busy = st.counts["active"] or st.held_leases
    if busy and not force:
        raise SweepError(f"{st.counts['active']} active runs and {st.held_leases} held leases: "
                         "freezing now would strand them on the old runtime",
                         hint="`sweep drain` and wait for `sweep status` to say drained, or pass --force")
    # building the wheel from this installation takes seconds (pip wheel): say so before it starts
    click.echo(f"copying {wheel} into {d / 'runtime'} ..." if wheel else
               "building a wheel of this installation of sweep (pip wheel, a few seconds) ...", err=True)
    rt = freeze(d, Path(wheel) if wheel else None)
    click.echo(f"frozen runtime {rt.short} (sweep {rt.version}, python {rt.python})")
    next_step(f"sweep undrain --campaign {d}" if st.draining else f"sweep tick --campaign {d}")


@runtime.command("show")
@campaign_option
def show_cmd(campaign: str | None) -> None:
    """Show the frozen runtime, if any."""
    from sweep.campaign import find_campaign, load_campaign
    from sweep.frozen import current_runtime, frozen_controller_command
    d = find_campaign(campaign)
    load_campaign(d)
    rt = current_runtime(d)
    if rt is None:
        click.echo("no frozen runtime: controller jobs run this installation of sweep")
        next_step(f"sweep runtime freeze --campaign {d}")
        return
    click.echo(f"frozen runtime {rt.sha256} (sweep {rt.version}), python {rt.python}")
    command = frozen_controller_command(d)      # None if it was unfrozen since the line above
    click.echo("controller command: " + (" ".join(command) if command else "this installation of sweep"))
