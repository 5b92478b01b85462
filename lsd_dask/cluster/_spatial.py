"""A Potts penalty on the mesh in the assignment step, solved by ICM sweeps.

Combined cost of a labelling l with per-sample scores ``S`` (larger is better, e.g. the
cosine to each centre): ``J(l) = -sum_i S[i, l_i] + beta * #{mesh edges (i, j): l_i != l_j}``.

An ICM sweep visits the vertices one colour class at a time (a greedy colouring of the mesh
graph: no two neighbours share a colour) and moves every vertex of the class to the label
with the best local energy ``S[i, l] + beta * (neighbours labelled l)``. Vertices of one
class do not touch, so updating them together is the same as updating them one by one,
and each such move can only lower J: J never increases. With the centres then set to the
mean directions of the new labels (which lowers the data term and leaves the Potts term
alone), the combined cost of spherical k-means never increases either.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = ["greedy_colouring", "icm", "potts_cost"]


def greedy_colouring(adjacency: sp.spmatrix) -> np.ndarray:
    """Colour of every vertex such that neighbours differ (about 7 colours on a mesh)."""
    A = sp.csr_matrix(adjacency)
    n = A.shape[0]
    colour = np.full(n, -1, np.int64)
    indptr, indices = A.indptr, A.indices
    for v in range(n):
        used = {int(colour[u]) for u in indices[indptr[v] : indptr[v + 1]]}
        c = 0
        while c in used:
            c += 1
        colour[v] = c
    return colour


def icm(
    S: np.ndarray,
    labels: np.ndarray,
    adjacency: sp.spmatrix,
    beta: float,
    *,
    sweeps: int = 2,
    colours: np.ndarray | None = None,
) -> np.ndarray:
    """ICM from ``labels`` on the scores S (n × K); returns the new labels."""
    A = sp.csr_matrix(adjacency)
    n, k = S.shape
    lab = np.asarray(labels, np.int64).copy()
    col = greedy_colouring(A) if colours is None else colours
    classes = [np.flatnonzero(col == c) for c in range(int(col.max()) + 1)]
    rows = np.arange(n)
    for _ in range(int(sweeps)):
        changed = 0
        for verts in classes:
            H = sp.csr_matrix((np.ones(n), (rows, lab)), shape=(n, k))
            local = S[verts] + beta * (A[verts] @ H).toarray()
            best = local.argmax(axis=1)
            # keep the current label on ties: a move must strictly lower the energy
            cur = local[np.arange(verts.size), lab[verts]]
            move = local[np.arange(verts.size), best] > cur
            changed += int(move.sum())
            lab[verts[move]] = best[move]
        if changed == 0:
            break
    return lab


def potts_cost(S: Any, labels: np.ndarray, adjacency: sp.spmatrix, beta: float) -> float:
    """``J(l) = -sum_i S[i, l_i] + beta * (edges with different labels)``."""
    A = sp.triu(sp.coo_matrix(adjacency), k=1)
    cut = int(np.count_nonzero(labels[A.row] != labels[A.col]))
    own = float(np.asarray(S)[np.arange(labels.size), labels].sum())
    return -own + beta * cut
