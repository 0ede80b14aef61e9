"""`module load` in a toolchain: what Lmod or Environment Modules would set, frozen by `sweep init`.

A site's toolchains are often modules (`module load gcc/12 python/3.11`). Loading them at every
job start would make each controller depend on the login shell it happens to get (a scrontab job
starts from `env -i` and a login shell; an interactive shell may hold other modules already), so
`init` loads them ONCE, in a clean login shell (`env -i` with HOME, USER, LOGNAME and the caller's
MODULEPATH, then `bash -l`, where the site's profile defines `module`), and keeps only what the
load changed: the PATH entries it added (in its order) and the variables it set. Those become the
toolchain's `path` and `variables` in campaign.toml, so every controller, session and trial gets
exactly what `init` validated, whether the tick came from a shell or from scrontab. The module
names are given to the shell as arguments, never spliced into its script.
"""
from __future__ import annotations

import os
import pwd
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

MODULE_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+@/-]{0,127}$")
_MARK = "SWEEP_MODULES_LOADED=1"
# `module` is defined by the site's profile; the state before the load, a mark, the state after.
_SCRIPT = ('type module >/dev/null 2>&1 || exit 64\n'
           'env -0; printf "%s\\0" "$0"\n'
           'module load "$@" 1>&2 || exit 65\n'
           'env -0\n')
# Set by the shell itself, not by the load.
_SHELL_OWN = frozenset({"SHLVL", "_", "PWD", "OLDPWD"})
LOAD_TIMEOUT_S = 60.0


class ModuleLoadFailed(RuntimeError):
    pass


@dataclass
class LoadedModules:
    path: list[str] = field(default_factory=list)          # PATH entries the load added, in its order
    variables: dict[str, str] = field(default_factory=dict)


def _login_env() -> dict[str, str]:
    try:
        user = pwd.getpwuid(os.getuid())
        env = {"HOME": user.pw_dir, "USER": user.pw_name, "LOGNAME": user.pw_name}
    except KeyError:
        env = {"HOME": os.environ.get("HOME", "/")}
    if os.environ.get("MODULEPATH"):
        env["MODULEPATH"] = os.environ["MODULEPATH"]
    return env


def _parse(raw: str) -> tuple[dict[str, str], dict[str, str]]:
    entries = raw.split("\0")
    try:
        mark = entries.index(_MARK)
    except ValueError:
        raise ModuleLoadFailed("the login shell's output could not be read") from None

    def table(items: list[str]) -> dict[str, str]:
        return dict(e.split("=", 1) for e in items if "=" in e)
    return table(entries[:mark]), table(entries[mark + 1:])


def load_modules(names: list[str], *, keep: Callable[[str], bool] = lambda name: True,
                 timeout_s: float = LOAD_TIMEOUT_S) -> LoadedModules:
    """`module load NAMES` in a clean login shell: the PATH entries and variables it added.
    `keep(name)` says which variable names may be taken (sweep's own and the shell's are not)."""
    argv = ["env", "-i", *[f"{k}={v}" for k, v in _login_env().items()], "bash", "-lc", _SCRIPT, _MARK, *names]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ModuleLoadFailed(f"`module load {' '.join(names)}` did not finish in {timeout_s:.0f} s") from None
    except OSError as exc:
        raise ModuleLoadFailed(f"could not start a login shell (bash -l): {exc}") from None
    said = done.stderr.decode(errors="replace").strip().splitlines()
    first = next((line.strip() for line in said if line.strip()), "")
    if done.returncode == 64:
        raise ModuleLoadFailed("a login shell (bash -l) has no `module` command: install Lmod or Environment "
                               "Modules, or declare the toolchain's `path` and `variables` instead")
    if done.returncode != 0:
        raise ModuleLoadFailed(f"`module load {' '.join(names)}` failed in a login shell (exit {done.returncode}): "
                               f"{first or 'it said nothing'}")
    before, after = _parse(done.stdout.decode(errors="replace"))
    old_path = before.get("PATH", "").split(":")
    out = LoadedModules()
    for entry in after.get("PATH", "").split(":"):
        if entry and entry not in old_path and entry not in out.path:
            out.path.append(entry)
    for name, value in after.items():
        if name == "PATH" or name in _SHELL_OWN or before.get(name) == value or not keep(name):
            continue
        out.variables[name] = value
    return out
