"""The gates convention shared by the controller (who runs them) and the reviewers (who read them).

`gates` is a JSON object: gate name -> result, where a result is either a bool or an object with
at least `ok` (bool) and optionally `detail` (text) and any evidence (rewards, digests).
Which gates there are is the gates phase's (sweep/controller/phases.py, listed in docs/controller.md);
this module holds only the rule that judges them.
The gates passed exactly when there is at least one gate and every gate is ok: `gates_passed` is
that rule's one home (the gates phase and the oracle reviewer both ask it).
"""
from __future__ import annotations


def gate_ok(result: object) -> bool:
    if isinstance(result, bool):
        return result
    return isinstance(result, dict) and result.get("ok") is True


def gates_passed(gates: object) -> tuple[bool, list[str]]:
    """(all passed, names of the gates that did not pass). Malformed input never passes."""
    if not isinstance(gates, dict) or not gates:
        return False, ["(no gate results)"]
    failed = [str(name) for name, result in gates.items() if not gate_ok(result)]
    return not failed, failed


def gate_detail(result: object) -> str:
    if isinstance(result, dict) and isinstance(result.get("detail"), str):
        return result["detail"]
    return ""
