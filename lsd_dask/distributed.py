"""Connecting to, or starting, the Dask cluster a run uses.

``connect`` takes a scheduler address, a cluster-config YAML from ``cluster_configs/``, or
nothing (a LocalCluster), and returns a ``distributed.Client`` usable as a context manager;
a cluster started here is closed with the client. The dashboard link is printed.

Config files have a ``type`` (local, remote, slurm, pbs, slurm-runner) and a section of
that name whose keys are the cluster class's own: LocalCluster's arguments for ``local``;
an ``address``, ``timeout`` and optional TLS ``security`` for ``remote``; dask-jobqueue's
configuration names (``cores``, ``memory``, ``job-extra-directives``, ...; hyphens or
underscores) for ``slurm`` and ``pbs``, plus ``n_workers``: the Dask workers to start, as
dask-jobqueue counts them (``n_workers / processes`` jobs), and ``timeout``: the seconds the
run waits for the first worker job to start (the jobs may queue; default
:data:`JOB_START_TIMEOUT_S`).

``slurm-runner`` is dask-jobqueue's ``SLURMRunner``, for sites whose compute nodes cannot
submit jobs: one ``sbatch`` job runs the same command in every task (``srun lsd-dask run
...``); task 0 becomes the scheduler, task 1 runs the pipeline, the others are workers
(:func:`serve_slurm_task`), and they meet through a scheduler file on the shared file
system. Its settings: ``scheduler-file``, ``interface``, ``nthreads``, ``memory-limit``,
``local-directory``, ``dashboard-address`` and ``timeout``.

Every cluster a run connects to gets :class:`WorkerAllocator` on its workers: glibc's
trim and mmap thresholds raised to :data:`WORKER_MALLOC_BYTES`, so that the reads' and the
products' buffers are reused rather than mapped afresh each time.
"""

from __future__ import annotations

import difflib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from distributed import Client, LocalCluster, WorkerPlugin

from ._validation import Array
from .linalg.placement import Placement, SchedulerChoice

__all__ = [
    "active_client",
    "worker_threads",
    "one_blas_thread_beside_workers",
    "task_location",
    "io_slot",
    "finished",
    "show_progress",
    "scattered_rows",
    "ClientPlacement",
    "placement",
    "connect",
    "serve_slurm_task",
    "slurm_task_role",
    "load_cluster_config",
    "check_cluster_config",
    "ManagedClient",
    "SCHEDULER_ENV",
    "CLUSTER_SETTINGS",
    "PAUSED_LIMIT_S",
    "PausedWorkers",
    "JOB_START_TIMEOUT_S",
    "WorkerAllocator",
    "WORKER_MALLOC_BYTES",
    "set_allocator_thresholds",
]

#: environment variable read when no address or config is given
SCHEDULER_ENV = "LSD_DASK_SCHEDULER"

_JOBQUEUE = {
    "n_workers", "name", "job_name", "cores", "memory", "processes", "python", "interface",
    "death_timeout", "local_directory", "shared_temp_directory", "worker_extra_args",
    "shebang", "queue", "account", "walltime", "job_script_prologue",
    "job_extra_directives", "job_directives_skip", "log_directory", "scheduler_options",
}  # fmt: skip
#: the settings each cluster type accepts (hyphens and underscores alike); the
#: cluster_configs/*.yaml files document every one
CLUSTER_SETTINGS: dict[str, frozenset[str]] = {
    "local": frozenset(
        {
            "n_workers",
            "threads_per_worker",
            "processes",
            "memory_limit",
            "host",
            "dashboard_address",
            "local_directory",
            "timeout",
        }  # fmt: skip
    ),
    "remote": frozenset({"address", "timeout", "security"}),
    "slurm": frozenset(_JOBQUEUE | {"job_cpu", "job_mem", "timeout"}),
    "pbs": frozenset(_JOBQUEUE | {"resource_spec", "timeout"}),
    "slurm-runner": frozenset(
        {
            "scheduler_file",
            "interface",
            "nthreads",
            "memory_limit",
            "local_directory",
            "dashboard_address",
            "timeout",
        }  # fmt: skip
    ),
}
#: seconds a ``slurm`` or ``pbs`` run waits for its first worker job when its config sets
#: no ``timeout``: the jobs may wait in the queue
JOB_START_TIMEOUT_S = 600.0
#: SLURM's variables that place a task of a ``slurm-runner`` job
SLURM_TASK_ENV = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID")


