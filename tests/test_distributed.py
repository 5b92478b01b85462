"""The distributed paths against a real scheduler and workers: separate processes on
127.0.0.1, started with the `dask scheduler` and `dask worker` command lines."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import dask.array as da
import numpy as np
import psutil
import pytest

from lsd_dask._validation import ConvergenceWarning
from lsd_dask.cluster import DirectionalClustering, HierarchicalLSD, SphericalKMeans
from lsd_dask.datasets import brain_grid
from lsd_dask.distributed import connect, io_slot, load_cluster_config
from lsd_dask.testing.processes import ProcessCluster


@pytest.fixture(scope="module")
def proc_cluster(tmp_path_factory):
    c = ProcessCluster(tmp_path_factory.mktemp("dask"))
    yield c
    c.close()


@pytest.fixture(scope="module")
def grid():
    X, lab, _ = brain_grid(snr_db=-3, n_features=40, n_regions=12, shape=(48, 48), random_state=0)
    return X, lab


def test_connect_to_process_scheduler(proc_cluster, capsys):
    with connect(proc_cluster.address) as client:
        client.wait_for_workers(2, timeout=60)
        info = client.scheduler_info()
        assert len(info["workers"]) == 2
        pids = set(client.run(os.getpid).values())
        assert os.getpid() not in pids and len(pids) == 2  # really separate processes
    assert "dashboard" in capsys.readouterr().out.lower()


@pytest.mark.parametrize("cls", [DirectionalClustering, SphericalKMeans])
def test_iterative_clusterers_match_local(proc_cluster, grid, cls):
    X, _ = grid
    local = cls(12, random_state=1).fit(X).labels_
    with connect(proc_cluster.address, log=None) as client:
        client.wait_for_workers(2, timeout=60)
        Xd = da.from_array(X, chunks=(576, 40))
        remote = cls(12, random_state=1).fit(Xd).labels_
    np.testing.assert_array_equal(local, remote)


def test_hierarchical_splits_as_futures_on_workers(proc_cluster, grid):
    X, _ = grid
    local = HierarchicalLSD(10).fit(X)
    with connect(proc_cluster.address, log=None) as client:
        client.wait_for_workers(2, timeout=60)
        remote = HierarchicalLSD(10).fit(X)
        # the splits ran as tasks on the workers: 9 splits make 10 leaves, and more may
        # have run speculatively
        logs = client.run(lambda dask_worker: [str(e[0]) for e in dask_worker.state.log])
        ran = {name for entries in logs.values() for name in entries if "_split_leaf" in name}
        assert len(ran) >= len(remote.tree_) == 9
    np.testing.assert_array_equal(local.labels_, remote.labels_)
    assert local.tree_ == remote.tree_


def test_worker_killed_mid_fit(tmp_path, grid):
    X, _ = grid
    X = np.tile(X, (4, 1)) + 0.01 * np.random.default_rng(0).standard_normal((4 * X.shape[0], 40))
    kw = dict(update="gradient", max_iter=40, tol=0.0, random_state=2)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # capped at max_iter on purpose
        expected = DirectionalClustering(12, **kw).fit(X).labels_
    cluster = ProcessCluster(tmp_path, n_workers=2)
    try:
        with connect(cluster.address, log=None) as client:
            client.wait_for_workers(2, timeout=60)
            victim = cluster.workers[0]
            killer = threading.Timer(2.0, lambda: os.kill(victim.pid, signal.SIGKILL))
            killer.start()
            t0 = time.time()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                est = DirectionalClustering(12, **kw).fit(da.from_array(X, chunks=(2304, 40)))
            labels = est.labels_
            killer.join()
            assert victim.poll() is not None, "the worker was not killed during the fit"
            assert time.time() - t0 > 2.0, "the fit ended before the worker was killed"
        np.testing.assert_array_equal(labels, expected)
    finally:
        cluster.close()


def test_unreachable_scheduler_clear_error():
    t0 = time.time()
    with pytest.raises(ConnectionError, match="could not reach a Dask scheduler"):
        connect("tcp://127.0.0.1:9", timeout=2, log=None)
    assert time.time() - t0 < 15


def test_a_scheduler_without_workers_fails_in_one_line(tmp_path):
    from lsd_dask.testing.processes import ProcessCluster

    empty = ProcessCluster(tmp_path, n_workers=0)
    try:
        with pytest.raises(ConnectionError, match=r"has no workers after 2 s; start some"):
            connect(empty.address, timeout=2, log=None)
    finally:
        empty.close()


def test_cluster_configs_parse_into_the_clusters_they_name():
    """Each shipped config is accepted, and its settings reach the cluster as configured:
    LocalCluster takes every local key; the SLURM and PBS job scripts dask-jobqueue writes
    from the configs ask for their cores, threads, worker processes and time limit."""
    import inspect

    from dask_jobqueue.pbs import PBSJob
    from dask_jobqueue.slurm import SLURMJob
    from distributed import LocalCluster, Nanny

    from lsd_dask.distributed import _underscored

    root = Path(__file__).resolve().parents[1] / "cluster_configs"
    kinds = {n: load_cluster_config(root / f"{n}.yaml")["type"] for n in
             ("local", "remote", "slurm", "pbs", "slurm_runner")}  # fmt: skip
    assert kinds == {"local": "local", "remote": "remote", "slurm": "slurm", "pbs": "pbs",
                     "slurm_runner": "slurm-runner"}  # fmt: skip
    local = load_cluster_config(root / "local.yaml")["local"]
    # LocalCluster's own arguments, and those it passes to each worker's nanny
    accepted = set(inspect.signature(LocalCluster).parameters) | set(
        inspect.signature(Nanny).parameters
    )
    # the run's own key (the memory check's wait for a worker) and the cluster's
    assert set(_underscored(local)) - {"timeout"} <= accepted
    for name, job in (("slurm", SLURMJob), ("pbs", PBSJob)):
        section = _underscored(load_cluster_config(root / f"{name}.yaml")[name])
        # the run's own keys, and the cluster's (not a job's) options
        for key in ("n_workers", "timeout", "scheduler_options", "shared_temp_directory"):
            section.pop(key, None)
        script = job(scheduler="tcp://127.0.0.1:8786", **section).job_script()
        threads = section["cores"] // section["processes"]
        assert f"--nthreads {threads} " in script
        assert f"--nworkers {section['processes']} " in script
        assert section["walltime"] in script
        assert (f"--cpus-per-task={section['cores']}" if name == "slurm"
                else f"ncpus={section['cores']}") in script  # fmt: skip
        # the job's name in the queue (not the workers'), and no network a site may lack
        assert ("#SBATCH -J lsd-dask\n" if name == "slurm" else "#PBS -N lsd-dask\n") in script
        assert "--interface" not in script
    with pytest.raises(FileNotFoundError):
        load_cluster_config(root / "nope.yaml")


def test_connect_has_the_workers_reuse_their_buffers(tmp_path):
    """Workers started by a nanny (``dask worker``) map every buffer above 128 kB afresh
    (its MALLOC_TRIM_THRESHOLD_ fixes glibc's mmap threshold there); once a run connects,
    an 8 MB buffer comes from the heap, which keeps it for the next one."""
    from distributed import Client

    # defined here: the workers cannot import this test module, so it travels by value
    def mapped_bytes_of_a_new_buffer(nbytes: int = 8 << 20) -> int:
        """Bytes glibc maps afresh for a new ``nbytes`` buffer (mallinfo2's hblkhd)."""
        import ctypes

        class MallInfo2(ctypes.Structure):
            _fields_ = [
                (name, ctypes.c_size_t)
                for name in (
                    "arena", "ordblks", "smblks", "hblks", "hblkhd",
                    "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
                )
            ]  # fmt: skip

        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = MallInfo2
        before = libc.mallinfo2().hblkhd
        buf = np.empty(nbytes, np.uint8)
        mapped = libc.mallinfo2().hblkhd - before
        del buf
        return int(mapped)

    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallinfo2  # noqa: B018 - glibc 2.33 or newer
    except (OSError, AttributeError):
        pytest.skip("needs glibc's mallinfo2")
    cluster = ProcessCluster(tmp_path, n_workers=2)
    try:
        with Client(cluster.address) as plain:
            plain.wait_for_workers(2)
            before = plain.run(mapped_bytes_of_a_new_buffer)
        with connect(cluster.address, log=None) as client:
            after = client.run(mapped_bytes_of_a_new_buffer)
    finally:
        cluster.close()
    assert len(before) == len(after) == 2
    assert all(v >= 8 << 20 for v in before.values()), before
    assert all(v == 0 for v in after.values()), after


def test_local_config_starts_and_closes_cluster():
    root = Path(__file__).resolve().parents[1] / "cluster_configs"
    cfg = load_cluster_config(root / "local.yaml")
    cfg["local"]["dashboard_address"] = ":0"
    with connect(cfg, log=None) as client:
        assert len(client.scheduler_info()["workers"]) == 2
        cluster = client.cluster
        pids = list(client.run(os.getpid).values())
    assert cluster.status.name in ("closed", "closing")
    # the worker processes are gone with the client
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(p) for p in pids)


def _alive(pid: int) -> bool:
    """Whether a process runs (an exited child not yet reaped counts as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class _SlowToClose:
    """A scheduler plugin whose close never ends: a cluster whose close hangs, as
    distributed's can when a nanny is restarting a worker killed for its memory."""

    name = "slow-to-close"

    async def close(self):
        import asyncio

        await asyncio.sleep(3600)


def test_a_cluster_whose_close_hangs_is_left_in_bounded_time(caplog):
    """A run's own cluster is closed in bounded time: past the timeout, the client's close
    returns with a warning (and kills any worker process left) instead of hanging."""
    from distributed import Client, LocalCluster
    from distributed.diagnostics.plugin import SchedulerPlugin

    from lsd_dask.distributed import _close_cluster

    plugin = type("SlowToClose", (_SlowToClose, SchedulerPlugin), {})()
    cluster = LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
        dashboard_address=":0",
    )  # fmt: skip
    cluster.scheduler.add_plugin(plugin)
    with Client(cluster) as client:
        client.wait_for_workers(1, timeout=30)
    start = time.monotonic()
    with caplog.at_level("WARNING", logger="lsd_dask.distributed"):
        _close_cluster(cluster, timeout=2)
    assert time.monotonic() - start < 15
    assert "the cluster did not close within 2 s" in caplog.text
    assert not any(w.process and w.process.is_alive() for w in cluster.workers.values())


