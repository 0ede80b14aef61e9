"""Evaluation campaigns (docs/eval.md): solver arms x repeats over a Harbor dataset.

`plan.py` is the evaluation plan (what `sweep eval init` reads), `dataset.py` reads a Harbor
dataset directory, `manifest.py` is the frozen assignment of every task x arm x repeat to a cell
in a randomized, interleaved order, `stats.py` the statistics of `sweep eval report` (pure), and
`cells.py` runs one cell and reads the results back.
"""
