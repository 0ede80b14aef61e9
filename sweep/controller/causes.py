"""The cause of an ending or a failed attempt (runstate/causes.py), from what the controller knows.

A phase that knows its cause says it (`Ending(..., cause=...)`, `AttemptFailed(..., cause=...)`);
otherwise it is derived here, in one place: from the ending's reason, from the gates evidence of
the bundle that failed (which gate failed, and how), and from the words the test tools and the
shell use for the common campaign-level failures ("command not found", "collected 0 items").
"""
from __future__ import annotations

import re
from pathlib import Path

from runstate.causes import CAUSES

_REASON_CAUSE = {
    "duplicate": "duplicate", "budget_exhausted": "budget", "max_interrupted": "interrupted",
    "intake_failed": "intake_failed", "secret_in_bundle": "secret_in_bundle",
    "review_rejected": "review_rejected", "review_failed": "review_failed",
    "author_failed": "author_failed", "evidence_incomplete": "evidence_incomplete", "aborted": "aborted",
    "weak_tests": "weak_tests", "prepared_probes_stale": "prepared_probes_stale",
}

# the words of the tools, most specific first; matched case-insensitively on test output and details
_TEXT_CAUSES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((c, re.compile(p, re.IGNORECASE)) for c, p in (
    ("test_command_not_found", r"command not found|no such file or directory.*(exec|test_command)|"
                               r"no module named (pytest|unittest)|exited 127\b|test_command_not_found|"
                               r"cannot run program|executable file not found"),
    ("no_per_test_results", r"no junit report|no per-test|no_per_test_results|unrecognized (test )?runner"),
    ("no_tests_collected", r"collected 0 items|no tests ran|ran 0 tests|no test files|no tests found|"
                           r"no_tests_collected|0 passing|# tests 0\b|running 0 tests"),
    ("test_timeout", r"timed out"),
    ("resource_limit", r"hit its \w+ bound|limit_(memory|processes|workspace_bytes|file_bytes)|file-size bound"),
    ("image_build_failed", r"the task's image|image build|build failed"),
    ("provider_config", r"configuration error|config park|\bconfig in role\b|parked \d+ times .*: config:"),
))


def cause_from_text(text: str, default: str) -> str:
    for cause, pattern in _TEXT_CAUSES:
        if pattern.search(text or ""):
            return cause
    return default


def _gates_evidence(run_dir: Path):
    """The newest gates evidence of the run, or None."""
    from runstate.errors import StateError
    from sweep.models.evidence import GatesEvidence, read_evidence
    files = sorted((run_dir / "evidence").glob("gates-r*.json")) if (run_dir / "evidence").is_dir() else []
    for path in reversed(files):
        try:
            ev = read_evidence(path, GatesEvidence)
        except StateError:      # a cause is a label: an unreadable file only makes it coarser
            ev = None
        if ev is not None:
            return ev
    return None


def cause_of_gates(run_dir: Path) -> tuple[str, str]:
    """(cause, detail) of the newest failed gates of a run."""
    ev = _gates_evidence(run_dir)
    if ev is None:
        return "gates_failed", ""
    gates = ev.gates

    def detail_of(name: str) -> str:
        g = gates.get(name)
        return f"gate {name}: {(g.detail or g.rewards) if g else ''}"[:300]

    def rewards(name: str) -> list:
        g = gates.get(name)
        return list(g.rewards or []) if g else []

    for name in ("valid", "verifier", "image"):
        g = gates.get(name)
        if g is not None and not g.ok:
            default = {"valid": "invalid_bundle", "image": "image_build_failed"}.get(name, "gates_failed")
            return cause_from_text(g.detail, default) if name != "valid" else default, detail_of(name)
    ref, empty = rewards("reference"), rewards("empty")
    if len({r for r in ref}) > 1 or len({r for r in empty}) > 1:
        return "flaky_reference", detail_of("repeat") if "repeat" in gates else detail_of("reference")
    g = gates.get("reference")
    if g is not None and not g.ok:
        return cause_from_text(g.detail, "reference_fails"), detail_of("reference")
    g = gates.get("empty")
    if g is not None and not g.ok:
        if empty and all(r == 1.0 for r in empty):
            return "passes_before_fix", detail_of("empty")
        return cause_from_text(g.detail, "gates_failed"), detail_of("empty")
    g = gates.get("fail_to_pass")
    if g is not None and not g.ok:
        return cause_from_text(g.detail, "no_fail_to_pass"), detail_of("fail_to_pass")
    for name, g in gates.items():
        if not g.ok:
            known = name if name in CAUSES else None
            return known or cause_from_text(g.detail, "gates_failed"), detail_of(name)
    return "gates_failed", ""


def cause_of_ending(run_dir: Path, reason: str | None, detail: str, last_cause: str | None) -> tuple[str | None, str]:
    """(cause, one-line detail) of an ending; (None, "") for `verified`."""
    line = " ".join((detail or "").split())[:300]
    if reason is None:
        return None, ""
    if reason == "gates_failed":
        cause, gate_detail = cause_of_gates(run_dir)
        return cause, gate_detail or line
    if reason in _REASON_CAUSE:
        return _REASON_CAUSE[reason], line
    if reason == "max_attempted":
        return cause_from_text(detail, last_cause or "max_attempted"), line
    if reason == "construction_failed":
        if re.search(r"no test file|changes no test", detail or "", re.IGNORECASE):
            return "no_test_changes", line
        return cause_from_text(detail, "construction_failed"), line
    if reason in CAUSES:
        return reason, line
    return cause_from_text(detail, "phase_failed"), line


def cause_of_failure(detail: str) -> str:
    """The cause of a failed attempt from its detail."""
    if (detail or "").startswith("unexpected "):
        return "unexpected_error"
    return cause_from_text(detail, "session_failed")