def test_a_local_cluster_of_threads_starts(tmp_path):
    """``processes: false`` (workers as threads of this process) starts: no loopback host
    is forced on its inproc:// transport."""
    path = tmp_path / "threads.yaml"
    path.write_text("type: local\nlocal:\n  n_workers: 1\n  threads_per_worker: 2\n"
                    "  processes: false\n  dashboard_address: \":0\"\n")  # fmt: skip
    with connect(load_cluster_config(path), log=None) as client:
        assert client.scheduler.address.startswith("inproc://")
        assert client.submit(sum, [1, 2, 3]).result() == 6


def test_scattered_rows_keep_the_data_out_of_the_graph(proc_cluster):
    """Features sent to the workers once: the graph holds futures, not the array (with
    ``from_array`` every task graph that reads them carries all of X)."""
    import pickle

    from lsd_dask.distributed import scattered_rows

    X = np.random.default_rng(0).standard_normal((5000, 40)).astype(np.float32)  # 0.8 MB

    def largest_task(arr):
        return max(len(pickle.dumps(v)) for v in dict(arr.__dask_graph__()).values())

    with connect(proc_cluster.address, log=None) as client:
        client.wait_for_workers(2, timeout=60)
        F = scattered_rows(X, 1024)
        assert F.chunks[0] == (1024, 1024, 1024, 1024, 904)
        assert largest_task(F) < 10_000
        assert largest_task(da.from_array(X, chunks=(1024, 40))) > 100_000  # what it avoids
        np.testing.assert_array_equal(F.compute(), X)
        labels = SphericalKMeans(5, random_state=0).fit(F).labels_
    np.testing.assert_array_equal(labels, SphericalKMeans(5, random_state=0).fit(X).labels_)
    # without a client: a plain from_array
    np.testing.assert_array_equal(scattered_rows(X, 1024).compute(), X)


