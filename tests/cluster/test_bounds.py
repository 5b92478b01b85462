"""Hamerly's angle bounds for spherical k-means: the labels of the plain Lloyd step,
with fewer rows compared with every centre."""

import warnings

import dask.array as da
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lsd_dask._validation import ConvergenceWarning
from lsd_dask.cluster import SphericalKMeans
from lsd_dask.cluster._bounds import AngleBounds
from lsd_dask.datasets import blumensath_dataset
from lsd_dask.similarity import unit_rows


def _unit(a):
    return a / np.linalg.norm(a, axis=1, keepdims=True)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    k=st.integers(1, 12),
    step=st.floats(0.0, 0.5),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_every_step_gives_the_dense_argmax(seed, k, step, dtype):
    """Whatever way the centres move (small steps, large jumps, a centre standing still),
    each step's labels are those of the dense X Cᵀ, and its score their summed cosine."""
    rng = np.random.default_rng(seed)
    X = _unit(rng.standard_normal((400, 6))).astype(dtype)
    C = _unit(rng.standard_normal((k, 6)))
    bounds = AngleBounds(X)
    for it in range(6):
        labels, score = bounds.assign(C)
        S = X.astype(np.float64) @ C.T
        np.testing.assert_array_equal(labels, S.argmax(axis=1))
        best = S.max(axis=1)
        # relative to the cosines summed, not to their sum, which may cancel to near 0
        # (float32 products: about 1e-7 of each cosine)
        np.testing.assert_allclose(score, best.sum(), rtol=0, atol=1e-5 * np.abs(best).sum())
        jump = 2.0 if it == 3 else step  # one step moves the centres anywhere
        moved = _unit(C + jump * rng.standard_normal(C.shape))
        if it % 2:
            moved[0] = C[0]  # a centre that stays
        C = moved
    assert bounds.checked_[0] == X.shape[0] and len(bounds.checked_) == 6


def test_small_moves_settle_most_rows_without_the_product():
    """Centres that move a little leave most rows provably where they were."""
    rng = np.random.default_rng(0)
    C = _unit(rng.standard_normal((8, 20)))
    X = _unit(np.repeat(C, 200, axis=0) + 0.1 * rng.standard_normal((1600, 20)))
    bounds = AngleBounds(X)
    bounds.assign(C)
    C = _unit(C + 1e-3 * rng.standard_normal(C.shape))
    labels, _ = bounds.assign(C)
    np.testing.assert_array_equal(labels, (X @ C.T).argmax(axis=1))
    assert bounds.checked_ == [1600, bounds.checked_[1]] and bounds.checked_[1] < 80


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), k=st.integers(2, 10), separated=st.booleans())
def test_the_fit_is_lloyds(seed, k, separated):
    """The same labels, iterations, centres and inertia as every row against every
    centre, on clustered and on structureless data."""
    rng = np.random.default_rng(seed)
    if separated:
        X, _ = blumensath_dataset(1, 0.2, n_features=30, n_samples=500, n_clusters=k,
                                  random_state=seed)  # fmt: skip
    else:
        X = rng.standard_normal((500, 8))
    X = np.asarray(X, np.float32)
    with warnings.catch_warnings():
        # structureless fits may stop at max_iter
        warnings.simplefilter("ignore", ConvergenceWarning)
        fast = SphericalKMeans(k, random_state=seed, max_iter=60).fit(X)
        plain = SphericalKMeans(k, random_state=seed, max_iter=60, algorithm="lloyd").fit(X)
    np.testing.assert_array_equal(fast.labels_, plain.labels_)
    assert fast.n_iter_ == plain.n_iter_
    np.testing.assert_allclose(fast.cluster_centers_, plain.cluster_centers_, atol=1e-6)
    np.testing.assert_allclose(fast.inertia_history_, plain.inertia_history_, rtol=1e-5)
    assert plain.rows_checked_ is None and len(fast.rows_checked_) == fast.n_iter_


def test_a_converging_fit_checks_ever_fewer_rows():
    """On clustered data the last iterations compare few rows with every centre."""
    X, truth = blumensath_dataset(1, 0.3, n_features=40, n_samples=2000, n_clusters=10,
                                  random_state=1)  # fmt: skip
    est = SphericalKMeans(10, random_state=0, tol=0).fit(np.asarray(X, np.float32))
    assert est.rows_checked_[0] == 2000
    assert est.rows_checked_[-1] < 0.1 * 2000


def test_dask_input_runs_lloyd_with_the_same_labels():
    X, _ = blumensath_dataset(1, 0.2, n_features=20, n_samples=300, n_clusters=4,
                              random_state=0)  # fmt: skip
    X = np.asarray(unit_rows(X), np.float64)
    lazy = SphericalKMeans(4, random_state=0).fit(da.from_array(X, chunks=(100, 20)))
    here = SphericalKMeans(4, random_state=0).fit(X)
    assert lazy.rows_checked_ is None
    np.testing.assert_array_equal(np.asarray(lazy.labels_), here.labels_)
