"""A Dask scheduler and workers as separate OS processes on 127.0.0.1, for tests."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["ProcessCluster"]

DASK = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
WORKER = [sys.executable, "-m", "distributed.cli.dask_worker"]


class ProcessCluster:
    """A scheduler (``dask scheduler``) and n workers (``dask worker``) as OS processes.

    The scheduler binds to 127.0.0.1 on a free port; ``address`` is read from its
    scheduler file. ``close()`` terminates every process.
    """

    def __init__(self, tmp: Path, n_workers: int = 2) -> None:
        sched_file = tmp / "scheduler.json"
        self.procs: list[subprocess.Popen] = []
        self.procs.append(
            subprocess.Popen(
                [
                    *DASK,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--no-dashboard",
                    "--scheduler-file",
                    str(sched_file),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        deadline = time.time() + 60
        while not sched_file.exists() and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(0.2)
        self.address = json.loads(sched_file.read_text())["address"]
        self.workers = [self.add_worker() for _ in range(n_workers)]

    def add_worker(self) -> subprocess.Popen:
        p = subprocess.Popen(
            [
                *WORKER,
                self.address,
                "--nthreads",
                "1",
                "--host",
                "127.0.0.1",
                "--no-dashboard",
                "--memory-limit",
                "2GB",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.procs.append(p)
        return p

    def close(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
