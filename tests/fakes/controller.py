"""`sweep controller` with test-only changes to its surroundings (a fake host, a fake runtime).

    python tests/fakes/controller.py [--no-bwrap | --bwrap-killed=N[:TEXT] [--bwrap-signal=SIG]] --campaign DIR --token T RUN_ID

- `--no-bwrap`: behave as on a host where bubblewrap is unusable (its probe fails). With the
  plan's isolation = "none" sessions then run as plain process groups, with no pid namespace to
  take them down when the controller goes; with "bwrap" (the default) the run parks instead.
- `--bwrap-killed=N[:TEXT]`: the first N runs of `bwrap` in this controller (those whose
  arguments, the options passed through `--args FD` after them, contain TEXT, when given; a `*`
  in TEXT stands for anything) are killed by SIGKILL (a `bwrap` on PATH that kills itself,
  then execs the real one): what a kill -9 landing on the bwrap probe's child, or on a sandboxed
  command, does to what the controller reads of it.
- `--bwrap-signal=SIG` (with `--bwrap-killed`): the signal they die by instead of KILL (TERM: a
  scancel's TERM reaching a gate trial before the controller; SEGV: a test that crashes).

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
    killed = [a for a in args if a.startswith("--bwrap-killed=")]
    if killed:
        args.remove(killed[0])
        n, _, text = killed[0].split("=", 1)[1].partition(":")
        sig = [a for a in args if a.startswith("--bwrap-signal=")]
        if sig:
            args.remove(sig[0])
        _kill_bwrap(Path(args[args.index("--campaign") + 1]), int(n), text,
                    sig[0].split("=", 1)[1] if sig else "KILL")
    from sweep.cli import main as sweep_main
    return sweep_main(["controller", *args])


def _kill_bwrap(campaign: Path, n: int, text: str, sig: str) -> None:
    import os
    import shlex
    import shutil
    import tempfile
    assert sig.isalnum(), sig
    real = shutil.which("bwrap")
    shim = Path(tempfile.mkdtemp(prefix="test-bwrap-", dir=campaign))     # one per controller
    count = shlex.quote(str(shim / "count"))
    pattern = "*".join(shlex.quote(part) for part in text.split("*"))     # a * in TEXT: anything
    (shim / "bwrap").write_text(
        "#!/bin/sh\n"
        "args=\"$*\"\n"
        # the options the provider passes through a descriptor (--args FD): read at their own offset
        "if [ \"$1\" = --args ]; then args=\"$args $(tr '\\0' ' ' < /proc/$$/fd/$2)\"; fi\n"
        f"case \"$args\" in *{pattern}*)\n"
        f"  n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}\n"
        f"  if [ \"$n\" -lt {n} ]; then kill -{sig} $$; fi;;\n"
        "esac\n"
        f"exec {shlex.quote(str(real))} \"$@\"\n")
    (shim / "bwrap").chmod(0o755)
    os.environ["PATH"] = f"{shim}{os.pathsep}{os.environ.get('PATH', '')}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
