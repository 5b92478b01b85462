"""NMF and semi-NMF clustering.

- ``NMF`` (Eldén, Matrix Methods in Data Mining, ch. 9): ``A ≈ W H`` with W (n × K) and
  H (K × d) non-negative, by alternating non-negative least squares ("als") or Lee–Seung
  multiplicative updates ("mu"); the columns of W are normalised every round (H rescaled).
  Label of a row: its largest entry of W.
- ``SemiNMF`` (Ding, Li, Jordan 2010), the variant Blumensath compares with:
  ``X ≈ G F^T`` with G (n × K) non-negative and F free; label = row maximum of G.

Both take numpy or dask input; per iteration the n × K factor is updated blockwise and the
K × d factor from K-sized reductions.
"""

from __future__ import annotations

from typing import Any, TypeVar

import dask.array as da
import numpy as np
from scipy.optimize import nnls

from .._validation import Array, RandomState, compute, is_dask, persisted
from ._base import ClusterBase, _n_features, eager_labels
from .kmeans import KMeans

_F = TypeVar("_F", bound=ClusterBase)

__all__ = ["NMF", "SemiNMF"]

_EPS = 1e-12


class NMF(ClusterBase):
    """Non-negative matrix factorisation clustering.

    Parameters
    ----------
    n_clusters : int, default=8
    solver : {"als", "mu"}, default="als"
        Alternating non-negative least squares (each subproblem solved exactly with
        scipy's NNLS on its K × K normal equations) or multiplicative updates.
    max_iter : int, default=200
    tol : float, default=1e-5
        Relative change of ``||A - W H||_F`` under which iterations stop.
    random_state : int, Generator or None

    Attributes
    ----------
    labels_, components_ (H, K × d), weights_ (W, n × K), reconstruction_err_, n_iter_

    Examples
    --------
    >>> from lsd_dask.cluster import NMF
    >>> from lsd_dask.datasets import blumensath_dataset
    >>> from lsd_dask.metrics import ari
    >>> X, truth = blumensath_dataset(1, 0.0, n_features=40, n_samples=60, n_clusters=4,
    ...                               random_state=0)
    >>> est = NMF(4, random_state=0).fit(abs(X))
    >>> float(ari(truth, est.labels_))
    1.0
    """

    _parameter_constraints = {
        "solver": [frozenset({"als", "mu"})],
        "max_iter": [("int", 1, None)],
        "tol": [("real", 0, None)],
    }

    def __init__(
        self,
        n_clusters: int = 8,
        *,
        solver: str = "als",
        max_iter: int = 200,
        tol: float = 1e-5,
        random_state: RandomState = None,
    ) -> None:
        self.n_clusters = n_clusters
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state

    def __sklearn_tags__(self) -> Any:  # noqa: D105 - scikit-learn protocol
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True
        return tags

    def fit(self, X: Array, y: object = None) -> NMF:
        A, k, rng = self._validate_fit(X)
        (amin,) = compute(A.min())
        if float(amin) < 0:
            raise ValueError("Negative values in data passed to NMF; use SemiNMF for signed data.")
        n, d = A.shape
        W0 = rng.random((n, k)) + 0.1
        W = da.from_array(W0, chunks=(A.chunks[0], k)) if is_dask(A) else W0
        H = rng.random((k, d)) + 0.1
        (a2,) = compute((A * A).sum())
        prev = np.inf
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):  # noqa: B007 - reported
            WtW, WtA = (np.asarray(v, np.float64) for v in compute(W.T @ W, W.T @ A))
            if self.solver == "mu":
                H = H * WtA / (WtW @ H + _EPS)
            else:
                H = _nnls_gram(WtW, WtA)
            HHt = H @ H.T
            if self.solver == "mu":
                W = W * (A @ H.T) / (W @ HHt + _EPS)  # H, HHt are fresh arrays: no late binding
            else:
                W = _map_rows(A, lambda a, G=HHt, Hc=H: _nnls_gram(G, Hc @ a.T).T, k)
            # normalise W's columns, rescale H's rows: W H unchanged
            (norms,) = compute(np.sqrt((W * W).sum(axis=0)))
            norms = np.where(np.asarray(norms) > 0, norms, 1.0)
            W = W / norms
            H = H * norms[:, None]
            W = persisted(W)
            WtW, WtA = (np.asarray(v, np.float64) for v in compute(W.T @ W, W.T @ A))
            err = float(np.sqrt(_residual2(a2, WtW, WtA, H)))
            if _converged(prev, err, self.tol):
                break
            prev = err
        self.reconstruction_err_ = err
        return _fitted(self, A, W, H, n_iter)


