"""Hamerly's bounds for the largest-cosine assignment of unit rows (spherical k-means).

Between two iterations a centre moves by an angle ``δ_j = arccos(c_j · c_j')``, and the
angle from any unit row x to that centre changes by at most ``δ_j`` (the triangle
inequality on the sphere). So a lower bound ``α(x)`` on the angle from x to every centre
other than its own stays a lower bound after the move once the largest ``δ_j`` of those
others is subtracted, and a row whose angle to its own centre (computed exactly, one dot
product) is below ``α(x)`` keeps its label without the K products with the centres
(Hamerly 2010, in angles as Schubert, Lang and Feher 2021 do for the cosine). Only the rows
that the bounds cannot settle go through the row-by-centre product; the labels are those
of the plain Lloyd step, with a margin of :data:`ANGLE_MARGIN` for the rounding of
float32 products.

References
----------
.. [1] G. Hamerly (2010). Making k-means even faster. SIAM International Conference on
   Data Mining.
.. [2] E. Schubert, A. Lang, G. Feher (2021). Accelerating spherical k-means. SISAP.
"""

from __future__ import annotations

import numpy as np

from ..linalg.reductions import own_centre_projection

__all__ = ["ANGLE_MARGIN", "AngleBounds"]

#: radians by which a row's own angle must beat its bound to keep its label unchecked:
#: above what the rounding of a float32 cosine of unit rows does to its angle (about 4e-4
#: rad near a cosine of 1, far less elsewhere), so a row near a tie is always compared with
#: every centre (the k-means++ start's bound uses the same margin)
ANGLE_MARGIN = 2e-3
#: rows per product with the centres: bounds the n × K similarities held at once
_ROW_BLOCK = 16384


class AngleBounds:
    """The assignment step of spherical k-means on a numpy X of unit rows, with bounds.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        Unit rows, in the float type the products run in.

    Attributes
    ----------
    checked_ : list of int
        Rows compared with every centre, per call of :meth:`assign` (n on the first).
    """

    def __init__(self, X: np.ndarray) -> None:
        self.X = X
        self.checked_: list[int] = []
        self._labels: np.ndarray | None = None
        self._alpha = np.empty(0)
        self._centres = np.empty(0)

    def assign(self, C: np.ndarray) -> tuple[np.ndarray, float]:
        """Labels (the largest cosine) and the summed cosine of every row to its centre.

        Parameters
        ----------
        C : ndarray of shape (n_clusters, n_features)
            Unit rows, float64.
        """
        X = self.X
        n, k = X.shape[0], C.shape[0]
        Cx = C.astype(X.dtype, copy=False)
        if self._labels is None:
            labels = np.zeros(n, np.int64)
            own = np.empty(n, np.float64)
            self._alpha = np.empty(n, np.float64)
            todo = np.arange(n)
        else:
            labels = self._labels.copy()
            self._alpha -= _largest_other_drift(self._centres, C, labels)
            own = np.asarray(own_centre_projection(X, labels, C), np.float64)
            angle = np.arccos(np.clip(own, -1.0, 1.0))
            todo = np.flatnonzero(angle >= self._alpha - ANGLE_MARGIN)
        for a in range(0, todo.size, _ROW_BLOCK):
            rows = todo[a : a + _ROW_BLOCK]
            block = X[rows] if rows.size < n else X
            S = block @ Cx.T
            best = S.argmax(axis=1)
            labels[rows] = best
            own[rows] = S[np.arange(rows.size), best]
            if k > 1:
                S[np.arange(rows.size), best] = -np.inf
                second = S.max(axis=1).astype(np.float64)
                self._alpha[rows] = np.arccos(np.clip(second, -1.0, 1.0))
            else:
                self._alpha[rows] = np.inf
        self.checked_.append(int(todo.size))
        self._labels, self._centres = labels, C.copy()
        return labels.copy(), float(own.sum())


def _largest_other_drift(before: np.ndarray, after: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """For each row, the largest angle by which a centre other than its own moved."""
    cos = np.clip(np.einsum("ij,ij->i", before, after), -1.0, 1.0)
    drift = np.arccos(cos)
    if drift.size == 1:
        return np.zeros(labels.size)
    first, second = np.argsort(drift)[::-1][:2]
    return np.asarray(np.where(labels == first, drift[second], drift[first]))
