"""Every method and option beside the published atlases, on the field's measures.

    python benchmarks/evaluation.py --data realistic --ks 100 200 400
    python benchmarks/evaluation.py --data real --ks 100 200 400
    python benchmarks/evaluation.py --ks 100 200 400 --spatial-weight 1 --oversegment 3 \
        --methods directional_potts_merged --fixed-rank --rank 400 --shared
        --shared-oversegment 2

Each method (``benchmarks/realistic.py``'s fits, on unit rows of U·Σ at rank max(100, K))
is fitted on each split, and each split's labels are scored on the **other** split's
data: unit rows of U·Σ of a rank-``--eval-rank`` SVD of the held-out split, the same for
every method and K. The measures are the pipeline's (:mod:`lsd_dask.evaluation`):
held-out homogeneity (CBIG), DCBC over the pairs within 35 mm along the mesh (1 mm bins),
the neighbour silhouette, each with its z against ``--spins`` spins
(:class:`lsd_dask.evaluation.SpinNull` with the pipeline's samples); the mean of the two
directions. Beside them: split-half Dice (matched, after the contiguity split), NMI
against the truth (the realistic study), regions per split.

On the realistic study (32k_fs_LR), brainspace's Schaefer and Vos de Wael atlases at the
same K are scored on both splits' data the same way; the truth is one of them
(``--atlas``, Vos de Wael by default: tuned on; Schaefer is the independent check). On the
real fsaverage5 run no atlas is shown: brainspace ships them for 32k_fs_LR only, and
nothing here resamples between meshes.

The last lines give the seconds each measure took, per parcellation and direction.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections import defaultdict
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from benchmarks.realistic import (
    _auto_blur,
    _smoothed,
    _svd_rows,
    fit,
    real_data,
    realistic_data,
)
from lsd_dask import evaluation as ev
from lsd_dask import metrics
from lsd_dask.pipeline.stages.held_out import BIN_WIDTH_MM, MAX_DIST_MM, NULL_PAIRS, NULL_VERTICES
from lsd_dask.spin import find_spheres
from lsd_dask.surface import split_connected

DEFAULT_METHODS = [
    "ward_mesh",
    "kmeans_sklearn",
    "spherical_kmeans",
    "directional",
    "directional_potts",
    "directional_potts_merged",
]
MEASURES = ("homogeneity", "dcbc", "silhouette")
#: the --shared variant's name in the tables
MULTISCALE = "directional_potts_multiscale"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", choices=("realistic", "real"), default="realistic")
    ap.add_argument("--ks", type=int, nargs="+", default=[100, 200, 400])
    ap.add_argument("--methods", nargs="+", default=DEFAULT_METHODS)
    ap.add_argument("--seed", type=int, default=0, help="Draws the realistic study and the fits.")
    ap.add_argument("--rank", type=int, default=100, help="Least fit rank; max(rank, K) used.")
    ap.add_argument("--eval-rank", type=int, default=300, help="Rank of the held-out data.")
    ap.add_argument("--spins", type=int, default=1000)
    ap.add_argument("--atlas", choices=("vosdewael", "schaefer"), default="vosdewael")
    ap.add_argument("--scale", type=int, default=400)
    ap.add_argument("--snr", type=float, default=0.5)
    ap.add_argument("--spatial-weight", type=float, default=2.0)
    ap.add_argument("--oversegment", type=float, default=2.0)
    ap.add_argument(
        "--fixed-rank",
        action="store_true",
        help="Fit every K on features of rank --rank (the pipeline's one rank), not "
        "max(--rank, K).",
    )
    ap.add_argument(
        "--shared",
        action="store_true",
        help=f"Add {MULTISCALE}: one fit per split at --shared-oversegment times the "
        "largest K, merged by Ward's linkage on the mesh and refined at every K, largest "
        "first (MultiScaleParcellation; needs --fixed-rank).",
    )
    ap.add_argument("--shared-oversegment", type=float, default=2.0)
    ap.add_argument(
        "--smooth-mm",
        default="0",
        help="Blur the fitted features along the mesh by this FWHM (mm) for every method but "
        "ward (the pipeline's feature_smoothing_mm); 'auto': the blur each split's halves "
        "choose at the smallest K. The held-out data are never blurred.",
    )
    args = ap.parse_args()
    warnings.simplefilter("ignore", ConvergenceWarning)
    data = realistic_data(args) if args.data == "realistic" else real_data(args)
    kept, meshes = _kept_and_meshes(args)
    A, V, truth = data["A"], data["V"], data["truth"]
    print(data["title"])
    t0 = time.perf_counter()
    pairs = ev.geodesic_pairs(V, A, MAX_DIST_MM, n_jobs=2)
    timing: dict[str, list[float]] = defaultdict(list)
    timing["pairs (once)"].append(time.perf_counter() - t0)
    held = {s: _svd_rows(X, args.eval_rank, 0) for s, X in data["columns"].items()}
    corr = {s: ev.pair_correlations(Z, pairs) for s, Z in held.items()}
    spheres = find_spheres(meshes)["spheres"]
    t0 = time.perf_counter()
    first, second = list(held)
    null = ev.SpinNull(held[first], pairs, corr[first], spheres, kept, n_spins=args.spins,
                       n_vertices=NULL_VERTICES, n_pairs=NULL_PAIRS,
                       bin_width=BIN_WIDTH_MM, random_state=[0, 2])  # fmt: skip
    nulls = {first: null, second: null.with_data(held[second], corr[second])}
    timing["spin null setup (once)"].append(time.perf_counter() - t0)

    def score(labels_kept: np.ndarray, on: str) -> dict[str, dict[str, Any]]:
        full = np.zeros(kept.size, np.int64)
        full[kept] = labels_kept
        out = {}
        for m, f in (
            ("homogeneity", lambda: ev.homogeneity(held[on], labels_kept)),
            ("dcbc", lambda: ev.dcbc(labels_kept, pairs, corr[on], bin_width=BIN_WIDTH_MM).value),
            ("silhouette", lambda: ev.neighbour_silhouette(held[on], labels_kept, A)),
        ):
            t = time.perf_counter()
            out[m] = {"value": float(f())}
            timing[m].append(time.perf_counter() - t)
        t = time.perf_counter()
        zs = nulls[on].z_scores(full, A)
        timing[f"{args.spins} spins, three measures"].append(time.perf_counter() - t)
        for m in MEASURES:
            out[m]["z"] = zs[m]["z"]
        return out

    print(f"held-out data: unit rows of U·Σ at rank {args.eval_rank}; {len(pairs)} pairs "
          f"within {MAX_DIST_MM:g} mm; z against {args.spins} spins")  # fmt: skip
    print("| K | method | regions | homogeneity (z) | DCBC (z) | silhouette (z) | Dice | NMI |")
    print("|---|---|---|---|---|---|---|---|")
    data["k_auto"] = min(args.ks)
    blur = {
        s: _auto_blur(data, s, max(args.rank, min(args.ks)))
        if args.smooth_mm == "auto"
        else float(args.smooth_mm)
        for s in data["columns"]
    }
    if args.shared and not args.fixed_rank:
        ap.error("--shared needs --fixed-rank: one fit serves every K on one set of features")
    shared: dict[str, Any] = {}
    for k in args.ks:
        rank = args.rank if args.fixed_rank else max(args.rank, k)
        feats = {s: _svd_rows(X, rank, 0) for s, X in data["columns"].items()}
        blurred = {s: _smoothed(F, data, blur[s]) for s, F in feats.items()}
        if args.shared and not shared:
            t = time.perf_counter()
            shared = {s: _multiscale(F, args, A) for s, F in blurred.items()}
            timing["multiscale: every K (per split)"].append(
                (time.perf_counter() - t) / len(shared)
            )
        methods = [*args.methods, *([MULTISCALE] if shared else [])]
        for method in methods:
            on = feats if method == "ward_mesh" else blurred  # ward already follows the mesh
            if method == MULTISCALE:
                labs = {s: {method: est.labels_[k]} for s, est in shared.items()}
            else:
                t = time.perf_counter()
                labs = {s: fit(method, F, k, args.seed, A, args.spatial_weight,
                               args.oversegment) for s, F in on.items()}  # fmt: skip
                timing[f"fit {method} (per split and K)"].append(
                    (time.perf_counter() - t) / len(labs)
                )
            for name in labs[first]:
                a, b = labs[first][name] + 1, labs[second][name] + 1
                both = [score(a, second), score(b, first)]
                pa, pb = (split_connected(x, A, min_size=20) for x in (a, b))
                dice = metrics.dice_matched(pa, pb, background=0)
                nmi = (
                    np.mean([metrics.nmi(truth, x) for x in (a, b)]) if truth is not None else None
                )
                print(_line(k, name, f"{dice.n_regions[0]}/{dice.n_regions[1]}", both,
                            dice.mean, nmi), flush=True)  # fmt: skip
        if args.data == "realistic":
            from lsd_dask.datasets.templates import ATLASES, load_atlas

            for atlas in ATLASES:
                if k not in ATLASES[atlas]:
                    continue
                lab = load_atlas(atlas, k)[kept]
                both = [score(lab, first), score(lab, second)]
                tag = " (truth)" if atlas == args.atlas and k == args.scale else ""
                nmi = metrics.nmi(truth, lab)
                print(_line(k, f"atlas {atlas}_{k}{tag}", str(np.unique(lab[lab > 0]).size),
                            both, None, nmi), flush=True)  # fmt: skip
    print("\n| step | seconds (mean per parcellation and direction) |\n|---|---|")
    for name, secs in timing.items():
        print(f"| {name} | {np.mean(secs):.2f} |")


def _multiscale(F: np.ndarray, args: argparse.Namespace, A: Any) -> Any:
    """Directional clustering with the Potts term, one fine fit at ``--shared-oversegment``
    × the largest K, merged and refined at every K (:class:`MultiScaleParcellation`)."""
    from lsd_dask import cluster

    one = cluster.MeshParcellation(
        cluster.DirectionalClustering(), connectivity=A, spatial_weight=args.spatial_weight,
        oversegment=args.shared_oversegment, random_state=args.seed,
    )  # fmt: skip
    return cluster.MultiScaleParcellation(one, args.ks).fit(F)


def _kept_and_meshes(args: argparse.Namespace) -> tuple[np.ndarray, dict[str, Any]]:
    """The kept vertices over the whole surface, and the meshes (for the spheres)."""
    from lsd_dask.datasets.templates import brainspace_data, load_template

    if args.data == "realistic":
        template = load_template("conte69")
        return template.cortex, template.meshes
    import nibabel as nib

    run = "preprocessing/sub-010188_ses-02_task-rest_acq-AP_run-01.fsa5.{}.mgz"
    x = np.concatenate(
        [np.asarray(nib.load(brainspace_data(run.format(h))).dataobj).squeeze()
         for h in ("lh", "rh")]
    )  # fmt: skip
    half = x.shape[1] // 2
    keep = (x[:, :half].std(axis=1) > 0) & (x[:, half : 2 * half].std(axis=1) > 0)
    return keep, load_template("fsaverage5").meshes


def _line(
    k: int,
    name: str,
    regions: str,
    both: list[dict[str, dict[str, Any]]],
    dice: float | None,
    nmi: float | None,
) -> str:
    cells = []
    for m in MEASURES:
        v = np.mean([d[m]["value"] for d in both])
        zs = [d[m]["z"] for d in both]
        z = f" ({np.mean(zs):.1f})" if all(x is not None for x in zs) else ""
        cells.append(f"{v:.3f}{z}")
    d = "–" if dice is None else f"{dice:.3f}"
    n = "–" if nmi is None else f"{nmi:.3f}"
    return f"| {k} | {name} | {regions} | {' | '.join(cells)} | {d} | {n} |"


if __name__ == "__main__":
    main()
