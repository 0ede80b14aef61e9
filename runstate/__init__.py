"""runstate: the file-state machine under sweep (see docs/state.md).

Guarantees, whatever process is killed at whatever line:
- state.json is only ever replaced by atomic rename: it holds the old record or the new one;
- lease.json is only ever created exclusively (O_EXCL, or link(2) when its holder re-issues it),
  and changed only by compare-and-swap, so there is never more than one holder;
- readers never raise for bad content: they return what is wrong and the tick carries on.

Imports nothing from `sweep` or `roles`.
"""
from importlib import import_module

# name -> module, resolved on first use (PEP 562). Importing runstate.errors runs this file first;
# eager imports here would load pydantic and every model for `sweep --help`.
_EXPORTS = {name: "runstate." + module for module, names in {
    "errors": "ConfigError LeaseError ProviderError SchedulerError StateError SweepError",
    "files": "Loaded append_line make_private_dir read_model write_atomic write_model_atomic",
    "lease": "LeaseLost LeaseVerdict LeaseView acquire_lease hand_over_lease heartbeat_lease judge_lease "
             "read_lease reap_lease release_lease",
    "markers": "active_cooldowns clear_drain is_draining read_drain read_outage request_drain stamp_outage",
    "models": "DrainMarker Event Lease OutageStamp Outcome Phase RunRecord RunState SpendEntry "
              "SpendLedger TickReport validate_run_id",
    "phases": "PHASE_TABLE PhaseRow",
    "runs": "RunListing append_event create_run_dir list_runs load_record read_events run_dir save_record",
}.items() for name in names.split()}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'runstate' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
