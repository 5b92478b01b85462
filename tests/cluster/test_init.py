"""Greedy k-means++ seeding on a seeded row subsample."""

from __future__ import annotations

from collections import OrderedDict

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


def _state(rng: np.random.Generator) -> str:
    return repr(rng.bit_generator.state)


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    k=st.integers(2, 30),
    metric=st.sampled_from(["cosine", "euclidean"]),
    n=st.sampled_from([150, 24000]),
)
def test_a_shared_start_is_the_start_made_again(seed, k, metric, n):
    """Inside ``shared_starts`` a repeated seeding (the same rows, K, metric and
    generator state) gives the centres and the generator state that seeding again
    outside gives, from one stored start (also where the rows are more than the seeding's
    20,000-row sample)."""
    import lsd_dask.cluster._init as init

    X, _ = _blobs(10, n // 10, 12, seed=seed % 5, spread=0.3)
    ref_rng = np.random.default_rng(seed)
    ref = kmeanspp_rows(X, k, ref_rng, metric=metric)
    starts: OrderedDict = OrderedDict()
    with init.shared_starts(starts):
        got = []
        for _ in range(3):
            rng = np.random.default_rng(seed)
            got.append(kmeanspp_rows(X.copy(), k, rng, metric=metric))
            assert _state(rng) == _state(ref_rng)
    assert len(starts) == 1
    for C in got:
        np.testing.assert_array_equal(C, ref)
    got[0][0, 0] += 1.0  # a caller's change to its centres leaves the stored start alone
    with init.shared_starts(starts):
        np.testing.assert_array_equal(
            kmeanspp_rows(X, k, np.random.default_rng(seed), metric=metric), ref
        )


def test_different_rows_seeds_or_candidates_are_not_shared():
    """Each different seeding inside one block is its own start, equal to the one made
    outside; only the repeats are served from the store, and the oldest starts go first
    once it holds ``MAX_SHARED_STARTS``. (K = 5 and 8 draw 3 and 4 candidates a centre.)"""
    import lsd_dask.cluster._init as init

    X, _ = _blobs(8, 20, 10, seed=0, spread=0.3)
    Y = X.copy()
    Y[5] = Y[6]  # one row differs
    cases = [(X, 5, 0), (X, 5, 1), (X, 8, 0), (Y, 5, 0)]
    starts: OrderedDict = OrderedDict()
    with init.shared_starts(starts):
        for A, k, seed in cases + cases:
            np.testing.assert_array_equal(
                kmeanspp_rows(A, k, np.random.default_rng(seed)),
                _outside(A, k, seed),
            )
        assert len(starts) == 4
        for seed in range(init.MAX_SHARED_STARTS):
            kmeanspp_rows(X, 3, np.random.default_rng(100 + seed))
        assert len(starts) == init.MAX_SHARED_STARTS
    assert init._STARTS.get() is None  # closed: nothing is kept outside a block


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    ks=st.lists(st.integers(1, 60), min_size=2, max_size=6),
    trials=st.sampled_from([None, 3]),
    metric=st.sampled_from(["cosine", "euclidean"]),
)
def test_a_start_at_one_k_is_made_from_a_start_at_another(seed, ks, trials, metric):
    """Seedings at several K in any order, inside one block: each has the centres and
    leaves the generator state of the seeding at its K made outside, while the block keeps
    one start per number of candidates (the first K of a longer start, or a shorter one
    carried on)."""
    import lsd_dask.cluster._init as init

    X, _ = _blobs(10, 15, 12, seed=seed % 5, spread=0.3)
    starts: OrderedDict = OrderedDict()
    for k in ks:
        ref_rng = np.random.default_rng(seed)
        ref = kmeanspp_rows(X, k, ref_rng, metric=metric, n_local_trials=trials)
        rng = np.random.default_rng(seed)
        with init.shared_starts(starts):
            got = kmeanspp_rows(X, k, rng, metric=metric, n_local_trials=trials)
        np.testing.assert_array_equal(got, ref)
        assert _state(rng) == _state(ref_rng)
    counts = {2 + int(np.log(k)) if trials is None else trials for k in ks}
    assert len(starts) == len(counts)
    (longest,) = [s for s in starts.values() if s.n == max(ks)]
    assert len(longest.states) == max(ks)


def _outside(A: np.ndarray, k: int, seed: int) -> np.ndarray:
    return kmeanspp_rows(A, k, np.random.default_rng(seed))


def test_directional_and_spherical_kmeans_seed_alike_and_fit_as_alone():
    """The pipeline's two default methods make the same start from the same features and
    random_state, so a block seeds them once; each fit is bit for bit its fit alone."""
    from lsd_dask.cluster import DirectionalClustering, SphericalKMeans
    from lsd_dask.cluster._init import shared_starts

    X, _ = _blobs(12, 40, 20, seed=4, spread=0.4)
    X = X.astype(np.float32) * np.linspace(0.5, 2.0, len(X), dtype=np.float32)[:, None]
    alone = [
        DirectionalClustering(12, random_state=3).fit(X),
        SphericalKMeans(12, random_state=3).fit(X),
    ]
    starts: OrderedDict = OrderedDict()
    with shared_starts(starts):
        shared = [
            DirectionalClustering(12, random_state=3).fit(X),
            SphericalKMeans(12, random_state=3).fit(X),
        ]
    assert len(starts) == 1
    for a, b in zip(alone, shared, strict=True):
        np.testing.assert_array_equal(a.labels_, b.labels_)
        np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)


@pytest.mark.parametrize("bits", [np.random.PCG64, np.random.MT19937, np.random.SFC64])
def test_any_bit_generator_is_shared_only_from_its_own_state(bits):
    """The key holds a generator's whole state, whatever its bit generator: two seeds
    are two starts, each the one made outside the block."""
    from lsd_dask.cluster._init import shared_starts

    X, _ = _blobs(6, 15, 8, seed=1, spread=0.3)
    outside = [kmeanspp_rows(X, 4, np.random.Generator(bits(s))) for s in (0, 1, 0)]
    starts: OrderedDict = OrderedDict()
    with shared_starts(starts):
        inside = [kmeanspp_rows(X, 4, np.random.Generator(bits(s))) for s in (0, 1, 0)]
    assert len(starts) == 2
    for a, b in zip(outside, inside, strict=True):
        np.testing.assert_array_equal(a, b)
