"""One full-size fit per method and K on one thread, from a pipeline's work folder.

The features are what the pipeline clusters: unit rows of U·Σ of a split (``<work>/<split>_U.npy``
and ``_s.npy``). Prints seconds, iterations and seconds per iteration beside the
assignment GEMM bound ``2 n d K`` at the float32 rate measured here on one thread; with
``--profile``, the top of a cProfile of each fit.

Run: ``python benchmarks/fit_profile.py --work /work/full/study/e2e-2w/work --ks 100 400``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits


def main() -> None:
    from lsd_dask.cluster import DirectionalClustering, SphericalKMeans
    from lsd_dask.similarity import unit_rows

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--split", default="split1")
    ap.add_argument("--ks", type=int, nargs="+", default=[100, 400])
    ap.add_argument("--methods", nargs="+", default=["directional", "spherical_kmeans"])
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    U = np.load(args.work / f"{args.split}_U.npy")
    F = unit_rows(U * np.load(args.work / f"{args.split}_s.npy").astype(U.dtype))
    n, d = F.shape
    estimators = {"directional": DirectionalClustering, "spherical_kmeans": SphericalKMeans}
    with threadpool_limits(1):
        a = np.random.default_rng(0).standard_normal((4000, 4000), dtype=np.float32)
        b = a[:, :1000].copy()
        a @ b
        t0 = time.perf_counter()
        a @ b
        gflops = 2 * 4000 * 4000 * 1000 / (time.perf_counter() - t0) / 1e9
        print(f"{n} x {d} features; float32 GEMM {gflops:.0f} GFLOP/s on one thread")
        print("| method | K | seconds | iterations | s / iteration | bound / iteration |")
        print("|---|---|---|---|---|---|")
        for method in args.methods:
            for k in args.ks:
                est = estimators[method](n_clusters=k, random_state=0)
                prof = cProfile.Profile() if args.profile else None
                t0 = time.perf_counter()
                if prof:
                    prof.enable()
                est.fit(F)
                if prof:
                    prof.disable()
                sec = time.perf_counter() - t0
                it = int(est.n_iter_)
                bound = 2 * n * d * k / (gflops * 1e9)
                print(f"| {method} | {k} | {sec:.1f} | {it} | {sec / it:.2f} | {bound:.2f} |")
                if prof:
                    pstats.Stats(prof).sort_stats("cumulative").print_stats(15)


if __name__ == "__main__":
    main()
