"""Greedy k-means++ seeding on a seeded row subsample."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

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