def _hold(nbytes: int) -> object:
    """A result that keeps ``nbytes`` of the worker's memory in use."""
    import numpy as np

    return np.ones(nbytes // 8)


@pytest.mark.parametrize("in_thread", [False, True])
def test_workers_paused_over_their_memory_end_the_work_in_one_line(in_thread):
    """A worker over its pause threshold, with the memory held, never resumes: the work
    waiting on it ends with MemoryError naming the worker's memory, not a hang, in the
    test's thread and in another (a notebook's kernel runs cells in its own)."""

    import dask
    from distributed import Client, LocalCluster, wait

    from lsd_dask.distributed import PausedWorkers

    memory = {"target": False, "spill": False, "pause": 0.5, "terminate": False}
    with (
        dask.config.set({f"distributed.worker.memory.{k}": v for k, v in memory.items()}),
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            memory_limit="600MB",
            host="127.0.0.1",
            dashboard_address=":0",
        ) as cluster,  # fmt: skip
        Client(cluster) as client,
    ):
        held = client.submit(_hold, 400 * 2**20)
        wait(held, timeout=60)  # kept on the worker, over half its limit
        # the worker's memory monitor pauses it on its next tick: submitting before
        # then would let the task run (the pause is what the test is about)
        deadline = time.time() + 30
        while time.time() < deadline and not all(
            w.get("status") == "paused"
            for w in client.scheduler_info(n_workers=-1)["workers"].values()
        ):
            time.sleep(0.1)
        raised: list[BaseException] = []

        def work() -> None:
            try:
                with PausedWorkers(client, 3, 0.5):
                    client.submit(sum, [1, 2], pure=False).result(timeout=60)
            except BaseException as err:  # noqa: BLE001 - the test reads what came out
                raised.append(err)

        t0 = time.time()
        if in_thread:
            runner = threading.Thread(target=work)
            runner.start()
            runner.join(timeout=90)
        else:
            work()
        assert time.time() - t0 < 30
        paused = (
            r"^every worker has been paused for 3 s, over its memory's pause threshold "
            r"\(worker tcp://127\.0\.0\.1:\d+: \d+ MB of its 572 MB limit\)"
        )
        assert len(raised) == 1 and isinstance(raised[0], MemoryError), raised
        assert re.match(paused, str(raised[0]))
        del held


