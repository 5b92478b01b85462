"""The randomized SVD's test matrices: Ω (m × l) drawn by rows from a seed, so that any
block of X's columns gets the same rows whatever its chunking; sparse signs or Gaussian;
and the column blocks a partial sketch reads."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._validation import (
    is_dask,
)

__all__ = ["TEST_MATRICES", "TestMatrix", "sketch_blocks"]

#: rows of the test matrix drawn from one generator; Ω does not depend on chunks
_OMEGA_ROWS = 1024


#: nonzeros in each row of the sparse sign test matrix (Tropp et al.'s choice, [3]_)
_OMEGA_NNZ = 8


#: the kinds of test matrix :func:`randomized_svd` draws
TEST_MATRICES = ("sparse", "gaussian")


@dataclass(frozen=True)
class TestMatrix:
    """The m × l test matrix Ω fixed by ``seed``, drawn by rows: any rows are those rows
    of one draw, whatever block of X asks for them.

    ``sparse``: each row has ``min(l, 8)`` entries ±1 in distinct random columns (a CSR
    matrix); applying it to a column block costs a quarter of a Gaussian Ω's GEMM (0.25
    against 0.93 s for a 59,784 × 1,000 float32 subject and l = 1,010 on one thread), and
    the power iterations that follow make the basis as good (``docs/benchmarks.md``).
    ``gaussian``: standard normal entries (a dense array).

    ``keep``: where not None, the column ranges of X whose rows are drawn; every other row
    is zero (a sketch of part of X, :func:`randomized_svd`'s ``sketch_columns``).
    """

    seed: int
    kind: str = "sparse"
    keep: tuple[tuple[int, int], ...] | None = None

    def rows(self, start: int, stop: int, l: int, dtype: Any) -> Any:
        """Rows ``start:stop`` in ``dtype``."""
        out = self._drawn(start, stop, l, dtype)
        if self.keep is None:
            return out
        zero = np.ones(stop - start, bool)
        for a, b in self.keep:
            zero[max(a, start) - start : max(min(b, stop), start) - start] = False
        if not zero.any():
            return out
        if sp.issparse(out):
            return sp.diags((~zero).astype(out.dtype)) @ out
        out = np.array(out, copy=True)
        out[zero] = 0
        return out

    def kept(self, start: int, stop: int) -> list[tuple[int, int]]:
        """The ranges of columns ``start:stop`` whose rows are not zero."""
        if self.keep is None:
            return [(start, stop)]
        return [(max(a, start), min(b, stop)) for a, b in self.keep if a < stop and b > start]

    def _drawn(self, start: int, stop: int, l: int, dtype: Any) -> Any:
        groups = range(start // _OMEGA_ROWS, (stop - 1) // _OMEGA_ROWS + 1)
        off, n = start - groups[0] * _OMEGA_ROWS, stop - start
        rngs = [np.random.default_rng([self.seed, g]) for g in groups]
        if self.kind == "gaussian":
            parts = [r.standard_normal((_OMEGA_ROWS, l), dtype=np.float32) for r in rngs]
            return np.concatenate(parts)[off : off + n].astype(dtype, copy=False)
        z = min(l, _OMEGA_NNZ)
        cols, signs = [], []
        for rng in rngs:
            keys = rng.random((_OMEGA_ROWS, l), dtype=np.float32)
            # z distinct columns per row: the z smallest of l uniform keys
            cols.append(np.argpartition(keys, z - 1, axis=1)[:, :z] if z < l else keys.argsort(1))
            signs.append(rng.integers(0, 2, (_OMEGA_ROWS, z), dtype=np.int8))
        c = np.concatenate(cols)[off : off + n].ravel()
        v = (2 * np.concatenate(signs)[off : off + n].ravel() - 1).astype(dtype)
        return sp.csr_matrix((v, c, np.arange(0, n * z + 1, z)), shape=(n, l))


def sketch_blocks(X: Any, columns: int, seed: int) -> tuple[tuple[int, int], ...]:
    """Whole column blocks of X, drawn at random (from ``seed``) until they hold at least
    ``columns`` columns (all of them if X has fewer), in column order.

    The blocks are a column-block source's ``block_bounds`` (a split store's subjects)
    where it has them, else its or a dask array's column chunks; a numpy array is one.
    """
    m = X.shape[1]
    bounds = getattr(X, "block_bounds", None)
    if bounds is None:
        if isinstance(X, np.ndarray):
            widths: Iterable[int] = [m]
        elif is_dask(X):
            widths = X.chunks[1]
        else:
            widths = [min(X.chunks[1], m - a) for a in range(0, m, X.chunks[1])]
        cuts = np.cumsum([0, *widths]).tolist()
        bounds = list(zip(cuts[:-1], cuts[1:], strict=True))
    order = np.random.default_rng([seed, 1]).permutation(len(bounds))
    held = np.cumsum([bounds[j][1] - bounds[j][0] for j in order])
    take = int(np.searchsorted(held, columns)) + 1  # the first prefix holding enough
    return tuple(tuple(map(int, bounds[j])) for j in sorted(order[:take]))  # type: ignore[misc]
