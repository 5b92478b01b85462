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
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

import dask
import dask.array as da
import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from dask.base import annotate
from dask.base import compute as dask_compute
from dask.base import persist as dask_persist
from dask.delayed import delayed

from .._validation import (
    Array,
    RandomState,
    as_array,
    check_random_state,
    compute,
    is_dask,
    to_numpy,
)

__all__ = [
    "lu_basis",
    "randomized_svd",
    "range_finder",
    "streaming_svd",
    "svd_flip",
    "svd_task_bytes",
    "tsqr",
]


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
    workers: Sequence[str] | None = None,
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
    workers : sequence of str, optional
        For a column-block source on a distributed client: the worker addresses whose
        threads run the passes' group tasks, one entry per thread (an address may
        repeat); X's columns are cut into that many groups. None: every thread of every
        worker. Two SVDs at once on workers of their own never wait on each other's
        passes (:class:`lsd_dask.pipeline.stages.svd.SvdStage`).

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
    seed = int(check_random_state(random_state).integers(2**63))
    if not (_is_block_source(X) or is_dask(X) or isinstance(X, np.ndarray)):
        X = as_array(X)
    keep = None if sketch_columns is None else _sketch_blocks(X, sketch_columns, seed)
    omega = _TestMatrix(seed, test_matrix, keep)
    if _is_block_source(X):
        passes: _Passes = _BlockPasses(X, l, omega, dtype, persist, workers)
    elif is_dask(X):
        passes = _DaskPasses(X.astype(dtype), l, omega, persist)
    else:
        passes = _NumpyPasses(np.asarray(X, dtype), l, omega)
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
    if isinstance(Q, _FactoredBasis):
        U = Q.times(Ub)  # Q applied to Q' Ub: Q itself never formed
    elif is_dask(Q):
        # row block by row block (dask's matmul would rechunk the k columns)
        U = da.map_blocks(np.matmul, Q, Ub, chunks=(Q.chunks[0], (k,)), dtype=dtype)
        if persist:
            U = _persisted(U)  # read by the sign flip and by the caller: computed once
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


def streaming_svd(
    blocks: Iterable[Any],
    k: int,
    *,
    n_keep: int | None = None,
) -> tuple[np.ndarray, np.ndarray, None]:
    """Group SVD over column blocks with bounded memory (MIGP-style).

    Keeps a running n × n_keep matrix W whose columns span the leading left singular
    subspace seen so far, scaled by the singular values. For each block B (n × T):
    ``W <- [W, B]``, then ``W <- W V_keep`` with V_keep the top eigenvectors of the small
    ``W^T W``, so that ``W W^T`` keeps the leading part of ``X X^T``. Peak memory is
    n × (n_keep + T), whatever the number of blocks.

    Parameters
    ----------
    blocks : iterable of arrays of shape (n, T_i)
        numpy or dask (each computed when its turn comes), e.g. one subject at a time.
    k : int
        Components returned.
    n_keep : int, optional
        Running dimension, default ``2 k`` (more is more accurate; see the benchmark).
        The algorithm is deterministic: it takes no ``random_state``.

    Returns
    -------
    U : ndarray of shape (n, k)
    s : ndarray of shape (k,)
    None
        No right singular vectors (they would need every block again).
    """
    keep = int(n_keep or 2 * k)
    if keep < k:
        raise ValueError(f"n_keep={keep} must be at least k={k}.")
    W: np.ndarray | None = None
    for b in blocks:
        b = to_numpy(b)
        dtype = np.float32 if b.dtype == np.float32 else np.float64
        W = (
            b.astype(dtype, copy=False)
            if W is None
            else np.concatenate([W, b.astype(W.dtype)], axis=1)
        )
        if W.shape[1] > keep:
            W = _truncate(W, keep)
    if W is None:
        raise ValueError("no blocks were given.")
    if W.shape[1] < k:
        raise ValueError(f"the blocks have {W.shape[1]} columns in all; cannot take k={k}.")
    W = _truncate(W, k) if W.shape[1] > k else W
    s = np.linalg.norm(W, axis=0)
    order = np.argsort(-s)
    s, W = s[order], W[:, order]
    U = W / np.where(s > 0, s, 1.0)
    U, _ = svd_flip(U, None)
    return U, s.astype(W.dtype), None


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


