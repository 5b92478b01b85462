"""Greedy k-means++ seeding on a seeded row subsample."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsd_dask.cluster._init import kmeanspp_rows


def _blobs(
    k: int, per: int, d: int, seed: int, spread: float = 0.05
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((k, d))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    y = np.repeat(np.arange(k), per)
    X = centres[y] + spread * rng.standard_normal((k * per, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True), y


def _potential(X: np.ndarray, C: np.ndarray) -> float:
    return float(np.maximum(1.0 - X @ C.T, 0.0).min(axis=1).sum())


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_greedy_seeding_lowers_the_potential(metric):
    """Arthur and Vassilvitskii's greedy variant: over seeds, its D² potential is below
    plain k-means++'s (the best of several candidates is taken at every step)."""
    X, _ = _blobs(30, 20, 16, seed=0, spread=0.4)
    greedy, plain = [], []
    for seed in range(10):
        g = kmeanspp_rows(X, 30, np.random.default_rng(seed), metric=metric)
        p = kmeanspp_rows(X, 30, np.random.default_rng(seed), metric=metric, n_local_trials=1)
        greedy.append(_potential(X, g))
        plain.append(_potential(X, p))
    assert np.mean(greedy) < np.mean(plain)


def test_one_centre_per_separated_blob_and_numpy_equals_dask():
    X, y = _blobs(25, 30, 64, seed=1, spread=0.01)
    for seed in range(5):
        C = kmeanspp_rows(X, 25, np.random.default_rng(seed))
        owner = y[np.argmax(X @ C.T, axis=0)]  # the blob each centre sits in
        assert len(set(owner)) == 25
        Cd = kmeanspp_rows(da.from_array(X, chunks=(100, 64)), 25, np.random.default_rng(seed))
        np.testing.assert_allclose(C, Cd)


def _dense_greedy(X: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Greedy k-means++ under the cosine metric, every row against every candidate."""
    trials = 2 + int(np.log(k))
    first = int(rng.integers(len(X)))
    chosen = [first]
    d2 = np.maximum(1.0 - X @ X[first], 0.0).astype(np.float64)
    for _ in range(1, k):
        cand = rng.choice(len(X), size=trials, p=d2 / d2.sum())
        new = np.minimum(d2[:, None], np.maximum(1.0 - X @ X[cand].T, 0.0))
        pick = int(np.argmin(new.sum(axis=0)))
        chosen.append(int(cand[pick]))
        d2 = new[:, pick]
    return X[chosen].astype(np.float64)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), k=st.integers(2, 40), spread=st.floats(0.01, 1.0))
def test_the_seeding_is_the_dense_greedy_one(seed, k, spread):
    """Rows that the angle bound leaves unchecked change nothing: the centres are those of
    the greedy seeding that compares every row with every candidate."""
    X, _ = _blobs(12, 25, 24, seed=seed % 7, spread=spread)
    X = X.astype(np.float32)
    C = kmeanspp_rows(X, k, np.random.default_rng(seed))
    # the same rows (the seeding makes them unit rows again, in float32)
    np.testing.assert_allclose(C, _dense_greedy(X, k, np.random.default_rng(seed)), atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), n_chosen=st.integers(1, 30), spread=st.floats(0.01, 1.0))
def test_an_unchecked_row_is_nearer_its_centre_than_every_candidate(seed, n_chosen, spread):
    from lsd_dask.cluster._init import _rows_a_candidate_may_take

    rng = np.random.default_rng(seed)
    S, _ = _blobs(20, 20, 16, seed=seed % 5, spread=spread)
    S = S.astype(np.float32)
    chosen = [int(i) for i in rng.choice(len(S), n_chosen, replace=False)]
    cos = S @ S[chosen].T
    own, d2 = cos.argmax(axis=1), np.maximum(1.0 - cos.max(axis=1), 0.0).astype(np.float64)
    cand = rng.choice(len(S), 5)
    rows = _rows_a_candidate_may_take(S, chosen, own, d2, cand, "cosine")
    left = np.setdiff1d(np.arange(len(S)), rows)
    to_cand = np.maximum(1.0 - S[left] @ S[cand].T, 0.0).min(axis=1, initial=np.inf)
    assert np.all(to_cand >= d2[left])


def test_near_centres_most_rows_go_unchecked():
    """Tight blobs, a centre in each: a candidate from one blob cannot take another's rows."""
    from lsd_dask.cluster._init import _rows_a_candidate_may_take

    S, y = _blobs(20, 50, 32, seed=3, spread=0.02)
    chosen = [int(np.flatnonzero(y == b)[0]) for b in range(20)]
    cos = S @ S[chosen].T
    own, d2 = cos.argmax(axis=1), np.maximum(1.0 - cos.max(axis=1), 0.0)
    cand = np.flatnonzero(y == 0)[1:4]  # three more rows of blob 0
    rows = _rows_a_candidate_may_take(S, chosen, own, d2, cand, "cosine")
    assert set(y[rows]) <= {0} and rows.size <= 50
