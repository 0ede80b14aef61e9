"""Rendering and keeping the controller job script (sbatch/controller.sbatch).

The script is the same for every job apart from two rendered blocks: a comment header recording
the sbatch options it was submitted with (audit), and one `export NAME='value'` line per extra
environment variable (names validated, values shlex-quoted). The controller argv never enters the
text: sbatch passes it to the script as arguments and the script ends with `exec "$@"`.
"""
from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from runstate.atomic import write_atomic
from sbatch import load_template
from sweep.scheduler.base import check_job_env

SCRIPT_MODE = 0o600


def _comment(text: str) -> str:
    """One comment line, whatever `text` holds: a newline must never end the comment early."""
    return "# " + text.encode("unicode_escape").decode("ascii")


def render_controller_script(job_name: str, sbatch_options: Sequence[str], env: Mapping[str, str],
                             passed: Sequence[str] = ()) -> str:
    """`passed`: the names of the environment sbatch ran with (recorded, never their values)."""
    header = [_comment(f"job name: {job_name}"),
              _comment("sbatch options: " + shlex.join(sbatch_options)),
              _comment("environment (--export=ALL of exactly these, values not kept here): "
                       + (" ".join(passed) or "none")),
              _comment("controller argv: passed as script arguments (see the run's events)")]
    exports = [f"export {key}={shlex.quote(value)}" for key, value in check_job_env(env).items()]
    text = load_template()
    return (text.replace("@SWEEP_HEADER@", "\n".join(header))
                .replace("@SWEEP_EXPORTS@", "\n".join(exports) if exports else "# (no extra environment)"))


def write_private(path: Path, text: str) -> None:
    """Write `path` atomically with mode 0600 (runstate's writer: unique temp, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(path, text.encode("utf-8"), SCRIPT_MODE)
