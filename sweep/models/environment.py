"""The job environment: the plan's `[environment]`, what every controller, session and trial sees.

A campaign is validated in one environment (`sweep init`, usually a shell with a venv active) and
run in another (controller jobs started by a scrontab tick, with the login PATH). The plan
therefore declares the toolchains its test commands need, and that declaration, not the tick's
own environment, is what the jobs get:

    [environment]
    inherit = ["HTTPS_PROXY"]                          # copied from the tick's environment when set
    [environment.toolchains.python]
    prefix = "/opt/venvs/py312"                        # a venv or conda prefix
    [environment.toolchains.rust]
    bind = ["~/.rustup/toolchains/stable-x86_64-unknown-linux-gnu"]
    path = ["~/.rustup/toolchains/stable-x86_64-unknown-linux-gnu/bin"]
    variables = { CARGO_NET_OFFLINE = "true" }
    [environment.toolchains.site]
    modules = ["gcc/12", "cuda/12.2"]                  # `module load`: init loads them once, freezes what they set

`init` resolves every path (`~`, relative to the plan) to an absolute one and freezes the result
in campaign.toml, so a tick from a shell and a tick from scrontab hand the controllers the same
PATH and variables, and the sandbox binds exactly the declared directories read-only. A directory
that would show a home directory whole, the campaign itself, or the host's credentials (/etc,
/run, ...) is refused, naming the field: a toolchain is a prefix, never a home.

Without an `[environment]` table a campaign keeps the older behaviour (controllers inherit the
tick's environment, sandboxes its PATH); `sweep init` and `sweep doctor` say so.
"""
from __future__ import annotations

import os
import pwd
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sweep.execution import SandboxEnvironment
from sweep.models.modules import LoadedModules

SYSTEM_PATH = ("/usr/local/bin", "/usr/bin", "/bin")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_TOOLCHAIN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Set by sweep or the provider itself, or able to redirect what every program loads: not declarable.
RESERVED_VARIABLES = frozenset({"PATH", "HOME", "TMPDIR", "LANG", "USER", "LOGNAME", "SHELL", "PWD",
                                "LD_PRELOAD", "LD_AUDIT", "REPO_DIR", "LOGS_DIR", "PYTHONHASHSEED"})
RESERVED_PREFIXES = ("SWEEP_", "SLURM_", "BASH_FUNC_")
# Host directories a bind may neither be nor contain: credentials and host services live there.
FORBIDDEN_ROOTS = (Path("/etc"), Path("/run"), Path("/var/run"), Path("/proc"), Path("/sys"), Path("/dev"),
                   Path("/var/lib"), Path("/var/spool"))


