"""The SVD stage: per split, the leading left singular vectors of the split's store; and
the pipeline's one SVD call and one feature builder, which the blur stage uses too.

A split's features are unit rows of U·Σ (or of U): :func:`svd_features`.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

import dask.array as da
import numpy as np
from distributed import KilledWorker

from ...distributed import active_client, placement, scattered_rows, worker_threads
from ...io.zarr_store import open_split, verify_split
from ...linalg import randomized_svd, streaming_svd
from ...linalg.randomized import svd_task_bytes
from ...similarity import unit_rows
from ..engine import placement as memory_rules
from ..engine.context import RunContext
from ..engine.contract import StageBase, Unit
from ..engine.workdir import WorkDir
from ..settings.svd import SvdSettings

__all__ = [
    "SvdStage",
    "group_svd",
    "half_rank",
    "half_svd",
    "split_features",
    "split_rank",
    "svd_features",
    "task_features",
]


class SvdStage(StageBase):
    """``svd/<split>``: U (float32) and the singular values of each split's store."""

    name = "svd"
    reads = ("ingest",)

    def plan(self, ctx: RunContext) -> list[Unit]:
        wd = ctx.wd
        return [
            Unit(
                f"svd/{split}",
                {
                    "ingest": ctx.fingerprint(f"ingest/{split}"),
                    "svd": ctx.cfg.svd.split_key(),
                    "random_state": ctx.cfg.random_state,
                },
                [wd.u(split), wd.s(split)],
                label=split,
                item=split,
            )
            for split in ctx.splits
        ]

    def load(self, ctx: RunContext, unit: Unit) -> dict[str, Any]:
        s = ctx.wd.load_npy(ctx.wd.s(unit.item))
        return {"rank": int(s.size), "method": ctx.cfg.svd.method}

    def compute(self, ctx: RunContext, todo: list[Unit]) -> Iterator[tuple[Unit, Any]]:
        """Each split's SVD, yielded as it ends.

        On a distributed cluster two splits' randomized SVDs run at once, each driven by
        its own client thread: one split's group tasks keep the workers busy while the
        other waits on the client (its QRs' small tasks, gathering U, saving it). At 33
        subjects × 250 time points a split (rank 200) those waits were about 2.8 s of a
        split's 9 s, against 0.2 s of work. Where the worker threads share out evenly,
        each running split has threads of its own (whole workers where it can,
        :func:`_thread_shares`): its group tasks, QRs and sums stay on them, and neither
        split's passes wait for the other's to end. The shares follow from the run's
        splits, not from the splits left to do: a split made again alone (its stamp
        stale, the other's not) runs on the share it had beside the other, cut into the
        same groups, so its U is bit for bit the whole run's (at half the threads). Every
        split's store is checked on the workers first, before any SVD starts. If one
        split fails, the other stops at its next pass.
        """
        # a streaming SVD runs in this process and takes no share
        split_shares = _thread_shares(worker_threads(), min(len(ctx.splits), _SPLITS_AT_ONCE))
        if len(todo) < 2 or active_client() is None or ctx.cfg.svd.method != "randomized":
            for unit in todo:
                yield unit, self._one(ctx, unit.item, workers=split_shares[0])
            return
        options = ctx.wd.folder.storage_options
        for unit in todo:
            _verify_on_workers(ctx.wd.store(unit.item), options)
        stop = threading.Event()
        shares: queue.SimpleQueue[list[str] | None] = queue.SimpleQueue()
        for share in split_shares:
            shares.put(share)

        def one(split: str) -> dict[str, Any]:
            share = shares.get()  # a running split's threads, given back when it ends
            try:
                return self._one(ctx, split, stop, verify=False, workers=share)
            finally:
                shares.put(share)

        with ThreadPoolExecutor(_SPLITS_AT_ONCE, thread_name_prefix="lsd-svd") as pool:
            running = {pool.submit(one, u.item): u for u in todo}
            try:
                for done in as_completed(running):
                    yield running[done], done.result()
            finally:
                stop.set()  # after a failure: the others stop at their next pass
                for f in running:
                    f.cancel()

    def _one(
        self,
        ctx: RunContext,
        split: str,
        stop: threading.Event | None = None,
        verify: bool = True,
        workers: list[str] | None = None,
    ) -> dict[str, Any]:
        cfg, wd, log = ctx.cfg, ctx.wd, ctx.log
        options = wd.folder.storage_options
        if verify:  # the store complete as every worker sees it
            _verify_on_workers(wd.store(split), options)
        st = open_split(wd.store(split), storage_options=options)
        blocks = st.column_blocks
        n, m = blocks.shape
        rank = split_rank(cfg.svd, n, m)
        t0 = time.perf_counter()
        why = ""
        if rank < min(cfg.svd.rank, n):
            why = f"; half the split's {m} time points, below svd.rank {cfg.svd.rank}"
        log(f"[svd] {split}: rank {rank} of {n} x {m} ({cfg.svd.method}{why})")
        settings = dataclasses.replace(cfg.svd, rank=rank)
        if cfg.svd.method == "streaming":
            cols = np.cumsum([0, *st.timepoints])
            subjects = (st.data[:, a:b] for a, b in zip(cols[:-1], cols[1:], strict=True))
            U, s, _ = streaming_svd(subjects, rank, n_keep=cfg.svd.n_keep)
        else:
            try:
                U, s = group_svd(
                    blocks,  # tasks read their own column blocks
                    settings,
                    cfg.random_state,
                    progress=lambda line: _progress(log, f"[svd] {split} {line}", stop),
                    workers=workers,
                )
                U = U.compute()
            except KilledWorker as err:
                raise MemoryError(_memory_message(split, n, max(st.timepoints), rank)) from err
        U, s = np.asarray(U), np.asarray(s)
        if not (np.isfinite(U).all() and np.isfinite(s).all()) or not np.any(s > 0):
            raise ValueError(
                f"the SVD of {split} is all-zero or non-finite: the data read from "
                f"{wd.store(split)} are not what ingest wrote (is the work folder shared with "
                "every worker?)."
            )
        wd.save_npy(wd.u(split), np.asarray(U, np.float32))
        wd.save_npy(wd.s(split), np.asarray(s, np.float64))
        return {
            "rank": rank,
            "method": cfg.svd.method,
            "seconds": time.perf_counter() - t0,
            "top_singular_values": [float(v) for v in np.asarray(s)[:10]],
        }


