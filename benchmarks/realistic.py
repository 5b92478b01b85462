"""Methods side by side on the realistic surface study (real conte69 mesh, Vos de Wael atlas
as the truth, HCP group connectivity), against scikit-learn KMeans and mesh-constrained ward.

Features per split: every subject z-scored per vertex, concatenated in time, rank-r
randomized SVD, unit rows (as the pipeline does). Columns: NMI and ARI of split 1 against
the truth, split-half Dice after the contiguity split (regions under 20 vertices dropped),
regions per split after that split, seconds per fit (mean of the two splits).

    python benchmarks/realistic.py --ks 100 200 400 --seeds 0 1 2
    python benchmarks/realistic.py --ks 100 --methods kmeans spherical_kmeans directional
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from sklearn.utils.extmath import randomized_svd

from lsd_dask import cluster, metrics
from lsd_dask.datasets import realistic_study
from lsd_dask.surface import combine_meshes, split_connected

METHODS = (
    "kmeans_sklearn",
    "ward_mesh",
    "spherical_kmeans",
    "directional",
    "directional_paper",
    "lsd",
    "hierarchical_lsd",
)


def features(study, split: str, rank: int, seed: int) -> np.ndarray:
    xs = []
    for sid in study.splits[split]:
        x = study.subject_data(sid)[study.cortex].astype(np.float64)
        x -= x.mean(axis=1, keepdims=True)
        x /= x.std(axis=1, keepdims=True)
        xs.append(x.astype(np.float32))
    U, _, _ = randomized_svd(np.concatenate(xs, axis=1), rank, n_iter=2, random_state=seed)
    return U / np.linalg.norm(U, axis=1, keepdims=True)


def fit(method: str, F: np.ndarray, k: int, seed: int, A) -> np.ndarray:
    if method == "kmeans_sklearn":
        from sklearn.cluster import KMeans

        return KMeans(k, n_init=1, random_state=seed).fit(F).labels_
    if method == "ward_mesh":
        from sklearn.cluster import AgglomerativeClustering

        return AgglomerativeClustering(k, linkage="ward", connectivity=A).fit(F).labels_
    est = {
        "spherical_kmeans": lambda: cluster.SphericalKMeans(k, random_state=seed),
        "directional": lambda: cluster.DirectionalClustering(k, random_state=seed),
        "directional_paper": lambda: cluster.DirectionalClustering(
            k, update="gradient", random_state=seed
        ),
        "lsd": lambda: cluster.LSD(k, random_state=seed),
        "hierarchical_lsd": lambda: cluster.HierarchicalLSD(k, random_state=seed),
    }[method]()
    return np.asarray(est.fit(F).labels_)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ks", type=int, nargs="+", default=[100, 200, 400])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--scale", type=int, default=400, help="Vos de Wael parcels (the truth).")
    ap.add_argument("--rank", type=int, default=100)
    ap.add_argument("--snr", type=float, default=0.5)
    args = ap.parse_args()
    study = realistic_study(scale=args.scale, snr=args.snr, random_state=0)
    combined, _ = combine_meshes(study.meshes)
    A = combined.adjacency()[study.cortex][:, study.cortex].tocsr()
    truth = study.labels[study.cortex]
    feats = {s: features(study, s, args.rank, 0) for s in study.splits}
    print(
        f"realistic study: conte69, vosdewael_{args.scale} truth, 3+3 subjects x "
        f"{study.n_timepoints} TRs, SNR {args.snr}, rank {args.rank}, "
        f"{int(study.cortex.sum())} vertices"
    )
    print("| method | K | seed | NMI | ARI | Dice | regions (split 1/2) | s per fit |")
    print("|---|---|---|---|---|---|---|---|")
    for k in args.ks:
        for method in args.methods:
            for seed in args.seeds:
                labs, secs = {}, []
                try:
                    for s, F in feats.items():
                        t0 = time.perf_counter()
                        labs[s] = fit(method, F, k, seed, A)
                        secs.append(time.perf_counter() - t0)
                except ValueError as err:
                    print(f"| {method} | {k} | {seed} | fails: {str(err)[:80]} |||||")
                    continue
                pa, pb = (split_connected(labs[s] + 1, A, min_size=20) for s in feats)
                a = labs["split1"]
                dice = metrics.dice_matched(pa, pb, background=0)
                print(
                    f"| {method} | {k} | {seed} | {metrics.nmi(truth, a):.3f} | "
                    f"{metrics.ari(truth, a):.3f} | {dice.mean:.3f} | "
                    f"{dice.n_regions[0]}/{dice.n_regions[1]} | {np.mean(secs):.1f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
