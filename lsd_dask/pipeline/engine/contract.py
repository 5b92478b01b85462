"""The stage contract: what every stage of the pipeline states, and the one runner that
skips, computes and records.

A stage (:class:`Stage`) names itself and plans its **units**: one stamp each, with

- ``name``: the stamp, e.g. ``svd/split1``;
- ``key``: everything the unit reads (its inputs' fingerprints) and every setting it uses;
- ``outputs``: the work-folder paths it writes;
- ``label``: how the log names it (``split1``, ``split1 directional K=50``).

:func:`run_stage` asks the work folder which units are current
(:meth:`~lsd_dask.pipeline.engine.workdir.WorkDir.is_current`: same key, every output there),
loads those with :meth:`Stage.load`, hands the others to :meth:`Stage.compute` together (so
a stage may run them side by side on a cluster), and records each unit as soon as the
stage yields it with its outputs in place. A unit interrupted before it was yielded has no
stamp and is computed again by the next run.

A stage reads the run through a :class:`RunContext`: the configuration, the work folder,
the splits, the meshes, the log and the earlier stages' results. Adding a stage is one
module with a :class:`Stage` class and one line in the run's stage list.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .context import RunContext

__all__ = ["Stage", "Unit", "run_stage"]


@dataclass
class Unit:
    """One stamped piece of a stage's work.

    Attributes
    ----------
    name : str
        The stamp's name; its first part is the stage's tag in the log (``svd/split1``).
    key : dict
        JSON-able inputs and settings; a change recomputes the unit.
    outputs : list of str
        The paths it writes (all must exist for it to be current).
    label : str
        Names the unit in log lines.
    item : object
        Whatever the stage needs to compute it (a split name, a fit's estimator).
    """

    name: str
    key: dict[str, Any]
    outputs: list[str]
    label: str = ""
    item: Any = None


class Stage(Protocol):
    """What a stage states: its name, its units, how it computes and loads them."""

    name: str

    def plan(self, ctx: RunContext) -> list[Unit]:
        """The units of this run, with their keys (after the earlier stages ran)."""
        ...

    def compute(self, ctx: RunContext, todo: list[Unit]) -> Iterator[tuple[Unit, Any]]:
        """Compute the units that are not current; yield each with its result once its
        outputs are written (the runner then records it)."""
        ...

    def load(self, ctx: RunContext, unit: Unit) -> Any:
        """The result of a current unit, from its outputs."""
        ...


def run_stage(stage: Stage, ctx: RunContext) -> dict[str, Any]:
    """Skip the current units, compute the rest, record each; return unit name -> result.

    The results are in the plan's order, whatever order the stage computed them in.
    """
    units = stage.plan(ctx)
    results: dict[str, Any] = {}
    todo = []
    for u in units:
        if ctx.wd.is_current(u.name, u.key, u.outputs):
            tag = u.name.split("/")[0]
            ctx.log(" ".join(p for p in (f"[{tag}]", u.label, "done earlier, skipped") if p))
            results[u.name] = stage.load(ctx, u)
        else:
            todo.append(u)
    if todo:
        for u, value in stage.compute(ctx, todo):
            ctx.wd.record(u.name, u.key, u.outputs)
            results[u.name] = value
    missing = [u.name for u in units if u.name not in results]
    if missing:
        raise RuntimeError(f"stage {stage.name} did not compute {missing}.")
    ordered = {u.name: results[u.name] for u in units}
    ctx.results[stage.name] = ordered
    return ordered
