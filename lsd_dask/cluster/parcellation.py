"""Spatially coherent parcels from any clustering: one estimator owns the spatial options.

:class:`MeshParcellation` wraps a clustering estimator as nilearn's ``Parcellations`` wraps
its methods: the spatial settings belong to the estimator, and ``fit`` runs

1. **blur**: the feature rows averaged along the mesh (``feature_smoothing_mm``, FWHM)
   and unit-normalised again;
2. **fit**: the wrapped estimator, with its Potts term on the mesh when it has one
   (``spatial_weight``), at K clusters, or at ``oversegment`` × K clusters that
   :func:`~lsd_dask.cluster.ward_merge` then merges, neighbours on the mesh only, down
   to K;
3. **contiguity**: every cluster split into connected parcels and fragments under
   ``min_region_size`` merged into their most similar neighbour (``contiguous``);
4. **size floor**: parcels under ``min_parcel_size`` vertices merged whole into their most
   similar neighbour (``min_parcel_size``).

Each setting is one constructor parameter with its bound in ``_parameter_constraints``;
a pipeline names the estimator and its parameters, and a new spatial option is one more
parameter here. :data:`SPATIAL_OPTIONS` lists them with their defaults.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone

from .._validation import Array, RandomState, persisted
from ..similarity import unit_rows
from ..surface import contiguous_parcels, merge_small_regions, smooth_on_mesh, smoothing_steps
from ._base import ClusterBase, _n_features, constraint_error, eager_labels
from ._spatial import check_connectivity
from .ward import WardMerge

__all__ = ["MeshParcellation", "SPATIAL_OPTIONS", "check_spatial_options"]


class MeshParcellation(ClusterBase):
    """A clustering of mesh vertices, made spatially coherent by its spatial options.

    Parameters
    ----------
    estimator : clustering estimator
        Takes ``n_clusters``, has ``labels_`` after fitting; cloned, never changed. When it
        takes ``spatial_weight`` (a Potts term: directional clustering, spherical k-means)
        it gets ``spatial_weight`` and the mesh; otherwise, when it takes ``connectivity``
        (mesh-constrained Ward), it gets the mesh.
    n_clusters : int, default=8
    connectivity : sparse matrix of shape (n_samples, n_samples) or None, default=None
        The mesh adjacency of the samples (vertices); needed by every spatial option.
    vertices : ndarray of shape (n_samples, 3) or None, default=None
        Vertex coordinates in mm; needed by ``feature_smoothing_mm``.
    feature_smoothing_mm : float, default=0.0
        Blur of the feature rows along the mesh (FWHM, mm; 0: none), then unit rows again.
    spatial_weight : float, default=0.0
        Potts penalty per cut mesh edge (estimators with a ``spatial_weight`` only).
    oversegment : float, default=1.0
        Fit ``ceil(oversegment × K)`` clusters, then merge touching clusters with Ward's
        linkage down to K (1: no merge).
    contiguous : bool, default=False
        Split clusters into connected parcels, fragments under ``min_region_size`` merged
        into the neighbour with the most similar mean feature row.
    min_region_size : int, default=20
        Vertices below which a fragment is merged (with ``contiguous``).
    min_parcel_size : int, default=0
        Parcels (clusters, or with ``contiguous`` connected parcels) under this many
        vertices merge whole into the neighbour with the most similar mean feature row,
        smallest first (0: none).
    random_state : int, Generator or None, default=None
        Given to the wrapped estimator when not None (its own otherwise).

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        Numpy int64 in ``[0, n_clusters_)``, whatever X is.
    n_clusters_ : int
        Parcels found: K, or more with ``contiguous`` (a cluster in several pieces).
    estimator_ : estimator
        The fitted inner estimator (a :class:`WardMerge` when ``oversegment`` > 1).
    smoothing_steps_ : int
        Averaging steps of the blur (0: none).
    n_iter_ : int
        The inner estimator's iterations, where it reports them.

    Notes
    -----
    Memory: the blur keeps one more array of X's shape (persisted when X is a dask
    array); the merge and the contiguity step need only per-cluster sums of the rows.

    Examples
    --------
    >>> from lsd_dask.cluster import MeshParcellation, SphericalKMeans
    >>> from lsd_dask.datasets import brain_grid
    >>> from lsd_dask.surface import grid_adjacency, split_connected
    >>> import numpy as np
    >>> X, truth, _ = brain_grid(snr_db=-3, n_features=20, n_regions=6, shape=(16, 16),
    ...                          random_state=0)
    >>> A = grid_adjacency(16, 16)
    >>> xy = np.stack(np.meshgrid(np.arange(16.0), np.arange(16.0), indexing="ij"), -1)
    >>> V = np.c_[xy.reshape(-1, 2), np.zeros(256)]      # 1 mm grid
    >>> est = MeshParcellation(SphericalKMeans(), 6, connectivity=A, vertices=V,
    ...                        feature_smoothing_mm=2, oversegment=2, contiguous=True,
    ...                        min_region_size=5, random_state=0).fit(X)
    >>> # every parcel is one connected piece of the grid
    >>> int(split_connected(est.labels_ + 1, A, min_size=1).max()) == est.n_clusters_
    True
    """

    _parameter_constraints = {
        "connectivity": [None, sp.spmatrix, sp.sparray, np.ndarray],
        "vertices": [None, np.ndarray],
        "feature_smoothing_mm": [("real", 0, None)],
        "spatial_weight": [("real", 0, None)],
        "oversegment": [("real", 1, None)],
        "contiguous": [bool],
        "min_region_size": [("int", 1, None)],
        "min_parcel_size": [("int", 0, None)],
    }

    def __init__(
        self,
        estimator: Any = None,
        n_clusters: int = 8,
        *,
        connectivity: Any = None,
        vertices: Any = None,
        feature_smoothing_mm: float = 0.0,
        spatial_weight: float = 0.0,
        oversegment: float = 1.0,
        contiguous: bool = False,
        min_parcel_size: int = 0,
        min_region_size: int = 20,
        random_state: RandomState = None,
    ) -> None:
        self.estimator = estimator
        self.n_clusters = n_clusters
        self.connectivity = connectivity
        self.vertices = vertices
        self.feature_smoothing_mm = feature_smoothing_mm
        self.spatial_weight = spatial_weight
        self.oversegment = oversegment
        self.contiguous = contiguous
        self.min_parcel_size = min_parcel_size
        self.min_region_size = min_region_size
        self.random_state = random_state

    def fit(self, X: Array, y: object = None) -> MeshParcellation:
        """Blur, fit (and merge), then make parcels contiguous; X is (n_samples, d)."""
        X, k, _ = self._validate_fit(X)
        F, A = self._prepare(X)
        est = self._inner(k, A)
        est.fit(F)
        self.estimator_ = est
        if hasattr(est, "n_iter_"):  # the inner fit's iterations (the pipeline logs them)
            self.n_iter_ = est.n_iter_
        self.labels_ = self._finish(eager_labels(est.labels_), F, A)
        self.n_clusters_ = int(self.labels_.max()) + 1 if self.labels_.size else 0
        self.n_features_in_ = _n_features(X)
        return self

    def needs_mesh(self) -> bool:
        """Whether ``fit`` uses ``connectivity``: a spatial option is on, or the wrapped
        estimator takes the mesh and has no Potts term (mesh-constrained Ward)."""
        params = self.estimator.get_params() if hasattr(self.estimator, "get_params") else {}
        takes_mesh = "connectivity" in params and "spatial_weight" not in params
        return bool(self._active_options()) or takes_mesh

    # -- private ------------------------------------------------------------------
    def _options(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in SPATIAL_OPTIONS}

    def _active_options(self) -> dict[str, Any]:
        """The spatial options set away from their defaults (each needs the mesh)."""
        return {k: v for k, v in self._options().items() if v != SPATIAL_OPTIONS[k]}

    def _prepare(self, X: Array) -> tuple[Any, sp.csr_matrix | None]:
        """The checked options and mesh, and the features to cluster (blurred where
        asked; ``smoothing_steps_`` set)."""
        if self.estimator is None:
            raise TypeError("MeshParcellation: estimator is None; give a clustering estimator.")
        check_spatial_options(self.estimator, self._options())
        n = X.shape[0]
        A = None if self.connectivity is None else check_connectivity(self.connectivity, n)
        active = self._active_options()
        if A is None and active:
            raise ValueError(
                f"MeshParcellation: the spatial options {sorted(active)} need connectivity "
                "(the mesh adjacency)."
            )
        F, self.smoothing_steps_ = self._blurred(X, A)
        return F, A

    def _finish(self, labels: np.ndarray, F: Any, A: sp.csr_matrix | None) -> np.ndarray:
        """The contiguity step and the size floor on a fit's labels (int64 from 0)."""
        if self.contiguous:
            labels = contiguous_parcels(labels, A, min_size=self.min_region_size, features=F) - 1
        if self.min_parcel_size > 1:
            labels = merge_small_regions(labels, A, min_size=self.min_parcel_size, features=F) - 1
        return np.asarray(labels, np.int64)

    def _blurred(self, X: Array, A: sp.csr_matrix | None) -> tuple[Any, int]:
        if self.feature_smoothing_mm == 0:
            return X, 0
        if self.vertices is None or len(self.vertices) != X.shape[0]:
            raise ValueError(
                f"MeshParcellation: feature_smoothing_mm={self.feature_smoothing_mm} needs "
                f"vertices, one (x, y, z) row per sample ({X.shape[0]})."
            )
        assert A is not None
        steps = smoothing_steps(self.vertices, A, float(self.feature_smoothing_mm))
        return persisted(unit_rows(smooth_on_mesh(X, A, n_iter=steps))), steps

    def _inner(self, k: int, A: sp.csr_matrix | None, *, merged: bool = True) -> Any:
        """The wrapped estimator, cloned and given K, the mesh and the Potts weight; in a
        :class:`WardMerge` where ``oversegment`` > 1 (unless not ``merged``)."""
        est = clone(self.estimator)
        params = est.get_params()
        update: dict[str, Any] = {}
        if self.random_state is not None and "random_state" in params:
            update["random_state"] = self.random_state
        if "spatial_weight" in params:
            update["spatial_weight"] = self.spatial_weight
            update["connectivity"] = A if self.spatial_weight > 0 else None
        elif "connectivity" in params and A is not None:
            update["connectivity"] = A
        est.set_params(**update)
        if merged and self.oversegment > 1:
            return WardMerge(
                est, k, oversegment=self.oversegment, connectivity=A,
                random_state=self.random_state,
            )  # fmt: skip
        return est.set_params(n_clusters=k)


