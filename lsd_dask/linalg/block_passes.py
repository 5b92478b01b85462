"""X as a column-block source (a split store's subjects), read inside the tasks: one
task per group of column blocks, each reading its blocks in turn into reused buffers
(:class:`BlockPasses`)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from typing import Any

import dask.array as da
import numpy as np
import scipy.linalg as sla
from dask.base import compute as dask_compute
from dask.base import persist as dask_persist
from dask.delayed import delayed

from .._validation import (
    Array,
    is_dask,
)
from .bases import lu_basis, tsqr
from .passes import _add_all, _add_times, _max_block_columns, _transpose_times, row_blocks
from .placement import Placement
from .sketch import TestMatrix

__all__ = ["BlockPasses", "is_block_source"]


class BlockPasses:
    """X as a column-block source, with the reads inside the tasks.

    The columns are split into one contiguous group of equal width per worker thread of
    ``placement`` (group task i preferring its i-th slot, where it names them; a column
    block across a group's edge is read in two pieces, one by each group: 33 subjects on
    2 threads are 16.5 each, not 17 and 16); a task per group reads its
    pieces in turn into two reused buffers (the next read while this one is multiplied:
    :func:`_read_ahead`) and accumulates the n × l result in place,
    so a pass moves only the group results (one n × l array each) between workers, and
    allocates its large buffers once per group rather than once per block (fresh
    allocations cost page faults comparable to the reads here). The basis is kept in one
    row block per thread (each at least l rows): its QR is one factorisation per thread,
    and each group task takes the blocks as they are, with no n × l copy of the whole
    gathered on one worker first.
    """

    def __init__(
        self,
        z: Any,
        l: int,
        omega: TestMatrix,
        dtype: Any,
        persist: bool,
        placement: Placement,
    ) -> None:
        n = z.shape[0]
        # the groups and their worker threads from one look at the cluster: as many groups
        # as the cluster has threads, whatever share of them this SVD runs on, so that the
        # sums (and so U, to the last bit) are the same on a share, on every thread, or
        # without a cluster on a machine of as many cores
        slots = placement.slots()
        self.slots = list(slots) if slots else None
        threads = placement.threads()
        bounds = _column_bounds(z, dtype)
        self.spans = _equal_groups(bounds, threads)
        # the sketch reads only the blocks where Ω is not zero (all of them without keep)
        kept = [piece for a, b in bounds for piece in omega.kept(a, b)]
        self.sketch_spans = _equal_groups(kept, threads)
        parts = max(1, min(threads, n // max(l, 1)))
        self.row_chunks = tuple(np.diff(np.linspace(0, n, parts + 1).round().astype(int)).tolist())
        self.l, self.omega, self.dtype, self.eager = l, omega, dtype, persist
        self.z, self.placement = z, placement

    def sketch(self) -> Any:
        return self._row_sums(self._tasks("sketch", spans=self.sketch_spans))

    def power(self, Q: Any) -> Any:
        return self._summed("power", Q)

    def power_and_transpose(self, Q: Any) -> tuple[Any, np.ndarray]:
        tasks = self._tasks("power_and_transpose", Q)
        Y = self._row_sums([t[0] for t in tasks])
        # one graph: each group task runs once and gives both its sum and its Xᵀ Q blocks
        # (not optimised: an array and delayed objects are optimised apart, and a lone
        # group's chain to Y fused into one task of another name ran the group again)
        Y, blocks = dask_persist(Y, [t[1] for t in tasks], optimize_graph=False)
        (blocks,) = dask_compute(blocks)
        return Y, np.concatenate([b for group in blocks for b in group])

    def transpose(self, Q: Any) -> np.ndarray:
        (blocks,) = dask_compute(self._tasks("transpose", Q))
        return np.concatenate([b for group in blocks for b in group])

    def times(self, W: np.ndarray) -> Any:
        return self._summed("times", W)

    def orthonormal(self, Y: Any) -> Any:
        return tsqr(Y, self.row_chunks, persist=self.eager, placement=self.placement)

    def basis(self, Y: Any) -> Any:
        return tsqr(Y, self.row_chunks, persist=self.eager, exact=False, placement=self.placement)

    def scaled_basis(self, Y: Any) -> Any:
        if self.eager and len(self.row_chunks) == 1:  # the whole basis on one worker
            # kept for tsqr too, where the LU gives no basis; the graph as it is (an
            # optimised one loses the group tasks' worker restrictions)
            (Y,) = dask_persist(Y, optimize_graph=False)
            B = lu_basis(Y, self.placement)
            if B is not None:
                return B
        return self.basis(Y)

    def orthonormal_r(self, Y: Any) -> tuple[Any, np.ndarray]:
        Q, R = tsqr(
            Y, self.row_chunks, persist=self.eager, with_r=True, formed=False,
            placement=self.placement,
        )  # fmt: skip
        return Q, R

    def as_basis(self, start: Any) -> Any:
        return row_blocks(start, self.row_chunks, self.dtype, self.placement)

    def _tasks(
        self, kind: str, W: Any = None, spans: list[list[tuple[int, int]]] | None = None
    ) -> list[Any]:
        if W is not None and is_dask(W):
            W = list(W.to_delayed().ravel())  # its row blocks, in order
        elif W is not None:
            W = delayed(W, pure=True)  # one key that every group task shares
        # X as its own key in each task, never hashed (as an argument of every group task
        # it was hashed again per task: 0.03 s a task on the client for a 33-subject
        # store, growing with subjects), and not one key that all share: the scheduler
        # ran every task that needed that key on the worker that held it, so the
        # sketch's group tasks (which need nothing else) ran one after the other
        tasks = []
        for i, g in enumerate(self.spans if spans is None else spans):
            # group i on worker thread i, not left to the scheduler: it placed both of a
            # pass's group tasks on the worker that held the most of their inputs, and the
            # other worker sat idle until one was stolen (0.9 s of a 3 s pass, with two
            # splits' SVDs at once); other workers may still take it
            with (
                nullcontext()
                if self.slots is None
                else self.placement.pinned(self.slots[i % len(self.slots)])
            ):
                x = delayed(self.z, pure=False, traverse=False)
                tasks.append(
                    delayed(_group_pass, pure=True)(x, g, kind, W, self.omega, self.l, self.dtype)
                )
        return tasks

    def _summed(self, kind: str, W: Any = None) -> Any:
        return self._row_sums(self._tasks(kind, W))

    def _row_sums(self, parts: list[Any]) -> Any:
        """The sum of the groups' n × l results, one task per row block of the basis.

        Each row block's sum takes only those rows of each group's result, and the
        scheduler places the blocks' sums (and then their QRs) on different workers: with
        one sum of the whole, both row blocks were on one worker, and on 2 workers their
        QRs (2.2–2.8 s each at full size) ran one after the other, or the second only
        once the scheduler had moved it.
        """
        cuts = np.cumsum([0, *self.row_chunks]).tolist()
        blocks = []
        for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
            # row block i on the share's i-th thread (modulo): a split's sums, and the QRs
            # that read them where they are, stay on its own threads
            with (
                nullcontext()
                if self.slots is None
                else self.placement.pinned(self.slots[i % len(self.slots)])
            ):
                if len(parts) == 1:  # its rows as they are: no n × l copy to fault in
                    block = delayed(_rows, pure=True)(parts[0], a, b)[0]
                else:
                    block = delayed(_add_all)([delayed(_rows, pure=True)(p, a, b) for p in parts])
            blocks.append(da.from_delayed(block, (b - a, self.l), dtype=self.dtype))
        return da.concatenate(blocks, axis=0)


def is_block_source(X: Array) -> bool:
    """A column-block source: reads its own column blocks (``read_columns``)."""
    return callable(getattr(X, "read_columns", None))


def _group_pass(
    z: Any,
    spans: list[tuple[int, int]],
    kind: str,
    W: Any,
    omega: TestMatrix,
    l: int,
    dtype: Any,
) -> Any:
    """One task: the contribution of a group of column blocks, read here one by one.

    ``sketch``: Σ X_j Ω_j; ``power``: Σ X_j (X_jᵀ W); ``times``: Σ X_j W_j (W: m × l);
    ``transpose``: [X_jᵀ W, …]; ``power_and_transpose``: (Σ X_j (X_jᵀ W), [X_jᵀ W, …]).
    """
    n = z.shape[0]
    W = [_aligned(w) for w in W] if isinstance(W, list) else _aligned(W)
    # the transpose pass keeps its blocks apart: no n × l buffers for it; the sketch adds
    # into acc in place
    acc = np.zeros((n, l), dtype) if kind != "transpose" else None
    out: list[np.ndarray] = []
    for (a, b), buf in _read_ahead(z, spans):
        x = buf if buf.dtype == dtype else buf.astype(dtype)
        if kind == "sketch":
            assert acc is not None
            _add_times(acc, x, omega.rows(a, b, l, dtype))
            continue
        if kind == "times":
            w = W[a:b].astype(dtype, copy=False)
        else:
            w = _transpose_times(_row_pieces(x, W), W) if isinstance(W, list) else x.T @ W
            if kind != "power":
                out.append(w)
            if kind == "transpose":
                continue
        assert acc is not None  # set for every kind but transpose
        _add_product(acc, x, w)
    if kind == "power_and_transpose":
        assert acc is not None
        return acc[None], out
    return out if acc is None else acc[None]


def _read_ahead(z: Any, spans: list[tuple[int, int]]) -> Iterator[tuple[tuple[int, int], Any]]:
    """``z``'s column blocks ``spans`` in order, each read into one of two buffers, the
    next one read by a second thread while the caller works on this one.

    The reads (``preadv`` and copies, which release the GIL) then wait on the disk while
    the products run: a group task of 16 subjects × 250 time points read from a cold page
    cache took the sum of its reads (1.25 s alone) and its products. A buffer is handed
    out until the caller asks for the next block, so it is never written while in use;
    the two buffers are made once per task (of each block width met).
    """
    bufs: list[np.ndarray | None] = [None, None]

    def read(i: int) -> np.ndarray:
        a, b = spans[i]
        buf = bufs[i % 2]
        if buf is None or buf.shape[1] != b - a:
            buf = bufs[i % 2] = np.empty((z.shape[0], b - a), z.dtype)
        z.read_columns(a, b, buf)
        return buf

    if len(spans) < 2:  # nothing to read ahead of
        for i, span in enumerate(spans):
            yield span, read(i)
        return
    with ThreadPoolExecutor(1, thread_name_prefix="lsd-read-ahead") as pool:
        ahead = pool.submit(read, 0)
        for i, span in enumerate(spans):
            buf = ahead.result()
            if i + 1 < len(spans):  # the other buffer: the caller is done with it
                ahead = pool.submit(read, i + 1)
            yield span, buf


def _add_product(acc: np.ndarray, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``acc += x @ w`` as one BLAS call that adds into ``acc`` (C-ordered n × l).

    BLAS's ``C = A B + C`` on the transposes (``accᵀ += wᵀ xᵀ``, all three F-ordered views
    of the C-ordered arrays, so nothing is copied): no n × l product buffer to hold, fill
    and add back, which at 59,784 × 1,010 float32 is 240 MB more per task and a pass over
    it per subject. Falls back to numpy where BLAS would have to copy an operand.
    """
    x = np.asarray(x)
    w = np.asarray(w, dtype=acc.dtype)
    fused = (
        acc.dtype in (np.float32, np.float64)
        and x.dtype == acc.dtype
        and acc.flags.c_contiguous
        and x.flags.c_contiguous
        and w.flags.c_contiguous
    )
    if not fused:
        acc += x @ w
        return acc
    gemm = sla.get_blas_funcs("gemm", (acc,))
    c = gemm(1.0, w.T, x.T, beta=1.0, c=acc.T, overwrite_c=True)
    if not np.shares_memory(c, acc):  # BLAS copied C after all: put its sum in place
        acc[...] = c.T
    return acc


