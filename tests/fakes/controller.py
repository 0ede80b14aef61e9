"""`sweep controller` with test-only changes to its surroundings (a fake host, a fake runtime).

    python tests/fakes/controller.py [--no-bwrap] --campaign DIR --token T RUN_ID

- `--no-bwrap`: behave as on a host where bubblewrap is unusable (its probe fails). With the
  plan's isolation = "none" sessions then run as plain process groups, with no pid namespace to
  take them down when the controller goes; with "bwrap" (the default) the run parks instead.

A plan runs it with `tick.controller_command = [python, "<this file>", "--no-bwrap"]`.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))    # the repository, for `tests.fakes`


def main(args: list[str]) -> int:
    if "--no-bwrap" in args:
        args.remove("--no-bwrap")
        from sweep.providers.local import bwrap
        bwrap._probe = (None, "bubblewrap disabled by tests/fakes/controller.py (a host without it)")
    from sweep.cli import main as sweep_main
    return sweep_main(["controller", *args])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
