"""MeshParcellation: blur -> fit (-> Ward merge) -> contiguity, against the steps composed
by hand from their separately tested pieces, on a sphere mesh with smooth features."""

from __future__ import annotations

import math

import dask.array as da
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse.csgraph import connected_components

from lsd_dask.cluster import (
    SPATIAL_OPTIONS,
    DirectionalClustering,
    MeshParcellation,
    MeshWard,
    SphericalKMeans,
    WardMerge,
    check_spatial_options,
)
from lsd_dask.metrics import ari
from lsd_dask.similarity import unit_rows
from lsd_dask.surface import contiguous_parcels, icosphere, smooth_on_mesh, smoothing_steps


def _sphere(n_features=8, noise=0.6, seed=0):
    """Unit rows of smooth functions of position on a 50 mm sphere, plus noise."""
    mesh = icosphere(8, radius=50.0)
    rng = np.random.default_rng(seed)
    X = np.column_stack(
        [np.sin(mesh.vertices @ rng.standard_normal(3) / 20) for _ in range(n_features)]
    )
    return unit_rows(X + noise * rng.standard_normal(X.shape)), mesh.adjacency(), mesh.vertices


def test_equals_the_steps_composed_by_hand():
    X, A, V = _sphere()
    est = MeshParcellation(
        DirectionalClustering(), 6, connectivity=A, vertices=V, feature_smoothing_mm=8,
        spatial_weight=0.5, oversegment=2, contiguous=True, min_region_size=10,
        random_state=3,
    ).fit(X)  # fmt: skip
    steps = smoothing_steps(V, A, 8)
    F = unit_rows(smooth_on_mesh(X, A, n_iter=steps))
    fine = DirectionalClustering(spatial_weight=0.5, connectivity=A, random_state=3)
    merged = WardMerge(fine, 6, oversegment=2, connectivity=A, random_state=3).fit(F)
    ref = contiguous_parcels(merged.labels_, A, min_size=10, features=F) - 1
    np.testing.assert_array_equal(est.labels_, ref)
    assert est.smoothing_steps_ == steps > 0
    assert est.estimator_.estimator_.n_clusters == 12  # the fine fit at oversegment x K
    assert est.n_clusters_ == ref.max() + 1 >= 6


def test_without_options_it_is_the_wrapped_estimator():
    X, A, V = _sphere(seed=1)
    est = MeshParcellation(SphericalKMeans(), 5, random_state=0).fit(X)
    ref = SphericalKMeans(5, random_state=0).fit(X)
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    assert not est.needs_mesh() and est.smoothing_steps_ == 0
    # mesh-constrained Ward takes the mesh even with no option on
    ward = MeshParcellation(MeshWard(), 5, connectivity=A).fit(X)
    assert ward.needs_mesh()
    np.testing.assert_array_equal(ward.labels_, MeshWard(5, connectivity=A).fit(X).labels_)


def test_blur_raises_agreement_with_smooth_truth_on_noisy_data():
    # the truth is the clustering of the noiseless features: a blur removes noise
    X0, A, V = _sphere(noise=0.0, seed=2)
    truth = SphericalKMeans(6, random_state=0).fit(X0).labels_
    X, _, _ = _sphere(noise=2.0, seed=2)
    plain = MeshParcellation(SphericalKMeans(), 6, random_state=0).fit(X).labels_
    blurred = MeshParcellation(
        SphericalKMeans(), 6, connectivity=A, vertices=V, feature_smoothing_mm=10,
        random_state=0,
    ).fit(X).labels_  # fmt: skip
    assert ari(truth, blurred) > ari(truth, plain) + 0.1


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 1000), k=st.integers(2, 9), oversegment=st.floats(1.0, 3.0))
def test_contiguous_parcels_are_connected_and_merges_reach_k(seed, k, oversegment):
    X, A, V = _sphere(seed=seed)
    est = MeshParcellation(
        SphericalKMeans(), k, connectivity=A, oversegment=oversegment, contiguous=True,
        min_region_size=5, random_state=seed,
    ).fit(X)  # fmt: skip
    for c in range(est.n_clusters_):
        inside = est.labels_ == c
        assert inside.any()
        assert connected_components(A[inside][:, inside], directed=False)[0] == 1
    if oversegment > 1:
        assert np.unique(est.estimator_.labels_).size == k
        assert est.estimator_.estimator_.n_clusters == min(
            X.shape[0], max(k, math.ceil(oversegment * k))
        )


