"""Directional clustering on Dask workers submitted as SLURM jobs with dask-jobqueue.

Needs the single-node SLURM that `.ci/slurm.sh start` sets up (CI does). Outside CI the test
skips when no slurmctld answers; in CI a missing SLURM is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import dask.array as da
import numpy as np
import pytest

from lsd_dask.cluster import DirectionalClustering
from lsd_dask.datasets import brain_grid
from lsd_dask.distributed import connect, load_cluster_config

CONFIG = Path(__file__).resolve().parents[1] / ".ci" / "slurm_ci.yaml"


def _slurm_up() -> bool:
    if shutil.which("scontrol") is None:
        return False
    out = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=20)
    return "UP" in out.stdout


@pytest.fixture(scope="module")
def slurm():
    if not _slurm_up():
        if os.environ.get("CI"):
            pytest.fail("CI must run SLURM (.ci/slurm.sh start) but scontrol ping fails.")
        pytest.skip("no SLURM controller answers `scontrol ping`; run `.ci/slurm.sh start`.")


def test_directional_on_slurm_workers(slurm, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # job scripts' output files land here
    X, lab = brain_grid(snr_db=-3, n_features=30, n_regions=10, shape=(40, 40), random_state=0)[:2]
    local = DirectionalClustering(10, random_state=0).fit(X).labels_
    cfg = load_cluster_config(CONFIG)
    with connect(cfg, log=None) as client:
        cluster = client.cluster
        script = cluster.job_script()
        assert "#SBATCH" in script and "--host 127.0.0.1" in script
        client.wait_for_workers(2, timeout=120)
        jobs = subprocess.run(
            ["squeue", "-h", "-o", "%i %T"], capture_output=True, text=True
        ).stdout
        assert jobs.count("RUNNING") >= 2, jobs
        remote = DirectionalClustering(10, random_state=0).fit(da.from_array(X, chunks=(400, 30)))
        labels = remote.labels_
        hosts = {w["host"] for w in client.scheduler_info()["workers"].values()}
        assert hosts == {"127.0.0.1"}
    np.testing.assert_array_equal(labels, local)


def test_slurm_runner_job_runs_the_pipeline(slurm, tmp_path):
    """``srun`` starts the same ``lsd-dask run`` in 4 tasks of one job (slurm-runner):
    the scheduler, the client that runs the pipeline, and 2 workers."""
    import json
    import sys

    import yaml

    cli = [sys.executable, "-m", "lsd_dask.cli"]
    synth = ["synth", str(tmp_path), "--frequency", "5", "--subjects", "2"]
    synth += ["--timepoints", "40", "--parcels", "6"]
    subprocess.run([*cli, *synth], check=True, capture_output=True)
    runner = {
        "type": "slurm-runner",
        "slurm-runner": {
            "scheduler-file": str(tmp_path / "scheduler-{job_id}.json"),
            "interface": "lo",
            "memory-limit": "1GB",
            "local-directory": str(tmp_path / "scratch"),
            "dashboard-address": "127.0.0.1:0",
            "timeout": 120,
        },
    }
    (tmp_path / "runner.yaml").write_text(yaml.safe_dump(runner))
    run = ["run", str(tmp_path / "pipeline.yaml"), "--cluster", str(tmp_path / "runner.yaml")]
    run += ["--out", str(tmp_path / "o"), "--k", "4", "--rank", "20"]
    srun = ["srun", "--ntasks=4", "--overcommit", "--cpus-per-task=1", "--mem-per-cpu=1000"]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    done = subprocess.run(
        [*srun, *cli, *run], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert [s["k"] for s in report["scores"]] == [4]
    # one task ran the pipeline; the scheduler's file went with the scheduler
    assert done.stdout.count("[done] outputs in") == 1
    assert not list(tmp_path.glob("scheduler-*.json"))