def _aligned(a: Any) -> Any:
    """``a``, or an aligned copy of it where its data are not aligned for its dtype.

    An array a task receives from another worker is rebuilt on the bytes of the message
    at whatever offset it had there: a Q row block arrived 2 bytes past a 4-byte boundary.
    numpy then copies such an operand into an aligned buffer on every product it takes
    part in: ``Xᵀ Q`` of one 59,784 × 1,000 subject with the received blocks took 1.3–1.7 s
    against 1.2 s with aligned ones (one thread), and a group task makes that product for
    every subject of its group. One copy per task instead.
    """
    if isinstance(a, np.ndarray) and not a.flags.aligned:
        return np.array(a, copy=True)
    return a


def _rows(part: np.ndarray, a: int, b: int) -> np.ndarray:
    """Rows ``a:b`` of a (1, n, l) group result, as a (1, b − a, l) view."""
    return part[:, a:b]


def _equal_groups(bounds: list[tuple[int, int]], n_groups: int) -> list[list[tuple[int, int]]]:
    """``n_groups`` runs of the columns of ``bounds`` (in order, not necessarily
    contiguous), of equal width (±1); a block across a run's edge goes in two pieces, one
    to each run."""
    starts = np.cumsum([0, *(b - a for a, b in bounds)]).tolist()  # bounds laid end to end
    edges = np.linspace(0, starts[-1], max(n_groups, 1) + 1).round().astype(int).tolist()
    groups = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        if hi <= lo:  # more groups than columns: this one gets none
            continue
        pieces = [
            (a + max(c, lo) - c, a + min(c + b - a, hi) - c)
            for (a, b), c in zip(bounds, starts, strict=False)
            if c < hi and c + b - a > lo
        ]
        if pieces:
            groups.append(pieces)
    return groups


def _row_pieces(x: np.ndarray, blocks: list[np.ndarray]) -> list[np.ndarray]:
    """The rows of x cut as ``blocks`` are (views)."""
    cuts = np.cumsum([0, *(b.shape[0] for b in blocks)])
    return [x[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def _column_bounds(z: Any, dtype: Any) -> list[Any]:
    """Column blocks: the array's column chunks, split where one would exceed the cap."""
    n, m = z.shape
    step = min(z.chunks[1], _max_block_columns(n, np.dtype(dtype).itemsize))
    return [(a, min(m, a + step)) for a in range(0, m, step)]
