"""PyslurmScheduler: the queue read through pyslurm's C API, the rest as the CLI backend.

pyslurm binds one Slurm release (pyslurm 25.11 builds only against Slurm 25.11); a mismatched
pyslurm either fails to import or misreads the controller's replies. So it is used only when
`import pyslurm` works AND its major.minor equals the site's (from `sinfo --version`); otherwise
constructing the backend raises a ConfigError naming both versions.

Only `queue()` goes through pyslurm: it is the call made every tick, and the one where skipping a
process start matters. `submit` and `cancel` are rare and stay on sbatch/scancel (inherited from
SlurmScheduler), so the job script, its audit copy and argv handling are identical.

pyslurm calls cannot be interrupted, so `queue()` runs the load in a daemon thread and returns
UNKNOWN when it does not finish within the call timeout (the thread ends when the C call does).
"""
from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from runstate.errors import ConfigError
from sweep.models.lanes import LanesSettings
from sweep.scheduler.base import JobInfo, QueueSnapshot
from sweep.scheduler.slurm.client import SlurmCallFailed, site_slurm_version
from sweep.scheduler.slurm.scheduler import SlurmScheduler

_VERSION_RE = re.compile(r"(\d+)\.(\d+)")


def _major_minor(version: str) -> tuple[int, int] | None:
    match = _VERSION_RE.search(version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def check_versions(pyslurm_version: str, slurm_version: str) -> None:
    """ConfigError unless pyslurm and Slurm share major.minor.

    Compared as numbers: pyslurm spells Slurm 23.02 as "23.2.x", Slurm itself as "23.02.x".
    """
    ours, site = _major_minor(pyslurm_version), _major_minor(slurm_version)
    if ours is None or site is None or ours != site:
        raise ConfigError(
            f"pyslurm {pyslurm_version} does not match this site's Slurm {slurm_version} "
            "(major.minor must be equal)", field="scheduler.backend",
            hint="install the pyslurm release built for this Slurm, or set backend = \"slurm\"")


def _import_pyslurm() -> Any:
    try:
        import pyslurm  # noqa: PLC0415 - optional, heavy, C-bound: imported only here
    except ImportError as exc:
        raise ConfigError(f"backend 'pyslurm' needs the pyslurm package, which cannot be imported "
                          f"here ({exc})", field="scheduler.backend",
                          hint="pip install 'sweep[pyslurm]' with a pyslurm matching your Slurm, "
                               "or set backend = \"slurm\"") from None
    return pyslurm


def pyslurm_version(module: Any) -> str:
    version = getattr(module, "__version__", None)
    if not version:
        from importlib.metadata import PackageNotFoundError, version as dist_version
        try:
            version = dist_version("pyslurm")
        except PackageNotFoundError:
            version = "unknown"
    return str(version)


class PyslurmScheduler(SlurmScheduler):
    name = "pyslurm"

    def __init__(self, name_prefix: str, lanes: LanesSettings | None = None, *,
                 call_timeout: float = 20.0, squeue_user: str = "me", signal: str = "B:USR1@120",
                 env: Mapping[str, str] | None = None):
        super().__init__(name_prefix, lanes, call_timeout=call_timeout, squeue_user=squeue_user,
                         signal=signal, env=env)
        self._pyslurm = _import_pyslurm()
        try:
            site = site_slurm_version(env=env, timeout=call_timeout)
        except SlurmCallFailed as exc:
            raise ConfigError(f"cannot check pyslurm against the site's Slurm: {exc}",
                              field="scheduler.backend") from None
        check_versions(pyslurm_version(self._pyslurm), site)

    def queue(self) -> QueueSnapshot:
        result: dict[str, object] = {}

        def load() -> None:
            try:
                result["jobs"] = list(self._pyslurm.Jobs.load().values())
            except Exception as exc:   # RPCError and anything else: the queue is unknown
                result["error"] = f"pyslurm could not load jobs: {exc}"

        worker = threading.Thread(target=load, name="pyslurm-queue", daemon=True)
        worker.start()
        worker.join(self.call_timeout)
        if worker.is_alive():
            return QueueSnapshot.unknown(f"pyslurm did not answer within {self.call_timeout:g} s "
                                         "(is slurmctld up?)")
        if "error" in result:
            return QueueSnapshot.unknown(str(result["error"]))
        try:
            return QueueSnapshot.of(self._job_infos(result["jobs"]))  # type: ignore[arg-type]  # pyslurm is untyped
        except Exception as exc:
            return QueueSnapshot.unknown(f"pyslurm returned jobs sweep cannot read: {exc}")

    def _job_infos(self, jobs: Iterable[Any]) -> list[JobInfo]:
        uid = os.getuid()
        infos = []
        for job in jobs:
            name = job.name or ""
            if not name.startswith(self.name_prefix) or job.user_id != uid:
                continue
            if getattr(job, "is_cronjob", False):   # the user's scrontab tick
                continue
            gres = _gres_text(getattr(job, "gres_per_node", None))
            infos.append(JobInfo(job_id=str(job.id), name=name, state=str(job.state),
                                 reason=str(job.state_reason or "None"), partition=str(job.partition or ""),
                                 gres=gres, gpus=_gpu_count(getattr(job, "gres_per_node", None))))
        return infos


def _gres_text(gres: object) -> str:
    if not gres:
        return ""
    if isinstance(gres, dict):
        return ",".join(f"gres/{k}:{v}" for k, v in gres.items())
    return str(gres)


def _gpu_count(gres: object) -> int:
    """GPUs in pyslurm's gres dict: {"gpu": 2}, {"gpu:a100": 2} or {"gpu": {"a100": 2}}."""
    if not isinstance(gres, dict):
        return 0
    total = 0
    for key, value in gres.items():
        if not str(key).split(":")[0] == "gpu":
            continue
        if isinstance(value, dict):
            total += sum(int(v) for v in value.values() if str(v).isdigit())
        elif str(value).isdigit():
            total += int(value)
    return total
