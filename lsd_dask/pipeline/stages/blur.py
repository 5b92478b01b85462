"""The blur stage: ``feature_smoothing_mm: auto`` lets each split's data choose its blur.

Once per split, after the SVD and before the cluster stage: the first and the second half
of every subject's time points each get a randomized SVD of their own at the run's rank
(capped at the half's width), started from the split's U with one power iteration
(``svd.blur_halves_start: split``, one read of each half) or from their own sketch with
the run's power iterations (``sketch``), and :func:`lsd_dask.selection.choose_feature_blur`
picks the blur from :data:`lsd_dask.selection.GRID_MM` by held-out parcel homogeneity at the
run's smallest K, from the least blur up until the held-out error has risen past its best.
The choice and its table go into ``<work>/blur/<split>.json`` (stamped,
so a run that changes nothing it depends on reuses it) and into ``report.json``. On a
distributed cluster, features too large to cluster in memory here
(:mod:`lsd_dask.pipeline.engine.placement`) stay on the workers and each
blur is scored there as two tasks, one a direction, as many blurs at a time as the workers
take.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import dask.array as da
import numpy as np
import scipy.sparse as sp

from ..._version import __version__
from ...distributed import active_client
from ...io.zarr_store import open_split
from ...selection import EARLY_STOP, GRID_MM, choose_feature_blur
from ..engine.context import RunContext
from ..engine.contract import StageBase, Unit
from ..engine.log import prefixed
from ..engine.placement import features_on_workers
from ..engine.workdir import mesh_digest
from .svd import half_rank, half_svd, svd_features

__all__ = ["BlurStage"]


class BlurStage(StageBase):
    """``blur/<split>``: the blur each split chooses, when a method asks for
    ``feature_smoothing_mm: auto`` (no unit otherwise).

    A unit's result is :meth:`lsd_dask.selection.BlurChoice.to_dict`: ``fwhm_mm``, the
    grid, each blur's mean held-out error and standard error.
    """

    name = "blur"
    reads = ("ingest", "svd")

    def plan(self, ctx: RunContext) -> list[Unit]:
        if not any(m.auto_blur for m in ctx.cfg.methods):
            return []
        V, A = ctx.kept_mesh()
        cfg, wd = ctx.cfg, ctx.wd
        return [
            Unit(
                f"blur/{split}",
                {
                    "ingest": ctx.fingerprint(f"ingest/{split}"),
                    "svd": asdict(cfg.svd),
                    # the halves start from the split's U
                    "split_svd": (
                        ctx.fingerprint(f"svd/{split}")
                        if cfg.svd.blur_halves_start == "split"
                        else None
                    ),
                    "random_state": cfg.random_state,
                    "k": min(cfg.ks),
                    "grid_mm": list(GRID_MM),
                    "early_stop": EARLY_STOP,
                    "mesh": mesh_digest(V, A),
                    "lsd_dask": __version__,
                },
                [wd.blur(split)],
                label=split,
                item=split,
            )
            for split in ctx.splits
        ]

    def load(self, ctx: RunContext, unit: Unit) -> dict[str, Any]:
        choice: dict[str, Any] = json.loads(ctx.wd.read_text(unit.outputs[0]))
        ctx.log(f"[blur] {unit.item}: {choice['fwhm_mm']:g} mm, chosen earlier")
        return choice

    def compute(self, ctx: RunContext, todo: list[Unit]) -> Iterator[tuple[Unit, Any]]:
        V, A = ctx.kept_mesh()
        for unit in todo:
            yield unit, _choose(ctx, unit.item, V, A)


def chosen_blurs(ctx: RunContext) -> dict[str, float]:
    """Split -> the blur (FWHM, mm) its data chose; empty when no method asked."""
    return {
        name.split("/", 1)[1]: float(c["fwhm_mm"])
        for name, c in ctx.results.get(BlurStage.name, {}).items()
    }


def _choose(ctx: RunContext, split: str, V: np.ndarray, A: sp.csr_matrix) -> dict[str, Any]:
    cfg, wd, log = ctx.cfg, ctx.wd, ctx.log
    k = min(cfg.ks)
    st = open_split(wd.store(split), storage_options=wd.folder.storage_options)
    client = active_client()
    start = wd.load_npy(wd.u(split)) if cfg.svd.blur_halves_start == "split" else None
    features: list[Any] = []
    remote = False
    for i, half in enumerate(st.column_blocks.halves(), 1):
        n, m = half.shape
        rank = half_rank(cfg.svd, n, m, start)
        # large features stay on the workers, where the blurs are scored as tasks, as the
        # cluster stage's fits are: the client holds none of them
        remote = client is not None and features_on_workers(client, n * rank * 4)
        log(f"[blur] {split} half {i} of 2: rank {rank} of {n} x {m}")
        U, s = half_svd(
            half, cfg.svd, cfg.random_state, start,
            progress=prefixed(log, f"[blur] {split} half {i}"),
        )  # fmt: skip
        F = svd_features(U, s)
        if remote and client is not None and isinstance(F, da.Array):
            features.append(client.compute(F))
        else:
            features.append(np.asarray(F.compute() if isinstance(F, da.Array) else F))
    if remote and client is not None:
        workers = len(client.nthreads())
        log(f"[blur] {split}: each blur and direction scored as a task on {workers} workers")
    choice = choose_feature_blur(
        features[0], features[1], V, A, k,
        random_state=cfg.random_state,
        progress=lambda line: log(f"[blur] {split} K={k} {line}"),
        client=client if remote else None,
    )  # fmt: skip
    out = choice.to_dict()
    wd.write_text(wd.blur(split), json.dumps(out, indent=1))
    log(f"[blur] {split}: feature_smoothing_mm auto chose {choice.fwhm_mm:g} mm")
    return out