class SemiNMF(ClusterBase):
    """Semi-NMF clustering: ``X ≈ G F^T``, G ≥ 0 (Ding, Li, Jordan 2010).

    Updates: ``F = X^T G (G^T G)^{-1}``;
    ``G <- G * sqrt(([X F]^+ + G [F^T F]^-) / ([X F]^- + G [F^T F]^+))``. Initialised from
    k-means labels plus 0.2, as in the paper.

    Parameters
    ----------
    n_clusters : int, default=8
    max_iter : int, default=200
    tol : float, default=1e-5
    random_state : int, Generator or None

    Attributes
    ----------
    labels_, weights_ (G), components_ (F^T, K × d), n_iter_

    Examples
    --------
    >>> from lsd_dask.cluster import SemiNMF
    >>> from lsd_dask.datasets import blumensath_dataset
    >>> from lsd_dask.metrics import ari
    >>> X, truth = blumensath_dataset(1, 0.0, n_features=40, n_samples=60, n_clusters=4,
    ...                               random_state=0)
    >>> est = SemiNMF(4, random_state=0).fit(X)
    >>> float(ari(truth, est.labels_))
    1.0
    """

    _parameter_constraints = {
        "max_iter": [("int", 1, None)],
        "tol": [("real", 0, None)],
    }

    def __init__(
        self,
        n_clusters: int = 8,
        *,
        max_iter: int = 200,
        tol: float = 1e-5,
        random_state: RandomState = None,
    ) -> None:
        self.n_clusters = n_clusters
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state

    def fit(self, X: Array, y: object = None) -> SemiNMF:
        X, k, rng = self._validate_fit(X)
        seed = int(rng.integers(2**31 - 1))
        init = KMeans(k, random_state=seed).fit(X).labels_
        G0 = np.eye(k)[init] + 0.2
        G = da.from_array(G0, chunks=(X.chunks[0], k)) if is_dask(X) else G0
        (x2,) = compute((X * X).sum())
        prev = np.inf
        n_iter = 0
        for n_iter in range(1, self.max_iter + 1):  # noqa: B007 - reported
            GtG, GtX = (np.asarray(v, np.float64) for v in compute(G.T @ G, G.T @ X))
            Ft = np.linalg.lstsq(GtG, GtX, rcond=None)[0]  # F^T = (G^T G)^{-1} G^T X
            FtF = Ft @ Ft.T
            XF = X @ Ft.T
            pos, neg = np.maximum(FtF, 0), np.maximum(-FtF, 0)
            num = _pos(XF) + G @ neg
            den = _pos(-XF) + G @ pos
            G = G * ((num + _EPS) / (den + _EPS)) ** 0.5
            G = persisted(G)
            GtG, GtX = (np.asarray(v, np.float64) for v in compute(G.T @ G, G.T @ X))
            err = _residual2(x2, GtG, GtX, Ft)
            if _converged(prev, err, self.tol):
                break
            prev = err
        return _fitted(self, X, G, Ft, n_iter)


def _fitted(est: _F, X: Array, W: Any, H: np.ndarray, n_iter: int) -> _F:
    """The fitted attributes both factorizations share: weights (n × K, lazy for dask),
    components, the labels (each row's largest weight), the iterations."""
    est.weights_ = W
    est.components_ = H
    est.labels_ = eager_labels(W.argmax(axis=1))
    est.n_features_in_ = _n_features(X)
    est.n_iter_ = n_iter
    return est


def _residual2(x2: Any, WtW: np.ndarray, WtX: np.ndarray, H: np.ndarray) -> float:
    """``||X - W H||²`` from the K-sized Grams (no n × d array): ``|X|² - 2<WᵀX, H> +
    <WᵀW H, H>``, floored at 0 against rounding."""
    return float(max(float(x2) - 2 * np.sum(WtX * H) + np.sum((WtW @ H) * H), 0.0))


def _converged(prev: float, err: float, tol: float) -> bool:
    """The relative change of the error at most ``tol`` (never on the first iteration)."""
    return bool(np.isfinite(prev) and abs(prev - err) <= tol * max(prev, _EPS))


def _pos(M: Any) -> Any:
    return np.maximum(M, 0)  # dispatches to dask for dask M


def _nnls_gram(G: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Solve ``min_{x >= 0} ||A x - b||`` for every column b of ``A^T b`` = B, given ``G = A^T A``.

    With the Cholesky factor ``G = R^T R`` the problem equals ``min ||R x - R^{-T} A^T b||``,
    a K × K NNLS per column.
    """
    k = G.shape[0]
    R = np.linalg.cholesky(G + 1e-10 * np.trace(G) / k * np.eye(k)).T
    rhs = np.linalg.solve(R.T, B)
    out = np.empty((k, B.shape[1]))
    for j in range(B.shape[1]):
        out[:, j] = nnls(R, rhs[:, j])[0]
    return out


def _map_rows(A: Any, fn: Any, k: int) -> Any:
    if is_dask(A):
        Ar = A.rechunk({1: -1}) if A.numblocks[1] > 1 else A
        return da.map_blocks(fn, Ar, chunks=(Ar.chunks[0], (k,)), dtype=np.float64)
    return fn(np.asarray(A))
