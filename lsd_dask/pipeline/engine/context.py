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
from ...io.lock import LockSet, WorkLock
from ...io.ownership import LOCK_NAMES, OutputRecord, check_work_folder, mark_work_folder
from ...io.storage import Folder, is_local
from ...io.surface_files import HEMISPHERES
from ...spin import find_spheres
from ...surface import Mesh, mesh_adjacency
from ..settings.config import PipelineConfig
from .log import LOG_FILE, Log
from .workdir import WorkDir, content_digest

__all__ = ["RunContext", "check_folders", "input_paths", "work_lock"]


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

    lock: LockSet | None = None
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
        lock: LockSet | None = None,
        *,
        adopt: bool = False,
    ) -> RunContext:
        """The context of a run: its work folder opened and locked (a second run into it
        fails with :class:`~lsd_dask.io.lock.FolderBusyError`), then what killed writers
        left swept (with the lock held, no live writer can own it). ``lock``: the folder's
        lock, already taken by the caller (:func:`work_lock`), who gives it back;
        otherwise :meth:`close` does."""
        wd = WorkDir(cfg.work_url, log, cfg.storage_options)
        owns = lock is None
        if lock is None:
            lock = work_lock(cfg, command, adopt=adopt)
        try:
            for note in lock.notes:
                log(note)
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
    def spheres(self) -> dict[str, Any]:
        """The spheres spin nulls rotate (:func:`~lsd_dask.spin.find_spheres`: ``spheres``,
        None when there are none, and ``source``), found once per run."""
        return find_spheres(self.meshes, self.cfg.sphere)

    @property
    def sphere_digest(self) -> str | None:
        """The spheres by their content, for the keys of what spins them: a sphere file
        rewritten in place (renumbered, still a sphere) changes it."""
        found = self.spheres["spheres"]
        if found is None:
            return None
        return content_digest(np.vstack([found[h] for h in HEMISPHERES]).astype(np.float64))

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


def work_lock(cfg: PipelineConfig, command: str | None = None, *, adopt: bool = False) -> LockSet:
    """Take the locks of the run's output and work folders, or raise
    :class:`~lsd_dask.io.lock.FolderBusyError` naming the run that holds one. The CLI takes
    them before reading any input, so that a second run fails within seconds.

    Before anything is written there, both folders must be lsd-dask's
    (:mod:`lsd_dask.io.ownership`): new, empty, or holding only what earlier runs
    recorded; otherwise :class:`~lsd_dask.io.ownership.FolderNotOwnedError` lists a few
    of the user's files, unless ``adopt`` (the run then writes beside them, and removes
    none). A link inside either folder is refused whatever ``adopt`` says. The log file
    is then claimed in the output folder's record.
    """
    out = Folder(str(cfg.output))
    work = Folder(cfg.work_url, cfg.storage_options)
    locks = LockSet(
        WorkLock(out, command, name=LOCK_NAMES[0], what="output folder"), WorkLock(work, command)
    )
    # nothing is made, in either folder, until both are known to be the run's
    check_folders(cfg)
    locks.check_free()  # a busy folder says so, not that its new files are not ours
    check_work_folder(work, adopt=adopt)
    record = OutputRecord.read(cfg.output)
    if cfg.output.is_dir():
        adopted = record.refuse_foreign([Path(work.url)] if work.local else [], adopt=adopt)
        if adopted:
            shown = ", ".join(p.relative_to(cfg.output).as_posix() for p in adopted[:5])
            locks.notes.append(
                f"[run] output folder adopted: {len(adopted)} file(s) no lsd-dask run wrote "
                f"({shown}{', ...' if len(adopted) > 5 else ''}), kept as they are"
            )
    try:  # its parent's permission said yes; the file system may still say no
        cfg.output.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise PermissionError(f"output folder {cfg.output} is not writable: {err}") from err
    mark_work_folder(work)
    locks.acquire()
    try:
        record.claim(LOG_FILE)
    except BaseException:
        locks.release()
        raise
    return locks


def check_folders(cfg: PipelineConfig) -> None:
    """Neither folder holds an input, and both take a write, checked without making
    either: a probe file in an existing output folder (removed), the permission of the
    folder it would be made in otherwise; an object-storage work folder a probe object."""
    _check_not_inputs(cfg)
    _check_output_writable(cfg.output)
    _check_work_folder(cfg)


def input_paths(cfg: PipelineConfig) -> list[Path]:
    """Every file the run reads, resolved: the subjects', the meshes, spheres and display
    meshes, the comparison atlases' files and the confounds files; a run never removes
    or replaces one, wherever it lives."""
    inputs = _data_and_meshes(cfg)
    inputs += [Path(p) for a in cfg.compare_atlases for p in (a.files or {}).values()]
    if cfg.preprocess.confounds is not None:
        inputs += [cfg.preprocess.confound_path(s.subject) for s in cfg.subjects]
    return [p.resolve() for p in inputs]


def _data_and_meshes(cfg: PipelineConfig) -> list[Path]:
    """The subjects' files and the meshes, spheres and display meshes."""
    paths = [Path(p) for s in cfg.subjects for p in s.paths]
    for pair in (cfg.mesh, cfg.sphere, cfg.display_mesh):
        paths += [Path(p) for p in (pair or {}).values()]
    return paths


def _check_output_writable(out: Path) -> None:
    """The output folder, or the folder it would be made in, takes a write: a probe file
    in an existing one (removed), the permission of the nearest existing parent else."""
    if out.is_dir():
        probe = out / f".write-test-{os.getpid()}"
        try:
            probe.write_text("ok")
            probe.unlink()
        except OSError as err:
            raise PermissionError(f"output folder {out} is not writable: {err}") from err
        return
    parent = next((p for p in out.parents if p.exists()), None)
    if out.exists() or parent is None or not parent.is_dir() or not os.access(parent, os.W_OK):
        raise PermissionError(
            f"output folder {out} is not writable: it cannot be made in {parent}."
        )


def _check_not_inputs(cfg: PipelineConfig) -> None:
    """Neither folder may hold the data or the meshes (an atlas or a confounds file in the
    output folder is the user's, found by the ownership check)."""
    inputs = [p.resolve() for p in _data_and_meshes(cfg)]
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