def test_slurm_runner_needs_its_slurm_task(monkeypatch):
    from lsd_dask.distributed import slurm_task_role

    cfg = {"type": "slurm-runner", "slurm-runner": {}}
    for var in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(RuntimeError, match="SLURM_PROCID is not set: start it with `srun"):
        slurm_task_role(cfg)
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_NTASKS", "2")
    monkeypatch.setenv("SLURM_PROCID", "1")
    with pytest.raises(RuntimeError, match="at least 3 tasks .* SLURM_NTASKS=2"):
        slurm_task_role(cfg)
    monkeypatch.setenv("SLURM_NTASKS", "5")
    roles = []
    for rank in range(5):
        monkeypatch.setenv("SLURM_PROCID", str(rank))
        roles.append(slurm_task_role(cfg))
    assert roles == ["scheduler", "client", "worker", "worker", "worker"]
    assert slurm_task_role({"type": "local", "local": {}}) is None


def test_slurm_runner_options_expand_like_a_job_script(monkeypatch):
    from lsd_dask.distributed import _runner_options, load_cluster_config

    root = Path(__file__).resolve().parents[1] / "cluster_configs"
    cfg = load_cluster_config(root / "slurm_runner.yaml")
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "4")
    monkeypatch.setenv("TMPDIR", "/local/scratch")
    file, scheduler, worker = _runner_options(cfg)
    assert file == "lsd-dask-scheduler-{job_id}.json"  # SLURMRunner fills in the job id
    assert worker == {"nthreads": 4, "memory_limit": "auto", "local_directory": "/local/scratch"}
    assert scheduler == {"dashboard_address": "127.0.0.1:8787"}  # loopback, as the file says
    monkeypatch.delenv("TMPDIR")  # a site without it: Dask's own default, not "$TMPDIR"
    assert "local_directory" not in _runner_options(cfg)[2]


