"""bubblewrap: the kernel-enforced half of the local provider's sandbox.

The sandbox sees the host's root read-only, its own /proc, /dev and an empty tmpfs /tmp, and only
the paths in `write_paths` writable. What matters, measured: run as root without a
user namespace, bwrap keeps every capability by default, and a sandboxed root process can then
`mount -o remount,bind,rw /` and write to the host through the read-only root. `--cap-drop ALL` is
therefore part of every sandbox, not an option.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from sweep.providers.base import ExecSpec

SANDBOX_HOME = "/tmp/sweep-home"     # on the sandbox's private tmpfs: writable, gone at exit
BASE_FLAGS = ("--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
              "--cap-drop", "ALL")

_probe: tuple[str | None, str] | None = None


def probe_bwrap(refresh: bool = False) -> tuple[str | None, str]:
    """(path to a working bwrap or None, why not). Probed once per process with our real flags."""
    global _probe
    if _probe is not None and not refresh:
        return _probe
    exe = shutil.which("bwrap")
    if exe is None:
        _probe = (None, "bubblewrap (bwrap) is not installed")
        return _probe
    argv = [exe, *BASE_FLAGS, "--unshare-net", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
            "--tmpfs", "/tmp", "true"]
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _probe = (None, f"bwrap probe failed: {exc}")
        return _probe
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip().splitlines()
        _probe = (None, f"bwrap probe exited {done.returncode}: {why[-1] if why else 'no message'} "
                        "(user namespaces may be disabled on this host)")
        return _probe
    _probe = (exe, "ok")
    return _probe


def _depth(path: Path) -> tuple[int, str]:
    return (len(path.parts), str(path))


def runtime_read_paths() -> set[Path]:
    """Where this Python and sweep itself live, when that is under /tmp.

    The sandbox mounts a fresh tmpfs on /tmp, which would hide a virtual environment or a checkout
    that lives there (CI clones into a temp folder): the session could not even start its
    interpreter. Those directories are re-bound read-only.
    """
    import sweep
    candidates = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).parent,
                  Path(os.path.realpath(sys.executable)).parent,
                  Path(sweep.__file__).resolve().parent.parent}
    out = set()
    for path in candidates:
        resolved = path.resolve()
        if resolved == Path("/tmp") or Path("/tmp") in resolved.parents:
            out.add(resolved)
    return out


def bwrap_argv(bwrap: str, spec: ExecSpec, argv: list[str]) -> list[str]:
    """The full command line: bwrap flags, the binds for `spec`, then `argv`."""
    args = [bwrap, *BASE_FLAGS]
    if not spec.network:
        args.append("--unshare-net")
    args += ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
             "--dir", SANDBOX_HOME]
    writable = {Path(p).resolve() for p in spec.write_paths}
    readable = ({Path(p).resolve() for p in (spec.cwd, *spec.read_paths)} | runtime_read_paths()) - writable
    # Parents before children: a later bind overlays an earlier one, so `task/` (rw) must come after
    # the workspace (ro) that contains it. Read paths are re-bound because /tmp is a fresh tmpfs.
    for path in sorted(readable | writable, key=_depth):
        if path in writable:
            args += ["--bind", str(path), str(path)]
        else:
            args += ["--ro-bind-try", str(path), str(path)]
    args += ["--chdir", str(Path(spec.cwd).resolve()), "--", *argv]
    return args
