"""Checks an exported dataset with Harbor's own code; run with the Python that has Harbor 0.26.0.

    python tests/harbor_check.py WORK_DIR DATASET_DIR...  ->  one JSON document on stdout

Not a test module (it needs Python >= 3.12 and Harbor, sweep's tests run on 3.11 without it):
tests/test_export_harbor.py runs it in the Harbor venv and asserts on what it prints. For every
task directory Harbor's local dataset loader finds:
- `load`: Harbor's Task model loads it (warnings captured), its task.toml validates as a TaskConfig;
- `envs.<type>`: a trial is prepared for it as `harbor run -e <type>` would (Trial.create: the
  agent environment is constructed and Harbor's network-policy validation runs), then the separate
  verifier's environment is constructed exactly as the trial does after the agent phase and checked
  with the trial's own rule. "ok", or the error Harbor raises. docker and podman are checked twice:
  with Harbor's egress sidecar available to them (`docker+egress`) and without it, the host
  condition Harbor probes by running a container.
The loader's `-i` filter is tried with each task's directory name.
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import warnings
from pathlib import Path

ENV_TYPES = ("docker", "podman", "daytona", "modal")


def _fake_credentials() -> None:
    # the providers' clients are only constructed, never called: no request leaves this process
    os.environ.setdefault("DAYTONA_API_KEY", "sweep-check-no-requests")
    os.environ.setdefault("DAYTONA_API_URL", "http://127.0.0.1:9/api")
    os.environ.setdefault("MODAL_TOKEN_ID", "ak-sweep-check")
    os.environ.setdefault("MODAL_TOKEN_SECRET", "as-sweep-check")


async def _check_env(task_dir: Path, env_type: str, egress: bool | None, work: Path) -> str:
    from harbor.environments.docker.docker import DockerEnvironment
    from harbor.environments.factory import EnvironmentFactory
    from harbor.models.task.verifier_mode import resolve_verifier_environment_definition
    from harbor.models.trial.config import AgentConfig, EnvironmentConfig, TaskConfig, TrialConfig
    from harbor.trial.trial import Trial

    if egress is not None:      # the host condition Harbor measures with a probe container
        DockerEnvironment._egress_control_kernel_support = classmethod(lambda cls: egress)  # type: ignore[method-assign]
    config = TrialConfig(task=TaskConfig(path=task_dir), agent=AgentConfig(name="oracle"),
                         environment=EnvironmentConfig(type=env_type), trials_dir=work / "trials")
    try:
        trial = await Trial.create(config)
    except Exception as exc:            # what `harbor run` would stop with, before the agent runs
        return f"agent environment: {type(exc).__name__}: {exc}"
    definition = resolve_verifier_environment_definition(trial.task.config, trial.task.paths, None)
    if definition is None:
        return "ok (shared verifier)"
    plan = trial._network_plan(None, env_config=definition.config)
    try:
        env = EnvironmentFactory.create_environment_from_config(
            config=trial.config.environment.model_copy(update={"extra_docker_compose": []}),
            stream=False, environment_dir=definition.directory,
            enable_environment_dir_upload=not definition.bundled_tests,
            environment_name=trial.task.short_name, session_id=f"{trial.config.trial_name}__verifier",
            trial_paths=trial.paths, task_env_config=definition.config, logger=trial.logger,
            auto_mounts=trial._verifier_env_mounts(definition.config),
            network_policy=plan.verifier_env_baseline, phase_network_policies=[plan.verifier_phase])
        trial._validate_separate_verifier_env_policies(env, plan=plan)
    except Exception as exc:            # what the trial would stop with, after the agent phase
        return f"verifier environment: {type(exc).__name__}: {exc}"
    return "ok"


async def check_dataset(dataset: Path, work: Path) -> dict:
    from harbor.models.job.config import DatasetConfig
    from harbor.models.task.config import TaskConfig as TaskToml
    from harbor.models.task.task import Task

    out: dict = {"tasks": {}, "filters": {}}
    configs = await DatasetConfig(path=dataset).get_task_configs()
    out["loaded"] = sorted(Path(c.path).name for c in configs)
    for cfg in configs:
        task_dir = Path(cfg.path)
        entry: dict = {}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            task = Task(task_dir)
            TaskToml.model_validate_toml((task_dir / "task.toml").read_text())
        entry["name"] = task.name
        entry["warnings"] = [str(w.message) for w in caught]
        entry["schema_version"] = task.config.schema_version
        entry["envs"] = {}
        for env_type in ENV_TYPES:
            variants = [(env_type, None)] if env_type in ("daytona", "modal") else [
                (f"{env_type}+egress", True), (env_type, False)]
            for label, egress in variants:
                entry["envs"][label] = await _check_env(task_dir, env_type, egress, work / label / task_dir.name)
        out["tasks"][task_dir.name] = entry
        picked = await DatasetConfig(path=dataset, task_names=[task_dir.name]).get_task_configs()
        out["filters"][task_dir.name] = [Path(c.path).name for c in picked]
    return out


async def main(work: Path, datasets: list[Path]) -> dict:
    import harbor
    _fake_credentials()
    out: dict = {"python": sys.version.split()[0], "harbor": getattr(harbor, "__version__", ""), "datasets": {}}
    for i, dataset in enumerate(datasets):
        out["datasets"][str(dataset)] = await check_dataset(dataset, work / str(i))
    return out


if __name__ == "__main__":
    result = asyncio.run(main(Path(sys.argv[1]), [Path(a) for a in sys.argv[2:]]))
    print(json.dumps(result, indent=1))
