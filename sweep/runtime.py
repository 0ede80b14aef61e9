"""The runtime controller jobs run: by default this very installation of sweep.

`sweep runtime freeze` (sweep/cli/runtime_cmd.py) copies a built wheel into <campaign>/runtime/
with its sha256; from then on the controller command runs that frozen copy with `python -I`, and a
controller refuses to run on any other runtime.
"""
from __future__ import annotations

import sys
from pathlib import Path


def controller_command(campaign_dir: Path) -> list[str]:
    from sweep.frozen import frozen_controller_command
    frozen = frozen_controller_command(Path(campaign_dir))
    if frozen is not None:
        return frozen
    return [sys.executable, "-m", "sweep", "controller"]
