"""The tasks' memory rules against what the tasks allocate, and workers too small for one
task failing the run in one line before any heavy work."""

from __future__ import annotations

import subprocess
import sys
import time
import tracemalloc

import numpy as np
import pytest

from lsd_dask.io.local_shards import RowBlocks
from lsd_dask.io.surface_files import SubjectFiles, write_dtseries, write_func_gifti
from lsd_dask.linalg import randomized_svd
from lsd_dask.pipeline import write_study
from lsd_dask.pipeline.engine.placement import task_bytes
from lsd_dask.pipeline.settings.config import PipelineConfig
from lsd_dask.pipeline.settings.preprocess import PreprocessSettings
from lsd_dask.pipeline.stages.reading import read_subject


@pytest.mark.parametrize("kind", ["gifti", "cifti"])
@pytest.mark.parametrize("preprocess", [False, True])
@pytest.mark.parametrize("streams", [False, True])
def test_an_ingest_task_allocates_no_more_than_its_estimate(tmp_path, kind, preprocess, streams):
    """tracemalloc counts numpy's and nibabel's allocations: reading, standardising (and
    preprocessing) one 20,000 x 200 subject peaks within its estimate, and not far below
    it (a second read, so that imports and caches do not count). A writer that makes the
    standardised rows as it writes them (a local store) takes them a chunk at a time, in
    its I/O slot: the task itself then never holds them whole."""
    n1, t = 10_000, 200
    x = np.random.default_rng(0).standard_normal((2 * n1, t)).astype(np.float32)
    if kind == "gifti":
        write_func_gifti(tmp_path / "l.func.gii", x[:n1], hemisphere="left", tr=2.0)
        write_func_gifti(tmp_path / "r.func.gii", x[n1:], hemisphere="right", tr=2.0)
        s = SubjectFiles.from_keys("a", left=tmp_path / "l.func.gii", right=tmp_path / "r.func.gii")
    else:
        write_dtseries(tmp_path / "a.dtseries.nii", x, [n1, n1], tr=2.0)
        s = SubjectFiles.from_keys("a", cifti=tmp_path / "a.dtseries.nii")
    cfg = PipelineConfig(subjects=[s], mesh={}, output=tmp_path / "out")
    if preprocess:
        cfg.preprocess = PreprocessSettings.from_mapping(
            {"detrend": True, "high_pass": 0.01, "t_r": 2.0}, "test", tmp_path
        )

    class Sink:  # the store's write, minus the file: the standardised array is what counts
        def __init__(self) -> None:
            self.streams, self.made = streams, None

        def write(self, index: int, subject: str, x, *, finite: bool = False) -> int:
            if isinstance(x, RowBlocks):  # made in the I/O slot: counted by the test below
                self.made = x.shape
            return x.shape[1]

    kept = np.ones(2 * n1, bool)
    read_subject(s, cfg, [n1, n1], kept, None, (Sink(), 0))
    tracemalloc.start()
    sink = Sink()
    read_subject(s, cfg, [n1, n1], kept, None, (sink, 0))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # the float64 series of preprocessing is made whole first, streaming or not
    assert (sink.made is not None) == (streams and not preprocess)
    need = task_bytes(2 * n1, t, 10, preprocess)["ingest"]
    # one estimate for both formats and both writers: GIFTI's decode holds more than
    # CIFTI's read; CIFTI: 8.2 of 16 B a value, 4.2 (the series read) where the writer
    # makes the rows; GIFTI's decode peaks before either (15.4)
    floor = 0.6
    if kind == "cifti" and not preprocess:
        floor = 0.2 if streams else 0.45
    assert floor * need < peak <= need, (peak, need)


def test_an_svd_task_allocates_no_more_than_its_estimate():
    """One column block through the randomized SVD in one thread: its peak within the
    estimate (the basis, its product and the block)."""
    import dask

    n, t, rank = 4000, 300, 40
    X = np.random.default_rng(0).standard_normal((n, t)).astype(np.float32)
    import dask.array as da

    A = da.from_array(X, chunks=(n, t))
    with dask.config.set(scheduler="sync"):
        tracemalloc.start()
        U, s, _ = randomized_svd(A, rank, n_power_iter=1, random_state=0)
        np.asarray(U)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak <= 2 * task_bytes(n, t, rank, False)["svd"], peak


