"""Mesh-constrained Ward and the Ward merge against scikit-learn's AgglomerativeClustering,
on a real mesh graph, and the merge's costs against the within-cluster sum of squares."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse.csgraph import connected_components
from sklearn.cluster import AgglomerativeClustering

from lsd_dask.cluster import MeshWard, SphericalKMeans, WardMerge, ward_merge
from lsd_dask.metrics import ari
from lsd_dask.surface import grid_adjacency, icosphere, split_connected


def _smooth_on_sphere(n_features, noise, seed):
    """Features that are smooth functions of position on a sphere mesh, plus noise."""
    mesh = icosphere(8, radius=50.0)
    rng = np.random.default_rng(seed)
    X = np.column_stack(
        [np.sin(mesh.vertices @ rng.standard_normal(3) / 20) for _ in range(n_features)]
    )
    return X + noise * rng.standard_normal(X.shape), mesh.adjacency()


def test_equals_scikit_learn_and_every_cluster_is_connected():
    X, A = _smooth_on_sphere(6, 0.1, seed=0)
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


# --------------------------------------------------------------------------- WardMerge


def _sse(X, lab):
    """Within-cluster sum of squares (numpy reference)."""
    return sum(((X[lab == c] - X[lab == c].mean(0)) ** 2).sum() for c in np.unique(lab))


def test_ward_merge_equals_scikit_learn_ward_over_the_cluster_means():
    # Ward over samples that each carry their (connected) cluster's mean first joins every
    # cluster at no cost, then merges the clusters exactly as ward_merge does
    X, A = _smooth_on_sphere(5, 0.2, seed=1)
    fine = split_connected(MeshWard(40, connectivity=A).fit(X).labels_ + 1, A, min_size=1) - 1
    means = np.array([X[fine == c].mean(0) for c in range(fine.max() + 1)])
    ref = AgglomerativeClustering(9, linkage="ward", connectivity=A).fit(means[fine]).labels_
    got, merges = ward_merge(X, fine, 9, connectivity=A)
    assert ari(ref, got) == pytest.approx(1.0)
    assert merges.shape == (fine.max() + 1 - 9, 3)
    lazy, _ = ward_merge(da.from_array(X, chunks=(300, 5)), fine, 9, connectivity=A)
    np.testing.assert_array_equal(lazy, got)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    n_fine=st.integers(2, 12),
    k=st.integers(1, 12),
    use_mesh=st.booleans(),
)
def test_ward_merge_costs_are_the_increases_in_within_sum_of_squares(seed, n_fine, k, use_mesh):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((64, 3))
    fine = rng.integers(0, n_fine, 64)
    A = grid_adjacency(8, 8) if use_mesh else None
    got, merges = ward_merge(X, fine, k, connectivity=A)
    n_present = np.unique(fine).size
    assert np.unique(got).size == min(k, n_present)
    assert set(np.unique(got)) == set(range(min(k, n_present)))
    # nested: every fine cluster lies inside one merged cluster
    for c in np.unique(fine):
        assert np.unique(got[fine == c]).size == 1
    # each merge's cost is exactly what it adds to the within-cluster sum of squares
    np.testing.assert_allclose(_sse(X, got), _sse(X, fine) + merges[:, 2].sum(), rtol=1e-9)
    assert (merges[:, 2] >= 0).all()


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    n_fine=st.integers(2, 16),
    ks=st.lists(st.integers(1, 16), min_size=2, max_size=4, unique=True),
    use_mesh=st.booleans(),
)
def test_one_merge_sequence_cut_at_each_k_is_each_ks_own_merge(seed, n_fine, ks, use_mesh):
    """Merged once down to the smallest K, then cut at every K: each cut equals
    :func:`ward_merge` run down to that K alone, bit for bit (what lets one fine fit serve
    every K)."""
    from lsd_dask.cluster import cut_merges

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((64, 3))
    fine = rng.integers(0, n_fine, 64)
    A = grid_adjacency(8, 8) if use_mesh else None
    present = np.unique(fine).size
    ks = [min(k, present) for k in ks]
    _, merges = ward_merge(X, fine, min(ks), connectivity=A)
    for k in ks:
        np.testing.assert_array_equal(cut_merges(fine, merges, k),
                                      ward_merge(X, fine, k, connectivity=A)[0])  # fmt: skip
    with pytest.raises(ValueError, match=r"n_clusters=\d+: the merges reach from"):
        cut_merges(fine, merges, min(ks) - 1 if min(ks) > 1 else 0)


def test_ward_merge_only_merges_touching_clusters_until_none_touch():
    # two separate 4 x 4 grids: clusters merge within a grid first, across them only last
    A = sp.block_diag([grid_adjacency(4, 4), grid_adjacency(4, 4)]).tocsr()
    fine = np.repeat(np.arange(8), 4)  # rows of the two grids
    X = np.zeros((32, 1))
    X[16:] = 10.0  # the second grid is far away, and its rows near grid 1's last rows
    X[:, 0] += np.repeat([0, 1, 2, 9.5, 10, 11, 12, 13], 4)
    got, _ = ward_merge(X, fine, 2, connectivity=A)
    assert (got[:16] == got[0]).all() and (got[16:] == got[16]).all() and got[0] != got[16]
    one, _ = ward_merge(X, fine, 1, connectivity=A)
    assert (one == 0).all()


def test_ward_merge_names_bad_labels():
    with pytest.raises(ValueError, match="labels"):
        ward_merge(np.ones((5, 2)), np.array([0, 1, -1, 0, 1]), 1)


def test_ward_merge_estimator_fits_oversegment_times_k_and_nests():
    mesh = icosphere(8, radius=50.0)
    A = mesh.adjacency()
    X, truth, _ = _patches(mesh, A)
    est = WardMerge(SphericalKMeans(), 6, oversegment=2.5, connectivity=A, random_state=0)
    est.fit(X)
    assert est.estimator_.n_clusters == 15 and est.estimator.n_clusters != 15  # cloned
    assert np.unique(est.fine_labels_).size == 15 and np.unique(est.labels_).size == 6
    for c in np.unique(est.fine_labels_):
        assert np.unique(est.labels_[est.fine_labels_ == c]).size == 1
    again = WardMerge(SphericalKMeans(), 6, oversegment=2.5, connectivity=A, random_state=0)
    np.testing.assert_array_equal(again.fit(X).labels_, est.labels_)
    merged, _ = ward_merge(X, est.fine_labels_, 6, connectivity=A)
    np.testing.assert_array_equal(est.labels_, merged)
    assert ari(truth, est.labels_) > 0.5  # the patches, not noise
    lazy = WardMerge(SphericalKMeans(), 6, oversegment=2.5, connectivity=A, random_state=0)
    np.testing.assert_array_equal(lazy.fit(da.from_array(X, chunks=(200, -1))).labels_, est.labels_)
    # every K from 6 to the fine 15, cut from the one fit
    for k in (6, 9, 15):
        merged, _ = ward_merge(X, est.fine_labels_, k, connectivity=A)
        np.testing.assert_array_equal(est.cut(k), merged)
    with pytest.raises(ValueError, match="merges reach from 15 clusters down to 6"):
        est.cut(5)


def test_ward_merge_estimator_needs_an_estimator():
    with pytest.raises(TypeError, match="estimator"):
        WardMerge(None, 2).fit(np.random.default_rng(0).standard_normal((10, 2)))


def _patches(mesh, A):
    """Six patches of the sphere (nearest of six directions), each with its own signal,
    in noise: the truth is contiguous."""
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((6, 3))
    truth = np.argmax(mesh.vertices @ centres.T, axis=1)
    signals = rng.standard_normal((6, 30))
    X = signals[truth] + 1.5 * rng.standard_normal((truth.size, 30))
    return X, truth, centres
