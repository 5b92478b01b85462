"""The memory rules of the pipeline's tasks against the workers' memory.

Features (rows of U·Σ, n_vertices × rank float32) are clustered in this process when they
are small, and on the workers, one task per fit or per blur scored, when they are large and
every worker holds them comfortably; otherwise as Dask graphs over row blocks
(:func:`features_on_workers`). Before any heavy work, workers too small for one ingest or
SVD task fail the run in one line (:func:`check_worker_memory`): a worker over its pause
threshold would otherwise wait for memory that never frees, and the run would hang. The
evaluation scores parcellations as tasks when every worker holds a scoring task per
thread (:func:`scoring_on_workers`), else in this process.
"""

from __future__ import annotations

import importlib
from typing import Any

import dask

from ...linalg.randomized import svd_task_bytes

__all__ = [
    "FIT_TASK_MEMORY_FACTOR",
    "IN_MEMORY_FEATURES_BYTES",
    "SCORING_NULL_BATCH_BYTES",
    "SCORING_PAIR_BYTES",
    "SCORING_PAIR_PEAK_BYTES",
    "SCORING_SPIN_BYTES",
    "INDIVIDUAL_FIT_FACTOR",
    "check_worker_memory",
    "individual_on_workers",
    "individual_task_bytes",
    "features_on_workers",
    "scoring_on_workers",
    "scoring_task_bytes",
    "task_bytes",
    "worker_peak_bytes",
    "INGEST_WRITE_BYTES_PER_VALUE",
]

#: features smaller than this are clustered in memory when no cluster is active: a round
#: trip per iteration costs more than the arithmetic (a full-size study's 64,984 x 1,000
#: float32 is 260 MB)
IN_MEMORY_FEATURES_BYTES = 64 * 2**20
#: a fit runs as one task when every worker's memory limit is at least this many times the
#: features' bytes (the features, their float64 products with K <= 400 centres, copies)
FIT_TASK_MEMORY_FACTOR = 8


def features_on_workers(client: Any, nbytes: int) -> bool:
    """Whether features of ``nbytes`` go to the workers (a task per fit, or per blur
    scored): too large to cluster in memory here (:data:`IN_MEMORY_FEATURES_BYTES`), and
    every worker's memory limit holds them :data:`FIT_TASK_MEMORY_FACTOR` times."""
    if nbytes <= IN_MEMORY_FEATURES_BYTES:
        return False
    need = FIT_TASK_MEMORY_FACTOR * nbytes
    limits = _limits_and_threads(client)
    return bool(limits) and all(m == 0 or m >= need for m, _ in limits)


#: a scoring task's (:mod:`..stages.evaluation`) memory, per vertex pair within DCBC's distance:
#: held through the task, their ids, distances, bins and held-out correlations (29 bytes);
#: at a peak, DCBC's gathers and masks (17 bytes) or the bins' float64 distances (16)
SCORING_PAIR_BYTES = 32
SCORING_PAIR_PEAK_BYTES = 20
#: the spin null's peak: its DCBC over 100 spins at a time on its sample of about 60,000
#: pairs (113 MB), or its homogeneity over batches of spun labels, which grow with the
#: spins up to 2·10⁷ cells (0.59 GB at 1,000 spins and K = 50; 0.13 GB at K = 400)
SCORING_NULL_BATCH_BYTES = 120_000_000
SCORING_SPIN_BYTES = 640_000


def scoring_on_workers(client: Any, feature_bytes: int, n_pairs: int, n_spins: int) -> bool:
    """Whether the evaluation's scorings run as tasks on the workers: every worker holds
    one scoring task per thread (:func:`scoring_task_bytes`) within its spill target
    (``distributed.worker.memory.target`` of its limit); otherwise they run in this
    process."""
    need = scoring_task_bytes(feature_bytes, n_pairs, n_spins)
    target = dask.config.get("distributed.worker.memory.target", 0.6) or 1.0
    limits = _limits_and_threads(client)
    return bool(limits) and all(m == 0 or t * need <= target * m for m, t in limits)


def scoring_task_bytes(feature_bytes: int, n_pairs: int, n_spins: int) -> int:
    """Peak bytes of one scoring task: held-out features of ``feature_bytes`` and the
    arrays of ``n_pairs`` vertex pairs, held through the task, and the largest of the
    transients on top: two more copies of the features (U·Σ and its squares; the
    silhouette's float64 rows), DCBC's per-pair arrays, or a null of ``n_spins`` spins'
    batches. At full size (59,784 × 1,000 float32 features, 24.4 million pairs, 1,000
    spins) tracemalloc measures 0.94 GB held and 1.53 GB at the peak; this gives 1.66 GB."""
    f, p, spins = int(feature_bytes), int(n_pairs), max(int(n_spins), 0)
    null = max(SCORING_NULL_BATCH_BYTES if spins else 0, SCORING_SPIN_BYTES * min(spins, 1000))
    return f + SCORING_PAIR_BYTES * p + max(2 * f, SCORING_PAIR_PEAK_BYTES * p, null)


