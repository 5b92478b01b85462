"""Leading eigenpairs of similarity matrices, dense or from a Gram factor.

For ``K = F F^T`` the eigenvectors are F's left singular vectors and the eigenvalues its
squared singular values, so only the n × r factor is touched. Signs are made deterministic
(each eigenvector's entries sum to a non-negative number).
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
import scipy.linalg as sla
from scipy.sparse.linalg import eigsh

from .._validation import check_random_state, compute, is_dask

__all__ = ["top_eigenpairs", "top_eigenpairs_from_factor"]

_DENSE_EIGH_MAX = 3000


def top_eigenpairs(K: Any, k: int, *, random_state: Any = None) -> tuple[np.ndarray, Any]:
    """Top-k eigenpairs (largest algebraic) of a symmetric matrix.

    Dense ``eigh`` for small n or k above n/10, Lanczos (``eigsh``, seeded start vector)
    otherwise. A dask
    K uses a randomized SVD followed by Rayleigh quotients for the signs of the eigenvalues.

    Returns
    -------
    eigvals : ndarray of shape (k,), decreasing
    eigvecs : ndarray or dask array of shape (n, k)
    """
    n = K.shape[0]
    if is_dask(K):
        U, _, _ = da.linalg.svd_compressed(
            K, k, n_power_iter=4, seed=int(check_random_state(random_state).integers(2**31))
        )
        (lam,) = compute(((K @ U) * U).sum(axis=0))
        order = np.argsort(-lam)
        U = U[:, order]
        return _fix_signs(np.asarray(lam)[order], U)
    K = np.asarray(K, dtype=np.float64)
    if n <= 200 or (n <= _DENSE_EIGH_MAX and k > n // 10) or k >= n - 1:
        w, V = sla.eigh(K, subset_by_index=[n - k, n - 1])
    else:
        v0 = check_random_state(random_state).standard_normal(n)
        w, V = eigsh(K, k=k, which="LA", v0=v0)
    order = np.argsort(-w)
    return _fix_signs(w[order], V[:, order])


def top_eigenpairs_from_factor(
    F: Any, k: int, *, random_state: Any = None
) -> tuple[np.ndarray, Any]:
    """Top-k eigenpairs of ``K = F F^T`` from the SVD of F (n × r), no n×n array.

    numpy: exact thin SVD. dask with one column chunk and r <= 4000: exact tall-skinny QR
    SVD (``dask.array.linalg.svd``); otherwise :func:`lsd_dask.linalg.randomized_svd`.
    """
    n, r = F.shape
    if k > min(n, r):
        raise ValueError(f"K = F F^T has rank at most {min(n, r)}; cannot take {k} eigenpairs.")
    if is_dask(F):
        if F.numblocks[1] == 1 and r <= 4000:
            U, s, _ = da.linalg.svd(F)
        else:
            from .randomized import randomized_svd

            U, s, _ = randomized_svd(F, k, n_power_iter=4, random_state=random_state)
        (s,) = compute(s)
        return _fix_signs(np.asarray(s[:k], np.float64) ** 2, U[:, :k])
    U, s, _ = np.linalg.svd(np.asarray(F, np.float64), full_matrices=False)
    return _fix_signs(s[:k] ** 2, U[:, :k])


def _fix_signs(w: np.ndarray, V: Any) -> tuple[np.ndarray, Any]:
    """Flip eigenvectors so their entries sum to >= 0 (ties: largest entry positive)."""
    sums, amax = compute(V.sum(axis=0), abs(V).argmax(axis=0))
    if is_dask(V):
        big = np.asarray(compute(*[V[int(i), j] for j, i in enumerate(amax)]))
    else:
        big = V[amax, np.arange(V.shape[1])]
    scale = np.maximum(np.abs(sums).max(), 1.0) * 1e-10
    sign = np.where(np.abs(sums) > scale, np.sign(sums), np.sign(big))
    sign[sign == 0] = 1.0
    return w, V * sign
