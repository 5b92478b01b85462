"""The stage engine: the stage contract and its one runner (:mod:`.contract`), the run
context the stages share (:mod:`.context`), the work folder that stamps every unit
(:mod:`.workdir`), the run's log (:mod:`.log`) and the tasks' memory rules
(:mod:`.placement`). It knows no particular stage."""

from .context import RunContext, work_lock
from .contract import Stage, Unit, run_stage

__all__ = ["RunContext", "Stage", "Unit", "run_stage", "work_lock"]
