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
) -> tuple[Any, np.ndarray, np.ndarray]:
    """Rank-k SVD ``X ≈ U diag(s) Vt`` by randomized subspace iteration.

    Parameters
    ----------
    X : dask array (or numpy) of shape (n, m)
        Typically Zarr-backed, vertices × (subjects · time). Read ``2 * n_power_iter + 2``
        times.
    k : int
    n_oversamples : int, default=10
    n_power_iter : int, default=2
        Power iterations, each re-orthonormalised by QR (Halko Alg. 4.4).
    random_state : int, Generator or None
    persist : bool, default=True
        Keep the n × l basis Q in (worker) memory between passes. ``False`` recomputes
        it lazily, trading reads of X for memory.

    Returns
    -------
    U : dask array (numpy for numpy X) of shape (n, k)
    s : ndarray of shape (k,)
    Vt : ndarray of shape (k, m)
        Signs fixed so the largest-magnitude entry of each column of U is positive; dtype
        float32 when X is float32.
    """
    n, m = X.shape
    if not 1 <= k <= min(n, m):
        raise ValueError(f"k must be in [1, {min(n, m)}], got {k}.")
    dtype = np.float32 if X.dtype == np.float32 else np.float64
    l = min(k + n_oversamples, min(n, m))
    rng = check_random_state(random_state)
    omega = rng.standard_normal((m, l)).astype(dtype)
    lazy = is_dask(X)
    if lazy:
        X = X.rechunk({0: X.chunks[0]})  # no-op; rows stay as stored
    Q = _orthonormal(X @ omega, persist)  # pass 1
    for _ in range(n_power_iter):
        (Z,) = compute(X.T @ Q)  # pass: m × l
        Qz, _ = np.linalg.qr(np.asarray(Z, dtype))
        Q = _orthonormal(X @ Qz.astype(dtype), persist)  # pass
    (B,) = compute(Q.T @ X)  # last pass: l × m
    Ub, s, Vt = np.linalg.svd(np.asarray(B, np.float64), full_matrices=False)
    Ub, s, Vt = Ub[:, :k], s[:k], Vt[:k]
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


def _orthonormal(Y: Any, persist: bool) -> Any:
    """Orthonormal basis of the columns of a tall Y (tall-skinny QR for dask)."""
    if not is_dask(Y):
        Q, _ = np.linalg.qr(Y)
        return Q
    Y = Y.rechunk({1: -1})
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
