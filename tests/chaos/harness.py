"""Chaos on the real test cluster: a real campaign (real controllers, oracle runtimes, real git
repositories), real ticks, and faults injected at random moments from a recorded seed.

Faults: kill -9 of ticks (at a random moment of the tick) and of controllers; scancel of jobs;
slurmctld SIGSTOPped while a tick runs (so squeue or sbatch gets no answer), and stopped and
restarted; run files truncated or filled with garbage (lease.json, events.jsonl, state.json,
tick.json, a drain marker); outage stamps; drain and undrain.

Invariants, checked after every tick and at the end of every round:
- no two controllers act for one run (events of two jobs of a run never overlap in time);
- no finished phase repeated (a `phase_done` twice without a `repair` between);
- spend never above the cap plus recorded overruns;
- with the queue UNKNOWN, nothing judged dead (no requeue, interruption, max_attempted, give-up or ghost cancel);
- live jobs (squeue) never above max_parallel / max_gpu_parallel, ghosts included;
- at the end: every run ended, or visibly corrupt / held with a reason; no lease, no lease stray,
  no live job of the campaign.
A round is one fresh campaign; rounds repeat until the number of injected kills is reached.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIVE_STATES = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING")
UNKNOWN_FORBIDDEN = ("requeue", "interrupt", "give_up", "cancel_ghost")


@dataclass
class Figures:
    seed: int
    rounds: int = 0
    runs: int = 0
    ticks: int = 0
    faults: dict = field(default_factory=dict)
    kills: int = 0                 # kill -9 of ticks and controllers, scancels, slurmctld stops/stalls
    violations: list = field(default_factory=list)
    endings: dict = field(default_factory=dict)
    corrupt_runs: int = 0
    seconds: float = 0.0
    max_live: int = 0
    ghosts_cancelled: int = 0
    uncertain_submissions: int = 0
    adopted: int = 0

    def count(self, kind: str, kill: bool = False) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1
        if kill:
            self.kills += 1

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def build_panel(root: Path, n: int, rng: random.Random, *, max_parallel: int, max_gpu_parallel: int,
                tick: dict | None = None) -> Path:
    """A plan with `n` real git PR repositories: mostly verifiable fixes, some without tests or
    passing before the fix; a few GPU runs (1 or 2 devices) for the gpu lane."""
    from sweep.harbor.samples import make_pr_repo
    repos = root / "repos"
    repos.mkdir(parents=True, exist_ok=True)
    candidates = []
    for i in range(n):
        kind = "verified" if i % 10 not in (3, 7) else ("no_tests" if i % 10 == 3 else "passes_before")
        src = make_pr_repo(repos, kind, name=f"pr-{i:03d}")
        options = {"test_command": src["test_command"]}
        if i % 6 == 5:
            options["gpus"] = 1 if i % 12 == 5 else 2
        candidates.append({"id": f"pr-{i:03d}", "repo": src["repo"], "base": src["base"], "head": src["head"],
                           "title": src["title"], "body": src["body"], "options": options})
    plan = {"name": "chaos", "target_verified": 10_000, "max_parallel": max_parallel,
            "max_gpu_parallel": max_gpu_parallel, "max_attempts": 8, "max_spend_usd": 100.0,
            "defaults": {"provider": "local", "max_spend_usd": 2.0,
                         "quality": {"max_repairs": 1, "gate_repeats": 1}},
            "scheduler": {"backend": "slurm", "call_timeout_seconds": 20,
                          "lanes": {"cpu": {"partition": "cpu", "time": "30"},
                                    "gpu": {"partition": "gpu", "time": "30"}}},
            "tick": {"submit_grace_s": 25, "uncertain_submit_s": 90, "ghost_grace_s": 20,
                     "lease_ttl_s": 300, "heartbeat_s": 5, "lane_backoff_s": 5, "max_runtime_s": 120,
                     **(tick or {})},
            "candidates": candidates}
    path = root / "plan.json"
    path.write_text(json.dumps(plan))
    return path


class Chaos:
    def __init__(self, cluster, workdir: Path, seed: int, *, runs: int = 30, kills: int = 100,
                 max_parallel: int = 6, max_gpu_parallel: int = 2, round_faults: int | None = None,
                 deadline_s: float | None = None, log=print, kill_rate: float = 0.5):
        self.cluster = cluster
        self.workdir = Path(workdir)
        self.seed = seed
        self.rng = random.Random(seed)
        self.n_runs = runs
        self.kills_wanted = kills
        self.max_parallel = max_parallel
        self.max_gpu_parallel = max_gpu_parallel
        self.round_faults = round_faults or max(20, min(kills, 250))
        self.deadline_s = deadline_s
        self.deadline: float | None = None     # starts with the first round's injection, not with the setup
        self.log = log
        self.kill_rate = kill_rate
        self.fig = Figures(seed=seed)
        self.env = dict(os.environ, SLURM_CONF=str(cluster.conf))
        self.campaign: Path | None = None
        self.prefix = ""
        self.ctld_down = False

    # ---- plumbing --------------------------------------------------------------------------
    def sweep(self, *args: str, timeout: float = 180, check: bool = False) -> subprocess.CompletedProcess:
        r = subprocess.run([sys.executable, "-m", "sweep", *args], capture_output=True, text=True,
                           env=self.env, cwd=REPO, timeout=timeout, stdin=subprocess.DEVNULL)
        if check and r.returncode != 0:
            raise RuntimeError(f"sweep {' '.join(args)}: rc {r.returncode}: {r.stderr.strip()[-800:]}")
        return r

    def squeue(self) -> list[tuple[str, str, str]] | None:
        try:
            r = self.cluster.run("squeue", "--me", "-h", "-o", "%i|%T|%j", check=False, timeout=30)
        except subprocess.TimeoutExpired:
            return None
        if r.returncode != 0:
            return None
        rows = []
        for line in r.stdout.splitlines():
            parts = line.split("|", 2)
            if len(parts) == 3 and parts[2].startswith(self.prefix):
                rows.append((parts[0], parts[1], parts[2]))
        return rows

    def violation(self, text: str) -> None:
        self.fig.violations.append(text)
        self.log(f"VIOLATION: {text}")

    def controller_pids(self) -> list[int]:
        """The campaign's controllers. A child a controller has just forked shows the controller's
        command line until it execs (a bwrap probe, a session's keeper): it is not a controller,
        and a kill -9 landing on it is another fault (it read as a probe that found bwrap
        unusable, a config park that tripped the breaker), so a process whose parent matches too
        is left out."""
        found = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    argv = fh.read().split(b"\0")
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if b"controller" in argv and b"--token" in argv and str(self.campaign).encode() in argv:
                found[int(entry)] = ppid
        return sorted(pid for pid, ppid in found.items() if ppid not in found)

    def runs_dir(self) -> Path:
        return self.campaign / "runs"

    def run_ids(self) -> list[str]:
        return sorted(os.listdir(self.runs_dir()))

    # ---- faults ------------------------------------------------------------------------------
    def tick(self) -> subprocess.CompletedProcess:
        r = self.sweep("tick", "--campaign", str(self.campaign), timeout=200)
        self.fig.ticks += 1
        if r.returncode != 0:
            self.violation(f"tick exited {r.returncode}: {r.stderr.strip()[-500:]}")
        self.check_after_tick()
        return r

    def kill_tick(self) -> None:
        p = subprocess.Popen([sys.executable, "-m", "sweep", "tick", "--campaign", str(self.campaign)],
                             env=self.env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             stdin=subprocess.DEVNULL)
        time.sleep(self.rng.uniform(0.2, 1.6))
        p.kill()
        p.wait()
        self.fig.count("kill -9 tick", kill=True)

    def kill_controller(self) -> None:
        pids = self.controller_pids()
        if not pids:
            return
        pid = self.rng.choice(pids)
        try:
            os.kill(pid, signal.SIGKILL)
            self.fig.count("kill -9 controller", kill=True)
        except ProcessLookupError:
            pass

    def scancel(self) -> None:
        rows = self.squeue() or []
        live = [r for r in rows if r[1] in ("PENDING", "RUNNING")]
        if not live:
            return
        job = self.rng.choice(live)[0]
        self.cluster.run("scancel", job, check=False)
        self.fig.count("scancel", kill=True)

    def stall_ctld(self) -> None:
        """SIGSTOP slurmctld while a tick runs: its squeue or its sbatch gets no answer."""
        pid = self.cluster.pids["slurmctld"]
        p = subprocess.Popen([sys.executable, "-m", "sweep", "tick", "--campaign", str(self.campaign)],
                             env=self.env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             stdin=subprocess.DEVNULL)
        time.sleep(self.rng.uniform(0.0, 1.2))
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(self.rng.uniform(2.0, 14.0))
        finally:
            os.kill(pid, signal.SIGCONT)
        try:
            p.wait(timeout=150)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        self.fig.count("slurmctld SIGSTOP during a tick", kill=True)
        self.check_after_tick()

    def restart_ctld(self) -> None:
        self.cluster.stop_controller()
        self.fig.count("slurmctld stopped", kill=True)
        # a tick while it is down: the queue is UNKNOWN, nothing may be judged dead
        self.tick()
        time.sleep(self.rng.uniform(0.0, 3.0))
        self.cluster.start_controller(wait_for_node=False)
        self.fig.count("slurmctld restarted")

    def corrupt(self) -> None:
        ids = self.run_ids()
        rid = self.rng.choice(ids)
        rdir = self.runs_dir() / rid
        what = self.rng.choices(["lease", "events", "state", "tick", "drain", "stray"],
                                weights=[4, 4, 1, 2, 1, 2])[0]
        if what == "lease":
            p = rdir / "lease.json"
            if p.exists():
                data = p.read_bytes()
                p.write_bytes(data[: self.rng.randrange(0, max(1, len(data)))])
                self.fig.count("lease.json truncated")
        elif what == "events":
            with open(rdir / "events.jsonl", "ab") as fh:
                fh.write(b'{"ts": 1, "run_id": "' + rid.encode() + b'", "kind": "tru')
            self.fig.count("events.jsonl torn line")
        elif what == "state":
            if self.fig.faults.get("state.json truncated", 0) < self.fig.rounds:   # rare: at most one a round
                p = rdir / "state.json"
                data = p.read_bytes()
                p.write_bytes(data[: len(data) // 2])
                self.fig.count("state.json truncated")
        elif what == "tick":
            (self.campaign / "tick.json").write_bytes(b"\x00garbage{")
            self.fig.count("tick.json garbage")
        elif what == "drain":
            (self.campaign / "drain-request.json").write_bytes(b"not json")
            self.fig.count("drain-request.json garbage")
        elif what == "stray":
            stray = rdir / f".lease.json.tomb.chaos.{self.rng.randrange(10**6)}"
            stray.write_bytes(b"{")
            old = time.time() - 3600
            os.utime(stray, (old, old))
            self.fig.count("lease stray planted")

    def stamp_outage(self) -> None:
        from runstate.markers import stamp_outage
        role = self.rng.choice(["author", "reviewer", "solver"])
        stamp_outage(self.campaign, role, "throttle", "chaos: injected throttle",
                     cooldown_s=self.rng.uniform(2, 12))
        self.fig.count("outage stamped")

    def drain(self) -> None:
        self.sweep("drain", "--campaign", str(self.campaign), "--reason", "chaos")
        self.fig.count("drain")

    def undrain(self) -> None:
        self.sweep("undrain", "--campaign", str(self.campaign))
        self.fig.count("undrain")

    # ---- invariants --------------------------------------------------------------------------
    def check_after_tick(self) -> None:
        tick = self._tick_json()
        if tick is not None and not tick.get("squeue_known", True):
            for a in tick.get("actions", []):
                if a.get("kind") in UNKNOWN_FORBIDDEN or (a.get("kind") == "end" and "max_attempted" in a.get("detail", "")):
                    self.violation(f"queue UNKNOWN but the tick judged {a}")
        rows = self.squeue()
        if rows is not None:
            live = [r for r in rows if r[1] in LIVE_STATES]
            self.fig.max_live = max(self.fig.max_live, len(live))
            if len(live) > self.max_parallel:
                self.violation(f"{len(live)} live jobs > max_parallel {self.max_parallel}: {live}")
            gpu_runs = {f"pr-{i:03d}" for i in range(self.n_runs) if i % 6 == 5}
            gpu_live = [r for r in live if r[2].split(".", 3)[-1] in gpu_runs]
            if len(gpu_live) > self.max_gpu_parallel:
                self.violation(f"{len(gpu_live)} live GPU jobs > max_gpu_parallel {self.max_gpu_parallel}: {gpu_live}")
        if tick is not None:
            for a in tick.get("actions", []):
                if a.get("kind") == "cancel_ghost":
                    self.fig.ghosts_cancelled += 1
                elif a.get("kind") == "submit_uncertain":
                    self.fig.uncertain_submissions += 1
                elif a.get("kind") == "adopt":
                    self.fig.adopted += 1
        self.check_spend()

    def _tick_json(self) -> dict | None:
        try:
            return json.loads((self.campaign / "tick.json").read_bytes())
        except (OSError, ValueError):
            return None

    def check_spend(self) -> None:
        total, overrun = 0.0, False
        for rid in self.run_ids():
            try:
                spend = json.loads((self.runs_dir() / rid / "spend.json").read_bytes())
            except (OSError, ValueError):
                continue
            overrun = overrun or spend.get("overrun", False)
            for e in spend.get("entries", []):
                total += e["actual_usd"] if e.get("status") == "settled" and e.get("actual_usd") is not None \
                    else e.get("reserved_usd", 0.0)
        if total > 100.0 + 1e-6 and not overrun:
            self.violation(f"spend {total:.2f} above the cap 100.00 with no recorded overrun")

    def check_events(self) -> None:
        """Two controllers acting at once, or a finished phase done again."""
        for rid in self.run_ids():
            try:
                lines = (self.runs_dir() / rid / "events.jsonl").read_bytes().splitlines()
            except OSError:
                continue
            spans: dict[str, list[float]] = {}
            done: set[str] = set()
            for line in lines:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                by = e.get("by") or ""
                if by.startswith("job:"):
                    span = spans.setdefault(by, [e["ts"], e["ts"]])
                    span[1] = e["ts"]
                if e.get("kind") == "repair":
                    done.clear()
                elif e.get("kind") == "phase_done":
                    if e.get("phase") in done:
                        self.violation(f"{rid}: phase {e.get('phase')} done twice (no repair between)")
                    done.add(e.get("phase"))
            ordered = sorted(spans.items(), key=lambda kv: kv[1][0])
            for (a, sa), (b, sb) in zip(ordered, ordered[1:], strict=False):
                if sb[0] < sa[1]:
                    self.violation(f"{rid}: controllers {a} and {b} acted at the same time "
                                   f"({sa[0]:.2f}-{sa[1]:.2f} vs {sb[0]:.2f}-{sb[1]:.2f})")

    def log_breaker(self) -> None:
        """A tripped circuit breaker, with the detail of the run that tripped it (why a round did not
        settle: the trip's cause alone does not say what the run met)."""
        from runstate.breaker import tripped
        trip = tripped(self.campaign)
        if trip is not None:
            self.log(f"circuit breaker tripped on {trip.cause} by {trip.runs}: {trip.detail}")
            for rid in trip.runs[-3:]:
                rec = json.loads((self.runs_dir() / rid / "state.json").read_bytes())
                self.log(f"  {rid}: last_error {rec.get('last_error')!r}; cause_detail {rec.get('cause_detail')!r}")

    def check_end(self) -> None:
        st = self.sweep("status", "--json", "--campaign", str(self.campaign))
        if st.returncode != 0:
            self.violation(f"status failed at the end: {st.stderr.strip()[-400:]}")
            return
        status = json.loads(st.stdout)
        corrupt = status.get("corrupt") or {}
        self.fig.corrupt_runs += len(corrupt)
        for rid, why in corrupt.items():
            if not why:
                self.violation(f"{rid}: corrupt without a reason")
        held = {h["run_id"]: h["reason"] for h in status.get("held", [])}
        self.log_breaker()
        for rid in self.run_ids():
            rdir = self.runs_dir() / rid
            if rid in corrupt:
                continue
            rec = json.loads((rdir / "state.json").read_bytes())
            if rec["state"] != "ended":
                if rec["state"] == "queued" and held.get(rid):
                    self.violation(f"{rid}: still queued at the end ({held[rid]})")
                else:
                    self.violation(f"{rid}: not ended at the end: {rec['state']}")
                continue
            key = rec["outcome"] + (f":{rec['reason']}" if rec.get("reason") else "")
            self.fig.endings[key] = self.fig.endings.get(key, 0) + 1
            if (rdir / "lease.json").exists():
                self.violation(f"{rid}: lease.json left at the end")
            strays = [n for n in os.listdir(rdir) if n.startswith(".lease.json.") and (".tomb." in n or ".new." in n)]
            if strays:
                self.violation(f"{rid}: lease strays left at the end: {strays}")
        rows = self.squeue() or []
        if [r for r in rows if r[1] in ("PENDING", "RUNNING", "CONFIGURING")]:
            self.violation(f"live jobs left at the end: {rows}")
        self.check_events()

    # ---- a round -----------------------------------------------------------------------------
    def new_campaign(self) -> None:
        from sweep.campaign import load_campaign
        self.fig.rounds += 1
        root = self.workdir / f"round-{self.fig.rounds:03d}"
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        plan = build_panel(root, self.n_runs, self.rng, max_parallel=self.max_parallel,
                           max_gpu_parallel=self.max_gpu_parallel)
        self.campaign = root / "campaign"
        self.sweep("init", str(plan), "--campaign", str(self.campaign), check=True)
        self.prefix = load_campaign(self.campaign).job_prefix
        self.fig.runs += self.n_runs

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def round(self) -> None:
        self.new_campaign()
        if self.deadline_s and self.deadline is None:
            # a loaded machine spends long on building the panel and init: that is not injection time
            self.deadline = time.monotonic() + self.deadline_s
        faults = 0
        actions = [(self.tick, 2), (self.kill_tick, 7), (self.kill_controller, 4), (self.scancel, 1.5),
                   (self.stall_ctld, 0.7), (self.restart_ctld, 0.3), (self.corrupt, 1.5),
                   (self.stamp_outage, 0.4), (self.drain, 0.2), (self.undrain, 0.5)]
        fns, weights = zip(*actions, strict=True)
        self.log(f"round {self.fig.rounds}: campaign {self.campaign} ({self.n_runs} runs), seed {self.seed}")
        while faults < self.round_faults and self.fig.kills < self.kills_wanted and not self.out_of_time():
            fn = self.rng.choices(fns, weights=weights)[0]
            fn()
            if fn is not self.tick:
                faults += 1
            if self.rng.random() > self.kill_rate:
                self.tick()
            if self._all_ended():
                break
        self.settle()

    def _all_ended(self) -> bool:
        for rid in self.run_ids():
            try:
                rec = json.loads((self.runs_dir() / rid / "state.json").read_bytes())
            except (OSError, ValueError):
                continue          # corrupt: visibly so
            if rec.get("state") != "ended":
                return False
        return True

    def settle(self, timeout_s: float = 900) -> None:
        """Stop injecting; undrain; tick until every run has ended (or is corrupt); check the end."""
        self.sweep("undrain", "--campaign", str(self.campaign))
        for role in ("author", "reviewer", "solver"):
            (self.campaign / f"outage-{role}.json").unlink(missing_ok=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.tick()
            if self._all_ended():
                # one more tick reaps what the last controllers left and tidies strays
                rows = self.squeue() or []
                if not [r for r in rows if r[1] in LIVE_STATES]:
                    self.tick()
                    break
            time.sleep(2.0)     # each tick is a Python process: a 1 s poll was half a core of ticks
        else:
            self.violation(f"round {self.fig.rounds} did not settle within {timeout_s:.0f}s")
        # lease strays younger than the repair age are left alone by the tick; wait them out once
        time.sleep(11)
        self.tick()
        self.check_end()
        self.log(f"round {self.fig.rounds} done: kills so far {self.fig.kills}, "
                 f"violations {len(self.fig.violations)}, endings {self.fig.endings}")

    def run(self) -> Figures:
        t0 = time.monotonic()
        try:
            while self.fig.kills < self.kills_wanted and not self.out_of_time():
                self.round()
        finally:
            try:
                os.kill(self.cluster.pids["slurmctld"], signal.SIGCONT)
            except (KeyError, ProcessLookupError):
                pass
            self.fig.seconds = time.monotonic() - t0
        return self.fig
