#!/usr/bin/env python
"""How the tick, `sweep status` and `sweep --help` scale with the number of runs in a campaign.

For each size N (default 1,000, 10,000 and 100,000) this builds a real campaign with `sweep init`
from a generated JSON plan of local-repo candidates, on the local scheduler backend, and brings it
to a realistic mix of states:

- 90 % of the panel ended (verified / generated_unverified / blocked, with the checkpoints a real
  controller writes, so state.json has its real size of 0.6-1.7 KB);
- ACTIVE (8) runs active with leases, held by real local jobs (a `sleep`) that stay alive for the
  whole benchmark, admitted by a real tick;
- CHURN (2) free slots: the controller command is a harmless `sleep 0`, so every tick finds the runs
  it admitted last time gone (requeue, attempts + 1) and admits two more — the "busy" tick;
- the rest queued, 1 % of them requeued earlier (attempts 1, an allocation, a spend.json), 1 % of
  the candidates needing a GPU that the local lane does not have (held with a reason).

Then it times, warm page cache, after one unmeasured warm-up each:
  (a)  the floor: list runs/ and read every state.json + lease.json with os.open/os.read, bytes
       only, no parsing; (a') the same with Python's buffered open() (runstate.files.read_bytes);
       (a'') the floor plus orjson.loads of every file (parsing, no validation);
  (b)  runstate.list_runs (read + parse + pydantic validation of every record);
  (b') tick.observe alone and tick.plan_tick alone (where the tick's time goes);
  (c)  a full tick in-process (run_tick) and `sweep tick` as a subprocess, both while busy
       (2 requeues + 2 admissions per tick) and while idle (campaign draining: nothing to do);
  (d)  `sweep status` as a subprocess;
  (e)  `sweep --help` as a subprocess (and bare interpreter start-up, for reference).
The in-process ticks get the real local scheduler wrapped in a proxy that COUNTS calls (it does not
change what they return), so the table shows how many queue calls each tick made.

Usage (from the repository root, with the project's venv):
    .venv/bin/python benchmarks/tick_scale.py                    # 1k, 10k, 100k: ~8 min, 1.6 GB of disk
    .venv/bin/python benchmarks/tick_scale.py --sizes 1000 --repeats 3
    .venv/bin/python benchmarks/tick_scale.py --sizes 100000 --profile /tmp/tick.prof
Options: --init cli|fast|auto (auto: `sweep init` subprocess up to 10k runs; above that the same
init_campaign code in-process with fsync disabled, because a real-fsync init of 100k runs takes
about 3 minutes on its own (167 s measured; see docs/benchmarks.md) — the in-process rate is still
printed), --workdir (e.g. on NFS), --keep, --json OUT.
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import dataclasses
import gc
import hashlib
import io
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))     # run against this checkout, whatever the current directory
os.environ["PYTHONPATH"] = str(REPO)  # and so do the CLI subprocesses and the local jobs' launcher

ACTIVE = 8            # long-lived active runs (leases held by live local jobs)
CHURN = 2             # free slots: the tick admits this many per tick, and requeues them next tick
ENDED_FRACTION = 0.90
REQUEUED_FRACTION = 0.01   # of the queued runs: admitted before, failed once, back in the queue
GPU_EVERY = 100            # every 100th candidate needs a GPU (the local lane has none: held)
HOLD_ENV = "SWEEP_BENCH_HOLD_S"
HOLD_S = 3600              # how long the seeded active jobs live (they are cancelled at the end)
# The controller every tick submits: exits at once unless SWEEP_BENCH_HOLD_S says otherwise. The
# tick appends "--campaign DIR --token T RUN_ID"; `sh -c` takes those as $0.. and ignores them.
CONTROLLER = ["/bin/sh", "-c", f'exec sleep "${{{HOLD_ENV}:-0}}"', "sweep-bench-controller"]


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f}s load {loadavg()}] {msg}", file=sys.stderr, flush=True)


T0 = time.monotonic()


# ---- timing helpers ----------------------------------------------------------------------------

@dataclasses.dataclass
class Samples:
    wall: list[float]            # seconds, perf_counter
    cpu: list[float]             # seconds of CPU (user + system) of this process and waited children


@dataclasses.dataclass
class Figure:
    n: int | None
    what: str
    samples: Samples
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.samples.wall)


def cpu_now() -> float:
    """CPU seconds used so far by this process and every child it has waited for."""
    import resource
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + c.ru_utime + c.ru_stime


def measure(fn, repeats: int, warmup: int = 1) -> Samples:
    for _ in range(warmup):
        fn()
    wall, cpu = [], []
    for _ in range(repeats):
        c = cpu_now()
        t = time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(cpu_now() - c)
    return Samples(wall, cpu)


def loadavg() -> str:
    with contextlib.suppress(OSError):
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return "?"


def sweep_argv() -> list[str]:
    """The console script a user runs (`sweep`), from the same environment as this interpreter."""
    script = Path(sys.executable).with_name("sweep")
    return [str(script)] if script.exists() else [sys.executable, "-m", "sweep"]


RSS_KB: list[int] = []     # peak resident set of each CLI subprocess, in order
TIME_BIN = shutil.which("time", path="/usr/bin:/bin")


def run_cli(*args: str, env: dict | None = None) -> str:
    """Run `sweep ARGS` as a user would; return its stdout. Records the child's peak RSS.

    The peak RSS comes from /usr/bin/time (%M), not from this process's wait4(): a child that
    Python starts with vfork inherits this (large) benchmark process's high-water mark at exec.
    """
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r") as rss:
        prefix = [TIME_BIN, "-q", "-f", "%M", "-o", rss.name] if TIME_BIN else []
        r = subprocess.run([*prefix, *sweep_argv(), *args], stdout=out, stderr=err, env=full_env,
                           cwd=REPO, stdin=subprocess.DEVNULL)
        text = rss.read().strip().splitlines()
        if text and text[-1].isdigit():
            RSS_KB.append(int(text[-1]))
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if r.returncode != 0:
        raise RuntimeError(f"sweep {' '.join(args)} exited {r.returncode}:\n{stdout}\n{stderr}")
    return stdout


def measure_cli(n: int | None, what: str, args: list[str], repeats: int) -> Figure:
    RSS_KB.clear()
    samples = measure(lambda: run_cli(*args), repeats)
    return Figure(n, what, samples, note=f"peak RSS {max(RSS_KB) / 1024:.0f} MB" if RSS_KB else "")


@contextlib.contextmanager
def fsync_disabled():
    """Benchmark SET-UP only: write thousands of synthetic records without one fsync each."""
    real = os.fsync
    os.fsync = lambda fd: None
    try:
        yield
    finally:
        os.fsync = real


# ---- the counting proxy ------------------------------------------------------------------------

class CountingScheduler:
    """Wraps a real scheduler and counts the calls made to it; every answer is the real one."""

    COUNTED = ("queue", "submit", "cancel", "capacity")

    def __init__(self, inner, hold_first: int = 0):
        self._inner = inner
        self.calls: Counter[str] = Counter()
        self._hold_first = hold_first      # seeding only: the first N submissions stay alive

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if name not in self.COUNTED:
            return attr

        def counted(*args, **kwargs):
            self.calls[name] += 1
            if name == "submit" and self._hold_first > 0:
                self._hold_first -= 1
                job = args[0]
                args = (dataclasses.replace(job, env={**job.env, HOLD_ENV: str(HOLD_S)}),)
            return attr(*args, **kwargs)
        return counted


def make_real_scheduler(campaign_dir: Path):
    from sweep.campaign import load_campaign
    from sweep.scheduler import make_scheduler
    c = load_campaign(campaign_dir)
    return make_scheduler(c.settings.scheduler, campaign_dir, c.job_prefix)


# ---- building a campaign -----------------------------------------------------------------------

def sample_repo(workdir: Path) -> Path:
    """A real (tiny) git repository the candidates point at. The tick never reads it."""
    repo = workdir / "repo"
    if not (repo / ".git").exists():
        repo.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.invalid",
               "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.invalid"}
        (repo / "README").write_text("benchmark repository\n")
        for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "README"],
                    ["git", "commit", "-q", "-m", "init"]):
            subprocess.run(cmd, cwd=repo, env=env, check=True, capture_output=True)
    return repo


def write_plan(path: Path, n: int, repo: Path) -> Path:
    # `sweep init` checks that every candidate's refs exist: one branch per candidate, packed
    sha = subprocess.run(["git", "rev-parse", "main"], cwd=repo, check=True, capture_output=True,
                         text=True).stdout.strip()
    subprocess.run(["git", "update-ref", "--stdin"], cwd=repo, check=True, capture_output=True,
                   input="".join(f"update refs/heads/fix-{i} {sha}\n" for i in range(n)).encode())
    subprocess.run(["git", "pack-refs", "--all"], cwd=repo, check=True, capture_output=True)
    cands = []
    for i in range(n):
        c = {"id": f"pr-{i:06d}", "repo": str(repo), "base": "main", "head": f"fix-{i}",
             "title": f"Fix issue {i}"}
        if i % GPU_EVERY == GPU_EVERY - 1:
            c["options"] = {"gpus": 1}
        cands.append(c)
    plan = {"name": f"bench-{n}", "target_verified": n, "max_parallel": ACTIVE + CHURN,
            "max_gpu_parallel": 2, "max_attempts": 3, "max_spend_usd": 10_000_000.0,
            "defaults": {"max_spend_usd": 5.0},
            "scheduler": {"backend": "local", "local": {"cpu_slots": 64, "gpu_slots": 0}},
            "tick": {"controller_command": CONTROLLER},
            "candidates": cands}
    path.write_text(json.dumps(plan))
    return path


def _sha(*parts: object) -> str:
    return hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()


def ended_record(base, i: int, now: float):
    """An ended RunRecord shaped like what the controller writes (see a `sweep demo` run)."""
    from runstate.models import Outcome, Phase, RunState
    t = now - 86_400 + i * 0.5
    bundle = _sha("bundle", i)
    cps: dict = {"intake": {"base": _sha("b", i)[:40], "head": _sha("h", i)[:40],
                            "evidence_sha256": _sha("e", i), "changed_files": 1 + i % 7, "at": t}}
    kind = i % 10
    if kind < 3:
        outcome, reason = Outcome.verified, None
        cps["author"] = {"revision": 1, "bundle_sha256": bundle, "at": t + 60}
        cps["gates"] = {"passed": True, "bundle_sha256": bundle, "revision": 1, "at": t + 120}
        cps["review"] = {"verdict": "accept", "bundle_sha256": bundle, "revision": 1, "at": t + 180}
        cps["solve"] = {"bundle_sha256": bundle, "rewards": [1.0, 0.0, 1.0], "at": t + 400}
    elif kind < 6:
        outcome, reason = Outcome.generated_unverified, "gates_failed"
        cps["author"] = {"revision": 2, "bundle_sha256": bundle, "at": t + 60}
        cps["gates"] = {"passed": False, "bundle_sha256": bundle, "revision": 2, "at": t + 120,
                        "failed": ["empty_solution_scores_0"]}
    else:
        outcome = Outcome.blocked
        reason = ("construction_failed", "review_rejected", "max_attempted", "no_tests")[kind - 6]
    cps["evaluate"] = {"outcome": outcome.value, "reason": reason, "at": t + 500}
    return base.model_copy(update={
        "state": RunState.ended, "phase": Phase.evaluate, "outcome": outcome, "reason": reason,
        "attempts": 3 if reason == "max_attempted" else 0, "job_id": f"local-{100000 + i}",
        "submit_token": _sha("tok", i)[:12], "allocation_usd": 5.0, "spent_usd": round(0.37 * (i % 13), 2),
        "checkpoints": cps, "created": t - 3600, "updated": t + 500})


def requeued_record(base, i: int, now: float):
    """A queued run whose first controller died: attempts 1, an allocation, the intake checkpoint."""
    from runstate.models import Phase
    t = now - 3600
    return base.model_copy(update={
        "phase": Phase.author, "attempts": 1, "job_id": f"local-{200000 + i}",
        "submit_token": _sha("tok", i)[:12], "allocation_usd": 5.0,
        "checkpoints": {"intake": {"base": _sha("b", i)[:40], "head": _sha("h", i)[:40],
                                   "evidence_sha256": _sha("e", i), "changed_files": 3, "at": t}},
        "last_error": f"job local-{200000 + i} vanished from the queue", "updated": t + 60})


def spend_ledger(run_id: str, settled: int, reserved: int):
    from runstate.models import SpendEntry, SpendLedger
    entries = [SpendEntry(op_id=f"{k + 1:04d}-author", what="author session (claude-code)",
                          reserved_usd=1.0, actual_usd=0.42, status="settled") for k in range(settled)]
    entries += [SpendEntry(op_id=f"{settled + k + 1:04d}-reviewer", what="reviewer session",
                           reserved_usd=1.0) for k in range(reserved)]
    return SpendLedger(run_id=run_id, entries=entries)


def build_campaign(workdir: Path, n: int, init_mode: str) -> tuple[Path, dict]:
    from runstate.files import write_model_atomic
    from runstate.models import RunRecord
    from runstate.runs import list_runs, run_dir, save_record
    from sweep.campaign import init_campaign
    from sweep.tick import run_tick

    cdir = workdir / f"campaign-{n}"
    plan = write_plan(workdir / f"plan-{n}.json", n, sample_repo(workdir))
    info: dict = {"init_mode": init_mode}
    how = "`sweep init` subprocess, real fsync" if init_mode == "cli" else "init_campaign in-process, fsync disabled"
    log(f"N={n}: sweep init ({how}) ...")
    t = time.perf_counter()
    if init_mode == "cli":
        run_cli("init", str(plan), "--campaign", str(cdir))
        if RSS_KB:
            info["init_rss_mb"] = round(RSS_KB[-1] / 1024)
    else:
        with fsync_disabled():
            init_campaign(plan, cdir)
    info["init_s"] = time.perf_counter() - t
    log(f"N={n}: init took {info['init_s']:.1f}s ({1000 * info['init_s'] / n:.2f} ms/run)")

    # the mix: first 90 % of the panel ended, the rest queued; 1 % of the queued requeued before
    now = time.time()
    n_ended = int(n * ENDED_FRACTION)
    queued_ids = [i for i in range(n_ended, n) if i % GPU_EVERY != GPU_EVERY - 1]
    # requeued runs sit after the ones the seeding tick admits, spread through the queue
    requeued = set(queued_ids[ACTIVE + CHURN::max(1, int(1 / REQUEUED_FRACTION))])
    t = time.perf_counter()
    with fsync_disabled():
        for i in range(n):
            if i >= n_ended and i not in requeued:
                continue
            rid = f"pr-{i:06d}"
            gpus = 1 if i % GPU_EVERY == GPU_EVERY - 1 else 0
            base = RunRecord(run_id=rid, panel_index=i, max_attempts=3, cap_usd=5.0, gpus=gpus,
                             lane="gpu" if gpus else "cpu")
            rdir = run_dir(cdir, rid)
            if i < n_ended:
                save_record(rdir, ended_record(base, i, now), touch=False)
            else:
                save_record(rdir, requeued_record(base, i, now), touch=False)
                write_model_atomic(rdir / "spend.json", spend_ledger(rid, settled=1, reserved=1))
            if i % 20000 == 19999:
                log(f"N={n}: wrote {i + 1} records")
    info["rewrite_s"] = time.perf_counter() - t
    log(f"N={n}: states written in {info['rewrite_s']:.1f}s: {n_ended} ended, {len(requeued)} requeued")

    # seed: one real tick admits ACTIVE + CHURN runs; the first ACTIVE jobs stay alive (sleep)
    seeder = CountingScheduler(make_real_scheduler(cdir), hold_first=ACTIVE)
    out = run_tick(cdir, scheduler=seeder)
    log(f"N={n}: seeding tick: {out.message}")
    listing = list_runs(cdir)
    counts = Counter(r.state.value if r.outcome is None else f"ended:{r.outcome.value}"
                     for r in listing.records.values())
    info["mix"] = dict(sorted(counts.items()))
    info["held_gpu"] = sum(1 for r in listing.records.values() if r.hold_reason)
    info["leases"] = sum(1 for rid in listing.records if (run_dir(cdir, rid) / "lease.json").exists())
    info["disk_mb"] = int(subprocess.run(["du", "-sm", str(cdir)], capture_output=True, text=True)
                          .stdout.split()[0])
    # active runs carry a spend.json as a controller would have written it
    with fsync_disabled():
        for rid, rec in listing.records.items():
            if rec.state.value == "active":
                write_model_atomic(run_dir(cdir, rid) / "spend.json", spend_ledger(rid, settled=2, reserved=1))
    log(f"N={n}: mix {info['mix']}, {info['leases']} leases, {info['held_gpu']} held, {info['disk_mb']} MB on disk")
    return cdir, info


# ---- what is measured --------------------------------------------------------------------------

def read_bytes_os(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def read_bytes_buffered(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:      # what runstate.files.read_bytes does
            return f.read()
    except FileNotFoundError:
        return None


def read_floor(cdir: Path, read=read_bytes_os, parse: bool = False) -> int:
    """List runs/ and read every state.json and lease.json: the I/O any tick must do, nothing more."""
    import orjson
    root = f"{cdir}/runs"
    with os.scandir(root) as it:
        names = [e.name for e in it if e.is_dir(follow_symlinks=False)]
    total = 0
    for name in names:
        for file in ("state.json", "lease.json"):
            raw = read(f"{root}/{name}/{file}")
            if raw is not None:
                total += len(raw)
                if parse:
                    orjson.loads(raw)
    return total


def bench_size(n: int, workdir: Path, repeats: int, init_mode: str, profile: Path | None) -> tuple[list[Figure], dict]:
    from runstate.markers import clear_drain, request_drain
    from runstate.runs import list_runs
    from sweep.campaign import load_campaign
    from sweep.tick import run_tick
    from sweep.tick.observe import observe
    from sweep.tick.plan import PlanSettings, plan_tick

    cdir, info = build_campaign(workdir, n, init_mode)
    figs: list[Figure] = []
    real = make_real_scheduler(cdir)
    try:
        log(f"N={n}: (a) floor: read state.json + lease.json bytes")
        figs.append(Figure(n, "(a) floor: os.open+os.read every state.json + lease.json",
                           measure(lambda: read_floor(cdir), repeats)))
        figs.append(Figure(n, "(a') the same with Python's buffered open()",
                           measure(lambda: read_floor(cdir, read=read_bytes_buffered), repeats)))
        figs.append(Figure(n, "(a'') floor (a) + orjson.loads of each file",
                           measure(lambda: read_floor(cdir, parse=True), repeats)))
        log(f"N={n}: (b) runstate.list_runs")
        figs.append(Figure(n, "(b) runstate.list_runs", measure(lambda: list_runs(cdir), repeats)))

        s = load_campaign(cdir).settings
        cfg = PlanSettings(target_verified=s.target_verified, max_parallel=s.max_parallel,
                           max_gpu_parallel=s.max_gpu_parallel, max_spend_usd=s.max_spend_usd,
                           lease_ttl_s=s.tick.lease_ttl_s, submit_grace_s=s.tick.submit_grace_s)
        obs_proxy = CountingScheduler(real)
        box: dict = {}      # only the latest snapshot stays alive: a bigger heap slows every later figure

        def observe_once():
            box.pop("snap", None)
            box["snap"] = observe(cdir, obs_proxy)[0]
        figs.append(Figure(n, "(b') tick observe() alone", measure(observe_once, repeats),
                           note=f"{obs_proxy.calls['queue'] / (repeats + 1):g} queue call/observe"))
        snap = box.pop("snap")
        figs.append(Figure(n, "(b') tick plan_tick() alone (pure)", measure(lambda s=snap: plan_tick(s, cfg), repeats)))
        del snap
        gc.collect()

        def tick_in_process(label: str) -> Figure:
            per_tick: list[Counter] = []

            def one():
                proxy = CountingScheduler(real)
                out = run_tick(cdir, scheduler=proxy)
                assert out.ran, out.message
                per_tick.append(proxy.calls)
            samples = measure(one, repeats)
            q = sorted({c["queue"] for c in per_tick})
            sub = sorted({c["submit"] for c in per_tick})
            return Figure(n, label, samples, note=f"queue calls/tick {q}, submits/tick {sub}")

        log(f"N={n}: (c) busy tick in-process (requeue {CHURN} + admit {CHURN} per tick)")
        figs.append(tick_in_process(f"(c) tick in-process, busy ({CHURN} requeue + {CHURN} admit)"))
        if profile is not None:
            prof = cProfile.Profile()
            prof.runcall(run_tick, cdir, scheduler=CountingScheduler(real))
            prof.dump_stats(f"{profile}.busy-{n}")
        log(f"N={n}: (c) busy `sweep tick` subprocess")
        figs.append(measure_cli(n, "(c) `sweep tick` subprocess, busy", ["tick", "--campaign", str(cdir)], repeats))

        request_drain(cdir, reason="benchmark: idle tick", who="benchmarks/tick_scale.py")
        log(f"N={n}: (c) idle tick in-process (draining: nothing to do)")
        figs.append(tick_in_process("(c) tick in-process, idle (draining)"))
        if profile is not None:
            prof = cProfile.Profile()
            prof.runcall(run_tick, cdir, scheduler=CountingScheduler(real))
            prof.dump_stats(f"{profile}.idle-{n}")
        log(f"N={n}: (c) idle `sweep tick` subprocess")
        figs.append(measure_cli(n, "(c) `sweep tick` subprocess, idle", ["tick", "--campaign", str(cdir)], repeats))
        clear_drain(cdir)

        log(f"N={n}: (d) `sweep status` subprocess")
        figs.append(measure_cli(n, "(d) `sweep status` subprocess", ["status", "--campaign", str(cdir)], repeats))
        tick_json = json.loads((cdir / "tick.json").read_text())
        info["tick_json_duration_s"] = tick_json["duration_s"]
        info["runs_read"] = tick_json["runs_read"]
    finally:
        jobs = list(real.queue().jobs)
        real.cancel(jobs)          # the seeded long-lived jobs (and any churn job still starting)
        log(f"N={n}: cancelled {len(jobs)} local jobs")
    return figs, info


def bench_startup(repeats: int) -> list[Figure]:
    log("(e) `sweep --help` subprocess")
    figs = [measure_cli(None, "(e) `sweep --help` subprocess", ["--help"], repeats)]
    figs.append(Figure(None, "    bare `python -c pass` (reference)",
                       measure(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), repeats)))
    return figs


# ---- report ------------------------------------------------------------------------------------

def render(figs: list[Figure], floors: dict[int, float]) -> str:
    rows = ["| N | measurement | median s | min s | max s | CPU s (median) | ms per 1k runs | x floor | notes |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for f in figs:
        per_k = f"{1000 * f.median / (f.n / 1000):.1f}" if f.n else ""
        x = f"{f.median / floors[f.n]:.1f}" if f.n in floors else ""
        w = f.samples.wall
        rows.append(f"| {f'{f.n:,}' if f.n else '-'} | {f.what} | {f.median:.3f} | {min(w):.3f} | "
                    f"{max(w):.3f} | {statistics.median(f.samples.cpu):.3f} | {per_k} | {x} | {f.note} |")
    return "\n".join(rows)


def machine() -> str:
    import platform
    mem_kb = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    cpu = ""
    with contextlib.suppress(OSError):
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), "")
    return (f"{os.cpu_count()} CPUs ({cpu}), {mem_kb / 2**20:.1f} GiB RAM, Linux {platform.release()}, "
            f"Python {platform.python_version()}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    ap.add_argument("--repeats", type=int,
                    help="measured repetitions per figure, after 1 warm-up (default 5; 3 from 100,000 runs)")
    ap.add_argument("--init", choices=("cli", "fast", "auto"), default="auto",
                    help="cli: `sweep init` subprocess (real fsync); fast: in-process, fsync off; "
                         "auto: cli up to 10,000 runs")
    ap.add_argument("--workdir", type=Path, help="where campaigns are built (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the campaigns afterwards")
    ap.add_argument("--json", type=Path, help="also write the raw samples here")
    ap.add_argument("--profile", type=Path,
                    help="cProfile one busy and one idle in-process tick per size to PREFIX.{busy,idle}-N")
    args = ap.parse_args()

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="sweep-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"machine: {machine()}; workdir {workdir}")
    figs: list[Figure] = bench_startup(max(args.repeats or 5, 10))
    infos: dict[int, dict] = {}
    built: list[Path] = []
    try:
        for n in args.sizes:
            repeats = args.repeats or (5 if n < 100_000 else 3)
            mode = args.init if args.init != "auto" else ("cli" if n <= 10_000 else "fast")
            info = {"load_before": loadavg(), "repeats": repeats}
            built.append(workdir / f"campaign-{n}")
            size_figs, more = bench_size(n, workdir, repeats, mode, args.profile)
            info.update(more, load_after=loadavg())
            figs += size_figs
            infos[n] = info

        floors = {f.n: f.median for f in figs if f.what.startswith("(a) ")}
        print(f"\nmachine: {machine()}")
        print("each figure: 1 unmeasured warm-up, then the repeats below; warm page cache; local ext4\n")
        print(render(figs, floors))
        print()
        for n, info in infos.items():
            print(f"N={n:,}: {info['repeats']} repeats; load avg {info['load_before']} -> {info['load_after']}; "
                  f"init {info['init_s']:.1f}s ({1000 * info['init_s'] / n:.2f} ms/run, {info['init_mode']}"
                  f"{', peak RSS %s MB' % info['init_rss_mb'] if 'init_rss_mb' in info else ''}); "
                  f"mix {info['mix']}; {info['leases']} leases; {info['held_gpu']} held; "
                  f"{info['disk_mb']} MB; last tick.json duration_s {info['tick_json_duration_s']:.3f}")
        if args.json:
            args.json.write_text(json.dumps({"machine": machine(), "infos": infos,
                                             "figures": [dataclasses.asdict(f) for f in figs]}, indent=1))
        if args.profile:
            for n in args.sizes:
                for kind in ("busy", "idle"):
                    path = f"{args.profile}.{kind}-{n}"
                    buf = io.StringIO()
                    pstats.Stats(path, stream=buf).sort_stats("tottime").print_stats(15)
                    print(f"\n--- cProfile, {kind} tick, N={n:,} (top 15 by own time) --- {path}")
                    print(buf.getvalue().split("\n", 4)[-1].strip())
        sys.stdout.flush()
    finally:
        if not args.keep:
            for cdir in built:
                log(f"removing {cdir}")
                shutil.rmtree(cdir, ignore_errors=True)
            if args.workdir is None:
                shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
