"""runstate: the file-state machine under sweep (see docs/state.md).

Imports nothing from `sweep` or `roles`. Public API is re-exported here.
"""
