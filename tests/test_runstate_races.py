"""Leases and records under real concurrent processes and SIGKILL."""
import multiprocessing as mp
import os
import random
import signal
import time

import pytest

from runstate import (RunRecord, acquire_lease, create_run_dir, hand_over_lease, heartbeat_lease,
                      list_runs, load_record, read_lease, reap_lease, release_lease, save_record)
from runstate.lease import LeaseLost, judge_lease

CTX = mp.get_context("fork")


def _contender(campaign, n_rounds, barrier, results, idx):
    for r in range(n_rounds):
        rdir = campaign / "runs" / f"r{r}"
        barrier.wait()
        won = acquire_lease(rdir, run_id=f"r{r}", token=f"p{idx}") is not None
        results.put((r, idx, won))


def test_32_processes_race_for_one_lease_one_winner_each_round(tmp_path):
    n_procs, n_rounds = 32, 200
    for r in range(n_rounds):
        create_run_dir(tmp_path, f"r{r}")
    barrier = CTX.Barrier(n_procs)
    results = CTX.Queue()
    procs = [CTX.Process(target=_contender, args=(tmp_path, n_rounds, barrier, results, i))
             for i in range(n_procs)]
    for p in procs:
        p.start()
    winners: dict[int, list[int]] = {r: [] for r in range(n_rounds)}
    for _ in range(n_procs * n_rounds):
        r, idx, won = results.get(timeout=60)
        if won:
            winners[r].append(idx)
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert all(len(w) == 1 for w in winners.values()), {r: w for r, w in winners.items() if len(w) != 1}
    for r, (idx,) in winners.items():      # the file on disk names the winner
        assert read_lease(tmp_path / "runs" / f"r{r}").lease.token == f"p{idx}"


def _reaper(rdir, judged_raw, barrier, out):
    from runstate.lease import LeaseView
    view = LeaseView(rdir / "lease.json", judged_raw, None, None, 0.0)
    barrier.wait()
    time.sleep(random.random() * 0.002)
    out.put(("reap", reap_lease(rdir, view)))


def _acquirer(rdir, barrier, out):
    barrier.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        lease = acquire_lease(rdir, run_id=rdir.name, token="fresh")
        if lease is not None:
            out.put(("acquired", lease.acquired_at))
            return
    out.put(("acquired", None))


def test_racing_reapers_never_destroy_a_fresh_lease(tmp_path):
    rounds, n_reapers = 60, 6
    for r in range(rounds):
        rdir = create_run_dir(tmp_path, f"r{r}")
        assert acquire_lease(rdir, run_id=f"r{r}", token="old", holder="job", job_id="1", now=1000.0)
        view = read_lease(rdir)
        assert judge_lease(view, holder_alive=False, now=2000.0, ttl_s=60).stale
        barrier = CTX.Barrier(n_reapers + 1)
        out = CTX.Queue()
        procs = [CTX.Process(target=_reaper, args=(rdir, view.raw, barrier, out)) for _ in range(n_reapers)]
        procs.append(CTX.Process(target=_acquirer, args=(rdir, barrier, out)))
        for p in procs:
            p.start()
        got = [out.get(timeout=30) for _ in procs]
        for p in procs:
            p.join(10)
        reaps = sum(1 for kind, v in got if kind == "reap" and v)
        acquired = [v for kind, v in got if kind == "acquired"]
        assert reaps == 1, f"round {r}: {reaps} reapers reaped the one stale lease"
        assert acquired[0] is not None, f"round {r}: the fresh acquirer never got the lease"
        now = read_lease(rdir)
        assert now is not None and now.lease.token == "fresh", f"round {r}: fresh lease destroyed"
        leftovers = [n for n in os.listdir(rdir) if ".tomb." in n or ".new." in n]
        assert leftovers == []


def test_reaper_never_takes_a_lease_that_heartbeated_after_judgement(tmp_path):
    rdir = create_run_dir(tmp_path, "r1")
    acquire_lease(rdir, run_id="r1", token="t", holder="job", job_id="9", now=1000.0)
    judged = read_lease(rdir)
    assert judge_lease(judged, holder_alive=None, now=5000.0, ttl_s=600).stale
    heartbeat_lease(rdir, token="t", now=4999.0)            # the holder was alive after all
    assert reap_lease(rdir, judged) is False
    assert read_lease(rdir).lease.heartbeat_at == 4999.0


def test_handover_heartbeat_release_only_by_the_token_holder(tmp_path):
    rdir = create_run_dir(tmp_path, "r1")
    assert acquire_lease(rdir, run_id="r1", token="tok") is not None
    assert acquire_lease(rdir, run_id="r1", token="other") is None
    with pytest.raises(LeaseLost):
        hand_over_lease(rdir, token="wrong", job_id="5")
    lease = hand_over_lease(rdir, token="tok", job_id="5")
    assert lease.holder == "job" and lease.job_id == "5"
    with pytest.raises(LeaseLost):
        heartbeat_lease(rdir, token="tok", job_id="6")       # a different job with a stolen token
    assert read_lease(rdir).lease.job_id == "5"
    assert release_lease(rdir, token="wrong") is False
    assert read_lease(rdir) is not None
    assert release_lease(rdir, token="tok") is True
    assert read_lease(rdir) is None
    with pytest.raises(LeaseLost):
        heartbeat_lease(rdir, token="tok")


