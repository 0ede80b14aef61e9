"""Opens an evaluation's Harbor job with Harbor's own code; run with the Python that has Harbor 0.26.0.

    python tests/harbor_job_check.py JOBS_DIR [DATASET_DIR]  ->  one JSON document on stdout

Not a test module (Harbor needs Python >= 3.12): tests/test_eval_harbor.py runs it in the Harbor
venv and asserts on what it prints.
- `jobs.<job>`: the job's config.json and result.json validated as Harbor's JobConfig and
  JobResult, every trial's config.json and result.json as TrialConfig and TrialResult (strictly:
  a document Harbor's scanner would skip with a warning is an error here); per trial, what Harbor
  reads from it (reward, reward_valid, agent, model, cost, exception, timing); the job's stats as
  Harbor recomputes them from the trials (JobStats.from_trial_results, compute_pass_at_k_by_evals)
  beside the stats the job's result.json holds;
- `viewer`: the answers of Harbor's viewer app (harbor.viewer.server.create_app, the `harbor view`
  server) to its job list, job, trial list and trial requests;
- `dataset`: with DATASET_DIR, the tasks Harbor's local dataset loader finds there, each loaded
  as Harbor's Task.
"""
from __future__ import annotations

import asyncio
import json
import sys
import warnings
from pathlib import Path


def _trial(job_dir: Path, name: str) -> dict:
    from harbor.models.trial.config import TrialConfig
    from harbor.models.trial.result import TrialResult
    TrialConfig.model_validate_json((job_dir / name / "config.json").read_text())
    r = TrialResult.model_validate_json((job_dir / name / "result.json").read_text())
    n_in, n_cache, n_out, cost = r.compute_token_cost_totals()
    return {"task_name": r.task_name, "agent": r.agent_info.name, "model": r.agent_info.model_info and
            r.agent_info.model_info.name, "rewards": r.verifier_result and r.verifier_result.rewards,
            "reward_valid": r.reward_valid, "cost_usd": cost, "source": r.source,
            "exception": r.exception_info and r.exception_info.exception_type,
            "seconds": (r.finished_at - r.started_at).total_seconds() if r.started_at and r.finished_at else None,
            "agent_seconds": r.agent_execution and r.agent_execution.finished_at and r.agent_execution.started_at
            and (r.agent_execution.finished_at - r.agent_execution.started_at).total_seconds(),
            "cell_id": (r.agent_result.metadata or {}).get("cell_id") if r.agent_result else None,
            "tokens": [n_in, n_cache, n_out]}


def check_jobs(jobs_dir: Path) -> dict:
    from harbor.models.job.config import JobConfig
    from harbor.models.job.result import JobResult, JobStats
    from harbor.models.trial.result import TrialResult
    from harbor.utils.pass_at_k import compute_pass_at_k_by_evals
    from harbor.viewer.scanner import JobScanner
    scanner = JobScanner(jobs_dir)
    out: dict = {}
    for job in scanner.list_jobs():
        config = JobConfig.model_validate_json((jobs_dir / job / "config.json").read_text())
        result = JobResult.model_validate_json((jobs_dir / job / "result.json").read_text())
        names = scanner.list_trials(job)
        trials = [TrialResult.model_validate_json((jobs_dir / job / n / "result.json").read_text()) for n in names]
        recomputed = JobStats.from_trial_results(trials, n_total_trials=result.n_total_trials)
        out[job] = {
            "agents": [(a.name, a.model_name) for a in config.agents], "n_attempts": config.n_attempts,
            "datasets": [str(d.path) for d in config.datasets], "n_total_trials": result.n_total_trials,
            "finished": result.finished_at is not None, "stats": result.stats.model_dump(mode="json"),
            "recomputed": recomputed.model_dump(mode="json"),
            "harbor_pass_at_k": {k: {str(n): v for n, v in p.items()}
                                 for k, p in compute_pass_at_k_by_evals(trials).items()},
            "trials": {n: _trial(jobs_dir / job, n) for n in names}}
    return out


def check_viewer(jobs_dir: Path) -> dict:
    from fastapi.testclient import TestClient
    from harbor.viewer.server import create_app
    out: dict = {}
    with TestClient(create_app(jobs_dir, mode="jobs")) as client:
        jobs = client.get("/api/jobs")
        out["jobs"] = {"status": jobs.status_code, "body": jobs.json()}
        for item in jobs.json().get("items", []):
            name = item["name"]
            job = client.get(f"/api/jobs/{name}")
            trials = client.get(f"/api/jobs/{name}/trials")
            entry = {"job": job.status_code, "n_total_trials": job.json().get("n_total_trials"),
                     "trials": trials.status_code, "trial_items": trials.json().get("items", []), "trial": {}}
            for t in entry["trial_items"]:
                r = client.get(f"/api/jobs/{name}/trials/{t['name']}")
                entry["trial"][t["name"]] = {"status": r.status_code, "rewards": (r.json().get("verifier_result") or
                                                                                  {}).get("rewards")}
            out[name] = entry
    return out


async def check_dataset(dataset: Path) -> dict:
    from harbor.models.job.config import DatasetConfig
    from harbor.models.task.task import Task
    configs = await DatasetConfig(path=dataset).get_task_configs()
    out = {}
    for cfg in configs:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            task = Task(Path(cfg.path))
        out[Path(cfg.path).name] = {"name": task.name, "warnings": [str(w.message) for w in caught]}
    return out


if __name__ == "__main__":
    import harbor  # noqa: F401
    jobs_dir = Path(sys.argv[1])
    doc = {"jobs": check_jobs(jobs_dir), "viewer": check_viewer(jobs_dir)}
    if len(sys.argv) > 2:
        doc["dataset"] = asyncio.run(check_dataset(Path(sys.argv[2])))
    print(json.dumps(doc, indent=1, default=str))