def test_a_scoring_task_allocates_no_more_than_its_estimate(tmp_path):
    """One held-out scoring task (its split's features loaded, the pairs, the spin null
    and two parcellations scored) peaks within the estimate from its features' bytes and
    the pairs, and not far below it: tracemalloc on a second run of the task."""
    from lsd_dask import evaluation as ev
    from lsd_dask.datasets import surface_study
    from lsd_dask.pipeline import load_config, run_pipeline
    from lsd_dask.pipeline.engine.context import RunContext
    from lsd_dask.pipeline.engine.placement import scoring_task_bytes
    from lsd_dask.pipeline.preflight import preflight
    from lsd_dask.pipeline.stages import evaluation as E
    from lsd_dask.surface import two_hemisphere_mesh

    # 2 × 2,562 vertices (4,610 kept): 0.57 million pairs; the estimate is 0.14 GB, and
    # a vertex × vertex float64 matrix alone would be 0.17 GB
    study = surface_study(
        two_hemisphere_mesh(16, radius=50.0), n_parcels=10, n_subjects=(2, 2),
        n_timepoints=60, medial_wall_fraction=0.1, random_state=0,
    )  # fmt: skip
    write_study(study, tmp_path, fmt="gifti")
    cfg = load_config(tmp_path / "pipeline.yaml", ks=[5, 10], null_repeats=0, spins=100)
    run_pipeline(cfg, log=lambda line: None)
    with RunContext.open(cfg, lambda line: None, preflight(cfg)[0]) as ctx:
        stage = E.EvaluationStage()
        with ctx.reading(stage.reads):
            units = stage.plan(ctx)
        jobs = [j for j in E._scorings(ctx, units) if j.split == "split2"]
        V, A = ctx.kept_mesh()
        args = (ctx.wd.root, None, "split2", jobs, V, A, ctx.kept, E.NullSettings.of(ctx))
        E._score_on_split(*args)
        tracemalloc.start()
        E._score_on_split(*args)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        n_pairs = len(ev.geodesic_pairs(V, A, E.MAX_DIST_MM))
        need = scoring_task_bytes(np.load(ctx.wd.u("split2")).nbytes, n_pairs, cfg.spins)
    assert 0.3 * need < peak <= need, (peak, need, n_pairs)


def test_workers_below_one_tasks_memory_fail_in_one_line_before_ingest(tmp_path, study):
    """Workers of 80 MB (each uses more than that at rest) pause and never resume: the run
    stops before ingest, in one line giving the memory needed, in bounded time (the config's
    3 s wait for a worker, at most 20 s to close the cluster, and start-up)."""
    write_study(study, tmp_path, fmt="gifti")
    config = tmp_path / "small.yaml"
    config.write_text(
        "type: local\nlocal:\n  n_workers: 1\n  threads_per_worker: 1\n  processes: true\n"
        '  memory_limit: 80MB\n  host: 127.0.0.1\n  dashboard_address: ":0"\n  timeout: 3\n'
    )
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "lsd_dask.cli", "run", str(tmp_path / "pipeline.yaml"),
         "--cluster", str(config), "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=150,
    )  # fmt: skip
    elapsed = time.monotonic() - t0
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, proc.stderr
    assert "has a memory limit of 76 MB" in errors[0] and "Give each worker at least" in errors[0]
    assert "Traceback" not in proc.stderr
    assert "[ingest]" not in proc.stdout + proc.stderr
    assert not (tmp_path / "out" / "work" / "split1.zarr").exists()
    assert elapsed < 60


def test_the_local_workers_spec_gives_the_limit_the_scheduler_reports():
    """When no worker of a LocalCluster stays up long enough to register, the memory check
    judges them by their spec: the limit and threads it reads from the spec are those the
    scheduler reports once a worker of that spec has joined."""
    from distributed import Client, LocalCluster

    from lsd_dask.pipeline.engine.placement import _local_workers

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=2, memory_limit="700MB", processes=False,
            dashboard_address=":0",
        ) as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        client.wait_for_workers(1, timeout=30)
        [reported] = client.scheduler_info(n_workers=-1)["workers"].values()
        [(name, spec)] = _local_workers(client).items()
    assert name == str(reported["name"])
    assert spec["memory_limit"] == reported["memory_limit"] == 700_000_000
    assert spec["nthreads"] == reported["nthreads"] == 2


def test_no_worker_at_all_fails_in_one_line(monkeypatch):
    """A scheduler that no worker joins: one line naming the wait, not dask's timeout."""
    from distributed import Client, LocalCluster

    from lsd_dask.pipeline.engine import placement

    monkeypatch.setattr(placement, "WORKER_WAIT_S", 1)
    with (
        LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster,
        Client(cluster) as client,
        pytest.raises(RuntimeError, match=r"no Dask worker joined the scheduler within 1 s") as err,
    ):
        placement.check_worker_memory(client, 1000, 100, 10, False)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("kind", ["slurm", "pbs"])
def test_an_hpc_cluster_waits_its_configured_timeout_for_a_first_job(kind, tmp_path):
    """A ``slurm``/``pbs`` cluster's jobs may queue: the memory check waits as long as the
    config's ``timeout`` for a first worker, then fails in one line that says so. The real
    dask-jobqueue cluster is started, with no job submitted (no batch system is needed)."""
    import time

    from lsd_dask.distributed import JOB_START_TIMEOUT_S, connect
    from lsd_dask.pipeline.engine import placement

    section = {"n_workers": 0, "cores": 1, "memory": "1GB", "interface": "lo"}
    section["log-directory"] = str(tmp_path)
    # the dashboard on any free port: 8787 may be another test's (tests run side by side)
    section["scheduler_options"] = {"dashboard_address": ":0"}
    with connect({"type": kind, kind: section}, log=None) as client:
        assert client.worker_wait_s == JOB_START_TIMEOUT_S > placement.WORKER_WAIT_S
    section["timeout"] = 2
    with connect({"type": kind, kind: section}, log=None) as client:
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=r"within 2 s \(the cluster config's timeout") as err:
            placement.check_worker_memory(client, 1000, 100, 10, False)
        waited = time.monotonic() - start
    assert "\n" not in str(err.value)
    assert 2 <= waited < 30