class ManagedClient(Client):
    """A Client that also closes the cluster it was started with."""

    _owned_cluster: Any = None
    #: seconds to wait for a first worker when none has joined; None: the caller's default
    worker_wait_s: float | None = None

    def close(self, *args: Any, **kwargs: Any) -> Any:
        out = super().close(*args, **kwargs)
        cluster, self._owned_cluster = self._owned_cluster, None
        if cluster is not None:
            _close_cluster(cluster)
        return out


def show_progress(futures: list[Any]) -> bool:
    """In a Jupyter kernel, display ``distributed.progress`` for these futures (a widget
    that fills as they finish; the call does not wait). Elsewhere nothing: the stages'
    console lines say the same, one per step. Returns whether a widget was shown.

    Needs ``ipywidgets`` (``pip install lsd-dask[notebook]``).
    """
    from distributed.utils import is_kernel

    if not futures or not is_kernel():
        return False
    try:
        import ipywidgets  # noqa: F401 - distributed's widget needs it
    except ImportError:
        return False
    from distributed import progress
    from IPython.display import display

    # progress() returns the widget; a notebook shows it only when it is displayed
    display(progress(futures, notebook=True, multi=False))
    return True


def finished(client: Any, futures: dict[Any, Any]) -> Iterator[tuple[Any, Any]]:
    """``(tag, result)`` for each of ``futures`` (future -> tag) as it finishes, with
    :func:`show_progress` in a notebook; on an error, or when the caller stops early, the
    futures not yet finished are cancelled (none is left running for a run that is over).
    """
    from distributed import as_completed

    show_progress(list(futures))
    try:
        for fut in as_completed(futures):
            yield futures[fut], fut.result()
    except BaseException:
        client.cancel(list(futures))
        raise


def task_location() -> str:
    """The address of the worker running the current task, or ``"client"`` outside one."""
    from distributed import get_worker

    try:
        return str(get_worker().address)
    except ValueError:
        return "client"


@contextmanager
def io_slot() -> Iterator[None]:
    """Run the block's I/O outside the worker's thread pool, one such block per process.

    On a worker, the task first takes the process's one I/O slot (waiting, with its
    thread held, while another task's block runs), then secedes: the worker starts its
    next task while this one waits on the disk. A subject's store write spends most of
    its time asleep in the kernel's write-back throttling once the page cache holds its
    limit of dirty pages, and a 1-thread worker left its core idle for all of it. One slot
    per process bounds what is held: the subject being written and the one being read.
    Outside a worker the block just runs.
    """
    from distributed import get_worker, secede

    try:
        get_worker()
    except ValueError:
        yield
        return
    with _IO_SLOT:
        secede()
        yield


#: the process's one slot for :func:`io_slot`
_IO_SLOT = threading.Lock()


#: how long every worker may stay paused (over its memory's pause threshold) before the
#: run ends: a worker paused with its memory held by running tasks never resumes
PAUSED_LIMIT_S = 60.0


