"""Hypothesis strategies for property tests (needs hypothesis, a test dependency)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

__all__ = ["labelings", "labeling_pairs", "vectors"]


@st.composite
def labelings(draw, min_size: int = 1, max_size: int = 60, max_label: int = 6) -> np.ndarray:
    """An integer labeling with labels in ``[0, max_label]``."""
    n = draw(st.integers(min_size, max_size))
    return draw(hnp.arrays(np.int64, n, elements=st.integers(0, max_label)))


@st.composite
def labeling_pairs(draw, min_size: int = 1, max_size: int = 60, max_label: int = 6):
    """Two labelings of the same samples."""
    a = draw(labelings(min_size, max_size, max_label))
    b = draw(hnp.arrays(np.int64, a.size, elements=st.integers(0, max_label)))
    return a, b


def vectors(dim: int, *, min_value: float = -10.0, max_value: float = 10.0):
    """A float64 vector of length ``dim`` with bounded finite entries."""
    return hnp.arrays(
        np.float64,
        dim,
        elements=st.floats(min_value, max_value, allow_nan=False, allow_infinity=False),
    )
