"""Mesh-constrained Ward against scikit-learn's AgglomerativeClustering, on a real mesh graph."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from scipy.sparse.csgraph import connected_components
from sklearn.cluster import AgglomerativeClustering

from lsd_dask.cluster import MeshWard
from lsd_dask.surface import icosphere


def test_equals_scikit_learn_and_every_cluster_is_connected():
    mesh = icosphere(8, radius=50.0)
    A = mesh.adjacency()
    rng = np.random.default_rng(0)
    # smooth features (a function of position) plus noise
    X = np.column_stack([np.sin(mesh.vertices @ rng.standard_normal(3) / 20) for _ in range(6)])
    X += 0.1 * rng.standard_normal(X.shape)
    lab = MeshWard(12, connectivity=A).fit(X).labels_
    ref = AgglomerativeClustering(12, linkage="ward", connectivity=A).fit(X).labels_
    np.testing.assert_array_equal(lab, ref)
    for c in range(12):
        sub = A[lab == c][:, lab == c]
        assert connected_components(sub, directed=False)[0] == 1
    lazy = MeshWard(12, connectivity=A).fit(da.from_array(X, chunks=(200, 6))).labels_
    assert type(lazy) is np.ndarray  # labels are numpy whatever the input
    np.testing.assert_array_equal(lazy, lab)


def test_connectivity_of_the_wrong_size_is_named():
    mesh = icosphere(4)
    with pytest.raises(ValueError, match="connectivity has shape"):
        MeshWard(3, connectivity=mesh.adjacency()).fit(np.ones((10, 2)))