def _slow_handover(rdir, held_s, started):
    """A tick handing the lease over on a loaded machine: the lease sits in its tombstone for held_s."""
    path = rdir / "lease.json"
    tomb = rdir / ".lease.json.tomb.slow"
    os.rename(path, tomb)
    started.set()
    time.sleep(held_s)
    os.link(tomb, path)
    os.unlink(tomb)


@pytest.mark.parametrize("held_s", [0.2, 1.0])
def test_a_handover_waits_out_another_process_holding_the_lease_in_its_tombstone(tmp_path, held_s):
    # CI: a controller starting while its tick handed the lease over found no lease for 0.3 s, took
    # it for reaped and exited; its job vanished right after the tick adopted it
    rdir = create_run_dir(tmp_path, "r1")
    assert acquire_lease(rdir, run_id="r1", token="tok") is not None
    started = CTX.Event()
    other = CTX.Process(target=_slow_handover, args=(rdir, held_s, started))
    other.start()
    try:
        assert started.wait(10)
        lease = hand_over_lease(rdir, token="tok", job_id="7")
    finally:
        other.join(10)
    assert lease.job_id == "7" and read_lease(rdir).lease.job_id == "7"


def test_staleness_rule():
    from runstate.lease import LeaseView
    from runstate.models import Lease
    lease = Lease(run_id="r", token="t", holder="job", job_id="1", acquired_at=100, heartbeat_at=500)
    view = LeaseView(None, b"x", lease, None, mtime=0.0)        # mtime is ignored for a good lease
    assert judge_lease(view, holder_alive=True, now=10**9, ttl_s=60).stale is False
    assert judge_lease(view, holder_alive=False, now=501, ttl_s=60).stale is True
    assert judge_lease(view, holder_alive=None, now=550, ttl_s=60).stale is False
    assert judge_lease(view, holder_alive=None, now=561, ttl_s=60).stale is True
    assert judge_lease(view, holder_alive=None, now=400, ttl_s=60).stale is False  # skewed clock
    corrupt = LeaseView(None, b"", None, "empty file", mtime=1000.0)
    assert judge_lease(corrupt, holder_alive=True, now=1030, ttl_s=60).stale is False
    assert judge_lease(corrupt, holder_alive=None, now=1061, ttl_s=60).stale is True


def test_torn_lease_can_still_be_reaped(tmp_path):
    rdir = create_run_dir(tmp_path, "r1")
    (rdir / "lease.json").write_bytes(b'{"run_id": "r1", "tok')
    os.utime(rdir / "lease.json", (1000, 1000))
    view = read_lease(rdir)
    assert view.corrupt
    verdict = judge_lease(view, holder_alive=None, now=5000, ttl_s=600)
    assert verdict.stale and "corrupt" in verdict.why
    assert reap_lease(rdir, view) and read_lease(rdir) is None
    assert acquire_lease(rdir, run_id="r1", token="new") is not None


def _version(writer: int, i: int) -> RunRecord:
    return RunRecord(run_id="victim", attempts=i % 3, reason=None,
                     checkpoints={"intake": {"writer": writer, "i": i, "pad": "x" * (i % 50) * 40}},
                     created=1.0, updated=float(i))


def _writer_loop(campaign, writer):
    rdir = campaign / "runs" / "victim"
    i = 0
    while True:
        save_record(rdir, _version(writer, i), touch=False)
        i += 1


def test_sigkilled_writer_never_leaves_a_torn_record(tmp_path):
    rdir = create_run_dir(tmp_path, "victim")
    save_record(rdir, _version(-1, 0), touch=False)
    kills = 200
    rng = random.Random(1234)
    for writer in range(kills):
        p = CTX.Process(target=_writer_loop, args=(tmp_path, writer))
        p.start()
        time.sleep(rng.random() * 0.01)
        os.kill(p.pid, signal.SIGKILL)
        p.join(10)
        loaded = load_record(rdir)
        assert loaded.ok, f"kill {writer}: {loaded.problem}"
        cp = loaded.value.checkpoints["intake"]
        expected = _version(cp["writer"], cp["i"])
        assert loaded.value == expected, f"kill {writer}: content is not a version that was written"
    temps = [n for n in os.listdir(rdir) if n.startswith(".state.json.tmp.")]
    listing = list_runs(tmp_path)          # leftover temp files never break the listing
    assert list(listing.records) == ["victim"] and listing.corrupt == {}
    print(f"{kills} kills, {len(temps)} leftover temp files")
