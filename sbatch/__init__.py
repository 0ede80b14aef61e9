"""Job-script templates shipped as package data (rendered by sweep.scheduler.slurm).

Data only: the templates are read with importlib.resources so they work from a wheel, a zip or a
source checkout alike.
"""
from __future__ import annotations

from importlib import resources

CONTROLLER_TEMPLATE = "controller.sbatch"


def load_template(name: str = CONTROLLER_TEMPLATE) -> str:
    """The text of a shipped template, e.g. `load_template("controller.sbatch")`."""
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
