"""runstate: the file-state machine under sweep (see docs/state.md).

Guarantees, whatever process is killed at whatever line:
- state.json is only ever replaced by atomic rename: it holds the old record or the new one;
- lease.json is only ever created exclusively (O_EXCL, or link(2) when its holder re-issues it),
  and changed only by compare-and-swap, so there is never more than one holder;
- readers never raise for bad content: they return what is wrong and the tick carries on.

Imports nothing from `sweep` or `roles`.
"""
from runstate.errors import (ConfigError, LeaseError, ProviderError, SchedulerError, StateError,
                             SweepError)
from runstate.files import (Loaded, append_line, make_private_dir, read_model, write_atomic,
                            write_model_atomic)
from runstate.lease import (LeaseLost, LeaseVerdict, LeaseView, acquire_lease, hand_over_lease,
                            heartbeat_lease, judge_lease, read_lease, reap_lease, release_lease)
from runstate.markers import (active_cooldowns, clear_drain, is_draining, read_drain, read_outage,
                              request_drain, stamp_outage)
from runstate.models import (PHASES, DrainMarker, Event, Lease, OutageStamp, Outcome, Phase,
                             RunRecord, RunState, SpendEntry, SpendLedger, TickReport,
                             validate_run_id)
from runstate.runs import (RunListing, append_event, create_run_dir, list_runs, load_record,
                           read_events, run_dir, save_record)

__all__ = [name for name in dir() if not name.startswith("_")]
