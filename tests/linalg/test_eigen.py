"""Leading eigenpairs of ``F F^T`` by every route, against numpy's dense SVD."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsd_dask.linalg.eigen import factor_gram, factor_route, top_eigenpairs_from_factor


def _factor(n: int, r: int, dtype, seed: int) -> np.ndarray:
    """F = U diag(s) V^T with well separated singular values (so eigenvectors are unique)."""
    rng = np.random.default_rng(seed)
    m = min(n, r)
    U, _ = np.linalg.qr(rng.standard_normal((n, m)))
    V, _ = np.linalg.qr(rng.standard_normal((r, m)))
    s = 10.0 * 0.85 ** np.arange(m)
    return ((U * s) @ V.T).astype(dtype)


@pytest.mark.parametrize(
    "n, r, k, route",
    [(400, 40, 2, "lanczos"), (400, 40, 12, "gram"), (60, 40, 12, "svd"), (30, 200, 3, "lanczos")],
)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_route_matches_the_dense_svd(n, r, k, route, dtype):
    F = _factor(n, r, dtype, seed=n + r + k)
    assert factor_route(F.shape, k) == route
    w, U = top_eigenpairs_from_factor(F, k, random_state=0)
    Uref, s, _ = np.linalg.svd(F.astype(np.float64), full_matrices=False)
    tol = 1e-5 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(w, s[:k] ** 2, rtol=tol)
    # the same eigenvectors up to sign, and the signs fixed: columns sum to >= 0
    np.testing.assert_allclose(np.abs(U.T @ Uref[:, :k]), np.eye(k), atol=100 * tol)
    assert np.all(U.sum(axis=0) >= 0)


def test_a_given_gram_is_used_and_equals_the_products():
    F = _factor(300, 30, np.float32, seed=3)
    G = factor_gram(F)
    np.testing.assert_allclose(G, F.astype(np.float64).T @ F.astype(np.float64), rtol=1e-12)
    w1, U1 = top_eigenpairs_from_factor(F, 10, gram=G)
    w2, U2 = top_eigenpairs_from_factor(F, 10)
    np.testing.assert_array_equal(w1, w2)
    np.testing.assert_array_equal(U1, U2)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), k=st.integers(1, 6))
def test_lanczos_is_deterministic_and_matches_dask(seed, k):
    F = _factor(240, 48, np.float64, seed=seed)
    w1, U1 = top_eigenpairs_from_factor(F, k, random_state=7)
    w2, U2 = top_eigenpairs_from_factor(F, k, random_state=7)
    np.testing.assert_array_equal(U1, U2)
    wd, Ud = top_eigenpairs_from_factor(da.from_array(F, chunks=(60, 48)), k, random_state=7)
    np.testing.assert_allclose(w1, wd, rtol=1e-9)
    np.testing.assert_allclose(U1, np.asarray(Ud), atol=1e-8)


def test_k_above_the_rank_is_refused():
    with pytest.raises(ValueError, match="rank at most 40; cannot take 41"):
        top_eigenpairs_from_factor(np.ones((100, 40)), 41)
