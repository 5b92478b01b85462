"""The run context: what the stages of one run share (the configuration, the work folder
and its lock, the meshes, the log, the earlier stages' results), and the checks that the
run's folders take a write before anything runs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ...datasets.templates import identify_template
from ...io.lock import WorkLock
from ...io.storage import Folder, is_local
from ...io.surface_files import HEMISPHERES
from ...surface import Mesh, mesh_adjacency
from ..settings.config import PipelineConfig
from .log import Log
from .workdir import WorkDir

__all__ = ["RunContext", "check_writable", "work_lock"]


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
    #: the stages the stage being planned reads (:meth:`reading`); None: no stage's plan
    reads: tuple[str, ...] | None = None

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

    @contextmanager
    def reading(self, stages: tuple[str, ...]) -> Iterator[None]:
        """While a stage plans: the stages whose fingerprints it may take."""
        before, self.reads = self.reads, tuple(stages)
        try:
            yield
        finally:
            self.reads = before

    def fingerprint(self, unit: str) -> str:
        """The recorded fingerprint of an earlier stage's unit (``svd/split1``), for the key
        of a unit that reads it; only a stage named in the planning stage's ``reads``."""
        stage = unit.split("/", 1)[0]
        if self.reads is None or stage not in self.reads:
            raise RuntimeError(
                f"{unit}: stage {stage} is not among the stages this stage reads ({self.reads})."
            )
        return self.wd.fingerprint_of(unit)

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
    def template(self) -> str | None:
        """The standard mesh the run's meshes are (by their triangles), or None: custom."""
        return identify_template(self.meshes)

    @cached_property
    def adjacency(self) -> sp.csr_matrix:
        """Mesh adjacency of every surface vertex (both hemispheres)."""
        return mesh_adjacency([self.meshes[h].faces for h in HEMISPHERES], self.sizes)

    @cached_property
    def atlases(self) -> dict[str, np.ndarray]:
        """The comparison atlases' parcel ids over every vertex (:mod:`..settings.atlases`)."""
        from ..settings.atlases import load_atlases

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
    check_writable(cfg)
    folder = Folder(cfg.work_url, cfg.storage_options)
    folder.makedirs()
    lock = WorkLock(folder, command)
    lock.acquire()
    return lock


def check_writable(cfg: PipelineConfig) -> None:
    """The output folder (created) and the work folder take a write, or one line says
    which does not; neither may hold an input (a run writes ``dataset_description.json``,
    ``.bidsignore`` and ``mask.npy``, which would replace the study's own)."""
    _check_not_inputs(cfg)
    out = cfg.output
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise PermissionError(f"output folder {out} is not writable: {err}") from err
    _check_work_folder(cfg)


def _check_not_inputs(cfg: PipelineConfig) -> None:
    inputs = [Path(p) for s in cfg.subjects for p in s.paths] + [Path(p) for p in cfg.mesh.values()]
    for pair in (cfg.sphere, cfg.display_mesh):
        inputs += [Path(p) for p in (pair or {}).values()]
    inputs = [p.resolve() for p in inputs]
    folders = [("output", cfg.output)]
    if is_local(cfg.work_url):
        folders.append(("work", Path(cfg.work_url.removeprefix("file://"))))
    for what, folder in folders:
        f = Path(folder).resolve()
        inside = next((p for p in inputs if p == f or f in p.parents), None)
        if inside is not None:
            raise ValueError(
                f"the {what} folder {f} holds the input {inside}; give the run a folder of "
                "its own (it would write over the study's files)."
            )


def _check_work_folder(cfg: PipelineConfig) -> None:
    """A work URL must take a write from here before anything runs (credentials, bucket)."""
    if is_local(cfg.work_url):
        return
    folder = Folder(cfg.work_url, cfg.storage_options)
    probe = folder.join(f".write-test-{os.getpid()}")
    try:
        folder.write_text(probe, "ok")
        folder.remove(probe)
    except Exception as err:  # fsspec back ends raise their own kinds (botocore, gcsfs...)
        raise PermissionError(
            f"work folder {cfg.work_url} is not writable: {type(err).__name__}: {err}"
        ) from err
