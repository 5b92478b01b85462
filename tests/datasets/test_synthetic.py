import numpy as np
import pytest

from lsd_dask import surface as S
from lsd_dask.datasets import (
    blumensath_dataset,
    blumensath_table_data,
    brain_grid,
    lsdable_similarity,
    surface_study,
)


@pytest.mark.parametrize("sizes", ["equal", "unequal"])
def test_table_data_sizes(sizes):
    X, lab = blumensath_table_data(0.1, sizes=sizes, random_state=0)
    assert X.shape == (100, 1000)
    counts = np.sort(np.bincount(lab, minlength=10))
    if sizes == "unequal":
        np.testing.assert_array_equal(counts, [1] * 9 + [91])
    else:
        assert counts.sum() == 100 and counts.size == 10


def test_table_data_noise_level():
    X0, lab = blumensath_table_data(0.0, random_state=1)
    X1, _ = blumensath_table_data(1.0, random_state=1)
    # same seed, same centres: the difference is the noise
    assert np.std(X1 - X0) == pytest.approx(1.0, rel=0.02)
    # noiseless rows of a cluster are identical
    c = lab[0]
    assert np.allclose(X0[lab == c], X0[0])


@pytest.mark.parametrize("which", [1, 2, 3])
def test_datasets_1_to_3(which):
    X, lab = blumensath_dataset(which, 4.0, random_state=0)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0)
    if which > 1:
        np.testing.assert_array_equal(np.sort(np.bincount(lab)), [1, 1, 1, 3, 3, 6, 10, 14, 24, 36])


@pytest.mark.parametrize("variant", ["gaussian", "smoothed", "beta"])
def test_brain_grid(variant):
    X, lab, A = brain_grid(variant, snr_db=-3, n_features=20, random_state=0)
    assert X.shape == (4096, 20)
    assert set(np.unique(lab)) == set(range(40))
    # 40 regions, each one connected piece on the grid
    assert S.connected_regions(lab, A, background=None).max() + 1 == 40
    if variant == "beta":
        assert X.min() >= 0 and X.max() <= 1


def test_brain_grid_snr():
    X, lab, _ = brain_grid("gaussian", snr_db=-9, n_features=200, random_state=0)
    means = np.stack([X[lab == c].mean(0) for c in range(40)])
    resid = X - means[lab]
    assert resid.var() == pytest.approx(10**0.9, rel=0.05)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_lsdable_similarity(k):
    d = lsdable_similarity(60, k, random_state=k)
    np.testing.assert_allclose(d.P.sum(axis=0), 1.0)
    assert d.P.min() >= 0
    np.testing.assert_array_equal(d.P.argmax(axis=0), d.labels)
    np.testing.assert_allclose(d.K, d.features @ d.features.T)
    # every cluster has a pure (one-hot) column
    for c in range(k):
        assert np.any(d.P[c] == 1.0)


def test_surface_study(tiny_meshes):
    st = surface_study(
        tiny_meshes,
        n_parcels=6,
        n_subjects=(2, 3),
        n_timepoints=40,
        medial_wall_fraction=0.1,
        random_state=0,
    )
    n = sum(m.n_vertices for m in tiny_meshes.values())
    assert st.n_vertices == n and st.n_parcels == 6
    assert len(st.splits["split1"]) == 2 and len(st.splits["split2"]) == 3
    assert set(st.splits["split1"]).isdisjoint(st.splits["split2"])
    x = st.subject_data("sub-001")
    assert x.shape == (n, 40) and x.dtype == np.float32
    # medial wall: labelled 0, constant zero
    wall = st.labels == 0
    assert wall.any() and np.all(x[wall] == 0)
    # parcels are connected on the mesh and never cross hemispheres
    lh, rh = tiny_meshes["left"], tiny_meshes["right"]
    A = S.mesh_adjacency([lh.faces, rh.faces], [lh.n_vertices, rh.n_vertices])
    assert S.split_connected(st.labels, A, min_size=1).max() == 6
    # deterministic per subject
    np.testing.assert_array_equal(x, st.subject_data("sub-001"))
    # within a parcel, time series of one subject are correlated (shared signal)
    p = st.labels[~wall][0]
    idx = np.flatnonzero(st.labels == p)[:2]
    assert np.corrcoef(x[idx[0]], x[idx[1]])[0, 1] > 0.3
