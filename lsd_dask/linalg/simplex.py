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
    return _project_rows(v[None, :])[0]


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
    ``s_j - (cumsum(s)_j - 1) / j > 0``; theta = ``(cumsum(s)_rho - 1) / rho``;
    the projection is ``max(y - theta, 0)``.
    """
    if Y.shape[0] == 0:
        return Y.copy()
    k = Y.shape[1]
    work = Y.astype(np.float64, copy=False)
    s = -np.sort(-work, axis=1)
    css = np.cumsum(s, axis=1) - 1.0
    j = np.arange(1, k + 1)
    cond = s - css / j > 0
    rho = k - np.argmax(cond[:, ::-1], axis=1)  # last True (cond[:, 0] is always True)
    theta = css[np.arange(Y.shape[0]), rho - 1] / rho
    out = np.maximum(work - theta[:, None], 0.0)
    return out.astype(Y.dtype, copy=False)
