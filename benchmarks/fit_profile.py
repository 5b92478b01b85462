"""One full-size fit per method and K on one thread, from a pipeline's work folder.

The features are what the pipeline clusters: unit rows of U·Σ of a split (``<work>/<split>_U.npy``
and ``_s.npy``). Prints seconds, iterations and seconds per iteration beside the
assignment GEMM bound ``2 n d K`` at the float32 rate measured here on one thread; with
``--profile``, the top of a cProfile of each fit.

With ``--mesh LEFT RIGHT`` (the study's ``.surf.gii`` files; the work folder's mask picks the
kept vertices), directional clustering is also fitted as the pipeline's default method
runs it at every K at once (:class:`~lsd_dask.cluster.MultiScaleParcellation`: one fine
fit at ``oversegment`` × the largest K with the Potts term, then a Ward merge on the mesh
and a Potts refinement at each K), each K's seconds beside the plain fit's, and the whole
split into phases by a profile: the fine fit's plain iterations, the Potts phases (the
fine fit's and the refinements': their score products against the GEMM bound of as many
rounds, and ICM), and the merges against one pass over the mesh's edges.

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
    ap.add_argument(
        "--algorithm",
        help="the estimators' algorithm (default: theirs), e.g. "
        "'lloyd' for spherical k-means' every-row steps",
    )
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
        plain: dict[int, float] = {}
        print(
            "| method | K | seconds | iterations | s / iteration | bound / iteration "
            "| rows checked, last 5 iterations |"
        )
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
                print(
                    f"| {method} | {k} | {sec:.1f} | {it} | {sec / it:.2f} | {bound:.2f} "
                    f"| {share} |"
                )
                if prof:
                    pstats.Stats(prof).sort_stats("cumulative").print_stats(15)
                if method == "directional":
                    plain[k] = sec
        if args.mesh:
            _default_variant(F, plain, args, gflops)


def _default_variant(
    F: np.ndarray, plain: dict[int, float], args: argparse.Namespace, gflops: float
) -> None:
    """Fit directional clustering at every K as the pipeline's default method does, and
    print each K's seconds beside the plain fit's, then the phases of the whole."""
    from lsd_dask.cluster import MultiScaleParcellation
    from lsd_dask.io.surface_files import load_mesh
    from lsd_dask.pipeline.settings.methods import DEFAULT_METHOD, parse_methods
    from lsd_dask.surface import mesh_adjacency

    kept = np.load(args.work / "mask.npy").astype(bool)
    meshes = [load_mesh(p) for p in args.mesh]
    A = mesh_adjacency([m.faces for m in meshes], [m.n_vertices for m in meshes])
    A = A[kept][:, kept].tocsr()
    [spec] = parse_methods([{**DEFAULT_METHOD, "method": "directional"}], {"features": None})
    est = MultiScaleParcellation(spec.estimator(max(args.ks), 0, connectivity=A), args.ks)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    est.fit(F)
    prof.disable()
    total = time.perf_counter() - t0
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]

    def cum(name: str) -> tuple[float, int]:
        hits = [v for key, v in stats.items() if key[2] == name]
        return sum(v[3] for v in hits), sum(v[1] for v in hits)

    n, d = F.shape
    print(f"\nthe default method ({spec.options['oversegment']:g} x the largest K, "
          f"spatial_weight {spec.options['spatial_weight']:g}), every K at once:")  # fmt: skip
    print("| K | plain fit (s) | default (s) | ratio | Potts rounds | note |")
    print("|---|---|---|---|---|---|")
    for k in sorted(est.labels_):
        fine = est.fine_clusters_.get(k)
        note = f"fine fit at {fine} clusters, {est.fine_n_iter_[k]} iterations" if fine else ""
        p = plain.get(k, float("nan"))
        print(f"| {k} | {p:.1f} | {est.seconds_[k]:.1f} | {est.seconds_[k] / p:.2f} "
              f"| {est.n_iter_[k]} | {note} |")  # fmt: skip
    print(f"| all | {sum(plain.values()):.1f} | {total:.1f} | "
          f"{total / sum(plain.values()):.2f} | | |")  # fmt: skip
    plain_it, _ = cum("_fit_directional")
    potts, _ = cum("potts_phase")
    scores, rounds = cum("_times_float64")
    icm, _ = cum("icm")
    moves, _ = cum("component_moves")
    merge, merges = cum("ward_merge")
    # the Potts phases' products: one n × K a round, at each K (its refinement's rounds)
    # and at the fine K (the calls left over; one fine fit when the K's are close)
    refine_rounds = sum(est.n_iter_.values())
    fine_k = max(est.fine_clusters_.values())
    bound = sum(2 * n * d * k * r for k, r in est.n_iter_.items())
    bound += 2 * n * d * fine_k * max(rounds - refine_rounds, 0)
    bound /= gflops * 1e9
    coo = A.tocoo()
    lab = est.labels_[max(est.labels_)]
    t = time.perf_counter()
    for _ in range(10):
        np.count_nonzero(lab[coo.row] != lab[coo.col])
    edge_pass = (time.perf_counter() - t) / 10
    print(
        f"\nphases (s): fine fit's plain iterations {plain_it:.1f}; Potts phases {potts:.1f} "
        f"({rounds} score products {scores:.1f}, their GEMM bound {bound:.1f}; ICM "
        f"{icm:.1f}, region moves {moves:.1f}); "
        f"merges {merge:.2f} ({merges} calls); one pass over the mesh's {coo.nnz // 2} edges "
        f"{edge_pass * 1e3:.1f} ms; float32 GEMM {gflops:.0f} GFLOP/s: a product at K "
        f"costs 2·{n}·{d}·K / rate, {2 * n * d * 400 / (gflops * 1e9):.2f} s at K = 400"
    )


if __name__ == "__main__":
    main()
