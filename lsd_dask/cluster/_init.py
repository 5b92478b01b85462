"""Seeding shared by the iterative clusterers: k-means++ on a seeded subsample."""

from __future__ import annotations

import numpy as np

from .._validation import Array, to_numpy
from ..similarity import unit_rows

__all__ = ["kmeanspp_rows", "sample_rows"]

#: rows used for seeding; numpy and dask input use the same rows, so they seed alike
SEED_SAMPLE = 20000


def sample_rows(X: Array, rng: np.random.Generator, n_max: int = SEED_SAMPLE) -> np.ndarray:
    """A seeded, sorted subsample of row indices (all rows when n <= n_max)."""
    n = X.shape[0]
    if n <= n_max:
        return np.arange(n)
    return np.sort(rng.choice(n, size=n_max, replace=False))


def kmeanspp_rows(
    X: Array,
    k: int,
    rng: np.random.Generator,
    *,
    metric: str = "cosine",
    n_local_trials: int | None = None,
) -> np.ndarray:
    """Greedy k-means++ seeding (D² sampling) on a subsample of the rows of X.

    Each new centre is the best of ``n_local_trials`` D²-sampled candidates: the one that
    lowers the summed distance to the nearest centre most (Arthur and Vassilvitskii's
    greedy variant, scikit-learn's default). On the realistic 32k-surface study at
    K = 400 it lifts spherical k-means' NMI from 0.951 to the level of scikit-learn's KMeans
    (see ``docs/benchmarks.md``).

    Parameters
    ----------
    metric : {"cosine", "euclidean"}
        "cosine" uses ``1 - x·c`` on unit rows (spherical k-means, directional clustering).
    n_local_trials : int or None
        Candidates per centre; None: ``2 + int(log(k))``. 1 is plain k-means++.

    Returns
    -------
    ndarray of shape (k, n_features), float64
        Rows of the subsample (in float32 precision for float32 ``X``).
    """
    idx = sample_rows(X, rng)
    # float32 features seed in float32 under the cosine metric: each centre is one pass over
    # the sample, bound by reading it, so half the bytes is about half the time (unit rows
    # keep 1 - x·c accurate; squared Euclidean distances would cancel, and stay float64)
    single = np.dtype(X.dtype) == np.float32 and metric == "cosine"
    dtype = np.float32 if single else np.float64
    S = to_numpy(X[idx], dtype)
    if metric == "cosine":  # directions only: the seeding ignores row lengths (weights)
        S = unit_rows(S)
    m = S.shape[0]
    trials = 2 + int(np.log(k)) if n_local_trials is None else int(n_local_trials)
    first = int(rng.integers(m))
    centers = [S[first]]
    d2 = _dist(S, S[first : first + 1], metric)[:, 0].astype(np.float64)
    for _ in range(1, k):
        total = d2.sum()
        if total <= 0:  # fewer distinct rows than clusters: pick any unused row
            j = int(rng.integers(m))
            best = _dist(S, S[j : j + 1], metric)[:, 0].astype(np.float64)
        else:
            cand = rng.choice(m, size=trials, p=d2 / total)
            # every candidate's new distances at once; keep the one with the least potential
            new = np.minimum(d2[:, None], _dist(S, S[cand], metric))
            pick = int(np.argmin(new.sum(axis=0)))
            j, best = int(cand[pick]), new[:, pick]
        centers.append(S[j])
        d2 = np.minimum(d2, best)
    return np.stack(centers).astype(np.float64)


def _dist(S: np.ndarray, C: np.ndarray, metric: str) -> np.ndarray:
    """Distances of every row of S to every row of C: (m, len(C))."""
    if metric == "cosine":
        return np.asarray(np.maximum(1.0 - S @ C.T, 0.0))
    sq = np.einsum("ij,ij->i", S, S)[:, None] - 2.0 * (S @ C.T) + np.einsum("ij,ij->i", C, C)
    return np.asarray(np.maximum(sq, 0.0))
