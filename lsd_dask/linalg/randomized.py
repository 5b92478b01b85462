"""Randomized and streaming rank-k SVD for tall data far larger than memory.

``randomized_svd`` is Halko, Martinsson and Tropp's range finder with QR-stabilised power
iterations, written as explicit passes over X (each a dask reduction over X's blocks), so
the number of reads is ``2 * n_power_iter + 2`` and X is never held: only the n × l basis
Q and the m × l and l × m sketches (l = k + oversamples) are. ``streaming_svd`` is a
MIGP-style group SVD over column blocks (one subject at a time) whose memory does not
depend on the number of blocks.

References
----------
.. [1] N. Halko, P.-G. Martinsson, J. A. Tropp (2011). Finding structure with randomness.
   SIAM Review 53(2). Algorithms 4.4 and 5.1.
.. [2] S. M. Smith et al. (2014). Group-PCA for very large fMRI datasets (MIGP).
   NeuroImage 101.
.. [3] J. A. Tropp, A. Yurtsever, M. Udell, V. Cevher (2019). Streaming low-rank matrix
   approximation with an application to scientific simulation. SIAM J. Sci. Comput.
   41(4). Sparse sign test matrices.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import dask.array as da
import numpy as np

from .._validation import (
    Array,
    RandomState,
    as_array,
    check_random_state,
    compute,
    is_dask,
)
from .bases import FactoredBasis, economic_qr, row_basis_bt
from .block_passes import BlockPasses, is_block_source
from .passes import DaskPasses, NumpyPasses, Passes
from .placement import Placement, SchedulerChoice, persisted
from .sketch import TEST_MATRICES, TestMatrix, sketch_blocks

__all__ = ["randomized_svd", "range_finder", "svd_flip", "svd_task_bytes"]


def randomized_svd(
    X: Array,
    k: int,
    *,
    n_oversamples: int = 10,
    n_power_iter: int = 2,
    random_state: RandomState = None,
    persist: bool = True,
    fuse_passes: bool = True,
    final_pass: bool = True,
    test_matrix: str = "sparse",
    sketch_columns: int | None = None,
    return_vt: bool = True,
    start: Any = None,
    progress: Callable[[str], None] | None = None,
    placement: Placement | None = None,
) -> tuple[Any, np.ndarray, np.ndarray | None]:
    """Rank-k SVD ``X ≈ U diag(s) Vt`` by randomized subspace iteration.

    Halko–Martinsson–Tropp's range finder: ``Q = orth(X Ω)``, then ``n_power_iter`` times
    ``Q = orth(X Xᵀ Q)``, then the SVD of the small ``B = Qᵀ X``. With ``fuse_passes``
    (the default) each power iteration reads X once: every column block (one subject)
    contributes ``X_j (X_jᵀ Q)`` from a single read, so X is read ``n_power_iter + 2``
    times; without it, Xᵀ Q and X (·) are separate passes with a QR between them
    (Halko's Algorithm 4.4, ``2 n_power_iter + 2`` reads). Both do the same
    ``2 n_power_iter + 2`` products with X. Without ``final_pass``, the last power
    iteration's ``Z = Xᵀ Q`` also gives the row basis ``P = orth(Z)``, and ``B`` comes
    from that iteration's product ``X Z`` (``X P = X Z R⁻¹``) instead of another read: one
    read and one product fewer.

    Parameters
    ----------
    X : column-block source, dask array or numpy array of shape (n, m)
        Vertices × (subjects · time), one subject per column chunk. Never held in memory:
        only the n × l basis and l-wide sketches are (l = k + n_oversamples). A
        column-block source (anything with ``shape``, ``dtype``, ``chunks`` and
        ``read_columns(start, stop, out)``, e.g. ``open_split(path).column_blocks``) is
        the fastest path: each dask task reads its own column blocks into one reused
        buffer and accumulates their contributions in place, one task per worker thread,
        so nothing X-sized crosses the network. A dask array is read through its own
        graph, with a tree sum of per-block contributions. Other arrays (a zarr array)
        are wrapped as dask arrays.
    k : int
    n_oversamples : int, default=10
    n_power_iter : int, default=2
        Power iterations, each re-orthonormalised by a (tall-skinny) QR; a basis that
        only starts another product by X Xᵀ is normalised by an LU instead where it is
        in one piece (numpy, or one worker thread: :func:`lu_basis`).
    random_state : int, Generator or None
        Seeds the test matrix Ω, which does not depend on X's chunks: numpy and dask
        inputs, however chunked, start from the same Ω.
    persist : bool, default=True
        Keep the basis Q in (worker) memory between passes. ``False`` leaves the whole
        computation as one lazy graph.
    fuse_passes : bool, default=True
        One read of X per power iteration. The QR between Xᵀ Q and X(·) is skipped, so
        directions with singular values below about ``sqrt(eps) σ₁`` (2e-4 σ₁ in float32)
        are not resolved; pass ``False``, or float64 data, for spectra that steep.
    final_pass : bool, default=True
        ``False`` (with ``fuse_passes`` and ``n_power_iter >= 1``): no last read for
        ``B = Qᵀ X``; X is approximated as ``X P Pᵀ`` with P the row basis of the last
        power iteration, whose range has one application of X fewer than Q's (the
        accuracy of ``n_power_iter - 1/2`` iterations). Reads: ``n_power_iter + 1`` for a
        column-block source or numpy input (a dask array still reads X twice in that
        iteration).
    test_matrix : {"sparse", "gaussian"}, default="sparse"
        Ω's entries: a sparse sign matrix (8 entries ±1 a row, [3]_), whose ``X Ω``
        costs a quarter of a Gaussian Ω's product, or standard normal ones (Halko's).
        After the power iterations both give bases of the same accuracy.
    sketch_columns : int or None, default=None
        The first sketch reads only whole column blocks (a split store's subjects; a dask
        array's column chunks; a numpy array is one block), drawn at random (seeded by
        ``random_state``) until they hold at least this many columns: Ω is zero on the
        others' rows, and a column-block source does not read them. None reads every
        block. The power iterations that follow read all of X, so this starts them from
        a random part of X's range rather than all of it; with ``n_power_iter >= 1`` and
        a few times l columns the basis is as accurate (``docs/benchmarks.md``), for a
        fraction of the sketch's reads. Needs ``n_power_iter >= 1``.
    return_vt : bool, default=True
        ``False``: Vt is None, and the orthonormal factor of the m × l row basis is never
        formed: only its R, from the Cholesky factor of its Gram matrix where that is well
        conditioned. For a split of 33,000 columns at l = 1,010 that is 0.6 s against 2.8 s
        for the QR's R alone (more to form its Q and take the product with it), in this
        process, while the workers wait.
    start : array of shape (n, l0), optional
        A basis to start from in place of the sketch ``X Ω``: no sketch pass, and l = l0
        (``k <= l0 <= min(n, m)``; ``n_oversamples`` unused). For an X whose range is
        near a known one: the columns of a larger matrix that holds X (a split's U for a
        half of its time points), where one power iteration from that basis does what
        the sketch and two do from Ω. With power iterations its columns are used as
        given (orthonormal ones, a U, keep the first product well conditioned); without,
        they are orthonormalised first. Numpy or dask; not with ``sketch_columns``.
    progress : callable, optional
        For a column-block source: receives one line per pass over X when the pass is done
        (``"pass 2 of 4 (power): 51.3 s"``), for batch logs.
    placement : Placement, optional
        Where the passes' tasks run (:mod:`~lsd_dask.linalg.placement`): how many worker
        threads X's columns are cut for, and which worker each group task prefers. The
        default is the scheduler's choice; :func:`lsd_dask.distributed.placement` pins
        the groups to a distributed client's worker threads (or a share of them: two
        SVDs at once on workers of their own never wait on each other's passes).

    Returns
    -------
    U : dask array (numpy for numpy X) of shape (n, k)
    s : ndarray of shape (k,)
    Vt : ndarray of shape (k, m), or None with ``return_vt=False``
        Signs fixed so the largest-magnitude entry of each column of U is positive; dtype
        float32 when X is float32.

    Notes
    -----
    Peak memory per dask task is about two n × l arrays plus two column blocks of X (the
    one in use and the next, read meanwhile; 260 MB each at 64,984 × 1,000 and l =
    1,010), :func:`svd_task_bytes`; a worker holds that once per thread: set worker
    memory to at least 2 GB per thread there.
    """
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D, got shape {X.shape}.")
    n, m = X.shape
    if not 1 <= k <= min(n, m):
        raise ValueError(f"k must be in [1, {min(n, m)}], got {k}.")
    if n_power_iter < 0 or n_oversamples < 0:
        raise ValueError("n_power_iter and n_oversamples must be non-negative.")
    if not final_pass and (n_power_iter < 1 or not fuse_passes):
        raise ValueError("final_pass=False needs fuse_passes=True and n_power_iter >= 1.")
    dtype = np.float32 if X.dtype == np.float32 else np.float64
    l = min(k + n_oversamples, min(n, m))
    if test_matrix not in TEST_MATRICES:
        raise ValueError(f"test_matrix must be one of {TEST_MATRICES}, got {test_matrix!r}.")
    if sketch_columns is not None and (sketch_columns < 1 or n_power_iter < 1):
        raise ValueError(
            "sketch_columns must be a positive number of columns, and needs n_power_iter "
            f">= 1; got {sketch_columns} with n_power_iter {n_power_iter}."
        )
    if start is not None:
        if sketch_columns is not None:
            raise ValueError("start replaces the sketch: pass start or sketch_columns, not both.")
        if start.ndim != 2 or start.shape[0] != n or not k <= start.shape[1] <= min(n, m):
            raise ValueError(
                f"start must be an (n, l0) basis with n = {n} and {k} <= l0 <= {min(n, m)}, "
                f"got shape {start.shape}."
            )
        l = start.shape[1]
    placement = SchedulerChoice() if placement is None else placement
    seed = int(check_random_state(random_state).integers(2**63))
    if not (is_block_source(X) or is_dask(X) or isinstance(X, np.ndarray)):
        X = as_array(X)
    keep = None if sketch_columns is None else sketch_blocks(X, sketch_columns, seed)
    omega = TestMatrix(seed, test_matrix, keep)
    if is_block_source(X):
        passes: Passes = BlockPasses(X, l, omega, dtype, persist, placement)
    elif is_dask(X):
        passes = DaskPasses(X.astype(dtype), l, omega, persist, placement)
    else:
        passes = NumpyPasses(np.asarray(X, dtype), l, omega)
    P, M, Q = range_finder(
        passes,
        n_power_iter,
        start=None if start is None else passes.as_basis(start),
        fuse=fuse_passes,
        final_pass=final_pass,
        row_basis=return_vt,
        progress=progress,
    )
    # B = Qᵀ X = (P M)ᵀ with P orthonormal: B's SVD is M's (l × l, float64 on the client),
    # its right vectors taken back through P
    Vm, s, Umt = np.linalg.svd(M, full_matrices=False)
    Ub, s = np.ascontiguousarray(Umt.T[:, :k], dtype), s[:k]
    Vt = (P @ Vm[:, :k]).T if P is not None else None
    if isinstance(Q, FactoredBasis):
        U = Q.times(Ub)  # Q applied to Q' Ub: Q itself never formed
    elif is_dask(Q):
        # row block by row block (dask's matmul would rechunk the k columns)
        U = da.map_blocks(np.matmul, Q, Ub, chunks=(Q.chunks[0], (k,)), dtype=dtype)
        if persist:
            U = persisted(U, placement)  # read by the sign flip and by the caller: computed once
    else:
        U = Q @ Ub
    U, Vt = svd_flip(U, Vt)
    return U, s.astype(dtype), None if Vt is None else Vt.astype(dtype)


def svd_task_bytes(
    n_rows: int, block_columns: int, k: int, *, n_oversamples: int = 10, itemsize: int = 4
) -> int:
    """Peak bytes of one :func:`randomized_svd` task: two n × l arrays (the basis and its
    product) and two column blocks of X (the one in use and the next, read meanwhile),
    with l = k + n_oversamples."""
    l = int(k) + int(n_oversamples)
    return int(itemsize) * int(n_rows) * (2 * l + 2 * int(block_columns))


def svd_flip(U: Any, Vt: Any) -> tuple[Any, Any]:
    """Deterministic signs: the largest-magnitude entry of each column of U is positive.

    One reduction (column maxima and minima) decides every sign, for numpy or dask U.
    """
    hi, lo = compute(U.max(axis=0), U.min(axis=0))
    hi, lo = np.asarray(hi, np.float64), np.asarray(lo, np.float64)
    signs = np.where(hi >= -lo, 1.0, -1.0)
    U = U * signs.astype(U.dtype)
    if Vt is not None:
        Vt = Vt * signs[:, None].astype(Vt.dtype)
    return U, Vt


def range_finder(
    passes: Passes,
    n_power_iter: int,
    *,
    fuse: bool = True,
    final_pass: bool = True,
    row_basis: bool = True,
    start: Any = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[np.ndarray | None, np.ndarray, Any]:
    """Halko's randomized range finder over X, read only through ``passes``.

    ``Q = orth(X Ω)``; then ``n_power_iter`` times ``Q = orth(X Xᵀ Q)`` (``fuse``: one read
    of X per iteration) or ``Q = orth(X orth(Xᵀ Q))`` (Algorithm 4.4: two reads and a QR
    between them); last ``Xᵀ Q``. The same loop serves numpy arrays, dask arrays and
    column-block sources; only how a pass reads X differs (:class:`Passes`).

    Without ``final_pass`` there is no last read: the last power iteration keeps its
    ``Z = Xᵀ Q_prev`` too, and with ``P R = qr(Z)`` and ``Y = X Z``,
    ``Qᵀ X P Pᵀ = (Qᵀ Y) R⁻¹ Pᵀ`` stands for ``Qᵀ X`` (X approximated on the row basis P).

    With ``row_basis=False`` P is None: only M is formed (the R factors of the QRs).
    ``start`` (from ``passes.as_basis``) stands for ``orth(X Ω)``: no sketch pass.

    Returns
    -------
    P : ndarray of shape (m, l), or None
        Orthonormal columns (float64), and
    M : ndarray of shape (l, l)
        (float64) such that ``P M = Bt = Xᵀ Q`` (without ``final_pass``: ``P R⁻ᵀ Yᵀ Q``):
        B's SVD is then M's, with no SVD of the m × l Bt.
    Q : ndarray or dask array of shape (n, l), or a :class:`FactoredBasis`
        Orthonormal columns; without ``final_pass``, on eager dask or column-block
        passes, their factors (``Q.times(W)`` forms ``Q W``).
    """
    t0 = started = time.perf_counter()
    first = 1 if start is None else 0  # passes before the power iterations
    total = n_power_iter + first + (1 if final_pass else 0)

    def done(i: int, kind: str) -> None:
        nonlocal t0
        now = time.perf_counter()
        if progress is not None and passes.eager:  # lazy passes all run at the end
            # the passes read the data alike: the time left at the pace so far
            left = f", about {(now - started) / i * (total - i):.0f} s left" if i < total else ""
            progress(f"pass {i} of {total} ({kind}): {now - t0:.1f} s{left}")
        t0 = now

    def basis_for(i: int) -> Callable[[Any], Any]:
        """How to make the basis power iteration i starts from: a Q that only starts
        another power iteration need not be orthonormal to the last digit
        (``passes.basis``), and where that iteration only multiplies by X Xᵀ it need
        not be orthonormal at all (``passes.scaled_basis``); the one the factors are
        made from must be, and so must the Q whose ``Xᵀ Q`` the row basis is made from
        (its directions below ``sqrt(ε)`` of the largest would be dropped)."""
        if i >= n_power_iter:
            return passes.orthonormal
        if not fuse or (not final_pass and i == n_power_iter - 1):
            return passes.basis
        return passes.scaled_basis

    if start is None:
        Q = basis_for(0)(passes.sketch())
        done(1, "sketch")
    else:  # U is formed from Q without a power iteration: it must be orthonormal then
        Q = start if n_power_iter else passes.orthonormal(start)
    for i in range(n_power_iter):
        if not final_pass and i == n_power_iter - 1:
            Y, Z = passes.power_and_transpose(Q)
            Q, R = passes.orthonormal_r(Y)  # Qᵀ Y = R
            done(i + 1 + first, "power")
            return (*row_basis_bt(Z, R, row_basis), Q)
        if fuse:
            Y = passes.power(Q)
        else:
            Z = passes.transpose(Q)
            Y = passes.times(np.linalg.qr(Z)[0].astype(Z.dtype, copy=False))
        Q = basis_for(i + 1)(Y)
        done(i + 1 + first, "power")
    Bt = np.asarray(passes.transpose(Q), np.float64)
    P, M = economic_qr(Bt, with_q=row_basis)
    done(total, "transpose")
    return P, M, Q
