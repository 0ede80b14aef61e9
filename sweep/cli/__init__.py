"""The `sweep` command line.

Each verb lives in its own module and is imported only when it runs, so `sweep --help` and
`sweep status` never pay for the scheduler, provider or agent SDK imports of other verbs.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys

import click

from runstate.errors import SweepError

# verb -> (module:attribute, one-line help shown by `sweep --help` without importing the module)
VERBS: dict[str, tuple[str, str]] = {
    "init": ("sweep.cli.init_cmd:init", "Create a campaign directory from a plan (TOML or JSON)."),
    "run": ("sweep.cli.run_cmd:run", "Tick a local-backend campaign until every run that can end has ended."),
    "tick": ("sweep.cli.tick_cmd:tick", "Observe, plan and act once: admit, reap, reconcile. Run it from scrontab."),
    "status": ("sweep.cli.status_cmd:status", "Show the campaign from its files (no Slurm calls)."),
    "show": ("sweep.cli.status_cmd:show", "Show one run: its record, lease and event history."),
    "drain": ("sweep.cli.drain_cmd:drain", "Stop admitting runs (latched) before a runtime change."),
    "undrain": ("sweep.cli.drain_cmd:undrain", "Remove the drain marker so ticks admit runs again."),
    "scrontab": ("sweep.cli.scrontab_cmd:scrontab", "Print, install or remove the tick's scrontab entry."),
    "controller": ("sweep.cli.controller_cmd:controller", "Run one run's controller (what the tick submits)."),
    "runtime": ("sweep.cli.runtime_cmd:runtime", "Freeze the runtime (wheel + sha256) controller jobs run."),
    "roles": ("sweep.cli.roles_cmd:roles", "Validate RoleSpec manifests."),
    "demo": ("sweep.cli.demo_cmd:demo", "Build a sample panel and run it end to end on the local backend."),
    "export": ("sweep.cli.export_cmd:export", "Export verified tasks as a Harbor dataset directory."),
    "retry": ("sweep.cli.retry_cmd:retry", "Re-admit a blocked or unverified run with fresh attempts."),
    "clear-cooldown": ("sweep.cli.cooldown_cmd:clear_cooldown", "End a role's or key family's cooldown now, after fixing its key."),
    "abort": ("sweep.cli.abort_cmd:abort", "Stop a run: cancel its job and end it blocked: aborted."),
    "doctor": ("sweep.cli.doctor_cmd:doctor", "Check the agent CLIs the campaign uses: installed, runnable in the sandbox, keys, endpoints."),
    "reconcile": ("sweep.cli.reconcile_cmd:reconcile", "Terminate remote sandboxes that dead controllers left (by receipt and tag)."),
    "discover": ("sweep.cli.discover_cmd:discover",
                 "Find merged PRs of a GitHub repository that change code and tests, as plan candidates."),
    "eval": ("sweep.cli.eval_cmd:eval_group", "Evaluate solver arms x repeats over a Harbor dataset (init, run, report)."),
    "report": ("sweep.cli.report_cmd:report", "Write a static HTML report of the campaign (plots, no server)."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(VERBS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in VERBS:
            return None
        target, _ = VERBS[name]
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:   # the verb is declared but not built yet
                return None
            raise
        return getattr(module, attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, VERBS[name][1]) for name in self.list_commands(ctx)
                if importlib.util.find_spec(VERBS[name][0].split(":")[0]) is not None]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="sweep", prog_name="sweep")
def cli() -> None:
    """sweep drives agent sweeps over a panel of pull requests on Slurm.

    A campaign is a directory. `sweep init` creates it, `sweep tick` (from scrontab) advances it,
    `sweep status` shows it. Start with `sweep demo` to see a whole campaign on this machine.
    """


def main(argv: list[str] | None = None) -> int:
    try:
        cli.main(args=argv, prog_name="sweep", standalone_mode=False)
    except SweepError as exc:
        click.echo(f"sweep: error: {exc}", err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("sweep: aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
