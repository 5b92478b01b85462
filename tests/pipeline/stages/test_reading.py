"""A subject's scan (non-finite and constant vertices) and standardisation, block by block,
against numpy on the whole array."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lsd_dask.pipeline.stages.reading import _scan, _standardised


@st.composite
def _subjects(draw):
    """A float32 subject with rows made constant, zero, or holding NaN / ±inf (some of
    those otherwise zero, some otherwise constant)."""
    n = draw(st.integers(1, 40))
    t = draw(st.integers(1, 12))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, t)) * draw(st.sampled_from([1e-3, 1.0, 1e6]))).astype(np.float32)
    for i in range(n):
        kind = draw(st.sampled_from(["plain", "plain", "constant", "zero", "nan", "inf", "-inf"]))
        if kind == "constant":
            x[i] = np.float32(rng.standard_normal())
        elif kind == "zero":
            x[i] = 0
        elif kind in ("nan", "inf", "-inf"):
            if draw(st.booleans()):
                x[i] = 0 if draw(st.booleans()) else 0.25  # zero or constant around it
            j = rng.integers(0, t, size=rng.integers(1, t + 1))
            x[i, j] = float(kind)
    return x, draw(st.integers(1, 7))


@settings(max_examples=200, deadline=None)
@given(_subjects())
def test_the_scan_finds_the_rows_numpy_finds(case):
    """Non-finite rows as ``isfinite``'s; constant rows as ``ptp == 0`` once the non-finite
    values read as 0, at any block size."""
    x, block = case
    nonfinite, constant = _scan(x, block=block)
    finite = np.isfinite(x)
    np.testing.assert_array_equal(nonfinite, ~finite.all(axis=1))
    np.testing.assert_array_equal(constant, np.ptp(np.where(finite, x, 0), axis=1) == 0)


@settings(max_examples=200, deadline=None)
@given(_subjects(), st.data())
def test_standardised_rows_match_numpy_on_the_rows_taken(case, data):
    """Any sorted subset of rows (or all), taken block by block and made in pieces of any
    size (as a writer's inner chunks ask for them): each finite row with variance as
    (x - mean) / std in float64, a row without variance 0 and flagged, and a row with a
    NaN or inf flagged as not finite."""
    x, block = case
    n = x.shape[0]
    keep = data.draw(st.one_of(st.none(), st.lists(st.booleans(), min_size=n, max_size=n)))
    rows = None if keep is None else np.flatnonzero(keep)
    made, flat, unfinished = _standardised(x, rows, block=block)
    m = made.shape[0]
    piece = data.draw(st.integers(1, max(m, 1)))
    out = np.full(made.shape, np.nan, np.float32)
    for a in range(0, m, piece):
        b = min(a + piece, m)
        scratch = np.full((b - a, made.shape[1]), np.nan, np.float32)  # a writer's buffer
        made.fill(a, b, scratch)
        out[a:b] = scratch
    taken = (x if rows is None else x[rows]).astype(np.float64)
    assert out.dtype == np.float32 and out.shape == taken.shape
    finite = np.isfinite(taken).all(axis=1)
    np.testing.assert_array_equal(unfinished, ~finite)
    with np.errstate(invalid="ignore"):
        centred = taken - taken.mean(axis=1, keepdims=True)
        sd = np.sqrt((centred**2).mean(axis=1))
    good = finite & (sd > 0)
    np.testing.assert_array_equal(flat[finite], sd[finite] == 0)
    np.testing.assert_allclose(out[good], (centred[good] / sd[good, None]), rtol=1e-5, atol=1e-5)
    assert not out[finite & (sd == 0)].any()
