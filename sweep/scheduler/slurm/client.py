"""Running one Slurm client command: argv only, bounded, stderr kept for the error message.

Slurm clients block for about 9 s and then fail when slurmctld is unreachable; a site under load
can be slower still. Every call therefore has a timeout, and a timeout is reported as such (it is
not a refusal: an sbatch that timed out may still have queued its job).
"""
from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence

# Variables that silently change what squeue prints (format, sort, state/partition/user filters).
# A user's SQUEUE_STATES=RUNNING would hide pending controllers and make the tick resubmit them.
SQUEUE_ENV_PREFIX = "SQUEUE_"


# Slurm's own words for "the request may or may not have reached slurmctld". A client gives up after
# MessageTimeout (10 s by default) with the first of these while slurmctld is stalled, yet slurmctld
# may still create the job when it resumes: such an sbatch is UNCERTAIN, never a refusal.
_NO_ANSWER = ("socket timed out", "timed out", "zero bytes were transmitted", "unable to contact slurm controller",
              "communication connection failure", "connection refused", "connection reset",
              "transport endpoint is not connected", "standby mode", "resource temporarily unavailable",
              "slurm_receive_msg", "slurm_send", "kill signal", "broken pipe")


class SlurmCallFailed(Exception):
    """A client call failed, timed out or could not start; `str()` is the message to show.

    `uncertain` says whether the call may still have had its effect (no answer, a timeout, a
    socket error); a plain refusal (rc != 0 with Slurm's reason, or a client that could not start)
    is certain: nothing happened."""

    def __init__(self, message: str, *, timed_out: bool = False, stderr: str = "",
                 uncertain: bool | None = None):
        super().__init__(message)
        self.timed_out = timed_out
        self.stderr = stderr
        self.uncertain = timed_out if uncertain is None else uncertain


def is_no_answer(text: str) -> bool:
    """True if a client's message says it got no (complete) answer from slurmctld."""
    low = text.lower()
    return any(marker in low for marker in _NO_ANSWER)


def client_env(base: Mapping[str, str] | None, *, drop_prefixes: Sequence[str] = ()) -> dict[str, str]:
    """The caller's environment (SLURM_CONF and friends pass through), minus `drop_prefixes`."""
    env = dict(os.environ if base is None else base)
    if drop_prefixes:
        env = {k: v for k, v in env.items() if not k.startswith(tuple(drop_prefixes))}
    return env


def run_client(argv: Sequence[str], *, env: Mapping[str, str], timeout: float) -> str:
    """Run a Slurm client and return its stdout; SlurmCallFailed (with stderr) otherwise."""
    what = os.path.basename(argv[0])
    try:
        result = subprocess.run(list(argv), env=dict(env), capture_output=True, text=True,
                                errors="replace", stdin=subprocess.DEVNULL, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        stderr = _text(exc.stderr)
        raise SlurmCallFailed(f"{what} did not answer within {timeout:g} s (is slurmctld up?)"
                              + (f": {stderr}" if stderr else ""), timed_out=True, stderr=stderr) from None
    except OSError as exc:   # not installed, not executable
        raise SlurmCallFailed(f"cannot run {what}: {exc.strerror or exc}", uncertain=False) from None
    if result.returncode != 0:
        stderr = result.stderr.strip()
        # killed by a signal (rc < 0) or no answer from slurmctld: the call may have taken effect
        raise SlurmCallFailed(f"{what} failed (rc {result.returncode}): "
                              f"{stderr or result.stdout.strip() or 'no message'}", stderr=stderr,
                              uncertain=result.returncode < 0 or is_no_answer(stderr))
    return result.stdout


def site_slurm_version(*, env: Mapping[str, str] | None = None, timeout: float = 20.0) -> str:
    """The site's Slurm version ("22.05.8") from `sinfo --version`, else `scontrol --version`.

    Both need a reachable configuration (SLURM_CONF or configless DNS), not a running slurmctld.
    """
    errors = []
    for client in ("sinfo", "scontrol"):
        try:
            out = run_client([client, "--version"], env=client_env(env), timeout=timeout)
        except SlurmCallFailed as exc:
            errors.append(str(exc))
            continue
        match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
        if match:
            return match.group(0)
        errors.append(f"{client} --version printed no version: {out.strip()!r}")
    raise SlurmCallFailed("could not determine the site's Slurm version: " + "; ".join(errors))


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    if isinstance(data, bytes):
        data = data.decode(errors="replace")
    return data.strip()
