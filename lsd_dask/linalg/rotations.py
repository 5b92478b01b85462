"""Rotations used by LSD: Givens rotations between two directions, Procrustes about an axis.

References
----------
Arora, Gupta, Kapila, Fazel (2013), Subroutines 1 and 2.
"""

from __future__ import annotations

import numpy as np

__all__ = ["rotate_givens", "procrustes_about_axis", "rotation_about_axis"]


def rotate_givens(m: np.ndarray, u: np.ndarray) -> np.ndarray:
    """A rotation ``R`` (``R^T R = I``, ``det R = 1``) with ``R m/|m| = u/|u|``.

    Subroutine 1 of Arora et al.: a Givens rotation in the plane spanned by m and u,
    identity on its orthogonal complement. Parallel vectors give the identity; antiparallel
    ones a rotation by pi in a plane containing them.

    Parameters
    ----------
    m, u : ndarray of shape (k,), non-zero, k >= 2
    """
    m = np.asarray(m, dtype=np.float64)
    u = np.asarray(u, dtype=np.float64)
    k = m.size
    if m.shape != u.shape or m.ndim != 1 or k < 2:
        raise ValueError("m and u must be vectors of the same length >= 2.")
    nm, nu = np.linalg.norm(m), np.linalg.norm(u)
    if nm == 0 or nu == 0:
        raise ValueError("cannot rotate a zero vector.")
    m, u = m / nm, u / nu
    c = float(np.clip(u @ m, -1.0, 1.0))
    v = u - c * m
    nv = np.linalg.norm(v)
    if nv < 1e-12:
        if c > 0:
            return np.eye(k)
        # antiparallel: rotate by pi in the plane of m and any vector orthogonal to it
        v = _orthogonal_to(m)
        c, s = -1.0, 0.0
    else:
        # once more against m: for nearly parallel m and u, v = u - c m is a small
        # difference whose rounding leaves it off m's complement by about eps / angle
        v = v / nv
        v = v - (v @ m) * m
        v = v / np.linalg.norm(v)
        s = float(u @ v)
    # basis U = [m, v, rest]; R = U G U^T with G the 2-D rotation taking e1 to (c, s)
    U = _complete_basis(np.column_stack([m, v]))
    G = np.eye(k)
    G[0, 0] = G[1, 1] = c
    G[1, 0] = s
    G[0, 1] = -s
    return np.asarray(U @ G @ U.T)


def rotation_about_axis(g: np.ndarray, R_ue: np.ndarray) -> np.ndarray:
    """Embed ``g`` in SO(k-1) as the rotation ``R_ue^T diag(g, 1) R_ue`` of R^k.

    With ``R_ue u = e_k`` the result leaves u fixed (Arora et al.'s map psi_u).
    """
    k = R_ue.shape[0]
    G = np.eye(k)
    G[: k - 1, : k - 1] = g
    return np.asarray(R_ue.T @ G @ R_ue)


def procrustes_about_axis(A: np.ndarray, B: np.ndarray | None, R_ue: np.ndarray) -> np.ndarray:
    """The rotation fixing u that best maps the columns of A onto those of B.

    Minimises ``||R A - B||_F`` over rotations with ``R u = u``, where ``R_ue u = e_k``:
    in the frame of ``R_ue`` the problem is an orthogonal Procrustes problem in the first
    k-1 coordinates, ``T = (R_ue B)_{:k-1} (R_ue A)_{:k-1}^T = U S V^T``,
    ``g = U diag(1, ..., det(U V^T)) V^T``.

    Parameters
    ----------
    A, B : ndarray of shape (k, n)
        Or pass the k×k cross product ``B A^T`` as ``A`` with ``B=None``.
    """
    C = A if B is None else B @ A.T  # k x k cross product B A^T
    T = (R_ue @ C @ R_ue.T)[:-1, :-1]
    U, _, Vt = np.linalg.svd(T)
    d = np.ones(U.shape[0])
    d[-1] = np.sign(np.linalg.det(U @ Vt)) or 1.0
    g = (U * d) @ Vt
    return rotation_about_axis(g, R_ue)


# --------------------------------------------------------------------------- helpers


def _complete_basis(V: np.ndarray) -> np.ndarray:
    """Extend orthonormal columns V (k × r) to an orthonormal basis of R^k (Gram-Schmidt)."""
    k, r = V.shape
    Q, _ = np.linalg.qr(np.column_stack([V, np.eye(k)]))
    # QR keeps the span of the first r columns; fix signs so they equal V exactly
    signs = np.sign(np.sum(Q[:, :r] * V, axis=0))
    Q[:, :r] *= signs
    return Q[:, :k]


def _orthogonal_to(m: np.ndarray) -> np.ndarray:
    e = np.zeros_like(m)
    e[np.argmin(np.abs(m))] = 1.0
    v = e - (e @ m) * m
    return np.asarray(v / np.linalg.norm(v))
