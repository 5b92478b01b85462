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
  fits at every K whose starts share their centres do (:func:`_batches`).
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
from dataclasses import dataclass
from typing import Any

import dask
import numpy as np
import scipy.sparse as sp

from ..._version import __version__
from ...cluster import MeshParcellation
from ...cluster._init import seeding_candidates, shared_starts
from ...distributed import active_client, finished, task_location
from ..engine import placement
from ..engine.context import RunContext
from ..engine.contract import StageBase, Unit
from ..engine.log import Log, bar
from ..engine.workdir import WorkDir, content_digest
from ..settings.methods import MethodSpec
from .blur import chosen_blurs
from .svd import split_features, task_features

__all__ = [
    "ClusterStage",
    "FitJob",
    "estimator_key",
    "fit_job",
    "fit_labels",
]


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
        return [Unit(j.stage, j.key, [j.path], label=_fit_name(j), item=j) for j in jobs]

    def load(self, ctx: RunContext, unit: Unit) -> None:
        return None

    def compute(self, ctx: RunContext, todo: list[Unit]) -> Iterator[tuple[Unit, Any]]:
        kept, wd, log = ctx.kept, ctx.wd, ctx.log
        by_job = {id(u.item): u for u in todo}
        jobs: list[FitJob] = [u.item for u in todo]
        client = active_client()
        U = wd.load_npy(wd.u(jobs[0].split), mmap=True)
        if client is not None and placement.features_on_workers(client, U.nbytes):
            for j, _out in _fit_as_tasks(client, jobs, kept, wd, log):
                yield by_job[id(j)], None
            return
        features: dict[Any, Any] = {}
        starts: OrderedDict[Any, Any] = OrderedDict()  # alike starts made once (every K)
        started = time.monotonic()
        for i, j in enumerate(jobs, 1):
            log(f"[cluster] {bar(i - 1, len(jobs), started=started)} next: {_fit_name(j)}")
            if j.which not in features:
                features.clear()  # one set of features in memory at a time (jobs in order)
                features[j.which] = split_features(wd, j.split, j.spec.features)
            with shared_starts(starts):
                out = fit_labels(j.est, features[j.which], kept)
            _save(wd, j, out, log, bar(i, len(jobs), started=started))
            yield by_job[id(j)], None


@dataclass
class FitJob:
    """One fit: its estimator, and where its labels and stamp go."""

    split: str
    spec: MethodSpec
    k: int
    est: MeshParcellation
    key: dict[str, Any]
    path: str
    stage: str

    @property
    def which(self) -> tuple[str, str]:
        """The features it needs: split and kind."""
        return (self.split, self.spec.features)


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


def fit_labels(est: MeshParcellation, F: Any, kept: np.ndarray) -> dict[str, Any]:
    """Fit, then the labels on the full surface (0 on masked vertices), with the fit's
    seconds, iterations, parcels, blur steps and where it ran; runs anywhere."""
    t0 = time.perf_counter()
    where = task_location()
    # inside a worker, any graph an estimator builds runs right here: sent to the cluster,
    # it would wait for worker threads that the fits themselves hold
    with dask.config.set(scheduler="sync" if where != "client" else None):
        est.fit(F)
    full = np.zeros(kept.size, np.int32)
    full[kept] = est.labels_ + 1  # numpy, whatever the features (the labels_ policy)
    n_iter = getattr(est, "n_iter_", None)
    return {
        "labels": full,
        "seconds": time.perf_counter() - t0,
        "n_iter": int(n_iter) if isinstance(n_iter, (int, np.integer)) else None,
        "n_parcels": est.n_clusters_ if est.contiguous else None,
        "blur_steps": est.smoothing_steps_,
        "where": where,
    }


