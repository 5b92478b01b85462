"""Similarity operators: each similarity is held as a factor F with ``K = F F^T``.

No n×n array is formed for features: cosine on unit rows is ``F F^T``; the shifted cosine
``(1 + cos) / 2`` is ``G G^T`` with ``G = [1, F] / sqrt(2)``; the RBF kernel is not low rank
and is represented by Nyström features (``K ≈ F F^T``) from a seeded set of landmarks.
Small precomputed or exact-RBF matrices are handled densely by the callers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.spatial.distance import cdist

from ._validation import (
    Array,
    RandomState,
    check_random_state,
    compute,
    is_dask,
    persisted,
    to_numpy,
)
from .linalg.eigen import factor_gram, factor_route, top_eigenpairs, top_eigenpairs_from_factor

__all__ = [
    "SIMILARITIES",
    "SimilarityFactor",
    "SimilarityOperator",
    "similarity_operator",
    "unit_rows",
    "squared_row_norms",
    "gram_factor",
    "median_bandwidth",
    "rbf_kernel",
]

SIMILARITIES = ("precomputed", "cosine", "shifted_cosine", "rbf")
#: largest n for which an RBF similarity is held densely rather than by Nyström features
_EXACT_RBF_MAX = 3000


@dataclass(frozen=True)
class SimilarityFactor:
    """``K = F F^T`` (exact for cosine kinds, Nyström for RBF).

    Attributes
    ----------
    F : ndarray or dask array of shape (n_samples, r)
    kind : str
    gamma : float or None
        RBF parameter ``exp(-gamma ||x - y||^2)`` when ``kind == "rbf"``.
    """

    F: Any
    kind: str
    gamma: float | None = None


@dataclass
class SimilarityOperator:
    """A similarity K held as a dense matrix or as a factor (``K = F Fᵀ``).

    Only the products LSD's solvers need: top eigenpairs, ``K P``, the objective's terms
    and ``||K||_F²``; no n × n array is formed for a factor.

    Attributes
    ----------
    n : int
        Samples.
    K : ndarray or dask array of shape (n, n), optional
        The dense similarity (precomputed or exact RBF).
    factor : SimilarityFactor, optional
        ``K = F Fᵀ`` for features.
    gamma : float or None
        The RBF parameter used, if any.
    """

    n: int
    K: Any = None  # dense (numpy or dask)
    factor: SimilarityFactor | None = None
    gamma: float | None = None
    _gram: np.ndarray | None = field(default=None, repr=False)

    @property
    def is_lazy(self) -> bool:
        return is_dask(self.K if self.factor is None else self.factor.F)

    def eigenpairs(self, k: int, rng: np.random.Generator) -> tuple[np.ndarray, Any]:
        if self.factor is not None:
            F = self.factor.F
            # the Gram route shares F^T F with frobenius2: computed once
            gram = None if is_dask(F) or factor_route(F.shape, k) != "gram" else self.gram()
            return top_eigenpairs_from_factor(F, k, random_state=rng, gram=gram)
        return top_eigenpairs(self.K, k, random_state=rng)

    def gram(self) -> np.ndarray:
        """``F^T F`` (r × r, float64), computed once."""
        if self._gram is None:
            F = self.factor.F
            if self.is_lazy:
                (G,) = compute(F.T @ F)
                self._gram = np.asarray(G, np.float64)
            else:
                self._gram = factor_gram(F)
        return self._gram

    def matmul(self, P: Any) -> Any:
        """``K @ P`` for P (n × k); for a factor, ``F (F^T P)`` with F^T P computed small."""
        if self.factor is None:
            return self.K @ P
        F = self.factor.F
        (FtP,) = compute(F.T @ P)
        return F @ np.asarray(FtP)

    def objective_terms(self, P: Any) -> tuple[Any, Any]:
        """Lazy ``(tr(P^T K P), ||P^T P||_F^2)``."""
        if self.factor is None:
            quad = (P * (self.K @ P)).sum()
        else:
            F = self.factor.F
            # in F's precision: a float64 P would upcast all of a float32 F
            FtP = F.T @ P.astype(F.dtype, copy=False)
            quad = (FtP * FtP).sum(dtype=np.float64)
        PtP = P.T @ P
        return quad, (PtP * PtP).sum()

    def frobenius2(self) -> float:
        if self.factor is None:
            (v,) = compute((self.K * self.K).sum())
        else:
            v = np.sum(self.gram() ** 2)
        return float(v)


def similarity_operator(
    X: Array, kind: str, *, gamma: float | None, n_landmarks: int, rng: np.random.Generator
) -> SimilarityOperator:
    """The similarity ``kind`` of the rows of X (validated by the caller), or X itself when
    ``kind == "precomputed"``: dense below ``_EXACT_RBF_MAX`` samples for RBF, a factor
    otherwise (persisted for dask input: the solvers read it many times)."""
    if kind == "precomputed":
        K = X
        if K.shape[0] != K.shape[1]:
            raise ValueError(f"a precomputed similarity must be square, got shape {K.shape}.")
        if not is_dask(K) and not np.allclose(K, K.T, atol=1e-8 * max(1.0, np.abs(K).max())):
            raise ValueError("the precomputed similarity matrix is not symmetric.")
        return SimilarityOperator(n=K.shape[0], K=K)
    if not is_dask(X):
        bad = np.flatnonzero(~np.any(X != 0, axis=1))
        if bad.size and kind in ("cosine", "shifted_cosine"):
            raise ValueError(
                f"{bad.size} sample(s) are all-zero (first: row {bad[0]}); their cosine "
                "similarity is undefined. Drop or mask them first."
            )
    if kind == "rbf" and not is_dask(X) and X.shape[0] <= _EXACT_RBF_MAX:
        g = median_bandwidth(X, random_state=rng) if gamma is None else float(gamma)
        return SimilarityOperator(n=X.shape[0], K=rbf_kernel(X, X, g), gamma=g)
    fac = gram_factor(X, kind, gamma=gamma, n_landmarks=n_landmarks, random_state=rng)
    F = persisted(fac.F)
    fac = SimilarityFactor(F, fac.kind, fac.gamma)
    return SimilarityOperator(n=X.shape[0], factor=fac, gamma=fac.gamma)


def unit_rows(X: Array) -> Any:
    """Scale every row to unit Euclidean length (zero rows stay zero); numpy or dask."""
    # numpy's functions dispatch to dask for dask X
    norms = np.sqrt(squared_row_norms(X))[:, None]
    return X / np.where(norms > 0, norms, 1).astype(X.dtype, copy=False)


def squared_row_norms(X: Array, *, block: int = 4096) -> Any:
    """Each row's squared Euclidean length, ``(X * X).sum(axis=1)``: numpy, or lazy for
    dask X.

    A numpy X goes ``block`` rows at a time, so no n × d temporary is made (240 MB at
    59,784 × 1,000 float32: its allocation and first touch were most of the cost); each
    row's sum is the same sum, bit for bit.
    """
    if is_dask(X):
        return (X * X).sum(axis=1)
    X = np.asarray(X)
    if X.shape[0] <= block:
        return (X * X).sum(axis=1)
    out = np.empty(X.shape[0], (X[:1] * X[:1]).dtype)
    for a in range(0, X.shape[0], block):
        xb = X[a : a + block]
        np.sum(xb * xb, axis=1, out=out[a : a + block])
    return out


def gram_factor(
    X: Array,
    kind: str,
    *,
    gamma: float | None = None,
    n_landmarks: int = 1000,
    random_state: RandomState = None,
) -> SimilarityFactor:
    """Factor F of a similarity of the rows of X, with ``K = F F^T``.

    Parameters
    ----------
    X : ndarray or dask array of shape (n_samples, n_features)
    kind : {"cosine", "shifted_cosine", "rbf"}
    gamma : float, optional
        RBF parameter; default from :func:`median_bandwidth`.
    n_landmarks : int
        Nyström landmarks for RBF (capped at n_samples).
    random_state : int, Generator or None
        Seeds the landmarks and the bandwidth subsample.
    """
    if kind == "cosine":
        return SimilarityFactor(unit_rows(X), kind)
    if kind == "shifted_cosine":
        F = unit_rows(X)
        G = np.concatenate([np.ones_like(F[:, :1]), F], axis=1)
        if is_dask(G):
            G = G.rechunk({1: -1})
        return SimilarityFactor(G / np.sqrt(2.0), kind)
    if kind == "rbf":
        rng = check_random_state(random_state)
        g = median_bandwidth(X, random_state=rng) if gamma is None else float(gamma)
        m = min(int(n_landmarks), X.shape[0])
        idx = np.sort(rng.choice(X.shape[0], size=m, replace=False))
        L = to_numpy(X[idx], np.float64)
        Kmm = rbf_kernel(L, L, g)
        w, V = np.linalg.eigh(Kmm)
        keep = w > w.max() * 1e-10
        W = V[:, keep] / np.sqrt(w[keep])  # Kmm^{-1/2} on its numerical range
        if is_dask(X):
            Xr = X.rechunk({1: -1}) if X.numblocks[1] > 1 else X
            F = Xr.map_blocks(
                lambda b: rbf_kernel(b, L, g) @ W,
                chunks=(Xr.chunks[0], (int(keep.sum()),)),
                dtype=np.float64,
            )
        else:
            F = rbf_kernel(np.asarray(X, np.float64), L, g) @ W
        return SimilarityFactor(F, kind, g)
    raise ValueError(f"similarity must be one of {SIMILARITIES[1:]}, got {kind!r}.")


def median_bandwidth(X: Array, *, n_sample: int = 1000, random_state: RandomState = None) -> float:
    """RBF ``gamma`` by the median heuristic: ``gamma = 1 / (2 sigma^2)``, sigma = median
    pairwise Euclidean distance over a seeded subsample of at most ``n_sample`` rows.
    """
    rng = check_random_state(random_state)
    m = min(n_sample, X.shape[0])
    idx = np.sort(rng.choice(X.shape[0], size=m, replace=False))
    S = to_numpy(X[idx], np.float64)
    d = cdist(S, S)
    med = float(np.median(d[np.triu_indices(m, 1)])) if m > 1 else 0.0
    if med <= 0:
        raise ValueError(
            f"all sampled rows coincide (n_samples={X.shape[0]}): the RBF bandwidth is "
            "undefined; pass it explicitly."
        )
    return 1.0 / (2.0 * med * med)


def rbf_kernel(A: np.ndarray, B: np.ndarray, gamma: float) -> np.ndarray:
    """Dense ``exp(-gamma ||a_i - b_j||^2)``."""
    return np.exp(-gamma * cdist(A, B, "sqeuclidean"))
