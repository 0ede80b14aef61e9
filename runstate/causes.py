"""The cause vocabulary: why a run ended short of `verified`, or why an attempt failed, as one code.

`reason` (runstate.models.EndReason) says where a run stopped (`gates_failed`); the cause says why,
in words an operator can act on (`passes_before_fix`, `test_command_not_found`), with a one-line
detail beside it on the record (`cause_detail`). Every ending and every failed attempt carries
one; `sweep status` counts them, `sweep show` and report.md lead with them, `--json` carries them.

Each cause has a scope:
- `campaign`: the campaign is set up wrong (the test command, the image, a provider's
  configuration): every run will fail the same way, so the circuit breaker (runstate/breaker.py)
  stops admission after `breaker.after` of them in a row in a lane;
- `pr`: this pull request does not make a task (its tests pass before the fix, ...);
- `agent`: a session did not produce what its role asks;
- `limit`: a budget, an attempt or an interruption limit ran out;
- `infra`: a transient failure of the machinery (a vanished job, an unexpected error).
"""
from __future__ import annotations

from typing import Literal, NamedTuple

Scope = Literal["campaign", "pr", "agent", "limit", "infra"]


class CauseInfo(NamedTuple):
    scope: Scope
    meaning: str


CAUSES: dict[str, CauseInfo] = {
    # the campaign's set-up
    "test_command_not_found": CauseInfo("campaign", "the test command's program is not found where the tests run"),
    "no_tests_collected": CauseInfo("campaign", "the test command ran but collected no test"),
    "no_per_test_results": CauseInfo("campaign", "the test runner gave no per-test results sweep can read"),
    "image_build_failed": CauseInfo("campaign", "the task's image could not be built or started"),
    "provider_config": CauseInfo("campaign", "a provider, key or endpoint is configured wrong (a config park)"),
    # the pull request
    "passes_before_fix": CauseInfo("pr", "the tests already pass without the fix"),
    "reference_fails": CauseInfo("pr", "the tests do not pass with the PR's own fix"),
    "flaky_reference": CauseInfo("pr", "the tests give different results on repeats"),
    "no_fail_to_pass": CauseInfo("pr", "no test fails before the fix and passes after it"),
    "no_test_changes": CauseInfo("pr", "the PR changes no test file, so nothing can check a solution"),
    "weak_tests": CauseInfo("pr", "the tests accept a wrong solution (a mutant or a probe survived)"),
    "probe_focus_missing": CauseInfo("pr", "a required probe focus has no wrong-solution probe that ran"),
    "equivalence_over_bound": CauseInfo("pr", "the reviewer called surviving mutants equivalent beyond what the "
                                        "plan lets it excuse (quality.max_equivalent_mutants; a return_constant one never)"),
    # the plan's, for this PR only (not the campaign's set-up: it must not trip the breaker)
    "prepared_probes_stale": CauseInfo("pr", "the plan's prepared probes are bound to another bundle sha256"),
    "duplicate": CauseInfo("pr", "the PR is already verified elsewhere (prior_verified)"),
    "intake_failed": CauseInfo("pr", "the PR could not be fetched or read"),
    "invalid_bundle": CauseInfo("pr", "the task bundle is not a valid Harbor task"),
    "test_timeout": CauseInfo("pr", "the tests ran past their time limit"),
    "resource_limit": CauseInfo("pr", "the tests or the solution hit a sandbox bound (memory, processes, disk)"),
    "secret_in_bundle": CauseInfo("pr", "a secret was found in the task bundle"),
    "gates_failed": CauseInfo("pr", "a gate failed for a reason not classified further"),
    # the agents
    "review_rejected": CauseInfo("agent", "the reviewer rejected the task"),
    "review_failed": CauseInfo("agent", "the review did not produce a usable verdict"),
    "author_failed": CauseInfo("agent", "the author did not produce a usable bundle"),
    "construction_failed": CauseInfo("agent", "no usable task bundle could be built"),
    "evidence_incomplete": CauseInfo("agent", "the evidence for `verified` is incomplete"),
    "session_failed": CauseInfo("agent", "a role session failed"),
    # limits
    "budget": CauseInfo("limit", "a spending cap was reached"),
    "max_attempted": CauseInfo("limit", "the run's attempts ran out"),
    "interrupted": CauseInfo("limit", "preempted, timed out or lost its node too often"),
    "aborted": CauseInfo("limit", "an operator aborted it"),
    # the machinery
    "outage": CauseInfo("infra", "a role's endpoint or a provider was out (a park)"),
    "throttle": CauseInfo("infra", "a role's endpoint or a provider throttled (a park)"),
    "job_vanished": CauseInfo("infra", "its controller job ended without a word"),
    "check_interrupted": CauseInfo("infra", "a check of the sandbox, or a gate trial (twice), was killed or stalled "
                                                "before it could say anything"),
    "unexpected_error": CauseInfo("infra", "an unforeseen error in a phase (a bug: see the events)"),
    "phase_failed": CauseInfo("infra", "a phase failed for a reason not classified further"),
}

# The causes that trip the circuit breaker by default: each says the campaign, not the PR, is wrong.
DEFAULT_BREAKER_CAUSES: tuple[str, ...] = tuple(c for c, info in CAUSES.items() if info.scope == "campaign")


def scope_of(cause: str | None) -> Scope | None:
    info = CAUSES.get(cause or "")
    return info.scope if info else None