#: an individual fit's peak beside the participant's series, in multiples of the series'
#: bytes (``PriorPottsIndividualParcellation`` on 64,984 × 1,000 float32 at K = 400: 1.48
#: GB over the 0.26 GB series, on one thread; the iterative fit needs less)
INDIVIDUAL_FIT_FACTOR = 6


def individual_on_workers(client: Any, series_bytes: int, n_pairs: int, n_spins: int) -> bool:
    """Whether the individual stage's participants run as tasks on the workers: every
    worker holds one participant's task per thread (:func:`individual_task_bytes`) within
    its spill target; otherwise they run in this process, one after the other."""
    need = individual_task_bytes(series_bytes, n_pairs, n_spins)
    target = dask.config.get("distributed.worker.memory.target", 0.6) or 1.0
    limits = _limits_and_threads(client)
    return bool(limits) and all(m == 0 or t * need <= target * m for m, t in limits)


def individual_task_bytes(series_bytes: int, n_pairs: int, n_spins: int) -> int:
    """Peak bytes of one participant's task: its series (``series_bytes``), their two
    halves' unit rows and pair correlations held through the scoring (a scoring task's
    bytes, :func:`scoring_task_bytes`, with the series as its features, and one more set
    of pair correlations), and the largest fit beside them (:data:`INDIVIDUAL_FIT_FACTOR`)."""
    pairs = 8 * int(n_pairs)  # the second half's correlations (float64)
    return (
        scoring_task_bytes(series_bytes, n_pairs, n_spins)
        + pairs
        + INDIVIDUAL_FIT_FACTOR * int(series_bytes)
    )


#: bytes an ingest task holds at its peak per value of a subject's data, measured with
#: tracemalloc on a 20,000 x 200 subject: 15.4 from GIFTI (nibabel's per-array decode and
#: the stacked copy), 8.2 from CIFTI (9.1 with a copy of the kept rows and a finiteness
#: mask, 12.3 when the standardisation went 4,096 rows at a time in float64); the
#: standardised float32 copy is in both
INGEST_BYTES_PER_VALUE = 16
#: the same with preprocessing (detrending, band-pass: the float64 copy cleaned in place and
#: nilearn's copies of one block of vertices), 24.9 from CIFTI
PREPROCESS_BYTES_PER_VALUE = 32


#: bytes per value a worker holds, beside its running tasks, for the subject its I/O slot
#: is writing (:func:`lsd_dask.distributed.io_slot`): the standardised float32 series and
#: zarr's shard as it is written, 12.0 bytes a value in all (measured with tracemalloc on
#: 20,000 × 200 and 64,984 × 1,000 subjects), rounded up. That is the store through zarr
#: (object storage, compressed stores); a local store's shards are written straight from
#: the series (:func:`lsd_dask.io.local_shards.write_rows`): 5.0 bytes a value
INGEST_WRITE_BYTES_PER_VALUE = 13


def task_bytes(n_vertices: int, timepoints: int, rank: int, preprocess: bool) -> dict[str, int]:
    """Peak bytes of one ingest task (a subject of ``timepoints``), of the subject a
    worker's I/O slot is writing meanwhile (``ingest_write``: one per worker, whatever
    its threads), and of one SVD task (a column block of that subject, at ``rank``)."""
    per_value = PREPROCESS_BYTES_PER_VALUE if preprocess else INGEST_BYTES_PER_VALUE
    values = n_vertices * timepoints
    return {
        "ingest": per_value * values,
        "ingest_write": INGEST_WRITE_BYTES_PER_VALUE * values,
        "svd": svd_task_bytes(n_vertices, timepoints, rank),
    }


def worker_peak_bytes(need: dict[str, int], threads: int) -> int:
    """A worker's peak beside what it holds at rest: one ingest task per thread and the
    subject its I/O slot writes, or one SVD task per thread (the stages run apart)."""
    return max(threads * need["ingest"] + need["ingest_write"], threads * need["svd"])


#: seconds the memory check waits for a worker to register when none has (unless the
#: client carries its cluster config's wait: ``ManagedClient.worker_wait_s``)
WORKER_WAIT_S = 60
#: the same for a LocalCluster of this process: its workers registered once as it started,
#: so none now means that their nannies keep restarting them
LOCAL_WORKER_WAIT_S = 20


