"""Normalised spectral clustering (Ng, Jordan, Weiss 2001).

``A_ij = exp(-||s_i - s_j||^2 / (2 σ^2))``, ``A_ii = 0``; ``L = D^{-1/2} A D^{-1/2}``; the
top-k eigenvectors of L as columns of Y; rows of Y normalised to unit length; k-means on
the rows.

Affinity: exact on up to 3000 numpy samples. Larger or dask input uses Nyström features
``A ≈ F F^T`` (seeded landmarks), so ``L ≈ (D^{-1/2} F)(D^{-1/2} F)^T`` and the eigen step
is the SVD of an n × r factor, the same machinery as LSD (the zero diagonal is not imposed
on the low-rank approximation). A precomputed affinity may be dense or scipy.sparse (e.g. a
mesh or kNN graph); sparse input uses Lanczos.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import eigsh

from .._validation import (
    Array,
    RandomState,
    check_array,
    check_n_clusters,
    check_random_state,
    compute,
    is_dask,
)
from ..linalg.eigen import top_eigenpairs, top_eigenpairs_from_factor
from ..similarity import gram_factor, median_bandwidth, rbf_kernel, unit_rows
from ._base import ClusterBase, _n_features, eager_labels
from .kmeans import KMeans

__all__ = ["SpectralClustering"]

_EXACT_MAX = 3000


class SpectralClustering(ClusterBase):
    """Ng–Jordan–Weiss spectral clustering.

    Parameters
    ----------
    n_clusters : int, default=8
    affinity : {"rbf", "precomputed"}, default="rbf"
    sigma : float, optional
        RBF width σ; default: the median pairwise distance of a seeded 1000-row subsample
        (robust to scale, unlike a fixed gamma).
    n_landmarks : int, default=1000
        Nyström landmarks for large or dask input.
    n_init : int, default=10
        k-means restarts on the embedded rows.
    random_state : int, Generator or None

    Attributes
    ----------
    labels_, embedding_ (n_samples × n_clusters, unit rows), eigenvalues_, sigma_

    Examples
    --------
    >>> from lsd_dask.cluster import SpectralClustering
    >>> from lsd_dask.datasets import blumensath_dataset
    >>> from lsd_dask.metrics import ari
    >>> X, truth = blumensath_dataset(1, 0.0, n_features=40, n_samples=60, n_clusters=4,
    ...                               random_state=0)
    >>> est = SpectralClustering(4, random_state=0).fit(X)
    >>> float(ari(truth, est.labels_))
    1.0
    """

    _parameter_constraints = {
        "affinity": [frozenset({"rbf", "precomputed"})],
        "sigma": [None, ("real", 0, None)],
        "n_landmarks": [("int", 2, None)],
        "n_init": [("int", 1, None)],
    }

    def __init__(
        self,
        n_clusters: int = 8,
        *,
        affinity: str = "rbf",
        sigma: float | None = None,
        n_landmarks: int = 1000,
        n_init: int = 10,
        random_state: RandomState = None,
    ) -> None:
        self.n_clusters = n_clusters
        self.affinity = affinity
        self.sigma = sigma
        self.n_landmarks = n_landmarks
        self.n_init = n_init
        self.random_state = random_state

    def fit(self, X: Array, y: object = None) -> SpectralClustering:
        self._check_params()
        rng = check_random_state(self.random_state)
        if not sp.issparse(X):
            X = check_array(X, name="affinity" if self.affinity == "precomputed" else "X")
        n = X.shape[0]
        k = check_n_clusters(self.n_clusters, n)
        self.sigma_ = None
        if self.affinity == "precomputed":
            A = X
            if A.shape[0] != A.shape[1]:
                raise ValueError(f"a precomputed affinity must be square, got {A.shape}.")
            Y, w = _embed_dense_or_sparse(A, k, rng)
        else:
            if sp.issparse(X):
                X = check_array(X)  # raises: features must be dense
            if self.sigma is None:
                gamma = median_bandwidth(X, random_state=rng)
            else:
                gamma = 1.0 / (2.0 * self.sigma**2)
            self.sigma_ = float(np.sqrt(1.0 / (2.0 * gamma)))
            if not is_dask(X) and n <= _EXACT_MAX:
                A = rbf_kernel(X, X, gamma)
                np.fill_diagonal(A, 0.0)
                Y, w = _embed_dense_or_sparse(A, k, rng)
            else:
                F = gram_factor(
                    X, "rbf", gamma=gamma, n_landmarks=self.n_landmarks, random_state=rng
                ).F
                deg = F @ (F.T.sum(axis=1) if not is_dask(F) else compute(F.sum(axis=0))[0])
                deg = _guard_degrees(deg)
                Fn = F / np.sqrt(deg)[:, None]
                w, Y = top_eigenpairs_from_factor(Fn, k, random_state=rng)
        Y = unit_rows(Y)
        seed = int(rng.integers(2**31 - 1))
        km = KMeans(k, n_init=self.n_init, random_state=seed).fit(Y)
        self.labels_ = eager_labels(km.labels_)
        self.n_features_in_ = _n_features(X)
        self.embedding_ = Y
        self.eigenvalues_ = w
        return self


def _embed_dense_or_sparse(A: Any, k: int, rng: np.random.Generator) -> tuple[Any, np.ndarray]:
    if sp.issparse(A):
        A = sp.csr_matrix(A, dtype=np.float64)
        deg = _guard_degrees(np.asarray(A.sum(axis=1)).ravel())
        Dm = sp.diags(1.0 / np.sqrt(deg))
        L = Dm @ A @ Dm
        v0 = rng.standard_normal(A.shape[0])
        w, V = eigsh(L, k=k, which="LA", v0=v0)
        order = np.argsort(-w)
        return V[:, order], w[order]
    deg = _guard_degrees(A.sum(axis=1))
    inv = 1.0 / np.sqrt(deg)
    L = A * inv[:, None] * inv[None, :]
    w, V = top_eigenpairs(L, k, random_state=rng)
    return V, w


def _guard_degrees(deg: Any) -> Any:
    """Raise on samples with no affinity to any other (their rows of L are undefined)."""
    (d,) = compute(deg)
    d = np.asarray(d, np.float64)
    bad = np.flatnonzero(d <= 1e-12 * max(float(d.max(initial=0.0)), 1.0))
    if bad.size:
        raise ValueError(
            f"{bad.size} sample(s) have zero affinity to every other sample (first: "
            f"{bad[0]}); raise sigma, or remove isolated samples."
        )
    return d
