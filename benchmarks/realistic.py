"""Methods side by side on realistic cortical data, against scikit-learn KMeans and
mesh-constrained ward (nilearn's approach).

Two data sets:

- ``--data realistic``: the realistic surface study (real conte69 32k mesh, Vos de Wael
  atlas as the truth, HCP group connectivity; 3 + 3 subjects × 300 TRs, 58,558 cortical
  vertices). Features per split: each subject z-scored per vertex, concatenated in time,
  rank-r randomized SVD, unit rows of U·Σ (the pipeline's default ``features: us``; ``--features
  u`` clusters unit rows of U, the paper's protocol).
- ``--data real``: brainspace's real fsaverage5 resting-state run (one subject, 652 TRs,
  20,484 vertices less the 888 constant ones); its first and second halves in time are the
  two splits. No truth: NMI and ARI are between the halves.

The rank is ``max(--rank, K)`` at each K, because LSD's cosine similarity of rank-r
features has at most r positive eigenvalues. Every method of a row sees the same features.

Columns: NMI and ARI against the truth (mean ± sd over both splits and every seed; for the
real run between the halves), split-half Dice after the contiguity split (regions under 20
vertices dropped), the regions per split after that split, and seconds per fit. LSD gives
two rows from one fit: the paper's labels (``lsd_paper``) and the refined labels (the
default). Hierarchical LSD gives its polished leaves (``hierarchical_lsd_leaves``) and the
refined labels from one fit; ``hierarchical_lsd_paper`` is a fit of the paper's algorithm
(closed-form splits, ``split_iter=0``, no refinement). ``*_potts`` rows add a Potts
penalty of ``--spatial-weight`` per cut mesh edge to the assignment step (the pipeline's
``spatial_weight``); ``*_merged`` rows fit ``--oversegment`` × K clusters with that Potts
term and merge them to K with Ward's linkage on the mesh (the pipeline's ``oversegment``).

    python benchmarks/realistic.py --data realistic --ks 100 200 400 --seeds 0 1 2
    python benchmarks/realistic.py --data real --ks 50 100 200 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import itertools
import time
import warnings
from collections import defaultdict
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.extmath import randomized_svd

from lsd_dask import cluster, metrics
from lsd_dask.surface import combine_meshes, smooth_on_mesh, smoothing_steps, split_connected

#: fitted methods; each yields one or more rows of the table
METHODS = (
    "kmeans_sklearn",
    "ward_mesh",
    "spherical_kmeans",
    "spherical_kmeans_potts",
    "directional",
    "directional_potts",
    "directional_potts_merged",
    "spherical_kmeans_potts_merged",
    "directional_paper",
    "lsd",
    "hierarchical_lsd",
    "hierarchical_lsd_paper",
)
#: methods that do not depend on the seed: fitted once per split
DETERMINISTIC = ("ward_mesh",)


def features(study: Any, split: str, rank: int, seed: int, kind: str = "us") -> np.ndarray:
    """Unit-row rank-r SVD features of a realistic study's split (time-concatenated)."""
    xs = [_zscore(study.subject_data(sid)[study.cortex]) for sid in study.splits[split]]
    return _svd_rows(np.concatenate(xs, axis=1), rank, seed, kind)


def fit(
    method: str,
    F: np.ndarray,
    k: int,
    seed: int,
    A: Any,
    beta: float = 2.0,
    oversegment: float = 2.0,
) -> dict[str, np.ndarray]:
    """Fit one method; returns its row name(s) mapped to labels."""
    if method.endswith("_merged"):  # oversegment × K clusters, Ward-merged to K on the mesh
        kind = cluster.DirectionalClustering if "directional" in method else cluster.SphericalKMeans
        est = cluster.WardMerge(
            kind(spatial_weight=beta, connectivity=A),
            k,
            oversegment=oversegment,
            connectivity=A,
            random_state=seed,
        )
        return {method: est.fit(F).labels_}
    if method == "kmeans_sklearn":
        from sklearn.cluster import KMeans

        return {method: KMeans(k, n_init=1, random_state=seed).fit(F).labels_}
    if method == "ward_mesh":
        from sklearn.cluster import AgglomerativeClustering

        return {method: AgglomerativeClustering(k, linkage="ward", connectivity=A).fit(F).labels_}
    if method == "spherical_kmeans":
        return {method: cluster.SphericalKMeans(k, random_state=seed).fit(F).labels_}
    if method == "spherical_kmeans_potts":
        est = cluster.SphericalKMeans(k, spatial_weight=beta, connectivity=A, random_state=seed)
        return {method: est.fit(F).labels_}
    if method == "directional_potts":
        est = cluster.DirectionalClustering(
            k, spatial_weight=beta, connectivity=A, random_state=seed
        )
        return {method: est.fit(F).labels_}
    if method == "directional":
        return {method: cluster.DirectionalClustering(k, random_state=seed).fit(F).labels_}
    if method == "directional_paper":
        est = cluster.DirectionalClustering(k, update="gradient", random_state=seed)
        return {method: est.fit(F).labels_}
    if method == "lsd":
        est = cluster.LSD(k, random_state=seed).fit(F)
        return {"lsd_paper": est.lsd_labels_, "lsd": est.labels_}
    if method == "hierarchical_lsd":
        est = cluster.HierarchicalLSD(k, random_state=seed).fit(F)
        return {"hierarchical_lsd_leaves": est.leaf_labels_, "hierarchical_lsd": est.labels_}
    if method == "hierarchical_lsd_paper":  # closed-form splits, no refinement: section 3.3
        est = cluster.HierarchicalLSD(k, split_iter=0, refine=None, random_state=seed)
        return {method: est.fit(F).labels_}
    raise ValueError(f"unknown method {method!r}")


