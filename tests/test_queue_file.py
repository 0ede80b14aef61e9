"""queue.json (sweep/tick/queue_file.py): each job's `since` is when a read first saw it in its
present state, and a read that failed keeps the last answer's jobs and says it failed."""
from sweep.scheduler.base import JobInfo, QueueSnapshot
from sweep.tick.queue_file import next_queue_file


def _job(job_id: str, state: str, reason: str = "None") -> JobInfo:
    return JobInfo(job_id=job_id, name=f"sw.abc.tok.pr-{job_id}", state=state, reason=reason,
                   partition="cpu", gres="", gpus=0)


def test_since_is_kept_while_the_state_holds_and_reset_when_it_changes():
    first = next_queue_file(None, QueueSnapshot.of([_job("1", "PENDING", "Priority"), _job("2", "RUNNING")]),
                            100.0, {"cpu": None})
    assert {j: (v.state, v.reason, v.since) for j, v in first.jobs.items()} == {
        "1": ("PENDING", "Priority", 100.0), "2": ("RUNNING", "None", 100.0)}
    # job 1 pends for another reason (same state: same since), then runs; job 2 left; job 3 is new
    second = next_queue_file(first, QueueSnapshot.of([_job("1", "PENDING", "Resources"), _job("3", "PENDING")]),
                             160.0, {"cpu": None})
    assert {j: (v.reason, v.since) for j, v in second.jobs.items()} == {"1": ("Resources", 100.0),
                                                                         "3": ("None", 160.0)}
    third = next_queue_file(second, QueueSnapshot.of([_job("1", "RUNNING")]), 220.0, {})
    assert third.jobs["1"].since == 220.0 and third.taken_at == 220.0 and third.known


def test_a_failed_read_keeps_the_last_answer_and_says_so():
    answered = next_queue_file(None, QueueSnapshot.of([_job("7", "RUNNING")]), 50.0, {"gpu": 2})
    failed = next_queue_file(answered, QueueSnapshot.unknown("slurm_load_jobs error: timeout"), 90.0, {"gpu": 2})
    assert not failed.known and failed.error == "slurm_load_jobs error: timeout"
    assert failed.asked_at == 90.0 and failed.taken_at == 50.0 and set(failed.jobs) == {"7"}
    never = next_queue_file(None, QueueSnapshot.unknown("down"), 10.0, {})
    assert never.taken_at is None and never.jobs == {}
