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
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import dask.array as da
import numpy as np

from .._validation import check_random_state, compute, is_dask

__all__ = ["randomized_svd", "streaming_svd", "svd_flip"]


def randomized_svd(
    X: Any,
    k: int,
    *,
    n_oversamples: int = 10,
    n_power_iter: int = 2,
    random_state: Any = None,
    persist: bool = True,
    fuse_passes: bool = True,
) -> tuple[Any, np.ndarray, np.ndarray]:
    """Rank-k SVD ``X ≈ U diag(s) Vt`` by randomized subspace iteration.

    Halko–Martinsson–Tropp's range finder: ``Q = orth(X Ω)``, then ``n_power_iter`` times
    ``Q = orth(X Xᵀ Q)``, then the SVD of the small ``B = Qᵀ X``. With ``fuse_passes``
    (the default) each power iteration reads X once: every column block (one subject)
    contributes ``X_j (X_jᵀ Q)`` from a single read, so X is read ``n_power_iter + 2``
    times; without it, Xᵀ Q and X (·) are separate passes with a QR between them
    (Halko's Algorithm 4.4, ``2 n_power_iter + 2`` reads). Both do the same
    ``2 n_power_iter + 2`` products with X.

    Parameters
    ----------
    X : dask array (or numpy) of shape (n, m)
        Typically Zarr-backed, vertices × (subjects · time), one subject per column chunk.
        Never held in memory: only the n × l basis and l-wide sketches are
        (l = k + n_oversamples).
    k : int
    n_oversamples : int, default=10
    n_power_iter : int, default=2
        Power iterations, each re-orthonormalised by a (tall-skinny) QR.
    random_state : int, Generator or None
        Seeds the Gaussian test matrix, which does not depend on X's chunks: numpy and
        dask inputs, however chunked, start from the same Ω.
    persist : bool, default=True
        Keep the basis Q in (worker) memory between passes. ``False`` leaves the whole
        computation as one lazy graph.
    fuse_passes : bool, default=True
        One read of X per power iteration. The QR between Xᵀ Q and X(·) is skipped, so
        directions with singular values below about ``sqrt(eps) σ₁`` (2e-4 σ₁ in float32)
        are not resolved; pass ``False``, or float64 data, for spectra that steep.

    Returns
    -------
    U : dask array (numpy for numpy X) of shape (n, k)
    s : ndarray of shape (k,)
    Vt : ndarray of shape (k, m)
        Signs fixed so the largest-magnitude entry of each column of U is positive; dtype
        float32 when X is float32.

    Notes
    -----
    Peak memory per dask task is about two n × l arrays plus one column block of X (260
    MB each at 64,984 × 1,000 and l = 1,010): set worker memory to at least 2 GB there.
    """
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D, got shape {X.shape}.")
    n, m = X.shape
    if not 1 <= k <= min(n, m):
        raise ValueError(f"k must be in [1, {min(n, m)}], got {k}.")
    if n_power_iter < 0 or n_oversamples < 0:
        raise ValueError("n_power_iter and n_oversamples must be non-negative.")
    dtype = np.float32 if X.dtype == np.float32 else np.float64
    l = min(k + n_oversamples, min(n, m))
    seed = int(check_random_state(random_state).integers(2**63))
    if is_dask(X):
        Bt, Q = _range_dask(X.astype(dtype), l, seed, n_power_iter, persist, fuse_passes)
    else:
        Bt, Q = _range_numpy(np.asarray(X, dtype), l, seed, n_power_iter, fuse_passes)
    # B = Qᵀ X = Btᵀ (l × m); its SVD in float64 on the client
    Vb, s, Ubt = np.linalg.svd(np.asarray(Bt, np.float64), full_matrices=False)
    Ub, s, Vt = Ubt.T[:, :k], s[:k], Vb.T[:k]
    U = Q @ Ub.astype(dtype)
    U, Vt = svd_flip(U, Vt)
    return U, s.astype(dtype), Vt.astype(dtype)