def _in_io_slot(name: str) -> tuple[float, float]:
    """A task: enter the I/O slot, say so, stay until told; when it entered and left."""
    from distributed import Event

    with io_slot():
        entered = time.monotonic()
        Event(f"{name}-in").set()
        assert Event(f"{name}-go").wait(60)
        left = time.monotonic()
    return entered, left


def _say(name: str) -> bool:
    from distributed import Event

    Event(name).set()
    return True


def test_io_slot_frees_a_one_thread_worker_for_its_next_task_one_block_at_a_time():
    """A task in its I/O block leaves the worker's only thread to the next task; a second
    task reaching its block waits there until the first has left it."""
    from distributed import Client, Event, LocalCluster

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
            dashboard_address=None,
        ) as lc,
        Client(lc) as client,
    ):  # fmt: skip
        a = client.submit(_in_io_slot, "a", pure=False)
        assert Event("a-in", client=client).wait(60)
        b = client.submit(_say, "b-ran", pure=False)
        # without the secession this waits for a, which waits for "a-go": a timeout
        assert Event("b-ran", client=client).wait(20)
        assert b.result()
        c = client.submit(_in_io_slot, "c", pure=False)
        assert not Event("c-in", client=client).wait(2)  # the slot is a's
        Event("a-go", client=client).set()
        assert Event("c-in", client=client).wait(60)
        Event("c-go", client=client).set()
        (_, a_left), (c_entered, _) = a.result(), c.result()
        assert c_entered >= a_left


def test_io_slot_outside_a_worker_just_runs_the_block():
    ran = []
    with io_slot():
        ran.append(threading.current_thread())
    assert ran == [threading.current_thread()]


def _blas_threads() -> list[int]:
    from threadpoolctl import threadpool_info

    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


def test_the_client_runs_blas_on_one_thread_beside_its_local_workers(proc_cluster):
    """Workers on this machine (127.0.0.1): the client's BLAS pools on one thread inside
    the block and as they were after it; without a client nothing changes."""
    from threadpoolctl import threadpool_limits

    from lsd_dask.distributed import one_blas_thread_beside_workers

    with threadpool_limits(2):
        before = _blas_threads()
        assert before  # numpy's BLAS is seen
        with connect(proc_cluster.address, log=None) as client:
            client.wait_for_workers(2, timeout=60)
            with one_blas_thread_beside_workers(client):
                assert _blas_threads() == [1] * len(before)
                # the linear algebra still gives the same answer
                a = np.random.default_rng(0).standard_normal((300, 300))
                np.testing.assert_allclose(
                    np.linalg.svd(a, compute_uv=False)[0] ** 2,
                    np.linalg.eigvalsh(a.T @ a)[-1],
                    rtol=1e-10,
                )
            assert _blas_threads() == before
        with one_blas_thread_beside_workers(None):
            assert _blas_threads() == before
