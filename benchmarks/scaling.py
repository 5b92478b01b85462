"""Directional clustering and hierarchical LSD across 1 and 2 Dask workers.

Data: 64,984 × 1,000 unit-norm features (a full study's vertices × SVD rank) with 500
planted clusters plus noise, as a dask array persisted on the workers. For K in
(50, 200, 500) and 1 or 2 single-threaded workers (the development machine has 2 cores;
BLAS is pinned to one thread per worker), reports end-to-end seconds, seconds per
iteration (directional) and the speed-up from 1 to 2 workers. A Dask performance report
(HTML) of the largest run is saved next to the table.

Run: ``python benchmarks/scaling.py [--ks 50 200 500] [--out /tmp/lsd_scaling]``.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import dask.array as da  # noqa: E402
import numpy as np  # noqa: E402
from distributed import Client, LocalCluster, performance_report  # noqa: E402

from lsd_dask import metrics  # noqa: E402
from lsd_dask.cluster import DirectionalClustering, HierarchicalLSD  # noqa: E402


def make_features(n: int = 64984, d: int = 1000, k: int = 500, seed: int = 0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((k, d)).astype(np.float32)
    labels = rng.integers(k, size=n)
    X = centres[labels] + 2.0 * rng.standard_normal((n, d), dtype=np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, labels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ks", nargs="+", type=int, default=[50, 200, 500])
    ap.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--out", default="/tmp/lsd_scaling")
    ap.add_argument("--methods", nargs="+", default=["directional", "hierarchical"])
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    warnings.simplefilter("ignore")
    X, truth = make_features()
    print(f"data: {X.shape[0]} x {X.shape[1]} float32, 500 planted clusters")
    print("\n| method | K | workers | end-to-end s | iterations | s / iteration | NMI vs planted |")
    print("|---|---|---|---|---|---|---|")
    times: dict[tuple[str, int, int], float] = {}
    for w in args.workers:
        with (
            LocalCluster(
                n_workers=w,
                threads_per_worker=1,
                processes=True,
                memory_limit="10GB",
                host="127.0.0.1",
                dashboard_address=":0",
            ) as cluster,
            Client(cluster),
        ):
            Xd = da.from_array(X, chunks=(8123, 1000)).persist()
            for method in args.methods:
                for k in args.ks:
                    report = out / f"{method}_K{k}_{w}workers.html"
                    ctx = performance_report(filename=str(report)) if k == max(args.ks) else _null()
                    with ctx:
                        t0 = time.perf_counter()
                        if method == "directional":
                            est = DirectionalClustering(k, random_state=0).fit(Xd)
                            iters = est.n_iter_
                        else:
                            est = HierarchicalLSD(k).fit(Xd)
                            iters = len(est.tree_)
                        labels = est.labels_
                        wall = time.perf_counter() - t0
                    times[(method, k, w)] = wall
                    print(
                        f"| {method} | {k} | {w} | {wall:.1f} | {iters} | "
                        f"{wall / max(iters, 1):.2f} | "
                        f"{metrics.nmi(truth, labels):.3f} |",
                        flush=True,
                    )
    if 1 in args.workers and 2 in args.workers:
        print("\n| method | K | speed-up 1 -> 2 workers |\n|---|---|---|")
        for method in args.methods:
            for k in args.ks:
                print(f"| {method} | {k} | {times[(method, k, 1)] / times[(method, k, 2)]:.2f}x |")


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    main()
