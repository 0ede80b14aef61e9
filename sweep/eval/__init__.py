"""Evaluation campaigns (docs/eval.md): solver arms x repeats over a Harbor dataset.

`plan.py` is the evaluation plan (what `sweep eval init` reads), `dataset.py` reads a Harbor
dataset directory, `manifest.py` is the frozen assignment of every task x arm x repeat to a cell
in a randomized, interleaved order, `stats.py` the statistics of `sweep eval report` (pure),
`cells.py` the directory and the results, `runs.py` the directory as a campaign (one run per cell),
and `run.py` the pieces of one cell's work that its run's phases call (sweep/controller/cell.py).
"""
