"""Re-export of the one error hierarchy (defined in runstate so every layer shares it)."""
from runstate.errors import (ConfigError, LeaseError, ProviderError, SchedulerError, StateError,
                             SweepError)

__all__ = ["SweepError", "ConfigError", "StateError", "LeaseError", "SchedulerError", "ProviderError"]
