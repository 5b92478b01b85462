import dask.array as da
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsd_dask import metrics
from lsd_dask._validation import ConvergenceWarning
from lsd_dask.cluster import DirectionalClustering, directional_assign, select_n_clusters
from lsd_dask.cluster.directional import PATIENCE, _Residuals
from lsd_dask.datasets import blumensath_dataset, blumensath_table_data, brain_grid


def test_paper_2d_example_goes_to_d3():
    D = np.array([[1.0, 0.0], [0.999, 0.1], [0.707, 0.707]])
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    x = np.array([[0.9239, 0.3827]])
    lab, _ = directional_assign(x, D, update="pinv")
    assert lab[0] == 2
    # spherical k-means (largest correlation) sends it to the near-duplicate d2 instead
    lab_c, _ = directional_assign(x, D, update="correlation")
    assert lab_c[0] == 1


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    mu=st.floats(0.01, 0.25),
    k=st.integers(2, 6),
    noise=st.sampled_from([0.1, 1.0, 2.0]),
)
def test_gradient_cost_never_increases(seed, mu, k, noise):
    X, _ = blumensath_table_data(
        noise, n_features=30, n_clusters=k, n_samples=40, random_state=seed
    )
    m = DirectionalClustering(
        k, update="gradient", normalize="D", mu=mu, max_iter=40, tol=0, random_state=seed
    )
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # capped at 40 iterations
        m.fit(X)
    c = np.asarray(m.cost_history_)
    assert np.all(np.diff(c) <= 1e-9 * c[0])


@pytest.mark.parametrize("update", ["pinv", "gradient"])
@pytest.mark.parametrize("normalize", ["D", "S", None])
def test_noiseless_clusters_recovered(update, normalize):
    X, lab = blumensath_dataset(1, 0.0, n_features=50, n_samples=60, n_clusters=5, random_state=1)
    m = DirectionalClustering(5, update=update, normalize=normalize, random_state=0).fit(X)
    assert metrics.nmi(m.labels_, lab) == pytest.approx(1.0)


@pytest.mark.parametrize("update", ["pinv", "gradient"])
def test_numpy_and_dask_same_labels(update):
    X, lab, _ = brain_grid(snr_db=-3, n_features=30, n_regions=8, shape=(24, 24), random_state=0)
    kw = dict(update=update, random_state=3, max_iter=30)
    a = DirectionalClustering(8, **kw).fit(X)
    b = DirectionalClustering(8, **kw).fit(da.from_array(X, chunks=(100, 30)))
    assert type(b.labels_) is np.ndarray
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, atol=1e-10)
    assert a.cost_history_ == pytest.approx(b.cost_history_)


def test_empty_cluster_reinitialised():
    # init with a duplicated centre: one of the pair starts empty
    X, lab = blumensath_dataset(1, 0.0, n_features=20, n_samples=40, n_clusters=4, random_state=2)
    centres = np.stack([X[lab == c][0] for c in range(4)])
    centres[3] = centres[2]
    m = DirectionalClustering(4, init=centres, random_state=0).fit(X)
    assert np.unique(m.labels_).size == 4
    assert metrics.nmi(m.labels_, lab) == pytest.approx(1.0)


def test_empty_cluster_reinitialised_alike_on_dask_input():
    # the residuals that pick the new centre's sample are made only then, on either input
    X, lab = blumensath_dataset(1, 0.0, n_features=20, n_samples=40, n_clusters=4, random_state=2)
    centres = np.stack([X[lab == c][0] for c in range(4)])
    centres[3] = centres[2]
    a = DirectionalClustering(4, init=centres, random_state=0).fit(X)
    b = DirectionalClustering(4, init=centres, random_state=0).fit(da.from_array(X, chunks=15))
    np.testing.assert_array_equal(a.labels_, b.labels_)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), k=st.integers(1, 6))
def test_residuals_match_their_definition(seed, k):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((50, 7))
    D = rng.standard_normal((k, 7))
    lab = rng.integers(0, k, 50)
    sb = rng.uniform(0, 2, 50)
    row_sq = (X * X).sum(axis=1)
    dense = ((X - sb[:, None] * D[lab]) ** 2).sum(axis=1)  # ||x_i - s̄_i d_{l_i}||²
    for Xs, P in ((X, None), (da.from_array(X, chunks=20), None), (X, X @ D.T)):
        np.testing.assert_allclose(_Residuals(Xs, lab, sb, D, row_sq, P)(), dense, atol=1e-9)


