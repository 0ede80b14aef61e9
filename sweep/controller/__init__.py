"""`sweep controller RUN_ID`: carry one run from its recorded phase to an ending.

Guards first: the job must hold the run's lease (the token in its argv matches the lease; the
holder is its SWEEP_JOB_ID, taken over here if the tick died before handing it over), it must run
on the campaign's frozen runtime when one is frozen, and it waits until the record names its job
(the tick writes that right after sbatch; the next tick adopts it if that tick died), so that
from then on the controller is the only writer of the record while it holds the lease.

Then phases run from the checkpoint: intake -> author -> gates -> probes -> review -> solve -> evaluate.
Each finished phase is written to state.json before the next starts; a killed controller's
successor resumes at the recorded phase and never repeats a finished one. See docs/controller.md.
"""
from sweep.controller.pipeline import run_controller

__all__ = ["run_controller"]