def streaming_svd(
    blocks: Iterable[Any],
    k: int,
    *,
    n_keep: int | None = None,
    random_state: Any = None,
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
    random_state : unused, accepted for a uniform signature (the algorithm is
        deterministic).

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
        b = np.asarray(b.compute() if is_dask(b) else b)
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


#: rows of the Gaussian test matrix drawn from one generator; Ω does not depend on chunks
_OMEGA_ROWS = 1024


def _omega_rows(seed: int, start: int, stop: int, l: int, dtype: Any) -> np.ndarray:
    """Rows ``start:stop`` of the m × l Gaussian test matrix fixed by ``seed``."""
    groups = range(start // _OMEGA_ROWS, (stop - 1) // _OMEGA_ROWS + 1)
    parts = [
        np.random.default_rng([seed, g]).standard_normal((_OMEGA_ROWS, l), dtype=np.float32)
        for g in groups
    ]
    off = groups[0] * _OMEGA_ROWS
    return np.concatenate(parts)[start - off : stop - off].astype(dtype, copy=False)


def _range_numpy(
    X: np.ndarray, l: int, seed: int, q: int, fuse: bool
) -> tuple[np.ndarray, np.ndarray]:
    """In-memory range finder: returns ``(Xᵀ Q, Q)``."""
    Q = np.linalg.qr(X @ _omega_rows(seed, 0, X.shape[1], l, X.dtype))[0]
    for _ in range(q):
        if fuse:
            Q = np.linalg.qr(X @ (X.T @ Q))[0]
        else:
            Q = np.linalg.qr(X @ np.linalg.qr(X.T @ Q)[0])[0]
    return X.T @ Q, Q


def _range_dask(
    X: Any, l: int, seed: int, q: int, persist: bool, fuse: bool
) -> tuple[np.ndarray, Any]:
    """Out-of-core range finder over X's column blocks: returns ``(Xᵀ Q, Q)``.

    Every pass is one dask graph: a task per column block (which reads that block once)
    and a tree sum of the n × l contributions; the QR is dask's tall-skinny QR.
    """
    X = _bounded_column_blocks(X)
    columns = da.arange(X.shape[1], chunks=(X.chunks[1],))  # tells a block where it is
    n = X.shape[0]
    part = da.blockwise(
        _sketch_block, "jal", X, "ij", columns, "j", new_axes={"a": n, "l": l},
        adjust_chunks={"j": 1}, concatenate=False, dtype=X.dtype, seed=seed, l=l,
    )  # fmt: skip
    Q = _orthonormal(_sum_blocks(part), X.chunks[0], persist)
    for _ in range(q):
        if fuse:
            part = da.blockwise(
                _power_block, "jal", X, "ij", Q, "il", new_axes={"a": n},
                adjust_chunks={"j": 1}, concatenate=False, dtype=X.dtype,
            )  # fmt: skip
            Y = _sum_blocks(part)
        else:
            (Z,) = compute(X.T @ Q)
            Qz = np.linalg.qr(np.asarray(Z, X.dtype))[0]
            Y = X @ da.from_array(Qz, chunks=(X.chunks[1], l))
        Q = _orthonormal(Y, X.chunks[0], persist)
    (Bt,) = compute(X.T @ Q)  # last read: m × l
    return Bt, Q


def _sketch_block(x_rows: list, columns: np.ndarray, *, seed: int, l: int) -> np.ndarray:
    """One column block's share of X Ω, from the row blocks of that column block."""
    x_rows = [np.asarray(x) for x in x_rows]
    s0 = int(columns[0])
    omega = _omega_rows(seed, s0, s0 + x_rows[0].shape[1], l, x_rows[0].dtype)
    return _stack_rows([x @ omega for x in x_rows])


def _power_block(x_rows: list, q_rows: list) -> np.ndarray:
    """One column block's share of X Xᵀ Q: ``X_j (X_jᵀ Q)`` from one read of X_j."""
    w = sum(np.asarray(x).T @ np.asarray(qr) for x, qr in zip(x_rows, q_rows, strict=True))
    return _stack_rows([np.asarray(x) @ w.astype(x.dtype) for x in x_rows])


def _stack_rows(rows: list) -> np.ndarray:
    out = np.empty((1, sum(r.shape[0] for r in rows), rows[0].shape[1]), rows[0].dtype)
    i = 0
    for r in rows:
        out[0, i : i + r.shape[0]] = r
        i += r.shape[0]
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


def _flatten(parts: Any):
    if isinstance(parts, list | tuple):
        for p in parts:
            yield from _flatten(p)
    else:
        yield parts


def _bounded_column_blocks(X: Any, target_bytes: float = 256e6) -> Any:
    """Split column chunks so one column block of all rows stays near ``target_bytes``."""
    per_col = X.shape[0] * X.dtype.itemsize
    cap = max(1, int(target_bytes // per_col))
    if max(X.chunks[1]) <= cap:
        return X
    return X.rechunk({1: cap})


def _orthonormal(Y: Any, row_chunks: tuple, persist: bool) -> Any:
    """Orthonormal basis of the columns of a tall dask Y (tall-skinny QR)."""
    Y = Y.rechunk({0: row_chunks, 1: -1})
    Q, _ = da.linalg.tsqr(Y)
    return Q.persist() if persist else Q


def _truncate(W: np.ndarray, keep: int) -> np.ndarray:
    """``W V_keep``: project W onto the top eigenvectors of its (small) Gram matrix.

    The Gram product runs in W's dtype (float32 GEMM is twice as fast and needs no n × w
    float64 copy); only the w × w eigenproblem is solved in float64.
    """
    G = (W.T @ W).astype(np.float64)
    _, V = np.linalg.eigh(G)
    V = V[:, ::-1][:, :keep]
    return W @ V.astype(W.dtype)