def test_svd_init_and_predict():
    X, lab, _ = brain_grid(snr_db=0, n_features=30, n_regions=6, shape=(20, 20), random_state=4)
    m = DirectionalClustering(6, init="svd", random_state=0).fit(X)
    assert metrics.nmi(m.labels_, lab) > 0.9
    # predict: each row's least-squares coefficients on all centres (lstsq, not pinv), largest
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    coef = np.linalg.lstsq(m.cluster_centers_.T, Xn.T, rcond=None)[0]
    np.testing.assert_array_equal(m.predict(X), coef.argmax(axis=0))
    with pytest.raises(ValueError, match="n_clusters <= n_features"):
        DirectionalClustering(31, init="svd").fit(X)


def test_sample_weight():
    X, lab, _ = brain_grid(snr_db=0, n_features=30, n_regions=4, shape=(16, 16), random_state=5)
    plain = DirectionalClustering(4, random_state=0).fit(X)
    # a common factor on every row rescales S̄ only: the same clustering
    same = DirectionalClustering(4, random_state=0).fit(X, sample_weight=np.full(X.shape[0], 2.5))
    np.testing.assert_array_equal(plain.labels_, same.labels_)
    # noiseless clusters are recovered whatever the per-row weights
    Xc, labc = blumensath_dataset(1, 0.0, n_features=30, n_samples=50, n_clusters=4, random_state=6)
    w = np.random.default_rng(0).uniform(0.5, 3.0, Xc.shape[0])
    m = DirectionalClustering(4, random_state=0).fit(Xc, sample_weight=w)
    assert metrics.nmi(m.labels_, labc) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="sample_weight"):
        DirectionalClustering(4).fit(X, sample_weight=-np.ones(X.shape[0]))


def test_select_n_clusters_aic():
    for seed in (0, 1, 2):
        X, _ = blumensath_dataset(
            1, 1.0, n_features=200, n_samples=120, n_clusters=6, random_state=seed
        )
        best, scores = select_n_clusters(X, range(2, 11))
        assert set(scores) == set(range(2, 11))
        assert best == 6  # noise variance 1: the planted count exactly (the paper: within ±2)
        assert scores[6] < scores[5] and scores[6] < scores[7]


def test_bad_input():
    X = np.random.default_rng(0).standard_normal((10, 4))
    X[3] = 0
    with pytest.raises(ValueError, match="all-zero"):
        DirectionalClustering(2).fit(X)
    with pytest.raises(ValueError, match="invalid update"):
        DirectionalClustering(2, update="x").fit(X)


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    rho=st.floats(0.6, 0.98),
    update=st.sampled_from(["pinv", "gradient"]),
    normalize=st.sampled_from(["D", "S", None]),
)
def test_strongly_correlated_centres_keep_the_lowest_cost_iterate(seed, rho, update, normalize):
    """The regime that made the pinv step climb on cortex: centres sharing a common
    direction (correlation rho), many clusters, noisy rows. Whatever the steps do, the fit
    returns its iterate of lowest cost (checked densely from its labels, coefficients and
    centres), never above the cost it started from, and stops within PATIENCE steps of it."""
    rng = np.random.default_rng(seed)
    k, d, n = 30, 20, 900
    common = rng.standard_normal(d)
    common /= np.linalg.norm(common)
    own = rng.standard_normal((k, d))
    own /= np.linalg.norm(own, axis=1, keepdims=True)
    C = np.sqrt(rho) * common + np.sqrt(1 - rho) * own
    X = C[rng.integers(0, k, n)] + 0.3 * rng.standard_normal((n, d))
    est = DirectionalClustering(
        k, update=update, normalize=normalize, max_iter=40, random_state=seed
    ).fit(X)
    hist = np.asarray(est.cost_history_)
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    recon = est.coefficients_[:, None] * est.cluster_centers_[est.labels_]
    dense = float(np.sum((Xn - recon) ** 2))
    assert dense == pytest.approx(hist.min(), rel=1e-9)
    assert hist.min() <= hist[0]
    assert len(hist) - 1 - int(np.argmin(hist)) <= PATIENCE
    # after PATIENCE steps above the lowest cost the fit goes back to that iterate and
    # descends from it: from there on no step ends above the lowest cost before it
    low = np.minimum.accumulate(hist)
    stalled = 0
    for i in range(1, len(hist)):
        if stalled >= PATIENCE:
            assert hist[i] <= low[i - 1] * (1 + 1e-9), (i, hist)
        stalled = 0 if hist[i] < low[i - 1] else stalled + 1


