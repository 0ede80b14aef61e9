"""A test job: record what this process received, then optionally stay alive.

    python tests/tools/write_argv.py OUT [ARG...]

Writes OUT (atomically, JSON): the argv after OUT, byte-exact; cwd; pid and process group; and
the environment variables the scheduler contract promises. With SWEEP_TEST_SLEEP=N in the
environment it then sleeps N seconds, so the job stays visible in the queue.
"""
import json
import os
import sys
import time

WATCHED = ("SWEEP_JOB_ID", "CUDA_VISIBLE_DEVICES", "SWEEP_TEST_VALUE", "SLURM_JOB_ID",
           "SLURM_JOB_PARTITION")


def main() -> None:
    out = sys.argv[1]
    data = {"argv": sys.argv[2:], "cwd": os.getcwd(), "pid": os.getpid(), "pgid": os.getpgid(0),
            "env": {k: os.environ.get(k) for k in WATCHED}, "all_env": dict(os.environ)}
    tmp = f"{out}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp, out)
    time.sleep(float(os.environ.get("SWEEP_TEST_SLEEP", "0")))


if __name__ == "__main__":
    main()
