"""The shared input helpers."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

from lsd_dask._validation import check_array, float_type


@pytest.mark.parametrize(
    ("dtype", "want"),
    [
        (np.float32, np.float32),
        (np.float64, np.float64),
        (np.float16, np.float16),
        (np.int32, np.float64),
        (np.int64, np.float64),
        (np.bool_, np.float64),
    ],
)
def test_products_keep_a_float_type_and_widen_the_rest(dtype, want):
    x = np.zeros((3, 2), dtype)
    assert float_type(x) == np.dtype(want)
    assert float_type(da.from_array(x, chunks=2)) == np.dtype(want)
    # the product made in that type has it
    assert (x.astype(float_type(x)) @ np.ones((2, 1), float_type(x))).dtype == np.dtype(want)


def test_check_array_gives_c_order_copying_only_what_is_not(tmp_path):
    """A Fortran-ordered or strided X comes back C-ordered with the same values; a
    C-ordered one (in memory or memory-mapped) comes back without a copy."""
    X = np.random.default_rng(0).standard_normal((40, 6)).astype(np.float32)
    for other in (np.asfortranarray(X), X[::2]):
        out = check_array(other)
        assert out.flags.c_contiguous and out.dtype == np.float32
        np.testing.assert_array_equal(out, other)
    assert np.shares_memory(check_array(X), X)
    np.save(tmp_path / "x.npy", X)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    assert np.shares_memory(check_array(mapped), mapped)
