"""oracle: the deterministic agent. Useful, not a toy: it does each role's job mechanically.

- author: turns the PR into a Harbor task (sweep/harbor/pr_bundle.py), written to `task/` in the
  workspace; a PR that changes no test file fails with reason `no_test_changes`.
- reviewer: accepts exactly when the gates in its inputs passed, and emits a verdict in the shape of
  the shipped reviewer schema (validated by sweep against the role's actual schema).
- solver: applies the reference solution (`inputs["reference_solution"]`) to `repo/`.

Like every runtime it runs as a separate process (`python -m sweep.runtimes.oracle_agent`) inside
the role's sandbox and is audited afterwards: the oracle gets no exemption from enforcement.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from runstate.errors import ConfigError
from runstate.models import PIPELINE_ROLES
from sweep.runtimes.base import Invocation, Parsed, RuntimeCapabilities, SessionFiles, SessionRequest
from sweep.runtimes.facts import RuntimeFacts

ORACLE_ROLES = frozenset(PIPELINE_ROLES)
# The directory holding the `sweep`, `roles` and `runstate` packages, for the child's PYTHONPATH.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = tuple(PROJECT_ROOT / name for name in ("sweep", "runstate", "roles"))


class OracleRuntime:
    name = "oracle"
    # sweep's own code (the child imports this installation): free, on this host, the one solver
    # that is given the reference solution (the control that must score 1)
    facts = RuntimeFacts(paid=False, host_only=True, protocol_classified=False, reference_solution=True,
                          mechanical=True)

    def capabilities(self, options: dict) -> RuntimeCapabilities:
        # Deterministic code: it uses no agent tools, takes no turns, costs nothing, needs no network.
        return RuntimeCapabilities(restricts_tools=True, structured_output=True, max_turns=True,
                                   cost_cap=True, needs_network=False, roles=ORACLE_ROLES,
                                   uses_credentials=False)

    def check_options(self, options: dict) -> None:
        if options:
            raise ConfigError(f"the oracle runtime takes no options (got {sorted(options)})",
                              field="runtime_options")

    def input_paths(self, inputs: dict) -> dict[str, Path]:
        """The host paths among the inputs this runtime reads (bound read-only; a sandboxed session
        sees each at /inputs/<name> unless it lies in the workspace: sweep/runtimes/session.py)."""
        out: dict[str, Path] = {}
        source = inputs.get("source")
        if isinstance(source, dict) and isinstance(source.get("repo"), str) and source["repo"].startswith("/"):
            out["source-repo"] = Path(source["repo"])
        for key in ("bundle_dir", "reference_solution"):
            value = inputs.get(key)
            if isinstance(value, str) and value.startswith("/"):
                out[key.replace("_", "-")] = Path(value)
        return out

    def build_invocation(self, req: SessionRequest, files: SessionFiles, output_path: str) -> Invocation:
        # every path as the session sees it (req.shown: the fixed view when sandboxed)
        argv = [sys.executable, "-P", "-s", "-m", "sweep.runtimes.oracle_agent", req.role.name,
                "--inputs", req.shown(files.inputs), "--workspace", req.shown(req.workspace), "--output", output_path]
        # sweep's packages one by one, never the checkout they live in: a campaign or a key file
        # next to the code (./sweep-demo, a checkout's .cache) stays out of the sandbox
        read_paths = [files.inputs, *PACKAGES, Path(sys.prefix), Path(sys.base_prefix)]
        read_paths += list(self.input_paths(req.inputs or {}).values())
        # The child must import sweep from this installation, not from anything in the workspace
        # (-P keeps the working directory off sys.path).
        env = {"PYTHONPATH": str(PROJECT_ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
        return Invocation(argv=argv, env=env, read_paths=read_paths, network=False)

    def parse(self, req: SessionRequest, files: SessionFiles, outcome) -> Parsed:
        try:
            report = json.loads(files.output.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            report = None
        if not isinstance(report, dict):
            tail = (outcome.stderr_tail.strip() or outcome.stdout_tail.strip())[-300:]
            return Parsed(ok=False, failure_class="failure", reason="oracle_no_report",
                          evidence=f"oracle exited {outcome.rc} without a report: {tail}")
        ok = outcome.rc == 0 and report.get("ok") is True
        return Parsed(ok=ok, failure_class=None if ok else "failure",
                      reason=None if ok else str(report.get("reason") or "oracle_failed"),
                      evidence=str(report.get("message") or ""), turns=0, cost_usd=0.0,
                      session_id=f"oracle-{req.role.name}", output=report.get("verdict"), report=report)
