import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn import datasets

from lsd_dask import metrics
from lsd_dask.cluster import KEVD, NMF, KMeans, SemiNMF, SoF, SpectralClustering, SphericalKMeans
from lsd_dask.cluster.kmeans import _EuclideanLloyd
from lsd_dask.datasets import blumensath_dataset, brain_grid
from lsd_dask.surface import grid_adjacency


@pytest.fixture(scope="module")
def noiseless():
    return blumensath_dataset(1, 0.0, n_features=40, n_samples=60, n_clusters=5, random_state=3)


@pytest.mark.parametrize("cls", [KMeans, SphericalKMeans, KEVD, SpectralClustering, SemiNMF])
def test_noiseless_recovery(cls, noiseless):
    X, lab = noiseless
    m = cls(5, random_state=0).fit(X)
    assert metrics.nmi(m.labels_, lab) == pytest.approx(1.0)


@pytest.mark.parametrize("cls", [KMeans, SphericalKMeans, KEVD, SemiNMF])
def test_dask_input_recovers_with_numpy_labels(cls, noiseless):
    X, lab = noiseless
    m = cls(5, random_state=0).fit(da.from_array(X, chunks=(16, 40)))
    # the labels policy: n integers are numpy, whatever the input
    assert type(m.labels_) is np.ndarray and m.labels_.dtype == np.int64
    assert metrics.nmi(m.labels_, lab) == pytest.approx(1.0)
    if cls is SemiNMF:  # n × k arrays stay lazy for dask input
        assert isinstance(m.weights_, da.Array)


def test_kmeans_numpy_is_scikit_learn_and_dask_reaches_its_partition():
    from sklearn.cluster import KMeans as SkKMeans

    X, lab = datasets.make_blobs(600, n_features=8, centers=6, cluster_std=0.5, random_state=4)
    a = KMeans(6, n_init=3, random_state=0).fit(X)
    ref = SkKMeans(6, n_init=3, random_state=0).fit(X)
    np.testing.assert_array_equal(a.labels_, ref.labels_)
    assert a.inertia_ == pytest.approx(ref.inertia_)
    b = KMeans(6, n_init=3, random_state=0).fit(da.from_array(X, chunks=(128, 8)))
    assert metrics.ari(a.labels_, b.labels_) == pytest.approx(1.0)
    assert b.inertia_ == pytest.approx(ref.inertia_, rel=1e-9)
    # inertia_ is the kept partition's: the squared distances to its own centres
    d2 = ((X - b.cluster_centers_[b.labels_]) ** 2).sum()
    assert b.inertia_ == pytest.approx(d2, rel=1e-9)


def test_kmeans_dask_keeps_the_run_of_lowest_inertia():
    X, _, _ = brain_grid(snr_db=-9, n_features=20, n_regions=12, shape=(20, 20), random_state=1)
    Xd = da.from_array(X, chunks=(100, 20))
    best = KMeans(12, n_init=4, random_state=5).fit(Xd)
    seeds = np.random.default_rng(5).integers(2**31 - 1, size=4)
    inertias = []
    for s in seeds:
        run = _EuclideanLloyd(12, max_iter=300, tol=1e-6, random_state=int(s)).fit(Xd)
        inertias.append(run.inertia_history_[-1])
    assert len(set(np.round(inertias, 6))) > 1  # the runs differ
    assert best.inertia_ == pytest.approx(min(inertias))


@pytest.mark.parametrize("cls", [SphericalKMeans, KEVD])
def test_numpy_and_dask_agree(cls):
    X, _, _ = brain_grid(snr_db=-3, n_features=20, n_regions=6, shape=(16, 16), random_state=1)
    a = cls(6, random_state=2).fit(X)
    b = cls(6, random_state=2).fit(da.from_array(X, chunks=(50, 20)))
    np.testing.assert_array_equal(a.labels_, b.labels_)


def test_spherical_objective_monotone():
    X, _, _ = brain_grid(snr_db=-9, n_features=20, n_regions=6, shape=(16, 16), random_state=1)
    m = SphericalKMeans(6, random_state=0, tol=0).fit(X)
    assert np.all(np.diff(m.inertia_history_) >= -1e-9)


def test_spectral_iris_and_nystrom():
    X, y = datasets.load_iris(return_X_y=True)
    m = SpectralClustering(3, random_state=0).fit(X)
    assert metrics.accuracy(y, m.labels_) > 0.85
    md = SpectralClustering(3, random_state=0, n_landmarks=100).fit(da.from_array(X, chunks=50))
    assert metrics.accuracy(y, np.asarray(md.labels_)) > 0.85


def test_spectral_sparse_affinity_and_zero_degree():
    A = grid_adjacency(10, 10).astype(float)
    # two disconnected halves of the grid -> two clusters
    A = A.tolil()
    for i in range(10):
        A[i * 10 + 4, i * 10 + 5] = A[i * 10 + 5, i * 10 + 4] = 0
    A = sp.csr_matrix(A)
    m = SpectralClustering(2, affinity="precomputed", random_state=0).fit(A)
    truth = (np.arange(100) % 10 >= 5).astype(int)
    assert metrics.ari(m.labels_, truth) == pytest.approx(1.0)
    A2 = A.tolil()
    A2[0, :] = 0
    A2[:, 0] = 0
    with pytest.raises(ValueError, match="zero affinity"):
        SpectralClustering(2, affinity="precomputed").fit(sp.csr_matrix(A2))


def test_sof_probabilities_on_simplex_and_iris():
    X, y = datasets.load_iris(return_X_y=True)
    m = SoF(3, random_state=0).fit(X)
    P = m.probabilities_
    assert P.min() >= 0
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    assert metrics.purity(y, m.labels_) > 0.85
    assert m.entropy_.shape == (150,) and np.all(m.entropy_ >= 0)


def test_sof_with_duplicated_samples(noiseless):
    """Noiseless data repeat samples, so a neighbour distance is 0: P must stay finite
    (it was 0/0 before) and the planted clusters are found."""
    from lsd_dask.cluster.sof import soft_cluster_matrix

    X, lab = noiseless
    assert len(np.unique(X, axis=0)) < len(X)
    P = soft_cluster_matrix(X, 10)
    assert np.all(np.isfinite(P)) and np.allclose(np.diag(P), 1.0)
    assert metrics.ari(lab, SoF(5, random_state=0).fit(X).labels_) == pytest.approx(1.0)


@pytest.mark.parametrize("solver", ["als", "mu"])
def test_nmf_block_structure(solver):
    rng = np.random.default_rng(0)
    # non-negative rows with disjoint supports per cluster
    lab = rng.integers(0, 3, 60)
    H = np.zeros((3, 30))
    for c in range(3):
        H[c, c * 10 : (c + 1) * 10] = rng.random(10) + 0.5
    A = (rng.random(60) + 0.5)[:, None] * H[lab]
    m = NMF(3, solver=solver, random_state=0).fit(A)
    assert metrics.nmi(m.labels_, lab) == pytest.approx(1.0)
    md = NMF(3, solver=solver, random_state=0, max_iter=50).fit(da.from_array(A, chunks=(20, 30)))
    assert metrics.nmi(md.labels_, lab) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="Negative values"):
        NMF(3).fit(A - 1.0)
