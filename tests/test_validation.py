"""The shared input helpers."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

from lsd_dask._validation import float_type


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