#: the spatial options of :class:`MeshParcellation` and their defaults (each option set
#: away from its default needs the mesh)
SPATIAL_OPTIONS: dict[str, Any] = {
    name: p.default
    for name, p in inspect.signature(MeshParcellation.__init__).parameters.items()
    if name
    not in {"self", "estimator", "n_clusters", "connectivity", "vertices", "min_region_size",
            "random_state"}
}  # fmt: skip


def check_spatial_options(estimator: Any, options: dict[str, Any]) -> None:
    """Check spatial options before any data: each against its bound, and (given the
    wrapped estimator) a Potts weight only for an estimator with a Potts term.

    Raises
    ------
    ValueError
        Naming the option, its value and what is allowed.
    TypeError
        When ``estimator`` is not an estimator.
    """
    unknown = sorted(set(options) - set(SPATIAL_OPTIONS))
    if unknown:
        raise ValueError(f"unknown spatial option(s) {unknown}; known: {sorted(SPATIAL_OPTIONS)}.")
    for name, value in options.items():
        problem = constraint_error(value, MeshParcellation._parameter_constraints[name])
        if problem:
            raise ValueError(f"{name}: {problem}")
    if estimator is None:
        return
    if not hasattr(estimator, "get_params"):
        raise TypeError(f"estimator: a clustering estimator, got {estimator!r}.")
    if options.get("spatial_weight", 0) > 0 and "spatial_weight" not in estimator.get_params():
        raise ValueError(
            f"spatial_weight: {type(estimator).__name__} has no Potts term (an estimator with "
            "a spatial_weight parameter has)."
        )
