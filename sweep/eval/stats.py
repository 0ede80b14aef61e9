"""The statistics of an evaluation's report (pure functions; docs/eval.md, "Results").

- `wilson`: the Wilson score interval of a pass rate (95 % by default);
- `pass_at_k`: the unbiased estimator 1 - C(n-c, k) / C(n, k), averaged over tasks by `arm_pass_at_k`;
- `mcnemar`: the exact (binomial) McNemar test of two arms' paired per-task success, with the
  discordant counts and the effect size (the difference of the two success rates);
- `cost_per_solved` and `median`.

A task's success for an arm, for the paired test, is solving it in more than half of its repeats.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

Z95 = 1.959963984540054          # the 0.975 quantile of the standard normal


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """(low, high) of the Wilson score interval for `successes` of `n`; (0, 1) when n is 0."""
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in 0..n (got {successes} of {n})")
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # at 0 and n the bound is exactly 0 (or 1): rounding would leave 1e-17 there
    return (0.0 if successes == 0 else max(0.0, centre - half)), (1.0 if successes == n else min(1.0, centre + half))


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one task from n attempts of which c succeeded."""
    if not 0 < k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 < k <= n and 0 <= c <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def arm_pass_at_k(per_task: Mapping[str, Sequence[bool]], k: int) -> float:
    """pass@k of one arm: the mean over tasks of each task's unbiased estimate."""
    if not per_task:
        raise ValueError("pass@k of an arm needs at least one task")
    return sum(pass_at_k(len(v), sum(v), k) for v in per_task.values()) / len(per_task)


@dataclass(frozen=True)
class Paired:
    """Two arms on the tasks both ran: a = only the first solved, b = only the second."""

    tasks: int
    both: int
    a_only: int
    b_only: int
    neither: int
    p_value: float
    effect: float            # success rate of the first minus that of the second, over the paired tasks


def mcnemar_p(a_only: int, b_only: int) -> float:
    """The two-sided exact McNemar p-value: twice the binomial(n, 1/2) tail of the rarer
    discordant count, at most 1 (1 when no pair is discordant)."""
    n = a_only + b_only
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(a_only, b_only) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def mcnemar(first: Mapping[str, bool], second: Mapping[str, bool]) -> Paired:
    """The paired comparison of two arms' per-task success over the tasks both have."""
    shared = sorted(set(first) & set(second))
    both = sum(1 for t in shared if first[t] and second[t])
    a_only = sum(1 for t in shared if first[t] and not second[t])
    b_only = sum(1 for t in shared if second[t] and not first[t])
    neither = len(shared) - both - a_only - b_only
    effect = (a_only - b_only) / len(shared) if shared else 0.0
    return Paired(len(shared), both, a_only, b_only, neither, mcnemar_p(a_only, b_only), effect)


def task_success(rewards: Sequence[bool]) -> bool:
    """A task counts as solved by an arm when more than half of its repeats solved it."""
    return sum(rewards) * 2 > len(rewards)


def cost_per_solved(costs: Iterable[float], solved: int) -> float | None:
    """Everything the arm spent divided by the cells it solved (None when it solved none)."""
    total = sum(costs)
    return total / solved if solved else None


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None
