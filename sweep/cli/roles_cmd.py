"""`sweep roles`: validate RoleSpec manifests before a campaign runs them.

Imports only click and roles at load; the runtime registry is imported only with --runtime.
"""
from __future__ import annotations

from pathlib import Path

import click

from runstate.errors import ConfigError, SweepError


@click.group(name="roles")
def roles() -> None:
    """Validate RoleSpec manifests (the rules each role session is held to)."""


@roles.command(name="check")
@click.argument("directory", type=click.Path(path_type=Path, file_okay=False), required=False)
@click.option("--runtime", "runtime_name", default=None, metavar="NAME",
              help="Also check that this session runtime (oracle, nop, command) can honour every manifest.")
def check(directory: Path | None, runtime_name: str | None) -> None:
    """Check every *.toml manifest in DIRECTORY (default: the manifests shipped with sweep).

    Prints one line per manifest, ok or the error naming the file and the field, and exits
    non-zero if any manifest is invalid.
    """
    from roles import load_manifest, manifest_paths, manifest_sha256, shipped_manifests_dir

    directory = directory if directory is not None else shipped_manifests_dir()
    paths = manifest_paths(directory)   # raises ConfigError for a missing directory
    if not paths:
        raise SweepError("no *.toml manifests found", path=directory,
                         hint="copy the shipped ones from `sweep roles check` output or run `sweep init`")
    failures = 0
    for path in paths:
        try:
            spec = load_manifest(path)
            if runtime_name:
                from sweep.runtimes import check_runtime_supports
                check_runtime_supports(spec, runtime_name)
        except SweepError as exc:
            failures += 1
            click.echo(f"error  {exc}")
            continue
        kind = "judge, read-only" if spec.is_judge else ("read-only" if spec.read_only else
                                                         "writes " + ", ".join(spec.scope))
        click.echo(f"ok     {path}  ({spec.name}: {kind}; sha256 {manifest_sha256(path)[:12]})")
    if failures:
        # A SweepError, not ctx.exit: the CLI turns it into one line and a non-zero exit code.
        raise ConfigError(f"{failures} of {len(paths)} manifest(s) invalid",
                          hint=f"fix them, then run: sweep roles check {directory}")
    click.echo(f"All {len(paths)} manifest(s) valid. Next: sweep init PLAN to start a campaign with them "
               "(or sweep tick, if these are a campaign's roles/).")
