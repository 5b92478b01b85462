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
the splits, the meshes, the log and the earlier stages' results. It names the stages whose
units it reads (``reads``): the runner lets its plan take their fingerprints
(:meth:`RunContext.fingerprint`) and no others. A stage whose results are scores states
their **columns** (:class:`Column`: name, title, direction) and returns them as rows keyed
by (method, K) (:meth:`Stage.rows`); ``report.json``, ``report.html`` and the sidecars
assemble themselves from the stage list. Adding a stage is one module with a
:class:`Stage` class (:class:`StageBase` holds the defaults of a stage without scores) and
one line in the run's stage list.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .log import heartbeat

if TYPE_CHECKING:
    from .context import RunContext

__all__ = [
    "HEARTBEAT_S",
    "SPIN_Z_HELP",
    "Column",
    "RowKey",
    "Stage",
    "StageBase",
    "Unit",
    "run_stage",
]

#: what a score row is keyed by: (method, K)
RowKey = tuple[str, int]


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


@dataclass(frozen=True)
class Column:
    """One score column a stage adds to the run's rows.

    Attributes
    ----------
    name : str
        Its key in a row (``report.json``'s ``scores``).
    title : str
        Its heading in ``report.html``.
    higher_is_better : bool or None
        Which way is better, for the report's comparison of methods; None: not compared
        (a count, a null's mean).
    table : bool
        Shown in the report's table of every score.
    sidecar_key : str or None
        Its key in the stage's section of each label file's sidecar (None: not there).
    help : str
        What it is, in a phrase: the report says it beside the tables that show it
        (columns of one title share it).
    """

    name: str
    title: str
    higher_is_better: bool | None = None
    table: bool = True
    sidecar_key: str | None = None
    help: str = ""


#: what every "z (spin)" column is
SPIN_Z_HELP = (
    "the score's z against spins of the parcellation on the sphere: "
    "(score - spins' mean) / spins' sd"
)


class Stage(Protocol):
    """What a stage states: its name, the stages it reads, its units, how it computes and
    loads them, and the score columns its results add."""

    name: str

    @property
    def reads(self) -> tuple[str, ...]:
        """The stages whose units' fingerprints its keys take."""
        ...

    @property
    def columns(self) -> tuple[Column, ...]:
        """The score columns its rows hold (none for a stage without scores)."""
        ...

    @property
    def sidecar_section(self) -> str | None:
        """The section of each label file's sidecar its ``sidecar_key`` columns go into."""
        ...

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

    def rows(self, ctx: RunContext) -> dict[RowKey, dict[str, Any]]:
        """Its ``columns``' values per (method, K), from its results in ``ctx``."""
        ...

    def explain(self, ctx: RunContext) -> dict[str, str]:
        """What its scores were computed on, in words (``scores_explained``)."""
        ...


class StageBase:
    """The defaults of a stage: it reads no other stage and adds no scores."""

    reads: tuple[str, ...] = ()
    columns: tuple[Column, ...] = ()
    sidecar_section: str | None = None

    def rows(self, ctx: RunContext) -> dict[RowKey, dict[str, Any]]:
        return {}

    def explain(self, ctx: RunContext) -> dict[str, str]:
        return {}


#: the longest a computing stage goes without a line in the log (seconds)
HEARTBEAT_S = 30.0


def run_stage(stage: Stage, ctx: RunContext) -> dict[str, Any]:
    """Skip the current units, compute the rest, record each; return unit name -> result.

    The results are in the plan's order, whatever order the stage computed them in.
    """
    with ctx.reading(stage.reads):
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
        # a line at least every HEARTBEAT_S while the stage computes
        with heartbeat(ctx.log, f"[{stage.name}]", HEARTBEAT_S) as log:
            quiet, ctx.log = ctx.log, log
            try:
                for u, value in stage.compute(ctx, todo):
                    ctx.wd.record(u.name, u.key, u.outputs)
                    results[u.name] = value
            finally:
                ctx.log = quiet
    missing = [u.name for u in units if u.name not in results]
    if missing:
        raise RuntimeError(f"stage {stage.name} did not compute {missing}.")
    ordered = {u.name: results[u.name] for u in units}
    ctx.results[stage.name] = ordered
    return ordered
