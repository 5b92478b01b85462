"""One worker's ingest writes: a subject standardised and written into a local split store,
its rows made as they are written against made whole first.

What an ingest task does once it has read a subject (``lsd_dask.pipeline.stages.reading``): the
series standardised, a block of rows at a time, and written into the split store. Made as
written (the default for a local, uncompressed store), the writer asks for each inner chunk
just before writing it, into one reused buffer; made whole first (what a store through zarr
gets), the task allocates the standardised subject, fills it, and writes it.

In each of ``--rounds`` fresh processes (one BLAS thread, as a worker's), the two ways in
turn, subject by subject (so that both meet the same state of the machine's memory: one
way per process read 0.32–0.92 s a subject for the same way, from process to process),
``--subjects`` subjects each into one store in a temporary folder under ``--folder``, each
subject a fresh copy of one random float32 array (as each task's read is). Per subject:
wall, user and system CPU seconds, each way's median over its subjects after the first.
Fresh memory (the standardised copy) costs page faults and the kernel's zeroing; on a
virtual machine that hands its free memory back to its host, far more (see
``benchmarks/end_to_end.py``'s ``fresh_memory_seconds``).

Run: ``python -m benchmarks.ingest_write --timepoints 1000``.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

N = 64984
WAYS = {"made": "made as written", "whole": "made whole first"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timepoints", type=int, default=1000)
    ap.add_argument("--subjects", type=int, default=6, help="per way, per process")
    ap.add_argument("--rounds", type=int, default=2, help="processes, one after the other")
    ap.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run(args.timepoints, args.subjects, args.folder)))
        return
    rounds = []
    for _ in range(args.rounds):
        cmd = [sys.executable, "-m", "benchmarks.ingest_write", "--child", *sys.argv[1:]]
        out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True)
        rounds.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(
        f"{N:,} vertices x {args.timepoints:,} time points; {args.subjects} subjects each way "
        f"a process, the ways in turn; medians per subject, one cell a process"
    )
    print("| rows | wall (s/subject) | user (s) | system (s) |")
    print("|---|---|---|---|")
    for way, label in WAYS.items():
        cells = [", ".join(f"{r[way][k]:.3f}" for r in rounds) for k in ("wall", "user", "sys")]
        print(f"| {label} | " + " | ".join(cells) + " |")


def run(t: int, subjects: int, folder: Path) -> dict[str, dict[str, float]]:
    """``subjects`` subjects each way, standardised and written into one store, the ways
    in turn (so that both meet the same state of the machine's memory); each way's
    medians per subject."""
    from threadpoolctl import threadpool_limits

    from lsd_dask.io.zarr_store import build_split
    from lsd_dask.pipeline.stages.reading import _standardised

    src = np.random.default_rng(0).standard_normal((N, t), dtype=np.float32)
    tmp = Path(tempfile.mkdtemp(dir=folder))
    got: dict[str, list[tuple[float, float, float]]] = {w: [] for w in WAYS}
    try:
        with threadpool_limits(1), build_split(tmp / "s.zarr", n_rows=N) as w:
            for i in range(2 * subjects):
                way = list(WAYS)[i % 2]
                x = src.copy()  # a task's fresh read
                r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
                made, _, _ = _standardised(x, None)
                w.write(i, f"s{i}", made if way == "made" else made.array(), finite=True)
                t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
                got[way].append((t1 - t0, r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime))
                del x, made
            w.finish([f"s{i}" for i in range(2 * subjects)], [t] * (2 * subjects))
    finally:
        shutil.rmtree(tmp)
    out = {}
    for way, rows in got.items():
        a = np.median(np.array(rows[1:] or rows), axis=0)
        out[way] = {"wall": float(a[0]), "user": float(a[1]), "sys": float(a[2])}
    return out


if __name__ == "__main__":
    main()
