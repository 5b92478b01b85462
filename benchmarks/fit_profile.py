"""One full-size fit per method and K on one thread, from a pipeline's work folder.

The features are what the pipeline clusters: unit rows of U·Σ of a split (``<work>/<split>_U.npy``
and ``_s.npy``). Prints seconds, iterations and seconds per iteration beside the
assignment GEMM bound ``2 n d K`` at the float32 rate measured here on one thread; with
``--profile``, the top of a cProfile of each fit.

With ``--mesh LEFT RIGHT`` (the study's ``.surf.gii`` files; the work folder's mask picks the
kept vertices), each method is also fitted as the pipeline's default variant runs it (its
Potts weight, ``oversegment`` × K fine clusters, the Ward merge to K), and the seconds are
split into the fine fit's plain iterations, its Potts phase and the merge, each beside the
plain fit at K.

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
    ap.add_argument("--algorithm", help="the estimators' algorithm (default: theirs), e.g. "
                    "'lloyd' for spherical k-means' every-row steps")
    ap.add_argument("--mesh", type=Path, nargs=2, metavar=("LEFT", "RIGHT"))
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
        spatial: list[tuple[str, int, float, dict[str, float]]] = []
        print("| method | K | seconds | iterations | s / iteration | bound / iteration "
              "| rows checked, last 5 iterations |")
        print("|---|---|---|---|---|---|---|")
        for method in args.methods:
            for k in args.ks:
                est = estimators[method](n_clusters=k, random_state=0)
                if args.algorithm:
                    est.set_params(algorithm=args.algorithm)
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
                checked = getattr(est, "rows_checked_", None)
                share = " ".join(f"{c / n:.2f}" for c in checked[-5:]) if checked else "all"
                print(f"| {method} | {k} | {sec:.1f} | {it} | {sec / it:.2f} | {bound:.2f} "
                      f"| {share} |")
                if prof:
                    pstats.Stats(prof).sort_stats("cumulative").print_stats(15)
                if args.mesh:
                    spatial.append((method, k, sec, _default_variant(F, method, k, args)))
        if spatial:
            _print_spatial(spatial)


#: the functions whose cumulative seconds split a default-variant fit into its phases
PHASES = {"potts": "potts_phase", "merge": "ward_merge"}


def _default_variant(
    F: np.ndarray, method: str, k: int, args: argparse.Namespace
) -> dict[str, float]:
    """Fit ``method`` as the pipeline's default variant at K on the study's mesh; its
    seconds in all and per phase (from a cProfile of the fit)."""
    from lsd_dask.io.surface_files import load_mesh
    from lsd_dask.pipeline.settings.methods import DEFAULT_METHOD, parse_methods
    from lsd_dask.surface import mesh_adjacency

    kept = np.load(args.work / "mask.npy").astype(bool)
    meshes = [load_mesh(p) for p in args.mesh]
    A = mesh_adjacency([m.faces for m in meshes], [m.n_vertices for m in meshes])
    A = A[kept][:, kept].tocsr()
    V = np.concatenate([m.vertices for m in meshes])[kept]
    [spec] = parse_methods([{**DEFAULT_METHOD, "method": method}], {"features": None})
    est = spec.estimator(k, 0, connectivity=A, vertices=V)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    est.fit(F)
    prof.disable()
    out = {"total": time.perf_counter() - t0}
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    for phase, name in PHASES.items():
        out[phase] = sum(v[3] for key, v in stats.items() if key[2] == name)
    out["plain iterations"] = out["total"] - out["potts"] - out["merge"]
    out["fine K"] = float(est.estimator_.estimator_.n_clusters)
    return out


def _print_spatial(rows: list[tuple[str, int, float, dict[str, float]]]) -> None:
    from lsd_dask.pipeline.settings.methods import DEFAULT_METHOD

    opts = ", ".join(f"{k} {v}" for k, v in DEFAULT_METHOD.items() if k not in ("name", "method"))
    print(f"\nthe default variant ({opts}), seconds:")
    print("| method | K | plain fit | fine K | fine fit | Potts phase | merge | total | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for method, k, plain, t in rows:
        print(
            f"| {method} | {k} | {plain:.1f} | {t['fine K']:.0f} | {t['plain iterations']:.1f} "
            f"| {t['potts']:.1f} | {t['merge']:.1f} | {t['total']:.1f} | {t['total'] / plain:.2f} |"
        )


if __name__ == "__main__":
    main()
