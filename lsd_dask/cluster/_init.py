"""Seeding shared by the iterative clusterers: k-means++ on a seeded subsample."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import is_dask

__all__ = ["kmeanspp_rows", "sample_rows"]

#: rows used for seeding; numpy and dask input use the same rows, so they seed alike
SEED_SAMPLE = 20000


def sample_rows(X: Any, rng: np.random.Generator, n_max: int = SEED_SAMPLE) -> np.ndarray:
    """A seeded, sorted subsample of row indices (all rows when n <= n_max)."""
    n = X.shape[0]
    if n <= n_max:
        return np.arange(n)
    return np.sort(rng.choice(n, size=n_max, replace=False))


def kmeanspp_rows(
    X: Any, k: int, rng: np.random.Generator, *, metric: str = "cosine"
) -> np.ndarray:
    """k-means++ seeding (D² sampling) on a subsample of the rows of X.

    Parameters
    ----------
    metric : {"cosine", "euclidean"}
        "cosine" uses ``1 - x·c`` on unit rows (spherical k-means, directional clustering).

    Returns
    -------
    ndarray of shape (k, n_features), float64
    """
    idx = sample_rows(X, rng)
    S = X[idx]
    S = np.asarray(S.compute() if is_dask(S) else S, dtype=np.float64)
    if metric == "cosine":  # directions only: the seeding ignores row lengths (weights)
        norms = np.linalg.norm(S, axis=1, keepdims=True)
        S = S / np.where(norms > 0, norms, 1.0)
    m = S.shape[0]
    first = int(rng.integers(m))
    centers = [S[first]]
    d2 = _dist(S, centers[0], metric)
    for _ in range(1, k):
        total = d2.sum()
        if total <= 0:  # fewer distinct rows than clusters: pick any unused row
            j = int(rng.integers(m))
        else:
            j = int(rng.choice(m, p=d2 / total))
        centers.append(S[j])
        d2 = np.minimum(d2, _dist(S, S[j], metric))
    return np.stack(centers)


def _dist(S: np.ndarray, c: np.ndarray, metric: str) -> np.ndarray:
    if metric == "cosine":
        return np.maximum(1.0 - S @ c, 0.0)
    diff = S - c
    return np.einsum("ij,ij->i", diff, diff)
