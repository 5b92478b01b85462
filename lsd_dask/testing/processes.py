"""A Dask scheduler and workers as separate OS processes on 127.0.0.1, for tests."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["ProcessCluster", "temporary_tls_files"]

DASK = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
WORKER = [sys.executable, "-m", "distributed.cli.dask_worker"]


class ProcessCluster:
    """A scheduler (``dask scheduler``) and n workers (``dask worker``) as OS processes.

    The scheduler binds to 127.0.0.1 on a free port; ``address`` is read from its
    scheduler file. ``close()`` terminates every process.
    """

    def __init__(self, tmp: Path, n_workers: int = 2, tls: dict[str, str] | None = None) -> None:
        """``tls``: PEM file paths ``{"ca": ..., "cert": ..., "key": ...}`` for a tls://
        scheduler whose workers and clients must present that certificate."""
        sched_file = tmp / "scheduler.json"
        self.tls_args = (
            []
            if tls is None
            else ["--tls-ca-file", tls["ca"], "--tls-cert", tls["cert"], "--tls-key", tls["key"]]
        )
        proto = [] if tls is None else ["--protocol", "tls"]
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
                    *proto,
                    *self.tls_args,
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
                *self.tls_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.procs.append(p)
        return p

    def close(self) -> None:
        """Stop the workers, then the scheduler.

        In that order because a worker whose scheduler has gone first spends seconds
        trying to reach it before it exits (2–8 s a cluster, against about 1 s)."""
        workers, scheduler = self.procs[1:], self.procs[:1]
        for group in (workers, scheduler):
            for p in group:
                if p.poll() is None:
                    p.terminate()
            for p in group:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def temporary_tls_files(folder: Path) -> dict[str, str]:
    """A self-signed certificate (its own CA) and key as PEM files in ``folder``; needs
    ``cryptography`` (``distributed.security.Security.temporary``)."""
    from distributed.security import Security

    sec = Security.temporary()
    files = {}
    for name, pem in (
        ("ca", sec.tls_ca_file),
        ("cert", sec.tls_scheduler_cert),
        ("key", sec.tls_scheduler_key),
    ):
        path = Path(folder) / f"{name}.pem"
        path.write_text(pem)
        files[name] = str(path)
    return files