class PausedWorkers:
    """Ends the work in this ``with`` block when every worker of ``client`` has been paused
    for ``limit_s``: the block gets :class:`MemoryError` with one line naming a
    worker's memory and limit (it would otherwise wait for ever). A worker the nanny keeps
    restarting ends the run already: its tasks fail with ``KilledWorker`` after
    ``distributed.scheduler.allowed-failures`` restarts.

    The check polls the scheduler from a thread of its own every ``poll_s``; without a
    client it does nothing.
    """

    def __init__(
        self, client: Client | None, limit_s: float = PAUSED_LIMIT_S, poll_s: float = 2.0
    ) -> None:
        self.client, self.limit_s, self.poll_s = client, limit_s, poll_s
        self.reason: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PausedWorkers:
        if self.client is not None:
            self._thread = threading.Thread(target=self._watch, daemon=True, name="paused")
            self._thread.start()
        return self

    def __exit__(self, kind: Any, err: Any, tb: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.reason is not None:  # whatever the waiting call raised, this is why
            raise MemoryError(self.reason) from None

    def _end(self) -> None:
        """Stop what the block waits for: the client's futures are cancelled, so that
        whichever thread waits on them gets the error (no signal: a notebook's kernel or
        a test runner may handle those itself)."""
        from distributed import Future

        client = self.client
        assert client is not None
        futures = [Future(key, client) for key in list(client.futures)]
        if futures:
            client.cancel(futures, force=True, msg=self.reason)

    def _watch(self) -> None:
        since: float | None = None
        while not self._stop.wait(self.poll_s):
            try:
                workers = self.client.scheduler_info(n_workers=-1)["workers"]  # type: ignore[union-attr]
            except Exception:  # the scheduler gone: the main thread's own error says so
                return
            if not workers or any(w.get("status") != "paused" for w in workers.values()):
                since = None
                continue
            since = since or time.monotonic()
            if time.monotonic() - since >= self.limit_s:
                address, w = next(iter(workers.items()))
                used = int((w.get("metrics") or {}).get("memory") or 0) / 2**20
                limit = int(w.get("memory_limit") or 0) / 2**20
                self.reason = (
                    f"every worker has been paused for {self.limit_s:.0f} s, over its memory's "
                    f"pause threshold (worker {address}: {used:.0f} MB of its {limit:.0f} MB "
                    "limit); the tasks need more memory than the workers have. Give each "
                    "worker more memory (memory_limit), or fewer threads per worker, or lower "
                    "svd.rank."
                )
                self._end()
                return


def active_client() -> Client | None:
    """The distributed client this process is working with, or None (dask's threads).

    None inside a task on a worker too: a fit running as one task (the pipeline's cluster
    stage) must not fan its own work out to the cluster, whose threads the fits hold.
    """
    if task_location() != "client":
        return None
    try:
        from distributed import get_client

        return get_client()
    except ValueError:  # no client in this process
        return None


def worker_threads(client: Client | None = None) -> list[str]:
    """The worker addresses of ``client`` (default: :func:`active_client`), one entry per
    worker thread: each worker's threads together, the workers in address order. Empty
    without a client, or while it has no workers."""
    client = active_client() if client is None else client
    if client is None:
        return []
    return [w for w, t in sorted(client.nthreads().items()) for _ in range(max(1, int(t)))]


@contextmanager
def one_blas_thread_beside_workers(client: Client | None) -> Iterator[None]:
    """This process's BLAS and OpenMP pools on one thread while ``client``'s workers run
    on this machine too (a LocalCluster, or a ``slurm-runner`` task beside workers); as
    they were otherwise, and again after the block.

    The workers own the cores: Dask starts each with one BLAS thread per task thread. The
    client's own linear algebra (the SVD's l × l steps between passes, while the other
    split's tasks run) is small, but OpenBLAS's threads on busy cores make it very slow:
    on 2 cores with both busy, a 1,010 × 1,010 SVD took 10.3 s on 2 threads against
    0.9 s on one, and a 2,020 × 1,010 QR up to 15.6 s against 0.4–0.5 s (0.5 and 0.2 s
    on idle cores either way).
    """
    if client is None or not _workers_share_this_host(client):
        yield
        return
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


def scattered_rows(X: Array, chunk: int | Sequence[int], client: Client | None = None) -> Any:
    """A dask array of X's row blocks of ``chunk`` rows (or of the row counts ``chunk``
    lists, which sum to X's rows), the blocks scattered to the workers.

    With an active client, each block is sent to a worker once (``Client.scatter``) and the
    array's graph holds only the futures: ``dask.array.from_array`` on a large numpy (or
    memory-mapped) array puts the data in the graph instead, which every computation
    would ship to the scheduler again ("Sending large graph"). Without a client it is
    ``from_array``. ``client``: the client to scatter through (default: :func:`active_client`).
    """
    import dask.array as da
    import numpy as np

    client = active_client() if client is None else client
    n = X.shape[0]
    rows = (
        tuple(min(chunk, n - a) for a in range(0, n, chunk))
        if isinstance(chunk, int)
        else tuple(chunk)
    )
    if client is None:
        return da.from_array(X, chunks=(rows, X.shape[1]))
    cuts = np.cumsum([0, *rows])
    blocks = [np.ascontiguousarray(X[a:b]) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    futures = client.scatter(blocks, hash=False)
    parts = [
        da.from_delayed(f, b.shape, dtype=b.dtype) for f, b in zip(futures, blocks, strict=True)
    ]
    return da.concatenate(parts, axis=0)


class ClientPlacement:
    """The randomized SVD's placement on a distributed client
    (:class:`lsd_dask.linalg.placement.Placement`): group task i pinned to the i-th of
    ``slots`` (the worker threads it may use; default every thread of every worker),
    small arrays scattered to every worker, large ones in scattered row blocks, and
    persisted results waited for.

    Pinning matters: left to itself, the scheduler placed both of a pass's group tasks
    on the worker that held the most of their inputs, and the other sat idle until one
    was stolen (0.9 s of a 3 s pass, with two splits' SVDs at once).
    """

    def __init__(self, client: Client, slots: Sequence[str] | None = None) -> None:
        self.client = client
        # one look at the cluster: the groups and their threads stay fixed for the SVD
        self._slots = list(slots) if slots else (worker_threads(client) or None)
        self._threads = int(sum(client.nthreads().values()))

    def threads(self) -> int:
        # every thread of the cluster, not the share in ``slots``: the groups a pass is
        # cut into, and so its sums' order, do not depend on which share runs it
        return max(1, self._threads)

    def slots(self) -> list[str] | None:
        return self._slots

    def pinned(self, slot: str) -> Any:
        from dask.base import annotate

        return annotate(workers=[slot], allow_other_workers=True)

    def broadcast(self, x: Any) -> Any:
        return self.client.scatter(x, broadcast=True, hash=False)

    def row_blocks(self, a: Any, rows: tuple[int, ...]) -> Any:
        return scattered_rows(a, rows, self.client)

    def wait(self, x: Any) -> None:
        from distributed import futures_of, wait

        futures = futures_of(x)
        if futures:
            wait(futures)


def placement(workers: Sequence[str] | None = None) -> Placement:
    """Where the randomized SVD's tasks run: on the active client's worker threads
    (``workers``: one address per thread, a share of them), else the scheduler's choice
    (:class:`~lsd_dask.linalg.placement.SchedulerChoice`)."""
    client = active_client()
    if client is None:
        return SchedulerChoice()
    return ClientPlacement(client, workers)


def load_cluster_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a cluster config YAML (see :func:`check_cluster_config`)."""
    from .io.settings_yaml import read_settings

    p = Path(path)
    return check_cluster_config(read_settings(p, "cluster config") or {}, str(p))


def check_cluster_config(cfg: Any, where: str = "cluster config") -> dict[str, Any]:
    """Check a cluster config: a known ``type`` and only the documented settings of it.

    The settings are those the files in ``cluster_configs/`` document. Anything else is
    refused, so a config cannot hand the workers code to run (``preload``) or settings the
    pipeline does not know about.
    """
    if not isinstance(cfg, dict):
        raise ValueError(f"{where}: a cluster config is a mapping, got {cfg!r}.")
    kind = cfg.get("type")
    if kind not in CLUSTER_SETTINGS:
        raise ValueError(
            f"{where}: 'type' must be local, remote, slurm, pbs or slurm-runner; got {kind!r}."
        )
    extra = sorted(set(cfg) - {"type", kind})
    if extra:
        raise ValueError(
            f"{where}: unknown key {extra[0]!r}; only 'type' and {kind!r} belong here."
        )
    section = cfg.get(kind) or {}
    if not isinstance(section, dict):
        raise ValueError(f"{where}: section {kind!r} must be a mapping.")
    allowed = CLUSTER_SETTINGS[kind]
    for key in section:
        if str(key).replace("-", "_") not in allowed:
            close = difflib.get_close_matches(str(key).replace("-", "_"), sorted(allowed), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"{where}: {kind}.{key} is not a documented {kind} setting{hint} (known: "
                f"{', '.join(sorted(allowed))})."
            )
    return {"type": kind, kind: dict(section)}


#: the dashboard line's default receiver
_LOG = logging.getLogger("lsd_dask.distributed").info


def connect(
    config_or_address: str | os.PathLike[str] | dict[str, Any] | None = None,
    *,
    timeout: float = 10.0,
    log: Callable[[str], None] | None = _LOG,
) -> Client:
    """Return a Client for a scheduler address, a cluster config, or a new LocalCluster.

    Parameters
    ----------
    config_or_address : str, path, dict or None
        ``"tcp://host:port"`` (or ``host:port``): an existing scheduler. A path to a YAML
        file or an already-loaded dict: a cluster config. None: the address in
        ``$LSD_DASK_SCHEDULER`` if set, else a LocalCluster.
    timeout : float
        Seconds to wait for a remote scheduler before raising ``ConnectionError``.
    log : callable or None
        Receives the dashboard line (default: the ``lsd_dask.distributed`` logger; None:
        no line).
    """
    target: Any = config_or_address
    if target is None:
        target = os.environ.get(SCHEDULER_ENV) or {"type": "local", "local": {}}
    if isinstance(target, str | os.PathLike) and str(target).endswith((".yaml", ".yml")):
        target = load_cluster_config(target)
    if isinstance(target, dict):
        client = _from_config(check_cluster_config(target), timeout)
    else:
        client = _remote(str(target), timeout, security=None)
    client.register_plugin(WorkerAllocator())
    if log is not None:
        log(f"Dask dashboard: {client.dashboard_link}")
    return client


#: glibc's trim and mmap thresholds on the workers (64 MiB): a zarr inner chunk (32 MB) or
#: a sketch block's temporaries come from the heap and go back to it
WORKER_MALLOC_BYTES = 64 * 2**20


class WorkerAllocator(WorkerPlugin):  # type: ignore[misc]
    """Raise glibc's trim and mmap thresholds on each worker (existing and joining).

    A nanny starts its workers with ``MALLOC_TRIM_THRESHOLD_=65536`` (distributed's
    ``pre-spawn-environ``), which also fixes the mmap threshold at 128 kB: every larger
    buffer is then a fresh mapping whose pages fault in again, each time. On a
    59,784 × 1,000 float32 subject that made reading its store 0.29–0.42 s against
    0.12–0.15 at these thresholds, and the sparse sketch's product 0.50–0.64 s against
    0.20–0.22 (one thread, the same code and subject). At 64 MiB freed blocks stay in the heap
    for the next ones, and larger ones are still returned at once.
    """

    name = "lsd-dask-allocator"
    idempotent = True

    def __init__(self, nbytes: int = WORKER_MALLOC_BYTES) -> None:
        self.nbytes = nbytes

    def setup(self, worker: Any) -> None:
        set_allocator_thresholds(self.nbytes)


def set_allocator_thresholds(nbytes: int) -> bool:
    """Set this process's glibc ``M_TRIM_THRESHOLD`` and ``M_MMAP_THRESHOLD`` to
    ``nbytes``; False where the C library has no ``mallopt`` (not glibc)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # malloc.h
    return bool(mallopt(m_trim_threshold, nbytes)) and bool(mallopt(m_mmap_threshold, nbytes))


def slurm_task_role(cfg: dict[str, Any] | None) -> str | None:
    """This process's part in a ``slurm-runner`` cluster: ``"scheduler"`` (SLURM task 0),
    ``"client"`` (task 1, which runs the pipeline) or ``"worker"``; None for any other
    cluster config. Needs SLURM's task variables (the command runs under ``srun``)."""
    if not cfg or cfg.get("type") != "slurm-runner":
        return None
    missing = [v for v in SLURM_TASK_ENV if not os.environ.get(v)]
    if missing:
        raise RuntimeError(
            f"a slurm-runner cluster runs as the tasks of one SLURM job, and {missing[0]} is "
            "not set: start it with `srun lsd-dask run ...` inside an sbatch script (or use "
            "type: slurm, which submits worker jobs itself)."
        )
    n_tasks = int(os.environ["SLURM_NTASKS"])
    if n_tasks < 3:
        raise RuntimeError(
            f"a slurm-runner job needs at least 3 tasks (scheduler, client, a worker); this "
            f"one has SLURM_NTASKS={n_tasks}: ask sbatch for more (--ntasks)."
        )
    return {0: "scheduler", 1: "client"}.get(int(os.environ["SLURM_PROCID"]), "worker")


def serve_slurm_task(cfg: dict[str, Any]) -> None:
    """Be the scheduler or a worker of a ``slurm-runner`` job until the client (SLURM
    task 1) ends the run; returns then. Call only where :func:`slurm_task_role` is not
    ``"client"``."""
    role = slurm_task_role(cfg)
    if role not in ("scheduler", "worker"):
        raise RuntimeError(f"serve_slurm_task is for the scheduler and workers, not {role}.")
    # the connections that close when the run ends are logged with tracebacks at INFO
    logging.getLogger("distributed.batched").setLevel(logging.WARNING)
    try:
        runner = _slurm_runner(cfg)  # serves inside its constructor
    except SystemExit:
        # the runner ends a scheduler or worker by interrupting its own process once the
        # client has closed the scheduler: the normal end of the task
        return
    runner.close()


# --------------------------------------------------------------------------- helpers


def _slurm_runner(cfg: dict[str, Any]) -> Any:
    from dask_jobqueue.slurm import SLURMRunner

    scheduler_file, scheduler, worker = _runner_options(cfg)
    return SLURMRunner(
        scheduler_file=scheduler_file, scheduler_options=scheduler, worker_options=worker
    )


def _runner_options(cfg: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """A slurm-runner section as SLURMRunner's scheduler file, scheduler and worker
    options. ``$VARIABLES`` expand as in a job script; a path naming one that is not set
    (``$TMPDIR`` on a site without it) is left to Dask's default."""
    section = _underscored(dict(cfg.get("slurm-runner") or {}))
    for key in ("scheduler_file", "local_directory"):
        if key in section:
            section[key] = os.path.expandvars(str(section[key]))
            if "$" in section[key] and key == "local_directory":
                del section[key]
    nthreads = section.get("nthreads") or int(os.environ.get("SLURM_CPUS_PER_TASK", "1"))
    worker: dict[str, Any] = {"nthreads": int(nthreads)}
    for key in ("memory_limit", "local_directory", "interface"):
        if key in section:
            worker[key] = section[key]
    # the dashboard shows task names and data shapes: loopback unless the file asks
    address = section.get("dashboard_address", "127.0.0.1:8787")
    scheduler: dict[str, Any] = {"dashboard_address": address}
    if "interface" in section:
        scheduler["interface"] = section["interface"]
    scheduler_file = str(section.get("scheduler_file", "lsd-dask-scheduler-{job_id}.json"))
    return scheduler_file, scheduler, worker


def _from_config(cfg: dict[str, Any], timeout: float) -> Client:
    kind = cfg.get("type", "local")
    section = dict(cfg.get(kind) or {})
    if kind == "remote":
        address = section.get("address") or os.environ.get(SCHEDULER_ENV)
        if not address:
            raise ValueError(f"remote config needs an 'address' (or ${SCHEDULER_ENV}).")
        return _remote(address, float(section.get("timeout", timeout)), section.get("security"))
    if kind == "local":
        # loopback unless configured otherwise: the dashboard shows the data's shapes and
        # task names to whoever can reach it
        defaults = {"host": "127.0.0.1", "dashboard_address": "127.0.0.1:8787"}
        if section.get("processes") is False:
            # threads in this process talk over inproc://, which takes no host
            defaults.pop("host")
        section = {**defaults, **section}
        # seconds the memory check waits for a worker when none is up (a worker over its
        # limit at rest keeps being restarted by its nanny); None: the check's default
        wait = section.pop("timeout", None)
        cluster = LocalCluster(**_underscored(section))
        return _owning(cluster, worker_wait_s=None if wait is None else float(wait))
    elif kind in ("slurm", "pbs"):
        try:
            import dask_jobqueue
        except ImportError as err:  # pragma: no cover - dask-jobqueue is a dependency
            raise ImportError("HPC configs need dask-jobqueue: pip install dask-jobqueue") from err
        n_workers = int(section.pop("n_workers", section.pop("n-workers", 1)))
        job_wait = float(section.pop("timeout", JOB_START_TIMEOUT_S))
        cls = dask_jobqueue.SLURMCluster if kind == "slurm" else dask_jobqueue.PBSCluster
        cluster = cls(**_underscored(section))
        cluster.scale(n=n_workers)  # workers, as dask-jobqueue's n_workers counts them
        return _owning(cluster, worker_wait_s=job_wait)
    elif kind == "slurm-runner":
        if slurm_task_role(cfg) != "client":
            raise RuntimeError(
                f"SLURM task {os.environ['SLURM_PROCID']} of a slurm-runner job is a scheduler "
                "or worker (serve_slurm_task), not the client: only task 1 connects."
            )
        cluster = _slurm_runner(cfg)
        client = _owning(cluster)
        n_workers = int(os.environ["SLURM_NTASKS"]) - 2
        wait = float(section.get("timeout", 300))
        try:
            client.wait_for_workers(n_workers, timeout=wait)
        except (OSError, TimeoutError) as err:
            have = len(client.scheduler_info(n_workers=-1).get("workers", {}))
            client.close()
            raise ConnectionError(
                f"slurm-runner: {have} of the job's {n_workers} workers joined the scheduler "
                f"within {wait:g} s (timeout); check the worker tasks' logs."
            ) from err
        return client
    else:
        raise ValueError(f"unknown cluster type {kind!r}.")
    return _owning(cluster)


#: seconds a cluster started here gets to close before its worker processes are killed
CLUSTER_CLOSE_S = 20.0


def _close_cluster(cluster: Any, timeout: float = CLUSTER_CLOSE_S) -> None:
    """Close a cluster started here, in bounded time.

    A LocalCluster's nannies first stop their memory monitors: a nanny that is restarting a
    worker killed for its memory when the close arrives can wait forever for that worker
    to start (distributed 2026.7), and a worker over its limit at rest is restarted about
    once a second. Whatever still runs after ``timeout`` seconds is killed. Anything else
    that is not a distributed ``Cluster`` (a ``SLURMRunner``) closes as it does.
    """
    from distributed.deploy import Cluster

    if not isinstance(cluster, Cluster):
        cluster.close()
        return
    nannies = [w for w in getattr(cluster, "workers", {}).values() if hasattr(w, "process")]
    if isinstance(cluster, LocalCluster) and nannies:

        async def _stop_monitors() -> None:
            for nanny in nannies:
                monitor = getattr(nanny, "periodic_callbacks", {}).get("memory_monitor")
                if monitor is not None:
                    monitor.stop()

        try:
            cluster.sync(_stop_monitors)
        except Exception:  # noqa: BLE001 - a closing loop: the close below still runs
            pass
    try:
        cluster.close(timeout=timeout)
    except TimeoutError:
        pids = [_worker_pid(nanny) for nanny in nannies]
        logging.getLogger(__name__).warning(
            "the cluster did not close within %g s; killing its %d worker process(es)",
            timeout, sum(p is not None for p in pids),
        )  # fmt: skip
        _kill_pids([p for p in pids if p is not None])
        # distributed's exit hook would wait on the same close again
        cluster.shutdown_on_close = False


def _worker_pid(nanny: Any) -> int | None:
    """The pid of a nanny's worker process, if it has one."""
    process = getattr(getattr(nanny, "process", None), "process", None)
    pid = getattr(process, "pid", None)
    return int(pid) if pid is not None else None


def _kill_pids(pids: list[int]) -> None:
    """SIGKILL these processes; those gone already are skipped."""
    import psutil

    for pid in pids:
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            continue


def _owning(cluster: Any, worker_wait_s: float | None = None) -> ManagedClient:
    """A client of ``cluster`` that closes it with itself."""
    client = ManagedClient(cluster)  # type: ignore[no-untyped-call]
    client._owned_cluster = cluster
    client.worker_wait_s = worker_wait_s
    return client


def _remote(address: str, timeout: float, security: dict[str, Any] | None) -> Client:
    if "://" not in address:
        address = f"tcp://{address}"
    sec = None
    if security:
        from distributed.security import Security

        sec = Security(**_underscored(security))
        if address.startswith("tcp://"):
            address = "tls://" + address[len("tcp://") :]
    try:
        client = Client(address, timeout=timeout, security=sec)
    except (OSError, TimeoutError) as err:
        raise ConnectionError(
            f"could not reach a Dask scheduler at {address} within {timeout:g} s ({err}); "
            "check the address and that the scheduler is running."
        ) from err
    try:
        # a scheduler without workers would take the run's tasks and never run them
        client.wait_for_workers(1, timeout=timeout)
    except (OSError, TimeoutError) as err:
        client.close()
        raise ConnectionError(
            f"the Dask scheduler at {address} has no workers after {timeout:g} s; start "
            f"some (dask worker {address}) or point at a scheduler that has them."
        ) from err
    return client


def _underscored(d: dict[str, Any]) -> dict[str, Any]:
    return {k.replace("-", "_"): v for k, v in d.items() if v is not None}


def _workers_share_this_host(client: Client) -> bool:
    """Whether any of ``client``'s workers listens on an address of this machine."""
    try:
        workers = client.scheduler_info().get("workers", {})
    except Exception:  # a client that cannot say (closing): leave the threads alone
        return False
    if any(str(address).startswith("inproc://") for address in workers):
        return True  # threads of this very process (a LocalCluster with processes: false)
    hosts = {str(w.get("host") or "") for w in workers.values()}
    return bool(hosts & _this_hosts())


def _this_hosts() -> set[str]:
    """The names and addresses this machine answers to (loopback included)."""
    names = {"localhost", "127.0.0.1", "::1", socket.gethostname(), socket.getfqdn()}
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None)
    except OSError:  # a host name that does not resolve: the names above only
        infos = []
    return names | {str(info[4][0]) for info in infos}
