"""The cluster stage: every (split, method, K) fit, each skipped when its stamp is current.

Where a fit runs depends on the features' size and on the cluster:

- **a task per fit, per K, or per start** (features over :mod:`..engine.placement`'s in-memory
  size, on a cluster whose workers hold them comfortably):
  each worker loads a split's features once (from the shared work folder, copied to every
  worker), and each fit runs in a task in numpy, so independent fits run side by side,
  one per worker thread, at the cost of their arithmetic: no per-iteration round trips.
  Where there are at least as many K and splits as worker threads, a split's fits at one
  K share a task, so that the methods that seed alike make their k-means++ start once
  (:func:`~lsd_dask.cluster._init.shared_starts`); where the threads stay as busy, its
  fits at every K whose starts share their centres do (:func:`.fits.task_batches`); a
  ``fine_fit: shared`` variant's K's on a split are one task (:func:`.fits.in_batches`).
- **a Dask graph per fit** (features too large for a worker): the features are scattered
  as row blocks once and every iteration is a graph over them, one fit after another.
- **in this process**: numpy when the features are small (whatever the scheduler), else
  dask's local threads when no distributed cluster is active.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..._version import __version__
from ...cluster import MeshParcellation
from ...cluster._init import shared_starts
from ...distributed import active_client, finished
from ..engine import placement
from ..engine.context import RunContext
from ..engine.contract import StageBase, Unit
from ..engine.log import Log, bar
from ..engine.workdir import WorkDir, content_digest
from ..settings.methods import MethodSpec
from .blur import chosen_blurs
from .fits import (
    Batch,
    FitJob,
    fit_batch,
    fit_name,
    fitted_line,
    in_batches,
    task_batches,
)
from .svd import split_features, task_features

__all__ = ["ClusterStage", "estimator_key", "fit_job", "split_estimator"]


class ClusterStage(StageBase):
    """``cluster/<split>/<method>/K<k>``: every fit's labels on the full surface (0 on
    masked vertices), saved as ``work/labels/<split>_<method>_K<k>.npy``."""

    name = "cluster"
    reads = ("svd",)

    def plan(self, ctx: RunContext) -> list[Unit]:
        mesh = ctx.kept_mesh() if any(m.needs_mesh for m in ctx.cfg.methods) else None
        # by split, then by features: each split's features are loaded once per kind
        splits = list(ctx.splits)
        jobs = sorted(
            (
                fit_job(ctx, split, spec, k, mesh)
                for split in splits
                for spec in ctx.cfg.methods
                for k in ctx.cfg.ks
            ),
            key=lambda j: (splits.index(j.split), j.spec.features),
        )
        return [Unit(j.stage, j.key, [j.path], label=fit_name(j), item=j) for j in jobs]

    def load(self, ctx: RunContext, unit: Unit) -> None:
        return None

    def compute(self, ctx: RunContext, todo: list[Unit]) -> Iterator[tuple[Unit, Any]]:
        kept, wd, log = ctx.kept, ctx.wd, ctx.log
        by_job = {id(u.item): u for u in todo}
        jobs: list[FitJob] = [u.item for u in todo]
        client = active_client()
        U = wd.load_npy(wd.u(jobs[0].split), mmap=True)
        if client is not None and placement.features_on_workers(client, U.nbytes):
            for j, _out in _fit_as_tasks(client, jobs, list(ctx.cfg.ks), kept, wd, log):
                yield by_job[id(j)], None
            return
        features: dict[Any, Any] = {}
        starts: OrderedDict[Any, Any] = OrderedDict()  # alike starts made once (every K)
        started, i = time.monotonic(), 0
        for batch in in_batches(jobs, ctx.cfg.ks):
            j = batch.jobs[0]
            log(f"[cluster] {bar(i, len(jobs), started=started)} next: {batch.name}")
            if j.which not in features:
                features.clear()  # one set of features in memory at a time (jobs in order)
                features[j.which] = split_features(wd, j.split, j.spec.features)
            with shared_starts(starts):
                outs = batch.run(features[j.which], kept)
            for job, out in zip(batch.jobs, outs, strict=True):
                i += 1
                _save(wd, job, out, log, bar(i, len(jobs), started=started))
                yield by_job[id(job)], None


def split_estimator(
    ctx: RunContext,
    spec: MethodSpec,
    k: int,
    split: str,
    mesh: tuple[np.ndarray, sp.csr_matrix] | None,
) -> MeshParcellation:
    """The one place a method's unfitted estimator at K for a split is made: the run's
    seed and region floor, ``mesh`` (vertices, adjacency) where given, and the blur the
    split's data chose folded in for ``feature_smoothing_mm: auto``. The fits, the time
    halves and the outputs ask it."""
    chosen = chosen_blurs(ctx).get(split)
    if spec.auto_blur and chosen is None:
        raise ValueError(f"{split}: no blur was chosen for {spec.name}'s auto smoothing.")
    V, A = (None, None) if mesh is None else mesh
    return spec.estimator(
        k, ctx.cfg.random_state, connectivity=A, vertices=V,
        min_region_size=ctx.cfg.min_region_size, blur_mm=chosen,
    )  # fmt: skip


def fit_job(
    ctx: RunContext,
    split: str,
    spec: MethodSpec,
    k: int,
    mesh: tuple[np.ndarray, sp.csr_matrix] | None,
) -> FitJob:
    """The fit of ``spec`` at K on a split: its estimator (:func:`split_estimator`), and
    its key: the SVD it reads and the estimator's parameters."""
    est = split_estimator(ctx, spec, k, split, mesh)
    wd = ctx.wd
    key = {
        "svd": ctx.fingerprint(f"svd/{split}"),
        "method": spec.method,
        "features": spec.features,
        "auto_blur": spec.auto_blur,
        "estimator": type(est.estimator).__name__,
        "params": estimator_key(est),
        "lsd_dask": __version__,
    }
    if spec.shared:  # K's labels come down from the run's larger K's (MultiScaleParcellation)
        key["fine_fit"] = {"shared": sorted((x for x in ctx.cfg.ks if x >= k), reverse=True)}
    stage = f"cluster/{split}/{spec.name}/K{k}"
    return FitJob(split, spec, k, est, key, wd.labels(split, spec.name, k), stage)


