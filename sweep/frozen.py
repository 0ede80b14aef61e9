"""Frozen runtimes: the exact sweep code that a campaign's controller jobs run.

`sweep runtime freeze` copies a built wheel into `<campaign>/runtime/<sha16>/` with its sha256,
unpacks it next to it (`site/`), writes a tiny launcher, and then writes `runtime/current.json`
LAST (the commit point: a crash before it leaves the old runtime in force). The tick then submits
`<python> -I <runtime>/<sha16>/launch.py controller ...`: `-I` keeps the user's environment and
site-packages out, so the job runs the frozen code whatever is installed or edited meanwhile.
A controller refuses to run when the code it is running is not the frozen copy (a job submitted
before a freeze, or a hand-started one): a half-upgraded campaign cannot mix versions silently.

The frozen copy pins sweep's own code; its dependencies (pydantic, orjson, click, filelock) come
from the recorded interpreter's environment.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from runstate.errors import ConfigError, SweepError
from runstate.files import make_private_dir, read_model, write_model_atomic
from runstate.paths import RUNTIME_DIR as RUNTIME_DIR, CampaignPaths
from sweep.tree import file_sha256

CURRENT = "current.json"
LAUNCHER = '''\
"""Launch the frozen sweep runtime next to this file (written by `sweep runtime freeze`)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "site"))
from sweep.cli import main  # noqa: E402

sys.exit(main())
'''


class FrozenRuntime(BaseModel):
    model_config = ConfigDict(extra="ignore")

    sha256: str
    wheel: str              # file name inside runtime/<sha16>/
    python: str             # the interpreter whose environment supplies the dependencies
    frozen_at: float
    frozen_by: str | None = None
    version: str | None = None

    @property
    def short(self) -> str:
        return self.sha256[:16]


def runtime_root(campaign_dir: Path) -> Path:
    return CampaignPaths(campaign_dir).runtime


def current_runtime(campaign_dir: Path) -> FrozenRuntime | None:
    loaded = read_model(runtime_root(campaign_dir) / CURRENT, FrozenRuntime)
    if loaded.missing:
        return None
    if loaded.value is None:
        raise ConfigError(f"frozen runtime record is unreadable: {loaded.problem}", path=loaded.path,
                          hint="run `sweep runtime freeze` again")
    return loaded.value


def frozen_controller_command(campaign_dir: Path) -> list[str] | None:
    rt = current_runtime(campaign_dir)
    if rt is None:
        return None
    launcher = runtime_root(campaign_dir) / rt.short / "launch.py"
    return [rt.python, "-I", str(launcher), "controller"]


def sha256_file(path: Path) -> str:
    return file_sha256(path)


def check_runtime(campaign_dir: Path) -> str | None:
    """The frozen runtime's sha256 after checking that this process runs it; None if none is frozen."""
    rt = current_runtime(campaign_dir)
    if rt is None:
        return None
    import sweep
    site = (runtime_root(campaign_dir) / rt.short / "site").resolve()
    running = Path(sweep.__file__).resolve()
    if site not in running.parents:
        raise SweepError(f"this controller runs sweep from {running.parent}, but the campaign's frozen "
                         f"runtime is {rt.short} ({site}); refusing to run a different runtime",
                         hint="jobs submitted before `sweep runtime freeze` cannot continue; the tick "
                              "resubmits the run with the frozen runtime")
    wheel = runtime_root(campaign_dir) / rt.short / rt.wheel
    if sha256_file(wheel) != rt.sha256:
        raise SweepError(f"frozen runtime wheel {wheel} does not match its sha256 {rt.short}…",
                         hint="freeze the runtime again")
    return rt.sha256


def build_wheel(out_dir: Path) -> Path:
    """Build a wheel of the sweep source tree this process was imported from."""
    import sweep
    source = Path(sweep.__file__).resolve().parent.parent
    if not (source / "pyproject.toml").exists():
        raise ConfigError("sweep is not installed from a source tree, so there is nothing to build",
                          hint="pass --wheel PATH with a built sweep wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out_dir),
                        str(source)], capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    wheels = sorted(Path(out_dir).glob("sweep-*.whl"))
    if r.returncode != 0 or not wheels:
        raise SweepError(f"building the wheel failed: {(r.stderr or r.stdout).strip()[-500:]}",
                         hint="or pass --wheel PATH")
    return wheels[-1]


def freeze(campaign_dir: Path, wheel: Path | None = None, *, python: str | None = None,
           who: str | None = None) -> FrozenRuntime:
    root = make_private_dir(runtime_root(campaign_dir))
    with tempfile.TemporaryDirectory(prefix=".freeze-", dir=root) as tmp:
        if wheel is None:
            wheel = build_wheel(Path(tmp))
        wheel = Path(wheel)
        if not wheel.is_file() or not wheel.name.startswith("sweep-") or wheel.suffix != ".whl":
            raise ConfigError("not a sweep wheel", path=wheel)
        sha = sha256_file(wheel)
        target = root / sha[:16]
        if not (target / "launch.py").exists():
            staging = Path(tmp) / "staging"
            make_private_dir(staging / "site")
            shutil.copy2(wheel, staging / wheel.name)
            with zipfile.ZipFile(wheel) as zf:
                for name in zf.namelist():
                    if name.startswith("/") or ".." in Path(name).parts:
                        raise ConfigError(f"wheel member {name!r} escapes its directory", path=wheel)
                zf.extractall(staging / "site")
            (staging / "launch.py").write_text(LAUNCHER)
            if target.exists():
                shutil.rmtree(target)
            os.rename(staging, target)
        version = wheel.name.split("-")[1] if wheel.name.count("-") >= 2 else None
        rt = FrozenRuntime(sha256=sha, wheel=wheel.name, python=python or sys.executable,
                           frozen_at=time.time(), frozen_by=who, version=version)
        write_model_atomic(root / CURRENT, rt)          # the commit point
    return rt