#: rows of the test matrix drawn from one generator; Ω does not depend on chunks
_OMEGA_ROWS = 1024
#: nonzeros in each row of the sparse sign test matrix (Tropp et al.'s choice, [3]_)
_OMEGA_NNZ = 8
#: the kinds of test matrix :func:`randomized_svd` draws
TEST_MATRICES = ("sparse", "gaussian")


@dataclass(frozen=True)
class _TestMatrix:
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


def range_finder(
    passes: _Passes,
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
    column-block sources; only how a pass reads X differs (:class:`_Passes`).

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
    Q : ndarray or dask array of shape (n, l), or a :class:`_FactoredBasis`
        Orthonormal columns; without ``final_pass``, on eager dask or column-block
        passes, their factors (``Q.times(W)`` forms ``Q W``).
    """
    t0 = time.perf_counter()
    first = 1 if start is None else 0  # passes before the power iterations
    total = n_power_iter + first + (1 if final_pass else 0)

    def done(i: int, kind: str) -> None:
        nonlocal t0
        if progress is not None and passes.eager:  # lazy passes all run at the end
            progress(f"pass {i} of {total} ({kind}): {time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()

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
            return (*_row_basis_bt(Z, R, row_basis), Q)
        if fuse:
            Y = passes.power(Q)
        else:
            Z = passes.transpose(Q)
            Y = passes.times(np.linalg.qr(Z)[0].astype(Z.dtype, copy=False))
        Q = basis_for(i + 1)(Y)
        done(i + 1 + first, "power")
    Bt = np.asarray(passes.transpose(Q), np.float64)
    P, M = _economic_qr(Bt, with_q=row_basis)
    done(total, "transpose")
    return P, M, Q


def _row_basis_bt(
    Z: np.ndarray, C: np.ndarray, row_basis: bool = True
) -> tuple[np.ndarray | None, np.ndarray]:
    """``P, M`` with ``P M = P (C R⁻¹)ᵀ`` and ``P R = qr(Z)``, in float64: the transpose of
    ``Qᵀ X P Pᵀ`` when ``C = Qᵀ X Z`` (so that ``C R⁻¹ = Qᵀ X P``); P is None without
    ``row_basis``, and R then comes from Zᵀ Z (:func:`_gram_r`). R's rows may differ in
    sign from the QR's: that flips the signs of M's rows, and so of its left singular
    vectors, which are taken back through P only; its singular values and right vectors
    stay.

    Where Z is ill-conditioned (R's reciprocal condition number below ``sqrt(ε)`` of Z's
    dtype, the passes'), the directions of Z below ``sqrt(ε)`` times its largest singular
    value are left out: C (from products in ``dtype``) holds them only to about
    ``ε ‖X‖ ‖Z‖``, which ``R⁻¹`` would blow up past ‖X‖ itself. With ``R = W₁ S W₂ᵀ``,
    ``P W₁`` is Z's left singular basis, and M's rows along the kept directions are
    ``(C W₂ S⁻¹)ᵀ``, the others zero: singular values of X there come out 0. Z is that
    ill-conditioned where X is rank-deficient, or has directions far below its largest
    that the start of the power iteration holds (a split's U for one half of it).
    """
    tol = float(np.sqrt(np.finfo(np.asarray(Z).dtype).eps))
    Z = np.asarray(Z, np.float64)
    P, R = _economic_qr(Z, with_q=True) if row_basis else (None, _gram_r(Z))
    C = np.asarray(C, np.float64)
    rcond, info = sla.lapack.dtrcon(R, norm="1", uplo="U")
    if info == 0 and rcond >= tol:
        # C R⁻¹ = Mᵀ with Rᵀ M = Cᵀ: a triangular solve, no inverse
        return P, sla.solve_triangular(R, C.T, trans="T", check_finite=False)
    W1, S, W2t = np.linalg.svd(R)
    r = int(np.count_nonzero(S > tol * S[0]))
    M = np.zeros_like(C)
    M[:r] = (C @ W2t[:r].T / S[:r]).T
    return (None if P is None else P @ W1), M


def _gram_r(z: np.ndarray) -> np.ndarray:
    """R of a tall float64 ``z``'s economic QR, up to the signs of its rows: the Cholesky
    factor of ``zᵀ z``, or the QR's own R where z is near rank-deficient.

    For the 33,000 × 1,010 row basis of a split this takes 0.6 s against 2.8 s for the QR
    (this process, 2 threads; the workers wait meanwhile). The Gram squares z's
    condition number, so at ``κ(z)`` above about 10⁶ (R's diagonal spread; or where the
    Cholesky factorisation fails) the QR is used: below it R is accurate to about
    ``ε κ(z)²``, 10⁻⁴ at worst in float64, against float32 data.
    """
    # the upper triangle of zᵀ z from z as it lies: a C-ordered z as its (F-ordered)
    # transpose, which BLAS would otherwise copy whole into F order first (0.77 s
    # against 0.50 s for a 33,000 × 1,010 z on one thread)
    c_ordered = z.flags.c_contiguous
    gram = sla.blas.dsyrk(1.0, z.T if c_ordered else z, trans=0 if c_ordered else 1)
    try:
        r = np.asarray(sla.cholesky(gram, lower=False, check_finite=False))
    except np.linalg.LinAlgError:
        return _economic_qr(z, with_q=False)[1]
    d = np.abs(np.diag(r))
    if d.min() <= _GRAM_MIN_SPREAD * d.max():
        return _economic_qr(z, with_q=False)[1]
    return r


#: the smallest ratio of R's diagonal entries at which :func:`_gram_r` trusts zᵀ z
_GRAM_MIN_SPREAD = 1e-6


def _economic_qr(a: np.ndarray, *, with_q: bool) -> tuple[np.ndarray | None, np.ndarray]:
    """The economic QR of a tall ``a`` (m ≥ l); without ``with_q`` Q is None and never
    formed (scipy's ``"r"`` mode gives the full m × l upper-trapezoidal R, whose first l
    rows are the economic R)."""
    if with_q:
        q, r = sla.qr(a, mode="economic", check_finite=False)
        return q, r
    return None, np.asarray(sla.qr(a, mode="r", check_finite=False)[0][: a.shape[1]])


def tsqr(
    Y: Any,
    row_chunks: tuple[int, ...],
    *,
    persist: bool = True,
    with_r: bool = False,
    exact: bool = True,
    formed: bool = True,
) -> Any:
    """Orthonormal basis of the columns of a tall dask Y: two-level tall-skinny QR.

    Each row block is factored on its own (``Y_i = Q_i R_i``), the stacked R's once more
    (``[R_1; …] = Q' R``), and ``Q = diag(Q_i) Q'``, each ``Q_i`` applied by its
    reflectors to its rows of Q' and never formed (:func:`_qr_reflectors`). Written here
    rather than with ``dask.array.linalg.tsqr`` because that calls ``numpy.linalg.qr``,
    2.7–3.5 times slower than LAPACK's geqrf/orgqr on 32,492 × 1,010 float32 blocks, which
    geqrt/gemqrt beat again (measured on the 2-core AVX2 development machine of
    ``docs/benchmarks.md``). Householder QR: a rank-deficient Y still gives orthonormal
    columns.

    Parameters
    ----------
    Y : dask array of shape (n, l)
    row_chunks : tuple of int
        Row blocks of the result; each at least l rows.
    persist : bool, default=True
        Compute Q now (in worker memory) rather than leave it lazy.
    with_r : bool, default=False
        Also return R (``Y = Q R``, float64, computed with Q).
    exact : bool, default=True
        ``False`` (with ``persist``): ``Q = Y R⁻¹``, a triangular solve of each row block
        (0.45 s for a 29,892 × 1,010 float32 block on a single-threaded worker, against
        1.3 s to apply its reflectors), where R's diagonal puts κ(Y) below about
        ``1 / (1000 ε)``: the same span, orthonormal to about ``ε κ(Y)``, which is all a
        power iteration needs of the basis it starts from (Y's own rounding already
        limits its span that far). Else, and for an ill-conditioned Y, the reflectors' Q.
    formed : bool, default=True
        ``False`` (with ``persist``): Q is returned as a :class:`_FactoredBasis`, not
        formed: its ``times(W)`` forms ``Q W`` in one step on the workers (for the final
        ``U = Q Ub`` of an SVD: 0.65 s a row block less than Q and then the product).

    Returns
    -------
    Q : dask array of shape (n, l), chunked by ``row_chunks`` (or its factors)
    R : ndarray of shape (l, l)
        With ``with_r`` only.
    """
    Y = Y.rechunk({0: row_chunks, 1: -1})
    l = Y.shape[1]
    # the graph as it is: optimised, it lost the annotations of its tasks (the group
    # tasks' worker restrictions, :class:`_BlockPasses`)
    ys = list(Y.to_delayed(optimize_graph=False).ravel())
    exact = exact or not persist or with_r
    if not exact:
        ys = list(dask_persist(*ys))  # read again by Y R⁻¹
    factored = [delayed(_qr_reflectors, pure=True)(b) for b in ys]
    if persist:
        # the stacked QR here, between the two steps on the workers: LAPACK's geqrt and
        # gemqrt hold the GIL, so a worker that made Q' and went on to apply it kept the
        # other waiting for its copy of Q' (1.2 s, the two applications one after the other)
        factored = list(dask_persist(*factored))
        _wait_for(factored)
        (rs,) = dask_compute([f[2] for f in factored])
        small: Any = _qr_of_stacked_r(rs)
        if not exact and _well_conditioned(small[1], Y.dtype):
            r = _on_every_worker(np.asarray(small[1], Y.dtype))
            del factored  # their reflectors are not needed
            blocks = [
                da.from_delayed(
                    delayed(_times_r_inverse, pure=True)(y, r), (rows, l), dtype=Y.dtype
                )
                for y, rows in zip(ys, Y.chunks[0], strict=True)
            ]
            return _persisted(da.concatenate(blocks, axis=0))
        basis = _FactoredBasis(factored, small[0], Y.chunks[0], Y.dtype)
        if not formed:
            return (basis, np.asarray(small[1])) if with_r else basis
        Q = basis.times()
        return (Q, np.asarray(small[1])) if with_r else Q
    small = delayed(_qr_of_stacked_r, pure=True)([f[2] for f in factored])
    blocks = [
        da.from_delayed(delayed(_times_q_part, pure=True)(f, small[0], i), (rows, l), dtype=Y.dtype)
        for i, (f, rows) in enumerate(zip(factored, Y.chunks[0], strict=True))
    ]
    Q = da.concatenate(blocks, axis=0)
    if not with_r:
        return Q
    (R,) = dask_compute(small[1])
    return Q, np.asarray(R)


def lu_basis(Y: Any) -> Any | None:
    """A basis of the span of a dask Y in one row block, for another power iteration:
    ``L = Y U⁻¹`` for the U of Y's LU factorisation with partial pivoting, persisted on
    the worker that holds Y (:func:`_lu_basis`); None where U's diagonal shows Y near
    rank-deficient (then :func:`tsqr`'s bases).

    The normaliser of Halko et al.'s power iterations as scikit-learn and fbpca take it
    (``power_iteration_normalizer="LU"``): not orthonormal, but well scaled (every entry
    at most 1 in magnitude, a unit lower triangle in the pivot rows), which is all a
    product by X Xᵀ needs. The range finder takes it for those bases only
    (``scaled_basis``): the one U is made from, and the one whose Xᵀ Q the row basis is
    made from, are :func:`tsqr`'s. At rank 1,000 on a split of the full study (59,784
    rows), 0.7 s on one thread against 2.4 s for ``tsqr(..., exact=False)``.
    """
    if len(Y.chunks[0]) != 1:
        raise ValueError(f"lu_basis takes Y in one row block, not {len(Y.chunks[0])}.")
    (y,) = Y.rechunk({1: -1}).to_delayed(optimize_graph=False).ravel()
    (b,) = dask_persist(delayed(_lu_basis, pure=True)(y))
    (made,) = dask_compute(delayed(_is_array, pure=True)(b))
    if not made:
        return None
    return _persisted(da.from_delayed(b, Y.shape, dtype=Y.dtype))


class _FactoredBasis:
    """The Q of :func:`tsqr`, kept as its factors: each row block's reflectors (persisted
    on the workers) and the stacked QR's Q' (here); ``times(W)`` forms ``Q W``."""

    def __init__(
        self, factored: list[Any], q_small: np.ndarray, rows: tuple[int, ...], dtype: Any
    ) -> None:
        self.factored, self.q_small, self.rows, self.dtype = factored, q_small, rows, dtype

    def times(self, W: np.ndarray | None = None) -> Any:
        """``Q W`` (Q without W), persisted: each row block's reflectors applied to its
        rows of ``Q' W``, one step, so Q itself is never formed when W is given."""
        q_small = self.q_small if W is None else self.q_small @ np.asarray(W, np.float64)
        shared = _on_every_worker(q_small)
        k = q_small.shape[1]
        blocks = [
            da.from_delayed(
                delayed(_times_q_part, pure=True)(f, shared, i), (rows, k), dtype=self.dtype
            )
            for i, (f, rows) in enumerate(zip(self.factored, self.rows, strict=True))
        ]
        return _persisted(da.concatenate(blocks, axis=0))


class _Passes(Protocol):
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
    give Q as its factors, :class:`_FactoredBasis`: the SVD forms only ``Q Ub``).
    ``eager``: each pass runs when it is asked for (False: one lazy graph at the end).
    Implemented by :class:`_NumpyPasses`, :class:`_DaskPasses` and :class:`_BlockPasses`.
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


class _NumpyPasses:
    """X in memory."""

    eager = True

    def __init__(self, X: np.ndarray, l: int, omega: _TestMatrix) -> None:
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


class _DaskPasses:
    """X as a dask array, read through its own graph: a task per column block (which reads
    that block once) and a tree sum of the n × l contributions."""

    def __init__(self, X: da.Array, l: int, omega: _TestMatrix, persist: bool) -> None:
        self.X = _bounded_column_blocks(X)
        self.l, self.omega, self.eager = l, omega, persist

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
        return tsqr(Y, self.X.chunks[0], persist=self.eager)

    def basis(self, Y: Any) -> Any:
        return self.orthonormal(Y)

    def scaled_basis(self, Y: Any) -> Any:
        return self.basis(Y)

    def orthonormal_r(self, Y: Any) -> tuple[Any, np.ndarray]:
        Q, R = tsqr(Y, self.X.chunks[0], persist=self.eager, with_r=True, formed=False)
        return Q, R

    def as_basis(self, start: Any) -> Any:
        return _row_blocks(start, self.X.chunks[0], self.X.dtype)


class _BlockPasses:
    """X as a column-block source, with the reads inside the tasks.

    The columns are split into one contiguous group of equal width per worker thread it
    is given (``workers``; every thread of the client's workers by default; a column
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
        omega: _TestMatrix,
        dtype: Any,
        persist: bool,
        workers: Sequence[str] | None = None,
    ) -> None:
        n = z.shape[0]
        # the groups and their worker threads from one look at the cluster
        self.slots = list(workers) if workers else _thread_slots()
        threads = len(self.slots) if self.slots else _n_threads()
        bounds = _column_bounds(z, dtype)
        self.spans = _equal_groups(bounds, threads)
        # the sketch reads only the blocks where Ω is not zero (all of them without keep)
        kept = [piece for a, b in bounds for piece in omega.kept(a, b)]
        self.sketch_spans = _equal_groups(kept, threads)
        parts = max(1, min(threads, n // max(l, 1)))
        self.row_chunks = tuple(np.diff(np.linspace(0, n, parts + 1).round().astype(int)).tolist())
        self.l, self.omega, self.dtype, self.eager = l, omega, dtype, persist
        self.z = z

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
        return tsqr(Y, self.row_chunks, persist=self.eager)

    def basis(self, Y: Any) -> Any:
        return tsqr(Y, self.row_chunks, persist=self.eager, exact=False)

    def scaled_basis(self, Y: Any) -> Any:
        if self.eager and len(self.row_chunks) == 1:  # the whole basis on one worker
            # kept for tsqr too, where the LU gives no basis; the graph as it is (an
            # optimised one loses the group tasks' worker restrictions)
            (Y,) = dask_persist(Y, optimize_graph=False)
            B = lu_basis(Y)
            if B is not None:
                return B
        return self.basis(Y)

    def orthonormal_r(self, Y: Any) -> tuple[Any, np.ndarray]:
        Q, R = tsqr(Y, self.row_chunks, persist=self.eager, with_r=True, formed=False)
        return Q, R

    def as_basis(self, start: Any) -> Any:
        return _row_blocks(start, self.row_chunks, self.dtype)

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
                else annotate(workers=[self.slots[i % len(self.slots)]], allow_other_workers=True)
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
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            if len(parts) == 1:  # its rows as they are: no n × l copy to fault in
                block = delayed(_rows, pure=True)(parts[0], a, b)[0]
            else:
                block = delayed(_add_all)([delayed(_rows, pure=True)(p, a, b) for p in parts])
            blocks.append(da.from_delayed(block, (b - a, self.l), dtype=self.dtype))
        return da.concatenate(blocks, axis=0)


def _row_blocks(a: Any, rows: tuple[int, ...], dtype: Any) -> Any:
    """``a`` (numpy or dask, n × l) as a dask array in ``dtype`` with row chunks ``rows``;
    a numpy one's blocks scattered to the workers of a distributed client, not put in the
    graph (240 MB for a split's U at full scale)."""
    if is_dask(a):
        return a.astype(dtype).rechunk((rows, a.shape[1]))
    from ..distributed import scattered_rows

    out: da.Array = scattered_rows(np.asarray(a, dtype), rows)
    return out


def _is_block_source(X: Array) -> bool:
    """A column-block source: reads its own column blocks (``read_columns``)."""
    return callable(getattr(X, "read_columns", None))


def _group_pass(
    z: Any,
    spans: list[tuple[int, int]],
    kind: str,
    W: Any,
    omega: _TestMatrix,
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


def _sketch_blocks(X: Any, columns: int, seed: int) -> tuple[tuple[int, int], ...]:
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


def _row_pieces(x: np.ndarray, blocks: list[np.ndarray]) -> list[np.ndarray]:
    """The rows of x cut as ``blocks`` are (views)."""
    cuts = np.cumsum([0, *(b.shape[0] for b in blocks)])
    return [x[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def _column_bounds(z: Any, dtype: Any) -> list[Any]:
    """Column blocks: the array's column chunks, split where one would exceed the cap."""
    n, m = z.shape
    step = min(z.chunks[1], _max_block_columns(n, np.dtype(dtype).itemsize))
    return [(a, min(m, a + step)) for a in range(0, m, step)]


#: largest column block (all rows) a task holds: a 64,984 × 1,000 float32 subject is 260 MB
_BLOCK_BYTES = 512e6


def _max_block_columns(n_rows: int, itemsize: int, target_bytes: float = _BLOCK_BYTES) -> int:
    """Columns of an all-rows block that fit in ``target_bytes`` (at least one)."""
    return max(1, int(target_bytes // (n_rows * itemsize)))


def _n_threads() -> int:
    """Worker threads of the active scheduler: the distributed client's, else local."""
    import os

    try:
        from distributed import default_client

        return max(1, int(sum(default_client().nthreads().values())))
    except (ImportError, ValueError):
        return int(dask.config.get("num_workers", None) or os.cpu_count() or 1)


def _thread_slots() -> list[str] | None:
    """The active distributed client's worker addresses, one entry per worker thread
    (each worker's threads together, the workers in address order); None without one, or
    while it has no workers (all lost: the tasks then wait for the ones that come back)."""
    from ..distributed import worker_threads

    return worker_threads() or None


def _sketch_block(
    x_rows: list[Any], columns: np.ndarray, *, omega: _TestMatrix, l: int
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


def _bounded_column_blocks(X: da.Array, target_bytes: float = _BLOCK_BYTES) -> da.Array:
    """Split column chunks so one column block of all rows stays near ``target_bytes``."""
    cap = _max_block_columns(X.shape[0], X.dtype.itemsize, target_bytes)
    if max(X.chunks[1]) <= cap:
        return X
    out: da.Array = X.rechunk({1: cap})
    return out


def _persisted(x: Any) -> Any:
    """Persist and wait: on a distributed cluster ``persist`` returns at once, and a
    next pass submitted meanwhile would share X's chunk keys with this one, so the
    scheduler would hold those chunks in memory until the next pass reads them."""
    x = x.persist()
    _wait_for(x)
    return x


def _on_every_worker(x: Any) -> Any:
    """``x`` for the tasks of a graph: a copy sent to every worker of the distributed
    client (16 MB for the stacked QR at l = 1,010, not in the graph sent to the
    scheduler), else a delayed literal."""
    try:
        from distributed import default_client

        client = default_client()
    except (ImportError, ValueError):
        return delayed(x, pure=True, traverse=False)
    return client.scatter(x, broadcast=True, hash=False)


def _wait_for(x: Any) -> None:
    """Wait until a persisted collection's futures (on a distributed cluster) are done."""
    from distributed import futures_of, wait

    futures = futures_of(x)
    if futures:
        wait(futures)


def _qr_reflectors(y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Householder QR of a tall block (rank-deficient blocks are fine), Q left as its
    reflectors: LAPACK geqrt's compact WY form (the reflectors below the diagonal of
    ``a``, their block factors ``t``) and R, in y's dtype.

    Q is applied once, to its rows of the stacked QR's Q' (:func:`_times_q_part`), never
    formed on its own: for a 29,892 × 1,010 float32 block (one thread) the factorisation
    and that application take 0.9 + 1.3 s against 2.5 s for scipy's economic QR (geqrf,
    then orgqr to form Q) and 0.6 s for the product with Q'.
    """
    geqrt = sla.get_lapack_funcs("geqrt", (y,))
    a, t, info = geqrt(min(_QR_BLOCK, *y.shape), y)
    if info != 0:
        raise np.linalg.LinAlgError(f"geqrt failed (info {info}).")
    l = y.shape[1]
    return a, t, np.triu(a[:l])


#: the block size of geqrt's compact WY reflectors: 0.9 s for a 29,892 × 1,010 float32
#: block at 128 (one thread), 0.91 at 64, 0.92 at 256, 1.0 at 32
_QR_BLOCK = 128


def _qr_of_stacked_r(rs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``Q', R`` of the stacked R factors, in float64 (small: blocks·l × l)."""
    q, r = sla.qr(np.vstack(rs).astype(np.float64), mode="economic", check_finite=False)
    return np.asarray(q), np.asarray(r)


def _well_conditioned(r: np.ndarray, dtype: Any) -> bool:
    """Whether R's diagonal (a lower bound on its condition number) allows ``Y R⁻¹`` in
    ``dtype`` to within about a thousandth of orthonormality."""
    d = np.abs(np.diag(r))
    return bool(d.size and d.min() > 1e3 * np.finfo(dtype).eps * d.max())


def _lu_basis(y: np.ndarray) -> np.ndarray | None:
    """``y U⁻¹`` (F-ordered, y's dtype) for the U of ``y = P L U``, LAPACK getrf's LU
    with partial pivoting; None where U's diagonal puts y near rank-deficient
    (:func:`_well_conditioned`'s test), or getrf met an exact zero pivot.

    ``y U⁻¹ = P L``: getrf's L with its rows put back in y's order, made in place of the
    factorisation (getrf swaps at most l rows, so at most 2 l move). For a 59,784 ×
    1,010 float32 y on one thread: 0.13 s for the F-ordered copy getrf works in, 0.55 s
    for getrf, against 1.57 s for geqrt and 0.79 s for ``Y R⁻¹`` (:func:`tsqr`'s
    ``exact=False``) on the AVX-512 development machine.
    """
    n, l = y.shape
    a = _fortran_copy(y)
    getrf = sla.get_lapack_funcs("getrf", (a,))
    lu, piv, info = getrf(a, overwrite_a=True)
    top = lu[:l]
    if info != 0 or not np.isfinite(top).all() or not _well_conditioned(top, y.dtype):
        return None
    top[np.triu_indices(l)] = 0
    np.fill_diagonal(top, 1)
    order = np.arange(n)
    for i, p in enumerate(piv.tolist()):  # row i was swapped with row p, in turn
        order[i], order[p] = order[p], order[i]
    moved = np.flatnonzero(order != np.arange(n))
    lu[order[moved]] = lu[moved]
    return np.asarray(lu)


#: rows of a C-ordered array :func:`_fortran_copy` transposes at a time
_TRANSPOSE_ROWS = 512


def _fortran_copy(y: np.ndarray) -> np.ndarray:
    """An F-ordered copy of a 2-d ``y``, a block of rows at a time: 0.13 s for a 59,784 ×
    1,010 float32 C-ordered y (warm memory, one thread) against 0.4 s for
    ``np.asfortranarray`` and 0.9 s for the copy f2py makes."""
    out = np.empty(y.shape[::-1], y.dtype)
    for i in range(0, y.shape[0], _TRANSPOSE_ROWS):
        out[:, i : i + _TRANSPOSE_ROWS] = y[i : i + _TRANSPOSE_ROWS].T
    return out.T


def _is_array(x: Any) -> bool:
    return x is not None


def _times_r_inverse(y: np.ndarray, r: np.ndarray) -> np.ndarray:
    """``y R⁻¹`` for an upper triangular R, by one triangular solve (BLAS trsm on the
    transposes, into a copy of y)."""
    trsm = sla.get_blas_funcs("trsm", (r,))
    # yᵀ is F-ordered: Rᵀ (y R⁻¹)ᵀ = yᵀ solved in place of a copy, whose transpose is C-ordered
    out = trsm(1.0, r, np.array(y.T, order="F", copy=True), side=0, lower=0, trans_a=1,
               overwrite_b=1)  # fmt: skip
    return np.asarray(out.T)


def _times_q_part(
    factored: tuple[np.ndarray, np.ndarray, np.ndarray], q_small: np.ndarray, i: int
) -> np.ndarray:
    """Block i of ``Q W``: ``Q_i`` (by its reflectors) times its l rows of ``q_small``,
    the stacked QR's ``Q' W`` (W = I for Q itself)."""
    a, t, _ = factored
    m, l = a.shape
    c = np.zeros((m, q_small.shape[1]), a.dtype, order="F")
    c[:l] = q_small[i * l : (i + 1) * l]
    gemqrt = sla.get_lapack_funcs("gemqrt", (a,))
    q, info = gemqrt(a, t, c, side="L", trans="N", overwrite_c=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"gemqrt failed (info {info}).")
    return np.asarray(q)


def _truncate(W: np.ndarray, keep: int) -> np.ndarray:
    """``W V_keep``: project W onto the top eigenvectors of its (small) Gram matrix.

    The Gram product runs in W's dtype (float32 GEMM is twice as fast and needs no n × w
    float64 copy); only the w × w eigenproblem is solved in float64.
    """
    G = (W.T @ W).astype(np.float64)
    _, V = np.linalg.eigh(G)
    V = V[:, ::-1][:, :keep]
    return np.asarray(W @ V.astype(W.dtype))
