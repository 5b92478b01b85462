"""k-means baselines: Euclidean k-means, spherical k-means and K-EVD.

All three are Lloyd-type loops sharing one kernel: assign each row to its best centre, then
recompute the centres from K-sized per-cluster reductions (one pass over X per iteration;
big lazy, small eager for dask input). Empty clusters are re-seeded with a random row, as
in Blumensath's comparison.

- ``KMeans``: scikit-learn's ``KMeans`` on numpy input, Lloyd on dask input (Eldén ch. 9).
- ``SphericalKMeans``: unit rows, assignment by the largest cosine, centres the normalised
  cluster means (Dhillon and Modha).
- ``KEVD``: one-dimensional subspace clustering. Assignment by the largest ``|x·d|``,
  centres the leading eigenvector of each cluster's scatter ``sum x x^T`` (found by power
  iteration from K-sized reductions; no d × d matrix per cluster).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.cluster import KMeans as _SkKMeans

from .._validation import (
    Array,
    ConvergenceWarning,
    RandomState,
    check_array,
    compute,
    is_dask,
    warn,
)
from ..linalg.reductions import cluster_sums, own_centre_projection
from ..similarity import squared_row_norms, unit_rows
from ._base import ClusterBase, _n_features, eager_labels
from ._bounds import AngleBounds
from ._init import kmeanspp_rows
from ._spatial import ScoreColumns, check_connectivity, potts_phase

__all__ = ["KMeans", "SphericalKMeans", "KEVD"]

_COMMON = {
    "max_iter": [("int", 1, None)],
    "tol": [("real", 0, None)],
}


class _Lloyd(ClusterBase):
    _metric = "cosine"

    def __init__(
        self,
        n_clusters: int = 8,
        *,
        init: Any = "kmeans++",
        max_iter: int = 100,
        tol: float = 1e-6,
        random_state: RandomState = None,
    ) -> None:
        self.n_clusters = n_clusters
        self.init = init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state

    def fit(self, X: Array, y: object = None) -> _Lloyd:
        X, k, rng = self._validate_fit(X)
        X = self._prepare(X)
        if isinstance(self.init, np.ndarray):
            C = np.asarray(self.init, np.float64)
            if C.shape != (k, X.shape[1]):
                raise ValueError(f"init has shape {C.shape}; expected ({k}, {X.shape[1]}).")
        else:
            C = kmeanspp_rows(X, k, rng, metric=self._metric)
        C = self._normalise_centres(C)
        labels = None
        self.inertia_history_ = []
        n_iter = 0
        converged = False
        beta = float(getattr(self, "spatial_weight", 0.0) or 0.0)
        A = self._spatial_setup(X) if beta > 0 else None  # checked before any work
        assign = self._assigner(X)
        for n_iter in range(1, self.max_iter + 1):  # noqa: B007 - reported
            new_labels, score = assign(C)
            self.inertia_history_.append(float(score))
            C_new = self._centres(X, new_labels, C, k, rng)
            shift = float(np.max(np.abs(C_new - C))) if C_new.size else 0.0
            same = labels is not None and np.array_equal(labels, new_labels)
            labels, C = new_labels, C_new
            if same or shift <= self.tol:
                converged = True
                break
        if not converged:
            warn(
                f"{type(self).__name__} did not converge in {self.max_iter} iterations.",
                ConvergenceWarning,
            )
        if A is not None:
            state = {"C": C}
            products = ScoreColumns(X)

            def scores() -> np.ndarray:
                return products(state["C"])

            def refit(lab: np.ndarray) -> None:
                state["C"] = self._centres(X, lab, state["C"], k, rng)

            assert labels is not None  # max_iter >= 1: the loop assigned them
            labels, self.spatial_cost_history_, n_potts = potts_phase(
                scores, refit, labels, A, beta, sweeps=self.icm_sweeps, max_iter=self.max_iter
            )
            C = state["C"]
            n_iter += n_potts
        self.cluster_centers_ = C
        self.labels_ = eager_labels(labels)
        self.n_features_in_ = _n_features(X)
        self.n_iter_ = n_iter
        return self

    def predict(self, X: Array) -> Any:
        self._check_fitted()
        X = check_array(X)
        self._check_n_features(X)
        X = self._prepare(X)
        return self._assign(X, self.cluster_centers_.astype(X.dtype, copy=False))[0]

    # hooks ------------------------------------------------------------------
    def _assigner(self, X: Array) -> Callable[[np.ndarray], tuple[np.ndarray, float]]:
        """The assignment step: centres (float64) to (labels, summed score)."""

        def assign(C: np.ndarray) -> tuple[np.ndarray, float]:
            # centres in X's precision: a float64 C would upcast all of a float32 X
            labels, score = self._assign(X, C.astype(X.dtype, copy=False))
            labels, score = compute(labels, score.sum(dtype=np.float64))
            return np.asarray(labels, np.int64), float(score)

        return assign

    def _prepare(self, X: Array) -> Any:
        return X

    def _normalise_centres(self, C: np.ndarray) -> np.ndarray:
        return C

    def _assign(self, X: Array, C: np.ndarray) -> tuple[Any, Any]:
        # default: the largest inner product (cosine on unit rows)
        S = X @ C.T
        return S.argmax(axis=1), S.max(axis=1)

    def _centres(
        self, X: Array, labels: np.ndarray, C: np.ndarray, k: int, rng: np.random.Generator
    ) -> np.ndarray:
        (sums,) = compute(cluster_sums(X, labels, k))
        counts = np.bincount(labels, minlength=k)
        new = np.asarray(sums) / np.maximum(counts, 1)[:, None]
        return self._normalise_centres(_reseed_empty(X, new, counts, rng))


class KMeans(ClusterBase):
    """Euclidean k-means: scikit-learn's on numpy input, the same algorithm out of core on
    dask input.

    Both run Lloyd iterations from greedy k-means++ seeding, ``n_init`` times, and keep the
    run of lowest inertia. On numpy input that is :class:`sklearn.cluster.KMeans` itself
    (``algorithm="lloyd"``). On dask input each iteration is one pass over X's row blocks
    (the n × K distances are never held), and k-means++ seeds from a seeded subsample of
    the rows (:func:`lsd_dask.cluster._init.kmeanspp_rows`): so the two kinds of input
    reach the same partition on well-separated data, but not the same random draws.

    Parameters
    ----------
    n_clusters : int, default=8
    n_init : int, default=1
        Runs from different seedings; the one with the lowest inertia is kept.
    max_iter, tol : as scikit-learn's.
    random_state : int, Generator or None
        Seeds every run.

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        Always numpy int64.
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
    inertia_ : float
        Sum of squared distances of the samples to their centres.
    n_iter_ : int
        Iterations of the kept run.

    Examples
    --------
    >>> import dask.array as da
    >>> import numpy as np
    >>> from lsd_dask.cluster import KMeans
    >>> from lsd_dask.metrics import ari
    >>> X = np.array([[0.0, 0.1], [0.1, 0.0], [5.0, 5.1], [5.1, 5.0], [9.0, 0.0], [9.1, 0.1]])
    >>> a = KMeans(3, random_state=0).fit(X).labels_
    >>> b = KMeans(3, n_init=3, random_state=0).fit(da.from_array(X, chunks=2)).labels_
    >>> float(ari(a, b)), type(b).__name__
    (1.0, 'ndarray')
    """

    _parameter_constraints = {**_COMMON, "n_init": [("int", 1, None)]}

    def __init__(
        self,
        n_clusters: int = 8,
        *,
        n_init: int = 1,
        max_iter: int = 300,
        tol: float = 1e-6,
        random_state: RandomState = None,
    ) -> None:
        self.n_clusters = n_clusters
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state

    def fit(self, X: Array, y: object = None) -> KMeans:
        X, _, rng = self._validate_fit(X)
        self.n_features_in_ = _n_features(X)
        seed = (
            int(rng.integers(2**31 - 1))
            if isinstance(self.random_state, np.random.Generator)
            else self.random_state
        )
        if not is_dask(X):
            km = _SkKMeans(
                self.n_clusters,
                n_init=self.n_init,
                max_iter=self.max_iter,
                tol=self.tol,
                random_state=seed,
            ).fit(X)
            self.labels_ = eager_labels(km.labels_)
            self.cluster_centers_, self.inertia_, self.n_iter_ = (
                km.cluster_centers_,
                float(km.inertia_),
                km.n_iter_,
            )
            return self
        best = None
        for run_seed in np.random.default_rng(seed).integers(2**31 - 1, size=self.n_init):
            lloyd = _EuclideanLloyd(
                self.n_clusters, max_iter=self.max_iter, tol=self.tol, random_state=int(run_seed)
            ).fit(X)
            # the last assignment's sum of squared distances: the run's inertia
            if best is None or lloyd.inertia_history_[-1] < best.inertia_history_[-1]:
                best = lloyd
        assert best is not None  # n_init >= 1 runs
        self.labels_, self.cluster_centers_, self.n_iter_ = (
            best.labels_,
            best.cluster_centers_,
            best.n_iter_,
        )
        self.inertia_ = float(best.inertia_history_[-1])
        return self

    def predict(self, X: Array) -> Any:
        self._check_fitted()
        X = check_array(X)
        self._check_n_features(X)
        return _nearest_centre(X, self.cluster_centers_)[0]


class _EuclideanLloyd(_Lloyd):
    _parameter_constraints = {**_COMMON, "init": [frozenset({"kmeans++"}), np.ndarray]}
    _metric = "euclidean"

    def _assign(self, X: Array, C: np.ndarray) -> tuple[Any, Any]:
        return _nearest_centre(X, C)


class SphericalKMeans(_Lloyd):
    """Spherical k-means: cosine assignment, centres = normalised cluster means.

    Parameters
    ----------
    n_clusters : int, default=8
    init : "kmeans++" or ndarray of shape (n_clusters, n_features)
    max_iter : int, default=100
    tol : float, default=1e-6
    spatial_weight : float, default=0.0
        beta of a Potts penalty on the mesh in the assignment step: each mesh edge whose two
        vertices get different labels costs beta (in units of cosine). 0: none. The
        assignment, once plain spherical k-means has converged, is ICM from the previous
        labels (:mod:`lsd_dask.cluster._spatial`), and from there the combined cost
        ``-sum cos + beta * cut edges`` never increases (``spatial_cost_history_``). Needs
        the n × K cosines in memory (dask input included).
    connectivity : sparse matrix of shape (n_samples, n_samples), optional
        The mesh adjacency of the samples; needed when ``spatial_weight > 0``.
    icm_sweeps : int, default=2
        ICM sweeps per assignment step. The spatial phase runs at most ``max_iter``
        ICM + centre rounds, after the plain iterations, and stops after a round that
        changes at most :data:`~lsd_dask.cluster._spatial.POTTS_TOL` of the labels.
    algorithm : {"hamerly", "lloyd"}, default="hamerly"
        "hamerly": a row compares itself with every centre only when bounds on its angles
        to the centres (kept from the last iteration and widened by how far the centres
        moved) cannot tell that its label stays (:mod:`lsd_dask.cluster._bounds`); the
        labels are Lloyd's. "lloyd": every row with every centre, every iteration. Dask
        input always runs "lloyd".
    random_state : int, Generator or None

    Attributes
    ----------
    labels_, cluster_centers_ (unit rows), n_iter_, inertia_history_ (sum of cosines, which
    never decreases without a spatial term), spatial_cost_history_ (the combined cost, with
    ``spatial_weight > 0``; never increases), rows_checked_ (per iteration, the rows
    compared with every centre)

    Examples
    --------
    >>> from lsd_dask.cluster import SphericalKMeans
    >>> from lsd_dask.datasets import blumensath_dataset
    >>> from lsd_dask.metrics import ari
    >>> X, truth = blumensath_dataset(1, 0.0, n_features=40, n_samples=60, n_clusters=4,
    ...                               random_state=0)
    >>> est = SphericalKMeans(4, random_state=0).fit(X)
    >>> float(ari(truth, est.labels_))
    1.0
    """

    _parameter_constraints = {
        **_COMMON,
        "init": [frozenset({"kmeans++"}), np.ndarray],
        "spatial_weight": [("real", 0, None)],
        "connectivity": [None, sp.spmatrix, sp.sparray],
        "icm_sweeps": [("int", 1, None)],
        "algorithm": [frozenset({"hamerly", "lloyd"})],
    }
    #: whether the assignment is the largest cosine, which the angle bounds apply to
    _angle_bounds = True

    def __init__(
        self,
        n_clusters: int = 8,
        *,
        init: Any = "kmeans++",
        max_iter: int = 100,
        tol: float = 1e-6,
        spatial_weight: float = 0.0,
        connectivity: Any = None,
        icm_sweeps: int = 2,
        algorithm: str = "hamerly",
        random_state: RandomState = None,
    ) -> None:
        super().__init__(
            n_clusters, init=init, max_iter=max_iter, tol=tol, random_state=random_state
        )
        self.spatial_weight = spatial_weight
        self.connectivity = connectivity
        self.icm_sweeps = icm_sweeps
        self.algorithm = algorithm

    def _assigner(self, X: Array) -> Callable[[np.ndarray], tuple[np.ndarray, float]]:
        self.rows_checked_: list[int] | None = None
        if self.algorithm == "lloyd" or not self._angle_bounds or is_dask(X):
            return super()._assigner(X)
        bounds = AngleBounds(np.asarray(X))
        self.rows_checked_ = bounds.checked_
        return bounds.assign

    def _spatial_setup(self, X: Array) -> Any:
        return check_connectivity(self.connectivity, X.shape[0])

    def _prepare(self, X: Array) -> Any:
        return unit_rows(X)

    def _normalise_centres(self, C: np.ndarray) -> np.ndarray:
        return np.asarray(unit_rows(C))


class KEVD(SphericalKMeans):
    """K-EVD: clustering into one-dimensional subspaces.

    Each row goes to the centre with the largest ``|x·d|``; each centre becomes the leading
    eigenvector of its cluster's scatter matrix, found by ``n_power`` power-iteration steps
    per outer iteration (warm-started; each step is a K-sized weighted reduction). Every
    row is compared with every centre in each iteration (``algorithm`` is not used).

    Examples
    --------
    >>> from lsd_dask.cluster import KEVD
    >>> from lsd_dask.datasets import blumensath_dataset
    >>> from lsd_dask.metrics import ari
    >>> X, truth = blumensath_dataset(1, 0.0, n_features=40, n_samples=60, n_clusters=4,
    ...                               random_state=0)
    >>> est = KEVD(4, random_state=0).fit(X)
    >>> float(ari(truth, est.labels_))
    1.0
    """

    _parameter_constraints = {**_COMMON, "init": [frozenset({"kmeans++"}), np.ndarray]}
    n_power = 3
    # |x·d| has no angle bounds of this kind: every row, every iteration
    _angle_bounds = False

    def _spatial_setup(self, X: Array) -> Any:
        raise ValueError("KEVD has no spatial term; use SphericalKMeans(spatial_weight=...).")

    def _assign(self, X: Array, C: np.ndarray) -> tuple[Any, Any]:
        S = abs(X @ C.T)
        return S.argmax(axis=1), S.max(axis=1)

    def _centres(
        self, X: Array, labels: np.ndarray, C: np.ndarray, k: int, rng: np.random.Generator
    ) -> np.ndarray:
        counts = np.bincount(labels, minlength=k)
        D = C.copy()
        for _ in range(self.n_power):
            # (sum_i x_i x_i^T) d = sum_i (x_i·d) x_i, for every cluster at once
            w = own_centre_projection(X, labels, D)
            (sums,) = compute(cluster_sums(X, labels, k, weights=w))
            D = self._normalise_centres(np.asarray(sums))
        return self._normalise_centres(_reseed_empty(X, D, counts, rng))


def _nearest_centre(X: Array, C: np.ndarray) -> tuple[Any, Any]:
    """Label and squared distance of each row's nearest centre (numpy or lazy dask)."""
    # ||x - c||^2 = ||x||^2 - 2 x·c + ||c||^2, as one GEMM
    d2 = squared_row_norms(X)[:, None] - 2.0 * (X @ C.T) + np.sum(C * C, axis=1)
    return d2.argmin(axis=1), d2.min(axis=1)


def _reseed_empty(
    X: Array, C: np.ndarray, counts: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    empty = np.flatnonzero(counts == 0)
    if empty.size == 0:
        return C
    C = C.copy()
    rows = rng.choice(X.shape[0], size=empty.size, replace=False)
    picked = compute(*[X[int(r)] for r in rows])
    for c, row in zip(empty, picked, strict=True):
        C[c] = np.asarray(row, np.float64)
    return C
