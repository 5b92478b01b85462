"""Euclidean projection onto the probability simplex."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import is_dask

__all__ = ["project_simplex", "project_rows_simplex"]


def project_simplex(v: Any) -> np.ndarray:
    """Project one vector onto ``{p : p >= 0, sum(p) = 1}`` (sort-based, Duchi et al. 2008).

    Parameters
    ----------
    v : array-like of shape (k,)

    Returns
    -------
    ndarray of shape (k,)
        The nearest point of the simplex in the Euclidean norm.
    """
    v = np.asarray(v, dtype=np.float64)
    if v.ndim != 1:
        raise ValueError(f"v must be 1-D, got shape {v.shape}.")
    return np.asarray(_project_rows(v[None, :])[0])


def project_rows_simplex(Y: Any) -> Any:
    """Project every row of ``Y`` onto the probability simplex.

    Parameters
    ----------
    Y : ndarray or dask array of shape (n, k)

    Returns
    -------
    Same kind as ``Y``, shape (n, k); lazy (blockwise) for dask input.
    """
    if is_dask(Y):
        Y = Y.rechunk({1: -1}) if Y.numblocks[1] > 1 else Y
        return Y.map_blocks(_project_rows, dtype=Y.dtype)
    return _project_rows(np.asarray(Y))


# --------------------------------------------------------------------------- kernel


def _project_rows(Y: np.ndarray) -> np.ndarray:
    """Vectorised Michelot/Duchi projection of each row.

    For a row y sorted decreasingly as s, rho is the largest j with
    ``s_j - (cumsum(s)_j - 1) / j > 0`` (the condition holds exactly for j <= rho);
    theta = ``(cumsum(s)_rho - 1) / rho``; the projection is ``max(y - theta, 0)``.

    Only the top ``_TOP`` entries of each row are sorted (a partition finds them): rho is
    the support of the projection, and LSD's rows on cortical features have 15 to 29
    non-zeros at k = 100 (median 15). Rows whose condition still holds at ``_TOP`` are
    redone in full.
    """
    n, k = Y.shape
    if n == 0:
        return Y.copy()
    work = Y.astype(np.float64, copy=False)
    m = min(k, _TOP)
    top = work if m == k else np.partition(work, k - m, axis=1)[:, k - m :]
    theta, full = _theta(top)
    if m < k and np.any(full):
        theta[full] = _theta(work[full])[0]
    out = work - theta[:, None]
    np.maximum(out, 0.0, out=out)
    return np.asarray(out.astype(Y.dtype, copy=False))


_TOP = 32


def _theta(top: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The threshold of each row from its largest entries, and whether all of them count."""
    s = np.sort(top, axis=1)[:, ::-1]
    css = np.cumsum(s, axis=1)
    css -= 1.0
    j = np.arange(1, s.shape[1] + 1, dtype=np.float64)
    rho = np.count_nonzero(s * j > css, axis=1)  # cond[:, 0] is always True
    theta = css[np.arange(s.shape[0]), rho - 1] / rho
    return theta, rho == s.shape[1]
