"""How a pass of the range finder reads X: the :class:`Passes` protocol, X in memory
(:class:`NumpyPasses`), X as a dask array read through its own graph
(:class:`DaskPasses`), and the per-block products both use."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import dask.array as da
import numpy as np
import scipy.sparse as sp
from dask.base import compute as dask_compute

from .._validation import (
    is_dask,
)
from .bases import _lu_basis, tsqr
from .placement import Placement
from .sketch import TestMatrix

__all__ = ["DaskPasses", "NumpyPasses", "Passes", "row_blocks"]


class Passes(Protocol):
    """How a pass reads X: the products the range finder needs, each one read of X.

    ``sketch``: X Ω; ``power``: X (Xᵀ Q) from one read; ``power_and_transpose``: that and
    ``Z = Xᵀ Q`` (computed); ``transpose``: Xᵀ Q (computed);
    ``times``: X W for a small m × l W; ``orthonormal``: a basis of an n × l product;
    ``basis``: a basis of its span for another power iteration, orthonormal only to about
    ε κ (:func:`tsqr`'s ``exact=False``; the others give ``orthonormal``'s);
    ``scaled_basis``: a basis of its span for a power iteration that only multiplies by
    X Xᵀ, well scaled but not orthonormal (numpy passes, and block passes whose basis is
    one row block: ``P L`` of Y's LU, :func:`lu_basis`; the others give ``basis``'s);
    ``orthonormal_r``: that basis Q and R with ``Y = Q R`` (eager dask and block passes
    give Q as its factors, :class:`FactoredBasis`: the SVD forms only ``Q Ub``).
    ``eager``: each pass runs when it is asked for (False: one lazy graph at the end).
    Implemented by :class:`NumpyPasses`, :class:`DaskPasses` and :class:`BlockPasses`.
    """

    eager: bool

    def sketch(self) -> Any: ...

    def power(self, Q: Any) -> Any: ...

    def power_and_transpose(self, Q: Any) -> tuple[Any, np.ndarray]: ...

    def transpose(self, Q: Any) -> np.ndarray: ...

    def times(self, W: np.ndarray) -> Any: ...

    def orthonormal(self, Y: Any) -> Any: ...

    def basis(self, Y: Any) -> Any: ...

    def scaled_basis(self, Y: Any) -> Any: ...

    def orthonormal_r(self, Y: Any) -> tuple[Any, np.ndarray]: ...

    def as_basis(self, start: Any) -> Any:
        """``start`` (n × l) as this reader's passes take a basis."""
        ...