class EnvironmentProblem(ValueError):
    """A declaration that cannot be resolved; `field` is its dotted path under `environment`."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class Toolchain(BaseModel):
    """One declared toolchain: PATH entries, read-only binds, variables, or a venv/conda prefix."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: list[str] = Field(default_factory=list)        # PATH entries, before the system's
    bind: list[str] = Field(default_factory=list)        # directories bound read-only in every sandbox
    variables: dict[str, str] = Field(default_factory=dict)
    prefix: str | None = None     # a venv or conda env: bin/ on PATH, bound with the interpreter it was made from
    # `module load` names (Lmod / Environment Modules): init loads them once in a clean login shell
    # and freezes what they set into `path`, `variables` and `bind` (sweep/models/modules.py)
    modules: list[str] = Field(default_factory=list)

    @field_validator("modules")
    @classmethod
    def _check_modules(cls, v: list[str]) -> list[str]:
        from sweep.models.modules import MODULE_NAME_RE
        for name in v:
            if not MODULE_NAME_RE.match(name):
                raise ValueError(f"{name!r} is not a module name (letters, digits, '._+@/-', not starting "
                                 "with '-')")
        return v

    @field_validator("variables")
    @classmethod
    def _check_variables(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            check_variable_name(name)
        return v


def check_variable_name(name: str) -> None:
    if not _NAME_RE.match(name):
        raise ValueError(f"{name!r} is not an environment variable name")
    if name in RESERVED_VARIABLES or name.startswith(RESERVED_PREFIXES):
        raise ValueError(f"{name} is set by sweep itself and cannot be declared "
                         "(PATH comes from the toolchains' `path` entries)")


class JobEnvironment(BaseModel):
    """`[environment]`: the toolchains (in PATH order) and the variables kept from the tick."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    toolchains: dict[str, Toolchain] = Field(default_factory=dict)
    inherit: list[str] = Field(default_factory=list)   # names copied from the tick's environment when set

    @field_validator("toolchains")
    @classmethod
    def _check_names(cls, v: dict[str, Toolchain]) -> dict[str, Toolchain]:
        for name in v:
            if not _TOOLCHAIN_RE.match(name):
                raise ValueError(f"{name!r} is not a toolchain name (letters, digits, '.', '_', '-')")
        return v

    @field_validator("inherit")
    @classmethod
    def _check_inherit(cls, v: list[str]) -> list[str]:
        for name in v:
            check_variable_name(name)
        return v

    # ---- what the jobs get ------------------------------------------------------------------

    @property
    def path(self) -> tuple[str, ...]:
        """The whole PATH: every toolchain's entries in declaration order, then the system's."""
        out: list[str] = []
        for tc in self.toolchains.values():
            entries = ([str(Path(tc.prefix) / "bin")] if tc.prefix else []) + list(tc.path)
            out += [e for e in entries if e not in out]
        return tuple(out + [p for p in SYSTEM_PATH if p not in out])

    @property
    def binds(self) -> tuple[Path, ...]:
        out: list[Path] = []
        for tc in self.toolchains.values():
            for p in (*tc.bind, *tc.path, *([tc.prefix] if tc.prefix else [])):
                if Path(p) not in out:
                    out.append(Path(p))
        return tuple(out)

    @property
    def variables(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for tc in self.toolchains.values():
            out.update(tc.variables)
        return out

    def sandbox(self) -> SandboxEnvironment:
        return SandboxEnvironment(path=self.path, binds=self.binds, variables=tuple(sorted(self.variables.items())))

    def job_variables(self) -> dict[str, str]:
        """What sweep sets in a controller job: the declared PATH and variables (the tick's own
        identity variables and the `inherit` names pass by name: sweep/tick/jobenv.py)."""
        return {**self.variables, "PATH": os.pathsep.join(self.path)}

    # ---- init: resolving the declaration ---------------------------------------------------------

    def resolved(self, base: Path, campaign_dir: Path | None = None) -> JobEnvironment:
        """Every path absolute (`~` expanded, relative = to `base`, the plan's folder), each
        checked; a venv prefix also binds the interpreter it was made from. EnvironmentProblem
        names the field (`toolchains.rust.bind.0`)."""
        toolchains: dict[str, Toolchain] = {}
        seen: dict[str, tuple[str, str]] = {}
        for name, tc in self.toolchains.items():
            where = f"toolchains.{name}"
            for var, value in tc.variables.items():
                if var in seen and seen[var][1] != value:
                    raise EnvironmentProblem(f"{where}.variables.{var}",
                                             f"{var} is also set, differently, by toolchain {seen[var][0]}")
                seen[var] = (name, value)
            path = [_absolute(p, base, f"{where}.path.{i}", must_exist=False) for i, p in enumerate(tc.path)]
            bind = [_absolute(p, base, f"{where}.bind.{i}") for i, p in enumerate(tc.bind)]
            variables = {k: _expand_home(v) for k, v in tc.variables.items()}
            if tc.modules:      # once, by init: campaign.toml keeps the names and what they set
                loaded = _load(tc.modules, f"{where}.modules")
                path = [p for p in loaded.path if p not in path] + path
                bind += [str(Path(p).parent) for p in loaded.path
                         if Path(p).name == "bin" and _bindable(Path(p).parent, campaign_dir)]
                variables = {**loaded.variables, **variables}     # the plan's own value wins
            prefix = None
            if tc.prefix is not None:
                prefix = _absolute(tc.prefix, base, f"{where}.prefix")
                kind, interpreter_root = _prefix_kind(Path(prefix), f"{where}.prefix")
                variables.setdefault("VIRTUAL_ENV" if kind == "venv" else "CONDA_PREFIX", prefix)
                if interpreter_root is not None:
                    bind.append(str(interpreter_root))
            for i, p in enumerate(bind):
                _check_bind(Path(p), f"{where}.bind.{i}" if i < len(tc.bind) else f"{where}.prefix", campaign_dir)
            for i, p in enumerate(path):
                _check_bind(Path(p), f"{where}.path.{i}", campaign_dir)
            if prefix is not None:
                _check_bind(Path(prefix), f"{where}.prefix", campaign_dir)
            toolchains[name] = Toolchain(path=path, bind=list(dict.fromkeys(bind)), variables=variables, prefix=prefix,
                                         modules=list(tc.modules))
        return JobEnvironment(toolchains=toolchains, inherit=list(self.inherit))


def _load(modules: list[str], field: str) -> LoadedModules:
    from sweep.models.modules import ModuleLoadFailed, load_modules

    def keep(name: str) -> bool:
        try:
            check_variable_name(name)
        except ValueError:
            return False
        return True
    try:
        return load_modules(modules, keep=keep)
    except ModuleLoadFailed as exc:
        raise EnvironmentProblem(field, str(exc)) from None


def _bindable(path: Path, campaign_dir: Path | None) -> bool:
    """A module's prefix (the parent of the bin/ it put on PATH) is bound when it may be."""
    if not path.is_dir() or any(path == Path(s).parent for s in SYSTEM_PATH):
        return False
    try:
        _check_bind(path, "", campaign_dir)
    except EnvironmentProblem:
        return False
    return True


def _expand_home(value: str) -> str:
    return os.path.expanduser(value) if value.startswith("~") else value


def _absolute(raw: str, base: Path, field: str, *, must_exist: bool = True) -> str:
    if not raw.strip():
        raise EnvironmentProblem(field, "an empty path")
    if "\n" in raw or os.pathsep in raw:
        raise EnvironmentProblem(field, f"{raw!r}: one directory per entry (no ':' or line break)")
    p = Path(_expand_home(raw))
    if not p.is_absolute():
        p = base / p
    p = Path(os.path.normpath(p))
    if must_exist and not p.is_dir():
        raise EnvironmentProblem(field, f"{p} is not a directory on this host")
    return str(p)


def _prefix_kind(prefix: Path, field: str) -> tuple[str, Path | None]:
    """("venv" | "conda", the interpreter's own prefix to bind, or None when it is the system's)."""
    cfg = prefix / "pyvenv.cfg"
    if cfg.is_file():
        home = None
        for line in cfg.read_text(errors="replace").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home":
                home = Path(value.strip())
        if home is None or not home.is_absolute():
            return "venv", None
        root = home.parent if home.name == "bin" else home
        if any(root == Path(s).parent or Path(s).parent in root.parents for s in SYSTEM_PATH[:2]):
            return "venv", None     # made from /usr's python: the system directories are bound anyway
        return "venv", root
    if (prefix / "conda-meta").is_dir():
        return "conda", None
    raise EnvironmentProblem(field, f"{prefix} is neither a venv (no pyvenv.cfg) nor a conda environment "
                                    "(no conda-meta/)")


def home_directories() -> set[Path]:
    homes = {Path(os.path.expanduser("~")), Path("/home"), Path("/root")}
    try:
        # people's homes only: system accounts "live" in /bin, /usr/sbin or /var/lib/munge
        homes |= {Path(e.pw_dir) for e in pwd.getpwall()
                  if e.pw_uid >= 1000 and e.pw_uid != 65534 and e.pw_dir not in ("", "/", "/nonexistent")}
    except OSError:
        pass
    return {Path(os.path.normpath(h)) for h in homes}


def _check_bind(path: Path, field: str, campaign_dir: Path | None) -> None:
    if path == Path("/"):
        raise EnvironmentProblem(field, "/ would show the whole host: bind the toolchain's own prefix")
    for home in home_directories():
        if path == home or path in home.parents:
            raise EnvironmentProblem(field, f"{path} is a home directory (or holds one): bind only the "
                                            "toolchain's prefix, e.g. ~/.pyenv/versions/3.12.1 or "
                                            "~/.rustup/toolchains/stable-x86_64-unknown-linux-gnu")
    for root in FORBIDDEN_ROOTS:
        if path == root or root in path.parents or path in root.parents:
            raise EnvironmentProblem(field, f"{path} is or holds {root}, which holds host credentials or "
                                            "services: a sandbox never sees it")
    if campaign_dir is not None:
        camp = Path(os.path.normpath(campaign_dir))
        if path == camp or path in camp.parents or camp in path.parents:
            raise EnvironmentProblem(field, f"{path} is or holds the campaign directory {camp}: every run "
                                            "would see the others")
