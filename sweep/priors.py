"""`prior_verified`: tasks verified before, as evidence, never as bare strings.

Each entry of the plan's `prior_verified` names a directory (absolute, or relative to the plan file):
a previous campaign's run directory (`.../runs/<id>`, with its state.json, source.json and task/) or
an exported task (`DIR/<name>` of `sweep export`, with task.toml beside the dataset's
dataset.toml). `sweep init` re-validates each one before anything is admitted:

- a run: its state.json says ended verified; its source.json's checksum holds; its task/ bundle
  hashes to the bundle_sha256 its evaluate (or solve) checkpoint recorded;
- an exported task: task.toml's [metadata.sweep] says verified; the dataset's dataset.toml lists
  it with the digest its files have now (the digest `harbor sync` computes).

Anything else is a ConfigError naming `prior_verified.N` and what did not hold (a changed prior
is an error, never skipped). The valid priors are frozen into campaign.toml (`priors`); a
candidate that is the same PR as one (the same GitHub PR, or the same base and head commits) is
written ended `blocked: duplicate` by init, so no tick ever admits it, and the priors count toward
`target_verified`.
"""
from __future__ import annotations

import tomllib
from pathlib import Path

from runstate.errors import ConfigError
from sweep.models.plan import PriorTask


def _fail(index: int, entry: str, what: str, plan_path: Path) -> ConfigError:
    return ConfigError(f"prior {entry!r}: {what}", path=plan_path, field=f"prior_verified.{index}",
                       hint="an entry names a previous campaign's run directory (.../runs/ID) or an "
                            "exported task directory (sweep export DIR: DIR/NAME), verified")


def _pr_key_of_url(url: str) -> str:
    from sweep.models.plan import github_pr
    try:
        owner, repo, number = github_pr(url)
    except ValueError:
        return ""
    return f"{owner}/{repo}#{number}".lower()


def _run_prior(index: int, entry: str, rdir: Path, plan_path: Path) -> PriorTask:
    from runstate.models import Outcome, RunState
    from runstate.runs import load_record
    from sweep.models.evidence import load_source
    from sweep.harbor.bundle import bundle_sha256
    loaded = load_record(rdir)
    rec = loaded.value
    if rec is None:
        raise _fail(index, entry, f"state.json is unreadable ({loaded.problem})", plan_path)
    if rec.state is not RunState.ended or rec.outcome is not Outcome.verified:
        shown = rec.outcome.value if rec.outcome else rec.state.value
        raise _fail(index, entry, f"the run is {shown}, not verified", plan_path)
    source = load_source(rdir)
    if source is None:
        raise _fail(index, entry, "source.json is missing or its checksum does not hold", plan_path)
    recorded = next((rec.checkpoints.get(p, {}).get("bundle_sha256") for p in ("evaluate", "solve", "gates")
                     if rec.checkpoints.get(p, {}).get("bundle_sha256")), None)
    if not recorded:
        raise _fail(index, entry, "its checkpoints record no bundle_sha256", plan_path)
    bundle = rdir / "task"
    actual = bundle_sha256(bundle) if bundle.is_dir() else "(no task/ directory)"
    if actual != recorded:
        raise _fail(index, entry, f"its task/ changed since it was verified (bundle sha256 {actual[:12]}, "
                                  f"recorded {recorded[:12]})", plan_path)
    return PriorTask(entry=entry, path=str(rdir), kind="run", pr_key=_pr_key_of_url(source.url or ""),
                     base=source.base or "", head=source.head or "", digest=recorded)


def _task_prior(index: int, entry: str, task: Path, plan_path: Path) -> PriorTask:
    from sweep.harbor.digest import harbor_digest
    try:
        doc = tomllib.loads((task / "task.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise _fail(index, entry, f"task.toml is unreadable ({exc})", plan_path) from None
    meta = doc.get("metadata", {}).get("sweep", {})
    if meta.get("verified") is not True or meta.get("outcome") != "verified":
        raise _fail(index, entry, "its task.toml does not say verified ([metadata.sweep] verified, outcome)", plan_path)
    name = doc.get("task", {}).get("name")
    try:
        dataset = tomllib.loads((task.parent / "dataset.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise _fail(index, entry, f"the dataset's dataset.toml is unreadable ({exc})", plan_path) from None
    listed = next((t.get("digest") for t in dataset.get("tasks", []) if t.get("name") == name), None)
    if listed is None:
        raise _fail(index, entry, f"the dataset's dataset.toml does not list task {name!r}", plan_path)
    actual = harbor_digest(task)
    if actual != listed:
        raise _fail(index, entry, f"its files changed since it was exported (digest {actual[:19]}, "
                                  f"dataset.toml {listed[:19]})", plan_path)
    return PriorTask(entry=entry, path=str(task), kind="task", pr_key=_pr_key_of_url(str(meta.get("source_pr", ""))),
                     base=str(meta.get("base", "")), head=str(meta.get("head", "")), digest=listed)


def load_priors(entries: list[str], plan_path: Path) -> list[PriorTask]:
    """Every entry validated (module docstring), in the plan's order; the first failure raised."""
    out = []
    for i, entry in enumerate(entries):
        path = Path(entry).expanduser()
        path = (path if path.is_absolute() else Path(plan_path).parent / path).resolve()
        if not path.is_dir():
            raise _fail(i, entry, f"{path} is not a directory", plan_path)
        if (path / "state.json").is_file():
            out.append(_run_prior(i, entry, path, plan_path))
        elif (path / "task.toml").is_file():
            out.append(_task_prior(i, entry, path, plan_path))
        else:
            raise _fail(i, entry, f"{path} holds neither a run's state.json nor a task's task.toml", plan_path)
    return out


def duplicate_of(priors: list[PriorTask], pr_key: str, commits: tuple[str, str] | None) -> PriorTask | None:
    """The prior that is the same PR: the same GitHub PR key, or the same (base, head) commits."""
    for prior in priors:
        if prior.pr_key and prior.pr_key == pr_key.lower():
            return prior
        if commits and prior.base and prior.head and (prior.base, prior.head) == commits:
            return prior
    return None
