r"""Can the data choose the feature blur (``feature_smoothing_mm``)? Two criteria, each
computed within one split from the two halves of its time points (alternate blocks of 50
columns, so every subject is in both halves), over a grid of FWHM in mm:

- ``correlation``: how well one half's blurred rank-r correlations predict the other
  half's unblurred ones, ``||G C_a G' - C_b||²`` off the diagonal, from r × r Gram matrices
  (never n × n);
- ``homogeneity``: how well a parcellation of one half's blurred features explains the
  other half's unblurred ones: the within-parcel sum of squares of the other half's unit
  rows under the first half's labels (spherical k-means with its Potts term, weight 2, at
  K), averaged both ways.

The chosen blur is the grid value with the least error. (The pipeline's
``feature_smoothing_mm: auto``, :mod:`lsd_dask.selection`, grew out of the second criterion:
``benchmarks/realistic.py --smooth-mm auto`` measures it.) The realistic study's truth
prefers no blur at all (``benchmarks/realistic.py --smooth-mm``); brainspace's real run
reproduces best with 20 mm. A useful criterion picks about 0 on the first and about 20 on
the second.

    python -m benchmarks.blur_selection --data real --criterion correlation homogeneity \
        --ks 50 100 200
    python -m benchmarks.blur_selection --data realistic --criterion correlation homogeneity \
        --ks 100 200 400
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from benchmarks.realistic import _smoothed, _svd_rows, real_data, realistic_data
from lsd_dask import cluster
from lsd_dask.selection import within_sum_of_squares

GRID_MM = (0.0, 5.0, 10.0, 20.0)


def halves(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two halves of the columns: alternate blocks of 50 time points."""
    block = (np.arange(X.shape[1]) // 50) % 2
    return X[:, block == 0], X[:, block == 1]


def correlation_error(P: np.ndarray, Q: np.ndarray) -> float:
    """``||P P' - Q Q'||²`` off the diagonal, per n², from Gram matrices."""
    gram = [np.linalg.norm(a.T @ b) ** 2 for a, b in ((P, P), (Q, Q), (P, Q))]
    total = gram[0] + gram[1] - 2 * gram[2]
    diag = np.sum((np.einsum("ij,ij->i", P, P) - np.einsum("ij,ij->i", Q, Q)) ** 2)
    return float((total - diag) / P.shape[0] ** 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", choices=("realistic", "real"), default="real")
    ap.add_argument(
        "--criterion", nargs="+", choices=("correlation", "homogeneity"), default=["homogeneity"]
    )
    ap.add_argument("--ks", type=int, nargs="+", default=[100])
    ap.add_argument("--rank", type=int, default=100, help="Least rank; max(rank, K) is used.")
    ap.add_argument("--scale", type=int, default=400)
    ap.add_argument("--snr", type=float, default=0.5)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="The fits' seeds.")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    data = realistic_data(args) if args.data == "realistic" else real_data(args)
    print(data["title"])
    print(
        "| criterion | K | split | seed | "
        + " | ".join(f"{h:g} mm" for h in GRID_MM)
        + " | chosen |"
    )
    print("|---|---|---|---|" + "---|" * (len(GRID_MM) + 1))
    for k in args.ks:
        rank = max(args.rank, k)
        for split, X in data["columns"].items():
            Xa, Xb = halves(X)
            for crit, seed in ((c, s) for c in args.criterion for s in args.seeds):
                unit = crit == "homogeneity"
                Fa, Fb = (_features(x, rank, unit) for x in (Xa, Xb))
                errs = [_error(crit, Fa, Fb, h, k, data, unit, seed) for h in GRID_MM]
                best = GRID_MM[int(np.argmin(errs))]
                cells = " | ".join(f"{e:.5g}" for e in errs)
                print(f"| {crit} | {k} | {split} | {seed} | {cells} | {best:g} mm |", flush=True)


def _features(X: np.ndarray, rank: int, unit: bool) -> np.ndarray:
    """Unit rows of U·Σ (clustering), or U·Σ/√T (the rank-r correlations' factor)."""
    if unit:
        return _svd_rows(X, rank, 0)
    from sklearn.utils.extmath import randomized_svd

    U, S, _ = randomized_svd(X, rank, n_iter=2, random_state=0)
    return U * S / np.sqrt(X.shape[1])


def _blur(F: np.ndarray, mm: float, data: dict, unit: bool) -> np.ndarray:
    if not mm:
        return F
    if unit:
        return _smoothed(F, data, mm)
    from lsd_dask.surface import smooth_on_mesh, smoothing_steps

    return smooth_on_mesh(F, data["A"], n_iter=smoothing_steps(data["V"], data["A"], mm))


def _error(
    crit: str, Fa: np.ndarray, Fb: np.ndarray, mm: float, k: int, data: dict, unit: bool, seed: int
) -> float:
    """The criterion both ways (a predicts b, b predicts a), averaged."""
    if crit == "correlation":
        return 0.5 * (
            correlation_error(_blur(Fa, mm, data, unit), Fb)
            + correlation_error(_blur(Fb, mm, data, unit), Fa)
        )

    def fit(F: np.ndarray) -> np.ndarray:
        est = cluster.SphericalKMeans(
            k, spatial_weight=2, connectivity=data["A"], random_state=seed
        )
        return est.fit(_blur(F, mm, data, unit)).labels_

    return 0.5 * (within_sum_of_squares(Fb, fit(Fa)) + within_sum_of_squares(Fa, fit(Fb)))


if __name__ == "__main__":
    main()