def estimator_key(est: Any) -> dict[str, Any]:
    """An estimator's parameters as plain data (``get_params(deep=True)``): arrays by a
    digest of their content, wrapped estimators by their own parameters."""
    return {
        p: content_digest(v) if sp.issparse(v) or isinstance(v, np.ndarray) else v
        for p, v in est.get_params(deep=True).items()
        if not hasattr(v, "get_params")
    }


def _fit_as_tasks(
    client: Any, todo: list[FitJob], ks: list[int], kept: np.ndarray, wd: WorkDir, log: Log
) -> Iterator[tuple[FitJob, dict[str, Any]]]:
    """Every fit as one task; each features set loaded by a worker, then copied to all.
    Yields each fit as it finishes, its labels saved."""
    (shared_kept,) = client.scatter([kept], broadcast=True, hash=False)
    loads: dict[Any, Any] = {}
    for j in todo:
        if j.which not in loads:
            loads[j.which] = client.submit(
                task_features, wd.root, wd.folder.storage_options, j.split, j.spec.features,
                pure=False,
            )  # fmt: skip
    # on every worker: fits then go wherever a thread is free
    client.replicate(list(loads.values()))
    plain = [j for j in todo if not j.spec.shared]
    batches = [
        *(Batch(b) for b in task_batches(plain, sum(client.nthreads().values()))),
        *(b for b in in_batches(todo, ks) if b.every_k is not None),
    ]
    # a task of several fits tells each fit but its last as it ends (the last one's line
    # comes with the task's labels): on a topic of this stage's own
    topic = f"lsd-dask-fits-{uuid.uuid4().hex}"
    client.subscribe_topic(topic, lambda event: log(fitted_line(event[1])))
    futures = {}
    # largest K first, over all splits: the long fits start early and the short ones fill
    # the threads at the end (longest-first scheduling; a fit's cost grows with K). In that
    # order too, as an idle worker starts the first fit it is sent before the rest arrive
    for batch in sorted(batches, key=lambda b: -b.jobs[0].k):
        j = batch.jobs[0]
        names = "-".join(b.spec.name for b in batch.jobs)
        key = f"fit_labels-{j.split}-{names}-K{j.k}-{uuid.uuid4().hex}"
        fit = client.submit(
            fit_batch, batch, loads[j.which], shared_kept, topic, key=key, priority=j.k
        )
        futures[fit] = batch.jobs
    loads.clear()  # the fits hold the features; they are released as the fits finish
    log(f"[cluster] {len(todo)} fits as {len(futures)} tasks on {len(client.nthreads())} workers")
    i, started = 0, time.monotonic()
    try:
        for batch, outs in finished(client, futures):
            for j, out in zip(batch, outs, strict=True):
                i += 1
                _save(wd, j, out, log, bar(i, len(todo), started=started))
                yield j, out
    finally:
        client.unsubscribe_topic(topic)


def _save(wd: WorkDir, j: FitJob, out: dict[str, Any], log: Log, progress: str) -> None:
    wd.save_npy(j.path, out["labels"])
    wd.record(j.stage, j.key, [j.path])
    iters = f", {out['n_iter']} iterations" if out["n_iter"] is not None else ""
    parcels = f", {out['n_parcels']} contiguous parcels" if out["n_parcels"] else ""
    where = f" ({out['where']})" if out["where"] != "client" else ""
    if out.get("fine"):
        parcels += f", from a fine fit at {out['fine']} clusters ({out['fine_n_iter']} iterations)"
    elif j.spec.shared:
        parcels += ", from the K above"
    blur = ""
    if out["blur_steps"]:
        chosen = ", chosen by the data" if j.spec.auto_blur else ""
        blur = (
            f", features blurred by {j.est.feature_smoothing_mm:g} mm "
            f"({out['blur_steps']} steps{chosen})"
        )
    log(f"[cluster] {progress} {fit_name(j)}: {out['seconds']:.1f} s{iters}{parcels}{blur}{where}")