def test_n_init_keeps_the_lowest_cost():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 10))
    one = [DirectionalClustering(12, random_state=s).fit(X) for s in range(3)]
    best = DirectionalClustering(12, n_init=4, random_state=0).fit(X)
    assert min(best.cost_history_) <= min(one[0].cost_history_) + 1e-9


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    k=st.integers(2, 12),
    rho=st.floats(0.0, 0.95),
    duplicate=st.booleans(),
)
def test_least_squares_coefficients_from_the_products_with_the_centres(seed, k, rho, duplicate):
    """The pinv step's coefficients, from X or from ``P = X Dᵀ`` as ``P (D Dᵀ)⁺``, equal
    numpy's ``X pinv(D)`` (float64), for correlated centres and for a repeated centre
    (rank-deficient D); in float32 within the rounding that the centres' conditioning
    allows."""
    from lsd_dask.cluster.directional import _pinv_coefficients

    rng = np.random.default_rng(seed)
    d, n = 16, 50
    common = rng.standard_normal(d)
    D = np.sqrt(rho) * common / np.linalg.norm(common) + np.sqrt(1 - rho) * rng.standard_normal(
        (k, d)
    ) / np.sqrt(d)
    if duplicate:
        D[-1] = D[0]
    X = rng.standard_normal((n, d))
    expected = X @ np.linalg.pinv(D)
    for got in (_pinv_coefficients(X, D), _pinv_coefficients(X, D, X @ D.T)):
        np.testing.assert_allclose(got, expected, atol=1e-9 * np.abs(expected).max())
    X32 = X.astype(np.float32)
    s = np.linalg.svd(D, compute_uv=False)
    cond = s[0] / s[s > 1e-10 * s[0]].min()
    scale = max(np.abs(expected).max(), 1.0)
    for got32 in (
        _pinv_coefficients(X32, D),
        _pinv_coefficients(X32, D, X32 @ D.T.astype(np.float32)),
    ):
        assert got32.dtype == np.float32
        assert np.abs(got32 - expected).max() <= 1e-5 * cond * scale


def test_numpy_and_dask_agree_where_the_fit_descends():
    """Strongly correlated centres make the pinv steps climb, so the fit goes on with the
    safe step (the products X Dᵀ, the pinv step from them): dask input, chunked by rows,
    gives numpy's labels and costs there too."""
    rng = np.random.default_rng(4)
    k, d, n = 30, 20, 900
    common = rng.standard_normal(d)
    own = rng.standard_normal((k, d))
    C = np.sqrt(0.9) * common / np.linalg.norm(common) + np.sqrt(0.1) * own / np.linalg.norm(
        own, axis=1, keepdims=True
    )
    X = C[rng.integers(0, k, n)] + 0.3 * rng.standard_normal((n, d))
    a = DirectionalClustering(k, max_iter=40, random_state=4).fit(X)
    hist = np.asarray(a.cost_history_)
    # PATIENCE costs in a row above the lowest so far: the fit went on descending
    above = hist[1:] >= np.minimum.accumulate(hist)[:-1]
    runs = np.diff(np.flatnonzero(np.concatenate([[True], ~above, [True]]))) - 1
    assert runs.max() >= PATIENCE, hist
    b = DirectionalClustering(k, max_iter=40, random_state=4).fit(da.from_array(X, chunks=(200, d)))
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert a.cost_history_ == pytest.approx(b.cost_history_)


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 200),
    d=st.integers(1, 40),
    k=st.integers(1, 30),
    rows=st.integers(1, 64),
    lazy=st.booleans(),
    reuse=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_float64_product_by_row_blocks_equals_the_whole_product(
    n, d, k, rows, lazy, reuse, seed
):
    """The Potts phase's scores product, a block of rows at a time into one float64 array,
    a step applied to each block in place: the step on the float32 product of the whole,
    widened (a dask X is computed whole). Given an array of the right shape, it is the
    result; given a stale one, its old values do not show."""
    from lsd_dask.cluster.directional import _times, _times_float64

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32)
    W = rng.standard_normal((d, k))
    want = np.square(np.maximum(np.asarray(_times(X, W), np.float64), 0.0))
    src = da.from_array(X, chunks=(max(1, n // 3), d)) if lazy else X
    old = np.full((n, k), np.nan) if reuse else None

    def step(P):
        np.maximum(P, 0.0, out=P)
        np.multiply(P, P, out=P)

    got = _times_float64(src, W, then=step, out=old, rows=rows)
    assert got.dtype == np.float64 and got.shape == (n, k)
    assert (got is old) == reuse
    # the float32 products by blocks and whole differ in their last bits, doubled by the square
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    wrong = _times_float64(src, W, out=np.zeros((n + 1, k)), rows=rows)
    assert wrong.shape == (n, k)
