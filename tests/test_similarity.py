"""Row norms and unit rows against numpy's own expressions, on numpy and dask input."""

import dask.array as da
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lsd_dask.similarity import squared_row_norms, unit_rows


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 300),
    d=st.integers(1, 40),
    block=st.integers(1, 64),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**16),
)
def test_squared_row_norms_are_numpys_sums_bit_for_bit(n, d, block, dtype, seed):
    X = np.random.default_rng(seed).standard_normal((n, d)).astype(dtype)
    want = (X * X).sum(axis=1)
    got = squared_row_norms(X, block=block)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    lazy = squared_row_norms(da.from_array(X, chunks=(max(1, n // 3), d)))
    assert isinstance(lazy, da.Array)
    np.testing.assert_allclose(lazy.compute(), want, rtol=1e-6)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 200), d=st.integers(1, 30), seed=st.integers(0, 2**16))
def test_unit_rows_have_unit_length_and_zero_rows_stay_zero(n, d, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32)
    X[rng.random(n) < 0.2] = 0.0
    U = unit_rows(X)
    assert U.dtype == np.float32
    zero = ~X.any(axis=1)
    np.testing.assert_array_equal(U[zero], 0.0)
    np.testing.assert_allclose(np.linalg.norm(U[~zero], axis=1), 1.0, rtol=1e-5)
    # each row keeps its direction
    np.testing.assert_allclose(U[~zero] * np.linalg.norm(X[~zero], axis=1)[:, None], X[~zero],
                               rtol=1e-4, atol=1e-5)  # fmt: skip
    np.testing.assert_allclose(unit_rows(da.from_array(X, chunks=(max(1, n // 2), d))), U,
                               rtol=1e-6, atol=1e-7)  # fmt: skip