def _fit_as_tasks(
    client: Any, todo: list[FitJob], kept: np.ndarray, wd: WorkDir, log: Log
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
    batches = _batches(todo, sum(client.nthreads().values()))
    # a task of several fits tells each fit but its last as it ends (the last one's line
    # comes with the task's labels): on a topic of this stage's own
    topic = f"lsd-dask-fits-{uuid.uuid4().hex}"
    client.subscribe_topic(topic, lambda event: log(_fitted_line(event[1])))
    futures = {}
    # largest K first, over all splits: the long fits start early and the short ones fill
    # the threads at the end (longest-first scheduling; a fit's cost grows with K). In that
    # order too, as an idle worker starts the first fit it is sent before the rest arrive
    for batch in sorted(batches, key=lambda b: -b[0].k):
        j = batch[0]
        names = "-".join(b.spec.name for b in batch)
        key = f"fit_labels-{j.split}-{names}-K{j.k}-{uuid.uuid4().hex}"
        fit = client.submit(
            _fit_batch, [b.est for b in batch], loads[j.which], shared_kept,
            [_fit_name(b) for b in batch], topic, key=key, priority=j.k,
        )  # fmt: skip
        futures[fit] = batch
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


def _batches(todo: list[FitJob], threads: int) -> list[list[FitJob]]:
    """The fits grouped into tasks, each task's largest K first.

    Grouped, the fits of a task on one set of features share their k-means++ starts
    (:func:`~lsd_dask.cluster._init.shared_starts`): the methods that seed alike at one
    K, and every K whose start draws as many candidates a centre (7 for K = 149…403), whose
    starts are the first K centres of one. So a split's fits go in one task per number of
    candidates where no task then costs more than a thread's share of the stage (its
    fits' seeded K, summed, as the cost: the products and the start grow with K);
    else in one task per K where there are at least as many of those as worker threads;
    else one task per fit, so that no thread waits.
    """

    def grouped(key: Any) -> list[list[FitJob]]:
        groups: dict[Any, list[FitJob]] = {}
        for j in todo:
            groups.setdefault(key(j), []).append(j)
        return [sorted(g, key=lambda j: -j.k) for g in groups.values()]

    by_start = grouped(lambda j: (j.which, seeding_candidates(_seeded_k(j))))
    share = sum(_seeded_k(j) for j in todo) / max(threads, 1)
    if len(by_start) >= threads and max(sum(map(_seeded_k, g)) for g in by_start) <= share:
        return by_start
    by_k = grouped(lambda j: (j.which, j.k))
    if len(by_k) < threads:
        return [[j] for j in todo]
    return by_k


def _seeded_k(j: FitJob) -> int:
    """The clusters a fit seeds: K, or the oversegmented fit's ``ceil(oversegment × K)``."""
    return int(np.ceil(float(getattr(j.est, "oversegment", 1.0)) * j.k))


def _fit_batch(
    ests: list[MeshParcellation], F: Any, kept: np.ndarray, names: list[str], topic: str
) -> list[dict[str, Any]]:
    """:func:`fit_labels` of each estimator on the same features, one after another, each
    k-means++ start made once (a worker's task). Each fit but the last is told on
    ``topic`` as it ends (``names``: the fits' names), for the client's log."""
    outs = []
    with shared_starts():
        for i, est in enumerate(ests):
            outs.append(fit_labels(est, F, kept))
            if i + 1 < len(ests):
                _tell(topic, names[i], outs[-1])
    return outs


def _tell(topic: str, name: str, out: dict[str, Any]) -> None:
    """A fit's end, as an event on ``topic`` (from a worker; nothing elsewhere)."""
    from distributed import get_worker

    try:
        worker = get_worker()
    except ValueError:
        return
    worker.log_event(
        topic,
        {"fit": name, "seconds": out["seconds"], "n_iter": out["n_iter"], "where": out["where"]},
    )


def _fit_name(j: FitJob) -> str:
    """How the log names a fit: ``split1 directional K=100``."""
    return f"{j.split} {j.spec.name} K={j.k}"


def _fitted_line(msg: dict[str, Any]) -> str:
    """The log line of a fit told by its task before the task's end."""
    iters = f", {msg['n_iter']} iterations" if msg.get("n_iter") is not None else ""
    return (
        f"[cluster] fitted {msg['fit']}: {msg['seconds']:.1f} s{iters} ({msg['where']}); "
        "saved with the rest of its task"
    )


def _save(wd: WorkDir, j: FitJob, out: dict[str, Any], log: Log, progress: str) -> None:
    wd.save_npy(j.path, out["labels"])
    wd.record(j.stage, j.key, [j.path])
    iters = f", {out['n_iter']} iterations" if out["n_iter"] is not None else ""
    parcels = f", {out['n_parcels']} contiguous parcels" if out["n_parcels"] else ""
    where = f" ({out['where']})" if out["where"] != "client" else ""
    blur = ""
    if out["blur_steps"]:
        chosen = ", chosen by the data" if j.spec.auto_blur else ""
        blur = (
            f", features blurred by {j.est.feature_smoothing_mm:g} mm "
            f"({out['blur_steps']} steps{chosen})"
        )
    log(f"[cluster] {progress} {_fit_name(j)}: {out['seconds']:.1f} s{iters}{parcels}{blur}{where}")
