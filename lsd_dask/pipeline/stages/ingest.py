"""The mask and ingest stages: every subject read once, by a task on the workers.

A task per subject reads its files, finds its constant and non-finite vertices, cleans
and standardises every vertex (demean, unit variance, after the optional preprocessing)
and writes its own array of the split store (:func:`lsd_dask.io.build_split`). The mask
(a vertex bad in *any* subject is dropped) needs every subject, so the stores hold every
surface vertex and readers take the kept rows: nothing has to be rewritten when a late
subject masks a vertex. The client only gathers the per-subject statistics (bits per
vertex), so its memory does not grow with the number of subjects.

Two cases read the subjects with a mask already known, and store the kept rows only: a
current mask from an earlier run (a split re-ingested after a preprocessing change), and
smoothing on the mesh, which mixes neighbouring vertices and so must not see a vertex the
mask drops (a first pass then computes the mask: the one case that reads twice).

When the meshes are a standard template (known by their triangles), its medial wall is
masked too, whatever the data hold there (fMRIPrep fills it on fsaverage, or writes NaN
with ``--medial-surface-nan``): the log and the mask's record count those vertices.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from typing import Any

import numpy as np

from ...datasets.templates import medial_wall
from ...distributed import active_client, show_progress
from ...io.zarr_store import SplitWriter, build_split
from ...surface import smoothing_steps
from ..engine.context import RunContext
from ..engine.contract import StageBase, Unit
from ..engine.log import Log, bar
from ..engine.workdir import (
    WorkDir,
    fingerprint,
)
from ..settings.atlases import check_coverage
from ..settings.config import PipelineConfig
from .inputs import ingest_key, mask_key, subject_inputs
from .reading import check_flat, read_subject

__all__ = ["IngestStage", "check_kept"]

#: what the mask's record keeps of each subject
_COUNTS = ("constant", "nonfinite", "timepoints")


class IngestStage(StageBase):
    """``mask`` and ``ingest/<split>``: one pass that reads every subject once.

    The mask unit's result is its record (vertices masked per subject); an ingest unit's
    is None (its output is the split's store).
    """

    name = "ingest"

    def plan(self, ctx: RunContext) -> list[Unit]:
        cfg, wd = ctx.cfg, ctx.wd
        by_id = {s.subject: s for s in cfg.subjects}
        masked = mask_key(cfg, ctx.sizes, ctx.log, ctx.template)
        # each subject's inputs, for the stages that stamp a subject at a time
        ctx.shared["subject_inputs"] = {
            s["id"]: {**s, **subject_inputs(cfg, by_id[s["id"]])} for s in masked["subjects"]
        }
        return [
            Unit("mask", masked, [wd.mask, wd.mask_info]),
            *(
                Unit(
                    f"ingest/{split}",
                    ingest_key(cfg, fingerprint(masked), [by_id[i] for i in ids], ctx.meshes),
                    [wd.store(split)],
                    label=split,
                    item=split,
                )
                for split, ids in ctx.splits.items()
            ),
        ]

    def load(self, ctx: RunContext, unit: Unit) -> dict[str, Any] | None:
        if unit.name != "mask":
            return None
        info: dict[str, Any] = json.loads(ctx.wd.read_text(ctx.wd.mask_info))
        check_kept(ctx, ctx.kept, info)
        return info

    def compute(self, ctx: RunContext, todo: list[Unit]) -> Iterator[tuple[Unit, Any]]:
        cfg, wd, log, sizes = ctx.cfg, ctx.wd, ctx.log, ctx.sizes
        mask_unit = todo[0] if todo[0].name == "mask" else None
        need = [u for u in todo if u is not mask_unit]
        kept: np.ndarray | None = None
        info: dict[str, Any] | None = None
        name = ctx.template
        wall = None if name is None else medial_wall(name)
        if mask_unit is None:
            kept = ctx.kept
        elif cfg.preprocess.smoothing_mm > 0 or len(need) < len(ctx.splits):
            # the mask needs every subject's statistics, and must be known before a blur
            # mixes vertices: a pass of its own when not every split is ingested again
            stats = _run(
                cfg, [(s, None) for s in cfg.subjects], sizes, None, None, log, "mask", wall
            )
            kept, info = _combine(cfg, stats, sizes, wall, name)
            _save_mask(wd, kept, info)
            check_kept(ctx, kept, info)
            yield mask_unit, info
            mask_unit = None
        smoothing = _smoothing(ctx, kept) if cfg.preprocess.smoothing_mm > 0 else None
        by_id = {s.subject: s for s in cfg.subjects}
        with ExitStack() as stack:
            writers: dict[str, SplitWriter] = {}
            for u in need:
                writers[u.item] = stack.enter_context(
                    build_split(
                        wd.store(u.item),
                        n_rows=int(kept.sum()) if kept is not None else sum(sizes),
                        overwrite=True,
                        storage_options=wd.folder.storage_options,
                    )
                )
            jobs = [
                (by_id[i], (writers[split], j))
                for split in writers
                for j, i in enumerate(ctx.splits[split])
            ]
            stats = _run(cfg, jobs, sizes, kept, smoothing, log, "ingest", wall)
            stored_rows = "kept" if kept is not None else "surface"
            if kept is None:
                kept, info = _combine(cfg, stats, sizes, wall, name)
                check_flat(stats, kept)
                _save_mask(wd, kept, info)
                check_kept(ctx, kept, info)
            for split, w in writers.items():
                ids = ctx.splits[split]
                w.finish(
                    ids,
                    [int(stats[i]["timepoints"]) for i in ids],
                    vertex_mask=kept,
                    rows=stored_rows,
                )
        if mask_unit is not None:
            yield mask_unit, info
        for u in need:
            yield u, None


def check_kept(ctx: RunContext, kept: np.ndarray, info: dict[str, Any]) -> None:
    """Report the mask; every comparison atlas must label the kept vertices and every K
    fit in them."""
    wall = int(info.get("n_medial_wall", 0))
    data = int((~kept).sum()) - wall
    where = f", {wall} more on {info['medial_wall']}'s medial wall" if wall else ""
    ctx.log(
        f"[mask] {int((~kept).sum())} of {kept.size} vertices masked "
        f"({data} constant or non-finite in some subject{where})"
    )
    check_coverage(ctx.cfg.compare_atlases, ctx.atlases, kept)
    n_kept = int(kept.sum())
    for k in ctx.cfg.ks:
        if k > n_kept:
            raise ValueError(
                f"K={k} is larger than the {n_kept} unmasked vertices (of {kept.size}); "
                "lower ks (--k)."
            )


def _smoothing(ctx: RunContext, kept: np.ndarray | None) -> tuple[int, Any]:
    """(averaging steps, adjacency of the kept vertices) for ``preprocess.smoothing_mm``."""
    assert kept is not None  # the mask is computed first when subjects are blurred
    V, A = ctx.kept_mesh(kept)
    steps = smoothing_steps(V, A, ctx.cfg.preprocess.smoothing_mm)
    ctx.log(
        f"[ingest] each subject blurred along the mesh: FWHM "
        f"{ctx.cfg.preprocess.smoothing_mm:g} mm ({steps} averaging steps)"
    )
    return steps, A


def _run(
    cfg: PipelineConfig,
    jobs: Sequence[tuple[Any, tuple[SplitWriter, int] | None]],
    sizes: list[int],
    kept: np.ndarray | None,
    smoothing: tuple[int, Any] | None,
    log: Log,
    stage: str,
    wall: np.ndarray | None = None,
) -> dict[str, dict[str, Any]]:
    """Run ``read_subject`` for every (subject, target): as tasks on the workers when a
    cluster is active (one log line as each finishes), else here, one after the other."""
    out: dict[str, dict[str, Any]] = {}
    n = len(jobs)
    client = active_client()
    started = time.monotonic()

    def done(i: int, s: Any, st: dict[str, Any]) -> None:
        out[s.subject] = st
        where = f" ({st['where']})" if client is not None else ""
        log(f"[{stage}] {bar(i, n, started=started)} {s.subject}{where}")

    if client is None:
        for i, (s, target) in enumerate(jobs, 1):
            done(i, s, read_subject(s, cfg, sizes, kept, smoothing, target, wall=wall))
        return out
    from distributed import Event, KilledWorker, as_completed, wait

    # set on the first failure: tasks not yet started return at once, and running ones
    # skip their write, so nothing lands in a store being removed
    abort = Event(f"lsd-dask-ingest-abort-{uuid.uuid4().hex}", client=client)
    # the large shared arguments go to the workers once, not once per task
    shared = client.scatter([cfg, kept, smoothing, wall], broadcast=True, hash=False)
    futures = {
        client.submit(
            read_subject, s, shared[0], sizes, shared[1], shared[2], target, abort.name, shared[3],
            pure=False,
        ): s
        for s, target in jobs
    }  # fmt: skip
    show_progress(list(futures))
    fut = None
    try:
        for i, fut in enumerate(as_completed(futures), 1):
            done(i, futures[fut], fut.result())
    except BaseException as err:
        abort.set()
        wait(list(futures))
        if isinstance(err, KilledWorker) and fut is not None:
            raise MemoryError(_memory_message(cfg, futures[fut], sizes, kept)) from err
        raise
    return out


def _memory_message(cfg: PipelineConfig, s: Any, sizes: list[int], kept: Any) -> str:
    """What a lost ingest worker needed: the subject in float32 and as much again (the
    reader's buffers; the next subject, read while this one is written), and with
    preprocessing three float64 copies."""
    rows = int(kept.sum()) if kept is not None else sum(sizes)
    t = s.time_slice[1] - s.time_slice[0] if s.time_slice else None
    per = f"{rows} vertices x {t} time points" if t else f"{rows} vertices x T"
    factor = 8 + (24 if cfg.preprocess.active else 0)
    size = f"about {rows * t * factor / 2**20:.0f} MB" if t else f"{factor} bytes per value"
    return (
        f"a Dask worker died (out of memory?) while ingesting subject {s.subject}: each "
        f"ingest task holds {size} ({per}); give each worker thread more memory."
    )


def _combine(
    cfg: PipelineConfig,
    stats: dict[str, dict[str, Any]],
    sizes: list[int],
    wall: np.ndarray | None,
    name: str | None,
) -> tuple[np.ndarray, dict[str, Any]]:
    """The kept vertices (good in every subject, off the template's medial wall) and the
    mask's record."""
    n = sum(sizes)
    bad = np.zeros(n, bool)
    for st in stats.values():
        bad |= np.unpackbits(st["bad"], count=n).astype(bool)
    # the medial wall's vertices that the data left unmasked (fMRIPrep fills them)
    on_wall = np.zeros(n, bool) if wall is None else wall & ~bad
    bad |= on_wall
    if bad.all():
        raise ValueError("every vertex is constant or non-finite in some subject.")
    info = {
        "n_vertices": n,
        "n_masked": int(bad.sum()),
        "medial_wall": name,
        "n_medial_wall": int(on_wall.sum()),
        "hemisphere_sizes": sizes,
        "per_subject": {
            s.subject: {
                k: int(stats[s.subject][k]) for k in ("constant", "nonfinite", "timepoints")
            }
            for s in cfg.subjects
            if s.subject in stats
        },
    }
    return ~bad, info


def _save_mask(wd: WorkDir, kept: np.ndarray, info: dict[str, Any]) -> None:
    wd.save_npy(wd.mask, kept)
    wd.write_text(wd.mask_info, json.dumps(info))
