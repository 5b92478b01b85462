"""Mesh-constrained Ward clustering: nilearn's parcellation approach, as a baseline method.

Agglomerative clustering with Ward's linkage, where only clusters that touch on the mesh
may merge (``connectivity``), so every cluster is one connected piece of the surface. It
runs scikit-learn's ``AgglomerativeClustering(linkage="ward", connectivity=...)`` on the
SVD features, as ``nilearn.regions.Parcellations(method="ward")`` does on its reduced data.

Notes
-----
Memory: the features in memory (a dask array is computed: 64,984 × 1,000 float32 is
260 MB) plus the merge tree, O(n) with a sparse mesh connectivity. Deterministic: there is
no seed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.cluster import AgglomerativeClustering

from .._validation import to_numpy
from ._base import ClusterBase, _n_features

__all__ = ["MeshWard"]


class MeshWard(ClusterBase):
    """Ward agglomeration constrained by the mesh (nilearn's ``Parcellations`` ward).

    Parameters
    ----------
    n_clusters : int, default=8
    connectivity : sparse matrix of shape (n_samples, n_samples) or None, default=None
        The mesh adjacency of the samples (vertices). None: unconstrained Ward.
    random_state : ignored
        Accepted so that every method of the pipeline takes the same arguments.

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        Always numpy int64, whatever X is.
    n_connected_components_ : int
        Pieces of the connectivity graph (scikit-learn joins pieces when there are several).

    Examples
    --------
    >>> from lsd_dask.cluster import MeshWard
    >>> from lsd_dask.datasets import brain_grid
    >>> from lsd_dask.metrics import ari
    >>> from lsd_dask.surface import grid_adjacency, split_connected
    >>> X, truth, _ = brain_grid(snr_db=0, n_features=20, n_regions=6, shape=(16, 16),
    ...                          random_state=0)
    >>> A = grid_adjacency(16, 16)
    >>> labels = MeshWard(6, connectivity=A).fit(X).labels_
    >>> # every parcel is one connected piece of the grid
    >>> int(split_connected(labels + 1, A, min_size=1).max()), bool(ari(truth, labels) > 0.95)
    (6, True)
    """

    _parameter_constraints = {
        "connectivity": [None, sp.spmatrix, sp.sparray, np.ndarray],
    }

    def __init__(
        self, n_clusters: int = 8, *, connectivity: Any = None, random_state: Any = None
    ) -> None:
        self.n_clusters = n_clusters
        self.connectivity = connectivity
        self.random_state = random_state

    def fit(self, X: Any, y: Any = None) -> MeshWard:
        """Fit to features X (n_samples × n_features)."""
        X, k, _ = self._validate_fit(X)
        data = to_numpy(X)
        conn = self.connectivity
        if conn is not None and conn.shape != (data.shape[0], data.shape[0]):
            raise ValueError(
                f"connectivity has shape {conn.shape}; expected ({data.shape[0]}, "
                f"{data.shape[0]}), one row per sample."
            )
        model = AgglomerativeClustering(n_clusters=k, linkage="ward", connectivity=conn)
        labels = model.fit(data).labels_.astype(np.int64)
        self.n_connected_components_ = int(getattr(model, "n_connected_components_", 1))
        self.labels_ = labels
        self.n_features_in_ = _n_features(X)
        return self
