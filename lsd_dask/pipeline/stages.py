"""The stage contract: what every stage of the pipeline states, and the one runner that
skips, computes and records.

A stage (:class:`Stage`) names itself and plans its **units**: one stamp each, with

- ``name``: the stamp, e.g. ``svd/split1``;
- ``key``: everything the unit reads (its inputs' fingerprints) and every setting it uses;
- ``outputs``: the work-folder paths it writes;
- ``label``: how the log names it (``split1``, ``split1 directional K=50``).

:func:`run_stage` asks the work folder which units are current
(:meth:`~lsd_dask.pipeline.workdir.WorkDir.is_current`: same key, every output there),
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
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import scipy.sparse as sp

from ..io.lock import WorkLock
from ..io.storage import Folder
from ..io.surface_files import HEMISPHERES
from ..surface import Mesh, mesh_adjacency
from ._log import Log, get_log
from .workdir import WorkDir

if TYPE_CHECKING:  # the configuration imports the stages' settings
    from .config import PipelineConfig

__all__ = ["Log", "RunContext", "Stage", "Unit", "get_log", "run_stage", "work_lock"]


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


@dataclass
class RunContext:
    """What the stages of one run share.

    Attributes
    ----------
    cfg : PipelineConfig
    wd : WorkDir
    log : callable
        One line per step.
    meshes : dict
        ``left`` and ``right`` :class:`~lsd_dask.surface.Mesh`.
    results : dict
        Stage name -> unit name -> result, as the stages finish.
    shared : dict
        What is computed once per run and read by more than one stage (the evaluation's
        vertex pairs), by name.
    """

    cfg: PipelineConfig
    wd: WorkDir
    log: Log
    meshes: dict[str, Mesh]
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    shared: dict[str, Any] = field(default_factory=dict)

    lock: WorkLock | None = None
    #: whether :meth:`close` gives the lock back (not when the caller took it)
    owns_lock: bool = False

    @classmethod
    def open(
        cls,
        cfg: PipelineConfig,
        log: Log,
        meshes: dict[str, Mesh],
        command: str | None = None,
        lock: WorkLock | None = None,
    ) -> RunContext:
        """The context of a run: its work folder opened and locked (a second run into it
        fails with :class:`~lsd_dask.io.lock.FolderBusyError`), then what killed writers
        left swept (with the lock held, no live writer can own it). ``lock``: the folder's
        lock, already taken by the caller (:func:`work_lock`), who gives it back;
        otherwise :meth:`close` does."""
        wd = WorkDir(cfg.work_url, log, cfg.storage_options)
        owns = lock is None
        if lock is None:
            lock = work_lock(cfg, command)
        try:
            wd.remove_partials()
        except BaseException:
            if owns:
                lock.release()
            raise
        return cls(cfg, wd, log, meshes, lock=lock, owns_lock=owns)

    def close(self) -> None:
        """Give the work folder's lock back, if this context took it."""
        if self.lock is not None and self.owns_lock:
            self.lock.release()
        self.lock = None

    def __enter__(self) -> RunContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def splits(self) -> dict[str, list[str]]:
        """Split name -> subject ids, in the configuration's order."""
        return self.cfg.resolved_splits()

    @property
    def sizes(self) -> list[int]:
        """Vertices per hemisphere."""
        return [self.meshes[h].n_vertices for h in HEMISPHERES]

    @property
    def kept(self) -> np.ndarray:
        """The vertices the mask keeps (after the mask stage)."""
        return np.asarray(self.wd.load_npy(self.wd.mask), bool)

    @cached_property
    def adjacency(self) -> sp.csr_matrix:
        """Mesh adjacency of every surface vertex (both hemispheres)."""
        return mesh_adjacency([self.meshes[h].faces for h in HEMISPHERES], self.sizes)

    @cached_property
    def atlases(self) -> dict[str, np.ndarray]:
        """The comparison atlases' parcel ids over every vertex (:mod:`.atlases`)."""
        from .atlases import load_atlases

        return load_atlases(self.cfg.compare_atlases, self.sizes)

    def kept_mesh(self, kept: np.ndarray | None = None) -> tuple[np.ndarray, sp.csr_matrix]:
        """Vertex coordinates and mesh adjacency of the kept vertices."""
        kept = self.kept if kept is None else kept
        A = self.adjacency[kept][:, kept].tocsr()
        V = np.concatenate([self.meshes[h].vertices for h in HEMISPHERES])[kept]
        return V, A


def work_lock(cfg: PipelineConfig, command: str | None = None) -> WorkLock:
    """Take the lock of the run's work folder (created if missing), or raise
    :class:`~lsd_dask.io.lock.FolderBusyError` naming the run that holds it. The CLI takes
    it before reading any input, so that a second run fails within seconds."""
    from .preflight import check_writable

    check_writable(cfg)
    folder = Folder(cfg.work_url, cfg.storage_options)
    folder.makedirs()
    lock = WorkLock(folder, command)
    lock.acquire()
    return lock


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
