"""What a fit task runs, on a worker or in the client: one fit, a batch of fits on one set
of features, or every K of a shared fine fit; and how the cluster stage batches its fits.

Grouped, the fits of a task on one set of features share their k-means++ starts
(:func:`~lsd_dask.cluster._init.shared_starts`); a ``fine_fit: shared`` variant's K's on
a split are one batch, one :class:`~lsd_dask.cluster.MultiScaleParcellation` fit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import dask
import numpy as np

from ...cluster import MeshParcellation, MultiScaleParcellation
from ...cluster._init import seeding_candidates, shared_starts
from ...distributed import task_location
from ..settings.methods import MethodSpec

__all__ = [
    "Batch",
    "FitJob",
    "fit_batch",
    "fit_every_k",
    "fit_labels",
    "fit_name",
    "fitted_line",
    "in_batches",
    "task_batches",
]


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


@dataclass
class Batch:
    """Fits made in one go, one output per job in order: each job's own estimator, one
    after another, or (``every_k``) one estimator for every K of a shared fine fit."""

    jobs: list[FitJob]
    every_k: MultiScaleParcellation | None = None

    @property
    def name(self) -> str:
        """How the log names the batch's fits."""
        if self.every_k is None:
            return ", ".join(fit_name(j) for j in self.jobs)
        j = self.jobs[0]
        return f"{j.split} {j.spec.name} K={','.join(str(x.k) for x in self.jobs)} (one fine fit)"

    def run(self, F: Any, kept: np.ndarray, tell: Any = None) -> list[dict[str, Any]]:
        """Every job's :func:`fit_labels` output (runs anywhere); ``tell(i, out)`` is
        called as each but the last ends."""
        if self.every_k is not None:
            return fit_every_k(self.every_k, F, kept, [j.k for j in self.jobs])
        outs = []
        for i, j in enumerate(self.jobs):
            outs.append(fit_labels(j.est, F, kept))
            if tell is not None and i + 1 < len(self.jobs):
                tell(i, outs[-1])
        return outs


def fit_labels(est: MeshParcellation, F: Any, kept: np.ndarray) -> dict[str, Any]:
    """Fit, then the labels on the full surface (0 on masked vertices), with the fit's
    seconds, iterations, parcels, blur steps and where it ran; runs anywhere."""
    t0 = time.perf_counter()
    where = _fitted_here(est, F)
    n_iter = getattr(est, "n_iter_", None)
    return _output(
        est.labels_, kept, where,
        seconds=time.perf_counter() - t0,
        n_iter=int(n_iter) if isinstance(n_iter, (int, np.integer)) else None,
        n_parcels=est.n_clusters_ if est.contiguous else None,
        blur_steps=est.smoothing_steps_,
    )  # fmt: skip


def fit_every_k(
    est: MultiScaleParcellation, F: Any, kept: np.ndarray, ks: list[int]
) -> list[dict[str, Any]]:
    """Fit every K of a shared fine fit; :func:`fit_labels`' output for each of ``ks``
    (a K's seconds: its merge and refinement, and the fine fit it started), with the fine
    fit's clusters and iterations at the K that started it."""
    where = _fitted_here(est, F)
    contiguous = bool(getattr(est.parcellation, "contiguous", False))
    return [
        _output(
            est.labels_[k],
            kept,
            where,
            seconds=est.seconds_[k],
            n_iter=est.n_iter_.get(k),
            n_parcels=est.n_clusters_[k] if contiguous else None,
            blur_steps=est.smoothing_steps_,
            fine=est.fine_clusters_.get(k),
            fine_n_iter=est.fine_n_iter_.get(k),
        )  # fmt: skip
        for k in ks
    ]


def _fitted_here(est: Any, F: Any) -> str:
    """Fit ``est`` on F where this runs; returns where (a worker's address, or "client").
    Inside a worker, any graph an estimator builds runs right here: sent to the cluster,
    it would wait for worker threads that the fits themselves hold."""
    where = task_location()
    with dask.config.set(scheduler="sync" if where != "client" else None):
        est.fit(F)
    return where


def _output(labels: np.ndarray, kept: np.ndarray, where: str, **fields: Any) -> dict[str, Any]:
    """A fit's output: its labels on the full surface (0 on masked vertices; numpy,
    whatever the features: the labels_ policy), where it ran, and ``fields``."""
    full = np.zeros(kept.size, np.int32)
    full[kept] = np.asarray(labels) + 1
    return {"labels": full, "where": where, **fields}


def task_batches(todo: list[FitJob], threads: int) -> list[list[FitJob]]:
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

    by_start = grouped(lambda j: (j.which, seeding_candidates(seeded_k(j))))
    share = sum(seeded_k(j) for j in todo) / max(threads, 1)
    if len(by_start) >= threads and max(sum(map(seeded_k, g)) for g in by_start) <= share:
        return by_start
    by_k = grouped(lambda j: (j.which, j.k))
    if len(by_k) < threads:
        return [[j] for j in todo]
    return by_k


def seeded_k(j: FitJob) -> int:
    """The clusters a fit seeds: K, or the oversegmented fit's ``ceil(oversegment × K)``."""
    return int(np.ceil(float(getattr(j.est, "oversegment", 1.0)) * j.k))


def fit_batch(batch: Batch, F: Any, kept: np.ndarray, topic: str) -> list[dict[str, Any]]:
    """A batch's fits on the same features (a worker's task), each k-means++ start made
    once. Each fit but the last is told on ``topic`` as it ends, for the client's log."""
    with shared_starts():
        return batch.run(F, kept, lambda i, out: tell(topic, fit_name(batch.jobs[i]), out))


def in_batches(jobs: list[FitJob], ks: list[int]) -> list[Batch]:
    """The jobs as batches, in their order: each ``fine_fit: shared`` variant's K's on a
    split as one (every K of the run at or above its smallest fitted again: each starts
    from the one above), every other job alone."""
    out: list[Batch] = []
    groups: dict[tuple[str, str], Batch] = {}
    for j in jobs:
        if not j.spec.shared:
            out.append(Batch([j]))
            continue
        group = groups.get((j.split, j.spec.name))
        if group is None:
            group = groups[(j.split, j.spec.name)] = Batch([])
            out.append(group)
        group.jobs.append(j)
    for group in groups.values():
        group.jobs.sort(key=lambda j: -j.k)
        low = group.jobs[-1].k
        chain = sorted((k for k in ks if k >= low), reverse=True)
        group.every_k = MultiScaleParcellation(group.jobs[0].est, chain)
    return out


def tell(topic: str, name: str, out: dict[str, Any]) -> None:
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


def fit_name(j: FitJob) -> str:
    """How the log names a fit: ``split1 directional K=100``."""
    return f"{j.split} {j.spec.name} K={j.k}"


def fitted_line(msg: dict[str, Any]) -> str:
    """The log line of a fit told by its task before the task's end."""
    iters = f", {msg['n_iter']} iterations" if msg.get("n_iter") is not None else ""
    return (
        f"[cluster] fitted {msg['fit']}: {msg['seconds']:.1f} s{iters} ({msg['where']}); "
        "saved with the rest of its task"
    )