class NumpyPasses:
    """X in memory."""

    eager = True

    def __init__(self, X: np.ndarray, l: int, omega: TestMatrix) -> None:
        self.X, self.l, self.omega = X, l, omega

    def sketch(self) -> np.ndarray:
        X = self.X
        out = np.zeros((X.shape[0], self.l), X.dtype)
        return _add_times(out, X, self.omega.rows(0, X.shape[1], self.l, X.dtype))

    def power(self, Q: np.ndarray) -> np.ndarray:
        return np.asarray(self.X @ (self.X.T @ Q))

    def power_and_transpose(self, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        Z = np.asarray(self.X.T @ Q)
        return np.asarray(self.X @ Z), Z

    def transpose(self, Q: np.ndarray) -> np.ndarray:
        return np.asarray(self.X.T @ Q)

    def times(self, W: np.ndarray) -> np.ndarray:
        return np.asarray(self.X @ W)

    def orthonormal(self, Y: np.ndarray) -> np.ndarray:
        return np.linalg.qr(Y)[0]

    def basis(self, Y: np.ndarray) -> np.ndarray:
        return self.orthonormal(Y)

    def scaled_basis(self, Y: np.ndarray) -> np.ndarray:
        B = _lu_basis(Y)
        return self.orthonormal(Y) if B is None else B

    def orthonormal_r(self, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        Q, R = np.linalg.qr(Y)
        return Q, R

    def as_basis(self, start: Any) -> np.ndarray:
        return np.asarray(start.compute() if is_dask(start) else start, self.X.dtype)


class DaskPasses:
    """X as a dask array, read through its own graph: a task per column block (which reads
    that block once) and a tree sum of the n × l contributions."""

    def __init__(
        self, X: da.Array, l: int, omega: TestMatrix, persist: bool, placement: Placement
    ) -> None:
        self.X = _bounded_column_blocks(X)
        self.l, self.omega, self.eager, self.placement = l, omega, persist, placement

    def sketch(self) -> Any:
        X, n, l = self.X, self.X.shape[0], self.l
        columns = da.arange(X.shape[1], chunks=(X.chunks[1],))  # tells a block where it is
        part = da.blockwise(
            _sketch_block, "jal", X, "ij", columns, "j", new_axes={"a": n, "l": l},
            adjust_chunks={"j": 1}, concatenate=False, dtype=X.dtype, omega=self.omega, l=l,
        )  # fmt: skip
        return _sum_blocks(part)

    def power(self, Q: Any) -> Any:
        X = self.X
        part = da.blockwise(
            _power_block, "jal", X, "ij", Q, "il", new_axes={"a": X.shape[0]},
            adjust_chunks={"j": 1}, concatenate=False, dtype=X.dtype,
        )  # fmt: skip
        return _sum_blocks(part)

    def power_and_transpose(self, Q: Any) -> tuple[Any, np.ndarray]:
        # two reads: X's own graph has no task that returns both products
        Z = self.transpose(Q)
        return self.times(Z), Z

    def transpose(self, Q: Any) -> np.ndarray:
        X = self.X
        Bt = da.blockwise(
            _transpose_times, "jl", X, "ij", Q, "il", concatenate=False, dtype=X.dtype,
        )  # fmt: skip
        # unoptimised, as every other pass submits X (tsqr's ``to_delayed``): optimised,
        # X's chunk keys came back fused under the same names with other inputs, and a
        # distributed scheduler that still knew the old ones left a task waiting forever
        (Bt,) = dask_compute(Bt, optimize_graph=False)
        return np.asarray(Bt)

    def times(self, W: np.ndarray) -> Any:
        return self.X @ da.from_array(W, chunks=(self.X.chunks[1], W.shape[1]))

    def orthonormal(self, Y: Any) -> Any:
        return tsqr(Y, self.X.chunks[0], persist=self.eager, placement=self.placement)

    def basis(self, Y: Any) -> Any:
        return self.orthonormal(Y)

    def scaled_basis(self, Y: Any) -> Any:
        return self.basis(Y)

    def orthonormal_r(self, Y: Any) -> tuple[Any, np.ndarray]:
        Q, R = tsqr(
            Y, self.X.chunks[0], persist=self.eager, with_r=True, formed=False,
            placement=self.placement,
        )  # fmt: skip
        return Q, R

    def as_basis(self, start: Any) -> Any:
        return row_blocks(start, self.X.chunks[0], self.X.dtype, self.placement)


def row_blocks(a: Any, rows: tuple[int, ...], dtype: Any, placement: Placement) -> Any:
    """``a`` (numpy or dask, n × l) as a dask array in ``dtype`` with row chunks ``rows``;
    a numpy one's blocks held as ``placement`` holds large arrays (scattered to the
    workers of a distributed client, not put in the graph: 240 MB for a split's U at full
    scale)."""
    if is_dask(a):
        return a.astype(dtype).rechunk((rows, a.shape[1]))
    return placement.row_blocks(np.asarray(a, dtype), rows)


def _sum_blocks(part: Any) -> Any:
    """Sum a (blocks, n, l) array over its first axis without concatenating partials."""
    return da.reduction(
        part, _keep, _add_all, combine=_add_all, axis=0, concatenate=False,
        split_every=4, dtype=part.dtype, meta=np.empty((0, 0), part.dtype),
    )  # fmt: skip


def _keep(x: np.ndarray, axis: Any = None, keepdims: bool = True) -> np.ndarray:
    return x


def _add_all(parts: Any, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    """Sum nested lists of (1, n, l) partials in place into one buffer."""
    flat = list(_flatten(parts))
    acc = np.array(flat[0], copy=True)
    for p in flat[1:]:
        acc += p
    return acc if keepdims else acc[0]


def _flatten(parts: Any) -> Iterator[Any]:
    if isinstance(parts, list | tuple):
        for p in parts:
            yield from _flatten(p)
    else:
        yield parts


def _bounded_column_blocks(X: da.Array, target_bytes: float | None = None) -> da.Array:
    """Split column chunks so one column block of all rows stays near ``target_bytes``."""
    target = _BLOCK_BYTES if target_bytes is None else target_bytes
    cap = _max_block_columns(X.shape[0], X.dtype.itemsize, target)
    if max(X.chunks[1]) <= cap:
        return X
    out: da.Array = X.rechunk({1: cap})
    return out


#: largest column block (all rows) a task holds: a 64,984 × 1,000 float32 subject is 260 MB
_BLOCK_BYTES = 512e6


def _max_block_columns(n_rows: int, itemsize: int, target_bytes: float = _BLOCK_BYTES) -> int:
    """Columns of an all-rows block that fit in ``target_bytes`` (at least one)."""
    return max(1, int(target_bytes // (n_rows * itemsize)))


def _sketch_block(
    x_rows: list[Any], columns: np.ndarray, *, omega: TestMatrix, l: int
) -> np.ndarray:
    """One column block's share of X Ω, from the row blocks of that column block."""
    x_rows = [np.asarray(x) for x in x_rows]
    s0 = int(columns[0])
    out = np.zeros((1, sum(x.shape[0] for x in x_rows), l), x_rows[0].dtype)
    if not omega.kept(s0, s0 + x_rows[0].shape[1]):
        return out  # a block the sketch leaves out: Ω is zero on its rows
    rows = omega.rows(s0, s0 + x_rows[0].shape[1], l, x_rows[0].dtype)
    i = 0
    for x in x_rows:
        _add_times(out[0, i : i + x.shape[0]], x, rows)
        i += x.shape[0]
    return out


#: rows of X a sparse sketch product takes at a time (a 256 × 1,010 float32 result: 1 MB)
_SKETCH_ROWS = 256


def _add_times(out: np.ndarray, x: np.ndarray, rows: Any) -> np.ndarray:
    """``out += x @ rows`` in place, for a dense (Gaussian) or CSR (sparse sign) Ω block.

    The sparse product goes ``_SKETCH_ROWS`` rows of x at a time, each as ``Ωᵀ xᵢᵀ`` by
    scipy's own CSR kernel into two buffers made once per call (xᵢᵀ copied in C order,
    and the product). scipy's ``x @ S`` makes both afresh: for a whole 59,784 × 1,000
    subject two 240 MB arrays whose page faults cost more than the product; piece by
    piece 1 MB arrays, which a worker left at distributed's allocator settings (its
    nanny's ``MALLOC_TRIM_THRESHOLD_``, so that every array above 128 kB is a fresh
    ``mmap``: a cluster that :func:`lsd_dask.distributed.connect` did not set up) maps
    and faults in anew each time: 0.50 s a subject there against 0.24 s with the
    buffers; 0.30–0.35 s against 0.25–0.27 s at the 64 MiB thresholds the pipeline's
    workers get (:class:`lsd_dask.distributed.WorkerAllocator`); 0.24 s either way with
    glibc's defaults (one thread; the same sums, bit for bit).
    """
    if not sp.issparse(rows):
        out += x @ rows
        return out
    rows_t = sp.csr_matrix(rows.T)
    kernel = _csr_matvecs()
    if kernel is None or x.dtype != out.dtype or rows_t.dtype != out.dtype:
        for i in range(0, x.shape[0], _SKETCH_ROWS):  # scipy's own path: fresh arrays
            block = out[i : i + _SKETCH_ROWS]
            block += (rows_t @ x[i : i + _SKETCH_ROWS].T).T
        return out
    l, width = rows_t.shape
    piece = min(_SKETCH_ROWS, x.shape[0])
    xt = np.empty((width, piece), x.dtype)
    prod = np.empty((l, piece), out.dtype)
    for i in range(0, x.shape[0], piece):
        r = min(piece, x.shape[0] - i)
        if r < piece:  # the last piece: C-ordered arrays of its own width
            xt, prod = np.empty((width, r), x.dtype), np.empty((l, r), out.dtype)
        np.copyto(xt, x[i : i + r].T)
        prod[...] = 0
        # prod += Ωᵀ xt, the kernel's vectors being the rows of the raveled (view) arrays
        kernel(l, width, r, rows_t.indptr, rows_t.indices, rows_t.data, xt.ravel(), prod.ravel())
        out[i : i + r] += prod.T
    return out


def _csr_matvecs() -> Any:
    """scipy's CSR × dense-block kernel (``Y += A X``, all C-ordered, Y written in place),
    or None where this scipy has none under that name: :func:`_add_times` then takes
    scipy's public product."""
    try:
        from scipy.sparse import _sparsetools
    except ImportError:
        return None
    return getattr(_sparsetools, "csr_matvecs", None)


def _power_block(x_rows: list[Any], q_rows: list[Any]) -> np.ndarray:
    """One column block's share of X Xᵀ Q: ``X_j (X_jᵀ Q)`` from one read of X_j."""
    x_rows = [np.asarray(x) for x in x_rows]
    return _rows_times(x_rows, _transpose_times(x_rows, q_rows))


def _transpose_times(x_rows: list[Any], q_rows: list[Any]) -> np.ndarray:
    """``X_jᵀ Q`` for one column block, summed over its row blocks in one task."""
    w = np.asarray(x_rows[0]).T @ np.asarray(q_rows[0])
    for x, q in zip(x_rows[1:], q_rows[1:], strict=True):
        w += np.asarray(x).T @ np.asarray(q)
    return np.asarray(w)


def _rows_times(x_rows: list[Any], w: np.ndarray) -> np.ndarray:
    """``[X_1; X_2; …] w`` as a (1, n, l) block, each product written in place."""
    w = w.astype(x_rows[0].dtype, copy=False)
    out = np.empty((1, sum(x.shape[0] for x in x_rows), w.shape[1]), w.dtype)
    i = 0
    for x in x_rows:
        np.matmul(x, w, out=out[0, i : i + x.shape[0]])
        i += x.shape[0]
    return out
