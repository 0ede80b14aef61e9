"""Small real git repositories for tests: a thin re-export of sweep.harbor.samples.

The builders live in the package (not here) because `sweep demo` builds the same repositories at
runtime. Each returns the author's `source` input dict.
"""
from sweep.harbor.samples import (SAMPLE_BUILDERS, TEST_COMMAND, make_flaky_pr, make_pr_repo,
                                  make_pr_tests_pass_before, make_pr_without_tests, make_verified_pr)

__all__ = ["make_pr_repo", "make_verified_pr", "make_pr_without_tests", "make_pr_tests_pass_before",
           "make_flaky_pr", "SAMPLE_BUILDERS", "TEST_COMMAND"]