def realistic_data(args: argparse.Namespace) -> dict[str, Any]:
    from lsd_dask.datasets import realistic_study

    atlas = getattr(args, "atlas", "vosdewael")
    # evaluation.py's --seed draws the study too (its subjects and noise); realistic.py's
    # seeds vary the fits on the one study of seed 0
    seed = getattr(args, "seed", 0)
    study = realistic_study(atlas=atlas, scale=args.scale, snr=args.snr, random_state=seed)
    combined, _ = combine_meshes(study.meshes)
    cols = {s: _split_matrix(study, s) for s in study.splits}
    return {
        "title": (
            f"realistic study (seed {seed}): conte69, {atlas}_{args.scale} truth, 3+3 subjects x "
            f"{study.n_timepoints} TRs, SNR {args.snr}, {int(study.cortex.sum())} vertices"
        ),
        "A": combined.adjacency()[study.cortex][:, study.cortex].tocsr(),
        "V": combined.vertices[study.cortex],
        "truth": study.labels[study.cortex],
        "columns": cols,
        "widths": {s: [study.n_timepoints] * len(study.splits[s]) for s in study.splits},
    }


def real_data(args: argparse.Namespace) -> dict[str, Any]:
    import nibabel as nib

    from lsd_dask.datasets.templates import brainspace_data, load_template

    run = "preprocessing/sub-010188_ses-02_task-rest_acq-AP_run-01.fsa5.{}.mgz"
    hemis = [nib.load(brainspace_data(run.format(h))).dataobj for h in ("lh", "rh")]
    x = np.concatenate([np.asarray(d).squeeze() for d in hemis]).astype(np.float64)
    half = x.shape[1] // 2
    halves = {"split1": x[:, :half], "split2": x[:, half : 2 * half]}
    keep = np.all([h.std(axis=1) > 0 for h in halves.values()], axis=0)
    combined, _ = combine_meshes(load_template("fsaverage5").meshes)
    return {
        "title": (
            f"brainspace real fsaverage5 run: 1 subject, halves of {half} TRs as the splits, "
            f"{int(keep.sum())} of {keep.size} vertices (constant ones dropped)"
        ),
        "A": combined.adjacency()[keep][:, keep].tocsr(),
        "V": combined.vertices[keep],
        "truth": None,
        "columns": {s: _zscore(h[keep]) for s, h in halves.items()},
        "widths": {s: [half] for s in halves},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", choices=("realistic", "real"), default="realistic")
    ap.add_argument("--ks", type=int, nargs="+", default=None)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--scale", type=int, default=400, help="Parcels of the atlas (the truth).")
    ap.add_argument(
        "--atlas",
        choices=("vosdewael", "schaefer"),
        default="vosdewael",
        help="The truth: Vos de Wael (tuned on) or Schaefer (kept for independent checks).",
    )
    ap.add_argument("--rank", type=int, default=100, help="Least rank; max(rank, K) is used.")
    ap.add_argument("--snr", type=float, default=0.5)
    ap.add_argument(
        "--features", choices=("us", "u"), default="us", help="Rows of U·Σ or of U (unit rows)."
    )
    ap.add_argument(
        "--spatial-weight", type=float, default=2.0, help="Potts weight of the *_potts rows."
    )
    ap.add_argument(
        "--oversegment",
        type=float,
        default=2.0,
        help="Fine clusters per cluster of the *_merged rows (the pipeline's oversegment).",
    )
    ap.add_argument(
        "--smooth-mm",
        nargs="+",
        default=[],
        help="Also fit every method on features blurred along the mesh by this FWHM (mm); "
        "rows '<method>+smooth<mm>' (the pipeline's feature_smoothing_mm). 'auto': the blur "
        "each split's halves choose at the smallest K (lsd_dask.selection).",
    )
    ap.add_argument(
        "--only-smoothed",
        action="store_true",
        help="Fit only the --smooth-mm variants (and ward, which is never blurred).",
    )
    args = ap.parse_args()
    # capped runs (spherical k-means' 100 iterations) are part of what is measured
    warnings.simplefilter("ignore", ConvergenceWarning)
    ks = args.ks or ([100, 200, 400] if args.data == "realistic" else [50, 100, 200])
    data = realistic_data(args) if args.data == "realistic" else real_data(args)
    truth, A = data["truth"], data["A"]
    print(data["title"])
    rows = "U·Σ" if args.features == "us" else "U"
    print(f"features: unit rows of {rows}; Potts weight of the *_potts rows: {args.spatial_weight}")
    against = "truth" if truth is not None else "the other half"
    print(f"NMI and ARI against {against}; mean ± sd over splits and seeds {args.seeds}")
    print("| K | rank | method | NMI | ARI | Dice | regions (split 1/2) | s per fit |")
    print("|---|---|---|---|---|---|---|---|")
    data["k_auto"] = min(ks)
    auto = (
        {}
        if "auto" not in args.smooth_mm
        else {s: _auto_blur(data, s, max(args.rank, min(ks))) for s in data["columns"]}
    )
    for k in ks:
        rank = max(args.rank, k)
        base = {s: _svd_rows(X, rank, 0, args.features) for s, X in data["columns"].items()}
        variants = [("", base)] + [
            (
                f"+smooth{mm}",
                {
                    s: _smoothed(F, data, auto[s] if mm == "auto" else float(mm))
                    for s, F in base.items()
                },
            )
            for mm in args.smooth_mm
        ]
        for (suffix, feats), method in itertools.product(variants, args.methods):
            if suffix and method == "ward_mesh":
                continue  # ward already follows the mesh
            if not suffix and args.only_smoothed and method != "ward_mesh":
                continue
            rows: dict[str, list[dict[str, np.ndarray]]] = defaultdict(list)
            secs = []
            seeds = args.seeds[:1] if method in DETERMINISTIC else args.seeds
            for seed in seeds:
                per_split: dict[str, dict[str, np.ndarray]] = {}
                for s, F in feats.items():
                    t0 = time.perf_counter()
                    per_split[s] = fit(method, F, k, seed, A, args.spatial_weight, args.oversegment)
                    secs.append(time.perf_counter() - t0)
                for name in per_split["split1"]:
                    rows[name].append({s: np.asarray(v[name]) for s, v in per_split.items()})
            for name, runs in rows.items():
                line = _row(k, rank, name + suffix, runs, truth, A, float(np.mean(secs)))
                print(line, flush=True)


# --------------------------------------------------------------------------- helpers


def _row(
    k: int,
    rank: int,
    name: str,
    runs: list[dict[str, np.ndarray]],
    truth: np.ndarray | None,
    A: Any,
    secs: float,
) -> str:
    nmi, ari, dice, regions = [], [], [], []
    for labs in runs:
        a, b = labs["split1"], labs["split2"]
        pairs = [(truth, a), (truth, b)] if truth is not None else [(a, b)]
        nmi += [metrics.nmi(x, y) for x, y in pairs]
        ari += [metrics.ari(x, y) for x, y in pairs]
        pa, pb = (split_connected(v + 1, A, min_size=20) for v in (a, b))
        d = metrics.dice_matched(pa, pb, background=0)
        dice.append(d.mean)
        regions.append(d.n_regions)
    reg = np.mean(regions, axis=0)
    return (
        f"| {k} | {rank} | {name} | {np.mean(nmi):.3f} ± {np.std(nmi):.3f} | "
        f"{np.mean(ari):.3f} | {np.mean(dice):.4f} | {reg[0]:.0f}/{reg[1]:.0f} | {secs:.1f} |"
    )


def _auto_blur(data: dict[str, Any], split: str, rank: int) -> float:
    """The blur a split's two halves choose at the smallest K (the pipeline's
    ``feature_smoothing_mm: auto``); prints the choice."""
    from lsd_dask.selection import choose_feature_blur, half_columns

    X = data["columns"][split]
    halves = [X[:, cols] for cols in half_columns(data["widths"][split])]
    Fa, Fb = (_svd_rows(h, min(rank, h.shape[1]), 0) for h in halves)
    k = data["k_auto"]
    choice = choose_feature_blur(Fa, Fb, data["V"], data["A"], k, random_state=0)
    print(f"{split}: feature_smoothing_mm auto at K={k}: {choice.to_dict()}", flush=True)
    return choice.fwhm_mm


def _smoothed(F: np.ndarray, data: dict[str, Any], mm: float) -> np.ndarray:
    """Unit-row features blurred along the mesh by ``mm`` FWHM, unit rows again."""
    if not mm:
        return F
    steps = smoothing_steps(data["V"], data["A"], mm)
    G = smooth_on_mesh(F, data["A"], n_iter=steps)
    return G / np.linalg.norm(G, axis=1, keepdims=True)


def _zscore(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    x -= x.mean(axis=1, keepdims=True)
    x /= x.std(axis=1, keepdims=True)
    return x.astype(np.float32)


def _split_matrix(study: Any, split: str) -> np.ndarray:
    return np.concatenate(
        [_zscore(study.subject_data(sid)[study.cortex]) for sid in study.splits[split]], axis=1
    )


def _svd_rows(X: np.ndarray, rank: int, seed: int, kind: str = "us") -> np.ndarray:
    """Unit rows of U·Σ (``kind="us"``) or of U (``"u"``) of a rank-r randomized SVD."""
    U, S, _ = randomized_svd(X, rank, n_iter=2, random_state=seed)
    F = U * S if kind == "us" else U
    return F / np.linalg.norm(F, axis=1, keepdims=True)


if __name__ == "__main__":
    main()
