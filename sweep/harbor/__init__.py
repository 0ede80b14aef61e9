"""The Harbor task bundle: its layout, validation, digest, trials, gates and sample PRs.

See docs/tasks.md. Light at import: the trial runner and the PR-to-bundle builder import only the
stdlib and sweep's provider contract.
"""
from sweep.harbor.bundle import bundle_sha256, validate_bundle
from sweep.harbor.gates import gates_passed
from sweep.harbor.layout import is_test_path, unsafe_relpath
from sweep.harbor.trial import TrialResult, read_reward, run_trial

__all__ = ["validate_bundle", "bundle_sha256", "run_trial", "TrialResult", "read_reward",
           "gates_passed", "is_test_path", "unsafe_relpath"]