def svd_rank(settings: SvdSettings, n: int, m: int) -> int:
    """The rank an SVD of an n × m matrix keeps: ``svd.rank``, at most min(n, m)."""
    return int(min(settings.rank, n, m))


def split_rank(settings: SvdSettings, n: int, m: int) -> int:
    """The rank a split's SVD keeps: ``svd.rank``, at most half the split's m time points
    (and n). A rank near m keeps the noise components too, and the features approach
    whitened data (the paper keeps 1,000 of 33,000): the data set the rank of a small
    study, as the default 1,000 sets a full-scale one's."""
    return max(1, svd_rank(settings, n, m // 2))


def group_svd(
    source: Any,
    settings: SvdSettings,
    random_state: int,
    progress: Callable[[str], None] | None = None,
    workers: list[str] | None = None,
) -> tuple[Any, Any]:
    """The randomized SVD of a split (or part of one) at the run's settings: ``(U, s)``,
    U lazy as :func:`~lsd_dask.linalg.randomized_svd` returns it.

    ``source`` is anything :func:`~lsd_dask.linalg.randomized_svd` reads (a store's column
    blocks, their halves); ``workers``, the worker threads its passes run on (None: all).
    """
    n, m = source.shape
    rank = svd_rank(settings, n, m)
    width = settings.sketch_width
    U, s, _ = randomized_svd(
        source,
        rank,
        n_oversamples=_OVERSAMPLES,
        n_power_iter=settings.n_power_iter,
        fuse_passes=settings.fuse_passes,
        final_pass=settings.final_pass,
        test_matrix=settings.test_matrix,
        sketch_columns=int(np.ceil(width * (rank + _OVERSAMPLES))) if width > 0 else None,
        random_state=random_state,
        return_vt=False,  # a run keeps U and s only
        progress=progress,
        placement=placement(workers),
    )
    return U, s


def half_rank(settings: SvdSettings, n: int, m: int, start: np.ndarray | None) -> int:
    """The rank :func:`half_svd` keeps for an n × m half: the run's, capped at the half's
    width and at the columns of ``start`` (the split's U) where it is given."""
    rank = svd_rank(settings, n, m)
    return rank if start is None else min(rank, start.shape[1])


def half_svd(
    half: Any,
    settings: SvdSettings,
    random_state: int,
    start: np.ndarray | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[Any, Any]:
    """The randomized SVD of one time half of a split: from ``start`` (the split's U) with
    one power iteration and no final pass (one read of the half) where it is given, else
    :func:`group_svd`'s. The rank is the run's, capped at the half's width, and ``start``
    gives that many of its columns."""
    if start is None:
        return group_svd(half, settings, random_state, progress=progress)
    n, m = half.shape
    rank = half_rank(settings, n, m, start)
    U, s, _ = randomized_svd(
        half, rank, n_power_iter=1, final_pass=False, start=start[:, :rank],
        random_state=random_state, return_vt=False, progress=progress,
        placement=placement(),
    )  # fmt: skip
    return U, s


def svd_features(U: Any, s: Any, kind: str = "us") -> Any:
    """Unit rows of U·Σ (``kind="us"``) or of U (``"u"``), in U's float type; numpy or
    dask as U is."""
    if kind == "us":
        return unit_rows(U * np.asarray(s).astype(U.dtype))
    return unit_rows(U)


#: the randomized SVD's oversamples (its l = rank + 10), which the sketch's width counts
_OVERSAMPLES = 10


def _memory_message(split: str, n: int, block: int, rank: int) -> str:
    """What a lost SVD worker needed, against what each worker thread has."""
    need = svd_task_bytes(n, block, rank)
    client = active_client()
    have = ""
    if client is not None:
        per_thread = [
            w["memory_limit"] / max(w["nthreads"], 1)
            for w in client.scheduler_info()["workers"].values()
            if w.get("memory_limit")
        ]
        if per_thread:
            have = f"; the workers have {min(per_thread) / 2**20:.0f} MB per thread"
    return (
        f"the SVD of {split} lost its workers (KilledWorker): at svd.rank {rank} each SVD task "
        f"holds about {need / 2**20:.0f} MB ({n} vertices x 2 x (rank + 10 + {block}) "
        f"float32){have}. Give the workers more memory per thread (memory_limit, or fewer "
        "threads per worker) or lower svd.rank (--rank)."
    )


#: splits whose SVDs run at once on a distributed cluster (each holds its basis and
#: sketch on the workers: 2 × 240 MB at 59,784 vertices and rank 1,000)
_SPLITS_AT_ONCE = 2


def _thread_shares(threads: list[str], splits: int) -> list[list[str] | None]:
    """``splits`` shares of the worker threads (listed as
    :func:`~lsd_dask.distributed.worker_threads` lists them), one per split running at
    once: equal runs of the list where the threads divide evenly by the splits, so a
    share is whole workers where the workers allow it; else (or with one split) every
    split shares them all (``None``), since a split with fewer threads than another
    would finish last alone."""
    if splits < 2 or not threads or len(threads) % splits:
        return [None] * max(splits, 1)
    size = len(threads) // splits
    return [threads[i * size : (i + 1) * size] for i in range(splits)]


class _Stopped(Exception):
    """Another split's SVD failed: this one stops (the run raises the other's error)."""


def _progress(log: Callable[[str], None], line: str, stop: threading.Event | None) -> None:
    """Log a pass's line, or stop here if another split's SVD has failed."""
    if stop is not None and stop.is_set():
        raise _Stopped(line)
    log(line)


def _verify_on_workers(store: str, storage_options: dict[str, Any]) -> None:
    """The split store complete as every worker sees it (a missing chunk would read as 0)."""
    client = active_client()
    if client is None:
        verify_split(store, storage_options=storage_options)
    else:
        client.run(verify_split, store, storage_options=storage_options)


def task_features(root: str, storage_options: Any, split: str, kind: str) -> np.ndarray:
    """A split's features in this worker's memory (it reads the shared work folder)."""
    wd = WorkDir(root, lambda line: None, storage_options)
    F: np.ndarray = split_features(wd, split, kind, in_memory=True)
    return F


def split_features(wd: WorkDir, split: str, kind: str = "us", *, in_memory: bool = False) -> Any:
    """Unit rows of U·Σ (``kind="us"``) or of U (``"u"``): numpy when small or
    ``in_memory``, else a dask array persisted on the workers."""
    U = wd.load_npy(wd.u(split), mmap=True)
    if in_memory or U.nbytes <= memory_rules.IN_MEMORY_FEATURES_BYTES:
        F = np.asarray(U)
    else:
        # sent to the workers once, not embedded in every graph that reads them
        F = scattered_rows(U, max(1, min(U.shape[0], 16384)))
    F = svd_features(F, wd.load_npy(wd.s(split)), kind)
    return F.persist() if isinstance(F, da.Array) else F
