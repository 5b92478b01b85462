"""``lsd-dask run --cluster <slurm-runner config>`` as the tasks of one SLURM job: four
processes run the same command with SLURM's task variables set, as ``srun`` starts them;
task 0 becomes the scheduler, task 1 runs the pipeline, tasks 2 and 3 are its workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml


def test_one_command_in_every_task_runs_the_pipeline(tmp_path, write_tiny_study):
    write_tiny_study(tmp_path, 0)
    raw = yaml.safe_load((tmp_path / "pipeline.yaml").read_text())
    raw.update(ks=[4], min_region_size=3, null_repeats=2, spins=0)
    raw["svd"]["rank"] = 20
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(raw))
    runner = {
        "type": "slurm-runner",
        "slurm-runner": {
            "scheduler-file": str(tmp_path / "scheduler-{job_id}.json"),
            "interface": "lo",  # 127.0.0.1
            "memory-limit": "2GB",
            "local-directory": "$TMPDIR",
            "dashboard-address": "127.0.0.1:0",
            "timeout": 120,
        },
    }
    (tmp_path / "runner.yaml").write_text(yaml.safe_dump(runner))
    out = tmp_path / "o"
    command = [sys.executable, "-m", "lsd_dask.cli", "run", str(tmp_path / "pipeline.yaml")]
    command += ["--cluster", str(tmp_path / "runner.yaml"), "--out", str(out)]
    tasks = []
    for rank in range(4):
        env = dict(os.environ, SLURM_PROCID=str(rank), SLURM_NTASKS="4", SLURM_JOB_ID="4242")
        env.update(SLURM_CPUS_PER_TASK="1", TMPDIR=str(tmp_path / f"scratch{rank}"))
        (tmp_path / f"scratch{rank}").mkdir()
        log = open(tmp_path / f"task{rank}.log", "w")  # noqa: SIM115 - closed below
        tasks.append((subprocess.Popen(command, env=env, stdout=log, stderr=log), log))
    try:
        codes = [p.wait(timeout=300) for p, _ in tasks]
    finally:
        for p, log in tasks:
            p.kill()
            log.close()
    logs = [(tmp_path / f"task{r}.log").read_text() for r in range(4)]
    assert codes == [0, 0, 0, 0], "\n\n".join(logs)
    report = json.loads((out / "report.json").read_text())
    assert report["scores"] and "report.html" in logs[1].splitlines()[-1]
    # only the client ran the pipeline; the workers' scratch was their node-local folder
    assert all("[ingest]" not in logs[r] for r in (0, 2, 3))
    assert all(any((tmp_path / f"scratch{r}").iterdir()) for r in (2, 3))
    assert not (tmp_path / "scheduler-4242.json").exists()  # removed with the scheduler
