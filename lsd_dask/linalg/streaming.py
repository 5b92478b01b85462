"""MIGP-style streaming group SVD: one column block at a time, with memory that does not
depend on the number of blocks (Smith et al. 2014)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from .._validation import (
    to_numpy,
)
from .randomized import svd_flip

__all__ = ["streaming_svd"]


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


def _truncate(W: np.ndarray, keep: int) -> np.ndarray:
    """``W V_keep``: project W onto the top eigenvectors of its (small) Gram matrix.

    The Gram product runs in W's dtype (float32 GEMM is twice as fast and needs no n × w
    float64 copy); only the w × w eigenproblem is solved in float64.
    """
    G = (W.T @ W).astype(np.float64)
    _, V = np.linalg.eigh(G)
    V = V[:, ::-1][:, :keep]
    return np.asarray(W @ V.astype(W.dtype))