def check_worker_memory(
    client: Any,
    n_vertices: int,
    timepoints: int,
    rank: int,
    preprocess: bool,
    task_module: str = "lsd_dask",
) -> None:
    """Raise :class:`MemoryError` in one line when a worker cannot run the pipeline's
    tasks: it is over its pause threshold at rest (``distributed.worker.memory.pause`` of
    its limit: it would never take a task, and the run would hang), or one task per thread
    beside what it uses would pass its terminate threshold (it would be killed mid-task,
    again and again). Workers without a limit pass. ``task_module``: the module a task
    runs, imported on each worker before its memory is read (the engine knows no stage;
    the caller names it)."""
    need = task_bytes(n_vertices, timepoints, rank, preprocess)
    pause = dask.config.get("distributed.worker.memory.pause", 0.8) or 1.0
    terminate = dask.config.get("distributed.worker.memory.terminate", 0.95) or 1.0
    workers = client.scheduler_info(n_workers=-1)["workers"]
    resident: dict[str, Any] = {}
    if not workers:
        # none registered yet, or each restarting after its nanny killed it (over its
        # limit at rest): the check needs one to look at
        local = _local_workers(client)
        # an HPC cluster's client carries its config's wait: its jobs may still be queued
        wait = getattr(client, "worker_wait_s", None)
        queued = ""
        if wait is None:
            wait = LOCAL_WORKER_WAIT_S if local else WORKER_WAIT_S
        else:
            queued = " (the cluster config's timeout; are its jobs still queued?)"
        try:
            client.wait_for_workers(1, timeout=wait)
            workers = client.scheduler_info(n_workers=-1)["workers"]
        except TimeoutError:
            if not local:
                raise RuntimeError(
                    f"no Dask worker joined the scheduler within {wait:g} s{queued}: "
                    "start workers, or check their logs (a worker whose nanny keeps "
                    "restarting it is over its memory limit)."
                ) from None
            # none stayed up: judge the local workers by their spec, each taken as full
            # (its nanny kept killing it)
            workers = local
            resident = {name: MemoryError("restarted") for name in workers}
    if not resident:
        # each worker's memory once it holds the code a task runs (a worker that dies
        # loading it counts as full): the scheduler's figure predates those imports
        resident = client.run(_resident_with_task_code, task_module, on_error="return")
    for address, w in workers.items():
        limit = int(w.get("memory_limit") or 0)
        if limit == 0:
            continue
        threads = max(int(w.get("nthreads") or 1), 1)
        used = int((w.get("metrics") or {}).get("memory") or 0)
        measured = resident.get(address, 0)
        used = max(used, limit if isinstance(measured, BaseException) else int(measured))
        peak = worker_peak_bytes(need, threads)
        if used <= pause * limit and used + peak <= terminate * limit:
            continue
        mb = 2**20
        enough = max(used / pause, (used + peak) / terminate)
        raise MemoryError(
            f"worker {address} has a memory limit of {limit / mb:.0f} MB for {threads} "
            f"thread(s) and uses {used / mb:.0f} MB already; its tasks need about "
            f"{peak / mb:.0f} MB more (a subject of about {timepoints} time points x "
            f"{n_vertices} vertices: reading it {need['ingest'] / mb:.0f} MB a thread and "
            f"writing the one before it {need['ingest_write'] / mb:.0f} MB, or an SVD task "
            f"at rank {rank} {need['svd'] / mb:.0f} MB a thread). Give each worker at least "
            f"{enough / mb:.0f} MB (memory_limit), or fewer threads per worker, or lower "
            "svd.rank."
        )


def _local_workers(client: Any) -> dict[str, dict[str, Any]]:
    """The workers of the client's LocalCluster, by name, with the memory limit and threads
    of their spec (as the scheduler reports them once they join); empty for any other
    cluster (an HPC cluster's workers may still be queued)."""
    import logging

    from distributed import LocalCluster
    from distributed.worker_memory import parse_memory_limit

    cluster = getattr(client, "cluster", None)
    spec = cluster.worker_spec if isinstance(cluster, LocalCluster) else {}
    out = {}
    for name, w in spec.items():
        options = w.get("options", {})
        threads = int(options.get("nthreads") or 1)
        limit = parse_memory_limit(
            options.get("memory_limit", "auto"), threads, logger=logging.getLogger(__name__)
        )
        out[str(name)] = {"memory_limit": limit or 0, "nthreads": threads, "metrics": {}}
    return out


def _resident_with_task_code(module: str, dask_worker: Any) -> int:
    """On a worker: its resident memory after importing ``module`` (what a task runs)."""
    importlib.import_module(module)

    return int(dask_worker.monitor.proc.memory_info().rss)


def _limits_and_threads(client: Any) -> list[tuple[int, int]]:
    """Each worker's memory limit (0: none) and threads, as the scheduler reports them."""
    info = client.scheduler_info(n_workers=-1)["workers"].values()
    return [(int(w.get("memory_limit") or 0), max(int(w.get("nthreads") or 1), 1)) for w in info]