def test_dask_features_give_the_labels_of_numpy():
    X, A, V = _sphere(seed=4)
    params = dict(
        connectivity=A, vertices=V, feature_smoothing_mm=6, spatial_weight=0.3,
        contiguous=True, min_region_size=5, random_state=0,
    )  # fmt: skip
    ref = MeshParcellation(DirectionalClustering(), 5, **params).fit(X)
    lazy = MeshParcellation(DirectionalClustering(), 5, **params).fit(
        da.from_array(X, chunks=(250, X.shape[1]))
    )
    assert type(lazy.labels_) is np.ndarray
    assert ari(ref.labels_, lazy.labels_) > 0.99


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"oversegment": 2}, ValueError, r"\['oversegment'\] need connectivity"),
        ({"feature_smoothing_mm": -1}, ValueError, "invalid feature_smoothing_mm=-1"),
        ({"contiguous": 1}, ValueError, "invalid contiguous=1; allowed: a bool"),
        ({"min_region_size": 0}, ValueError, "invalid min_region_size=0"),
    ],
)
def test_bad_options_are_named(kwargs, error, match):
    X, _, _ = _sphere()
    with pytest.raises(error, match=match):
        MeshParcellation(SphericalKMeans(), 4, **kwargs).fit(X)


def test_blur_needs_vertices_and_potts_needs_a_potts_term():
    X, A, V = _sphere()
    with pytest.raises(ValueError, match="needs vertices"):
        MeshParcellation(SphericalKMeans(), 4, connectivity=A, feature_smoothing_mm=5).fit(X)
    with pytest.raises(ValueError, match="MeshWard has no Potts term"):
        MeshParcellation(MeshWard(), 4, connectivity=A, spatial_weight=1).fit(X)
    with pytest.raises(ValueError, match=r"spatial_weight: -1; allowed: a number >= 0"):
        check_spatial_options(None, {"spatial_weight": -1})
    with pytest.raises(ValueError, match="unknown spatial option"):
        check_spatial_options(None, {"smooth": 1})


def test_spatial_options_are_the_constructor_parameters_with_their_defaults():
    est = MeshParcellation()
    assert SPATIAL_OPTIONS == {name: getattr(est, name) for name in SPATIAL_OPTIONS}
    assert set(SPATIAL_OPTIONS) <= set(MeshParcellation._parameter_constraints)


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 1000), floor=st.integers(2, 120))
def test_min_parcel_size_merges_small_parcels_whole(seed, floor):
    X, A, V = _sphere(noise=3.0, seed=seed)
    plain = MeshParcellation(SphericalKMeans(), 12, random_state=seed).fit(X).labels_
    est = MeshParcellation(
        SphericalKMeans(), 12, connectivity=A, min_parcel_size=floor, random_state=seed
    ).fit(X)
    sizes = np.bincount(est.labels_)
    assert est.n_clusters_ == 1 or sizes.min() >= floor  # the sphere is connected
    pairs = set(zip(plain.tolist(), est.labels_.tolist(), strict=True))
    assert len({c for c, _ in pairs}) == len(pairs)  # clusters merge whole, never split
    # only a small parcel moves: two parcels at the floor never end in one
    large = np.flatnonzero(np.bincount(plain) >= floor)
    landed = [next(p for c, p in pairs if c == big) for big in large]
    assert len(set(landed)) == len(large)