@pytest.mark.parametrize("through_zarr", [True, False])
def test_the_subject_an_io_slot_writes_holds_no_more_than_its_estimate(
    tmp_path, through_zarr, monkeypatch
):
    """A worker's I/O slot holds the standardised series while its shards are written (a
    real split store): the series plus the write's own peak, within the estimate. The
    estimate is zarr's write (object storage, compressed stores), close to what it holds;
    a local store's direct write holds less."""
    from lsd_dask.io import zarr_store
    from lsd_dask.io.zarr_store import build_split

    if through_zarr:
        monkeypatch.setattr(zarr_store, "local_layout", lambda a: None)
    n, t = 20_000, 200
    x = np.random.default_rng(0).standard_normal((n, t)).astype(np.float32)
    with build_split(tmp_path / "s.zarr", n_rows=n) as w:
        w.write(0, "a", x)
        tracemalloc.start()
        w.write(1, "b", x)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        w.finish(["a", "b"], [t, t])
    need = task_bytes(n, t, 10, False)["ingest_write"]
    held = x.nbytes + peak
    assert (0.5 * need if through_zarr else x.nbytes) < held <= need, (held, need)


def test_rows_made_as_they_are_written_hold_one_inner_chunk(tmp_path):
    """Rows made as a local store is written (``RowBlocks``): beside the series the task
    read, the write holds one inner chunk of the result, not all of it, and stores what
    the whole array would have stored."""
    from lsd_dask.io.zarr_store import build_split, open_split

    n, t, inner = 20_000, 200, 2_000
    x = np.random.default_rng(0).standard_normal((n, t)).astype(np.float32)

    def fill(a, b, out):
        np.multiply(x[a:b], 2, out=out)

    with build_split(tmp_path / "s.zarr", n_rows=n, inner_chunk=inner) as w:
        assert w.streams
        w.write(0, "a", RowBlocks((n, t), fill), finite=True)
        tracemalloc.start()
        w.write(1, "b", RowBlocks((n, t), fill), finite=True)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        w.finish(["a", "b"], [t, t])
    chunk = inner * t * 4
    assert chunk <= peak < 1.5 * chunk < x.nbytes / 5, (peak, chunk)
    st = open_split(tmp_path / "s.zarr")
    np.testing.assert_array_equal(st.arrays[1][:], 2 * x)


def test_a_participants_task_allocates_no_more_than_its_estimate(tmp_path):
    """One participant of the individual stage (three prior_potts fits at K = 10, both
    halves' pair correlations and spin nulls, the scores) peaks within the estimate from
    its series' bytes and the pairs, and not far below it: tracemalloc on a second run."""
    from lsd_dask import evaluation as ev
    from lsd_dask.datasets import surface_study
    from lsd_dask.pipeline import load_config, run_pipeline
    from lsd_dask.pipeline.engine.context import RunContext
    from lsd_dask.pipeline.engine.placement import individual_task_bytes
    from lsd_dask.pipeline.preflight import preflight
    from lsd_dask.pipeline.stages import individual as I
    from lsd_dask.pipeline.stages.held_out import MAX_DIST_MM, NullSettings
    from lsd_dask.surface import two_hemisphere_mesh

    study = surface_study(
        two_hemisphere_mesh(16, radius=50.0), n_parcels=10, n_subjects=(2, 2),
        n_timepoints=60, medial_wall_fraction=0.1, random_state=0,
    )  # fmt: skip
    write_study(study, tmp_path, fmt="gifti")
    cfg = load_config(tmp_path / "pipeline.yaml", ks=[10], null_repeats=0, spins=100,
                      held_out=["splits"], individual=True)  # fmt: skip
    run_pipeline(cfg, log=lambda line: None)
    with RunContext.open(cfg, lambda line: None, preflight(cfg)[0]) as ctx:
        stage = I.IndividualStage()
        ctx.shared["subject_inputs"] = {s.subject: {} for s in cfg.subjects}
        with ctx.reading(stage.reads):
            job = stage.plan(ctx)[0].item
        V, A = ctx.kept_mesh()
        pairs = ev.geodesic_pairs(V, A, MAX_DIST_MM)
        out = str(tmp_path / "again")
        job = I.ParticipantJob(
            job.label,
            job.split,
            job.runs,
            job.blocks,
            job.priors,
            [f"{out}/p.json", f"{out}/p_labels.npy", f"{out}/p_conf.npy"],
        )
        args = (job, cfg.individual, A, ctx.kept, pairs, NullSettings.of(ctx), ctx.wd.root, None)
        I.fit_participant(*args)
        tracemalloc.start()
        I.fit_participant(*args)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        need = individual_task_bytes(job.blocks.shape[0] * job.blocks.shape[1] * 4, len(pairs),
                                     cfg.spins)  # fmt: skip
    assert 0.3 * need < peak <= need, (peak, need, len(pairs))
