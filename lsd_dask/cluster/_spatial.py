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

from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp
import scipy.sparse.csgraph  # noqa: F401 - sp.csgraph

__all__ = [
    "POTTS_TOL",
    "check_connectivity",
    "component_moves",
    "greedy_colouring",
    "icm",
    "potts_cost",
    "potts_phase",
]


#: the share of the samples whose labels a round of the Potts phase may change and still
#: end it: at full size (59,784 vertices, 300 clusters) the first round moves about 2,800
#: labels and the last ten of sixteen 21 or fewer each, a full product with the centres
#: apiece
POTTS_TOL = 1e-3


def potts_phase(
    scores: Callable[[], np.ndarray],
    refit: Callable[[np.ndarray], None],
    labels: np.ndarray,
    adjacency: sp.spmatrix,
    beta: float,
    *,
    sweeps: int,
    max_iter: int,
    tol: float = POTTS_TOL,
) -> tuple[np.ndarray, list[float], int]:
    """Alternate ICM on the current scores and a refit of the centres to the new labels.

    Run after the method's plain iterations have converged: ICM from an arbitrary start
    would freeze the labels near it (a vertex inside a region pays ``beta`` per neighbour
    to move).

    Parameters
    ----------
    scores : callable
        Returns the n × K scores (larger is better) for the current centres; the method's
        data cost is a constant minus the score of each sample's label.
    refit : callable
        Sets the centres for the given labels. It must not raise the data cost at those
        labels (a mean direction, or a least-squares centre update, does not).
    labels : ndarray of shape (n,)
        The plain iterations' labels: where ICM starts.
    adjacency, beta, sweeps : as for :func:`icm`
    max_iter : int
        ICM + refit rounds at most.
    tol : float, default=POTTS_TOL
        Stop after the round (its refit included) whose moves change at most this share
        of the labels; 0 stops only when a round moves nothing.

    Returns
    -------
    labels : ndarray
    history : list of float
        ``potts_cost`` after every ICM: it never increases, because ICM lowers the combined
        cost for fixed centres and the refit lowers it for fixed labels.
    n_iter : int
    """
    A = sp.csr_matrix(adjacency)
    colours = greedy_colouring(A)
    history: list[float] = []
    n_iter = 0
    for n_iter in range(1, int(max_iter) + 1):  # noqa: B007 - reported
        S = np.asarray(scores(), np.float64)
        new = icm(S, labels, A, beta, sweeps=sweeps, colours=colours)
        new = component_moves(S, new, A, beta)
        history.append(potts_cost(S, new, A, beta))
        # gone before the next scores are made: two n × K float64 arrays at once were a
        # fine fit's peak (0.57 GB each at 59,784 × 1,200)
        del S
        moved = int(np.count_nonzero(new != labels))
        labels = new
        if moved == 0:
            break
        refit(labels)
        if moved <= tol * labels.size:
            break
    return labels, history, n_iter


def component_moves(
    S: np.ndarray, labels: np.ndarray, adjacency: sp.spmatrix, beta: float, *, rounds: int = 20
) -> np.ndarray:
    """Relabel whole connected regions where that lowers the combined cost.

    ICM moves one vertex at a time, so an island of a few vertices survives any beta: a
    vertex on its edge has as many neighbours inside as outside. Moving a whole region R
    (a connected component of one label l) to a label m changes the combined cost by
    ``sum_{i in R} (S[i, l] - S[i, m]) - beta * e(R, m)``, with ``e(R, m)`` the mesh edges
    from R to vertices labelled m (every edge leaving R is cut before the move; those to m
    are not after it). Each round moves the regions with a negative change, never two
    that touch (an independent set, by largest gain first), so J never increases. The
    largest region of each label stays: the moves remove fragments, not clusters.
    """
    A = sp.csr_matrix(adjacency)
    n, k = S.shape
    lab = np.asarray(labels, np.int64).copy()
    coo = sp.coo_matrix(A)
    # the largest |S|, without an n × K temporary (np.abs(S) was a fine fit's peak)
    s_max = float(max(S.max(initial=0.0), -S.min(initial=0.0)))
    for _ in range(int(rounds)):
        same = lab[coo.row] == lab[coo.col]
        G = sp.csr_matrix((np.ones(int(same.sum())), (coo.row[same], coo.col[same])), (n, n))
        n_comp, comp = sp.csgraph.connected_components(G, directed=False)
        C = sp.csr_matrix((np.ones(n), (comp, np.arange(n))), shape=(n_comp, n))
        own = np.bincount(comp, weights=S[np.arange(n), lab], minlength=n_comp)
        region_label = np.empty(n_comp, np.int64)
        region_label[comp] = lab
        # edges from each region to each label, and between regions
        H = sp.csr_matrix((np.ones(n), (np.arange(n), lab)), shape=(n, k))
        E = (C @ A @ H).toarray()
        E[np.arange(n_comp), region_label] = 0.0
        gain = np.asarray(C @ S) - own[:, None] + beta * E
        gain[np.arange(n_comp), region_label] = 0.0
        # each label keeps its largest region: moves clean up fragments, never drop a label
        size = np.bincount(comp, minlength=n_comp)
        order = np.lexsort((-size, region_label))
        first = np.ones(n_comp, bool)
        first[1:] = region_label[order][1:] != region_label[order][:-1]
        gain[order[first]] = 0.0
        best = gain.argmax(axis=1)
        top = gain[np.arange(n_comp), best]
        cand = np.flatnonzero(top > 1e-12 * max(1.0, s_max))
        if cand.size == 0:
            break
        R = (C @ A @ C.T).tocsr()
        taken = np.zeros(n_comp, bool)
        blocked = np.zeros(n_comp, bool)
        for c in cand[np.argsort(-top[cand], kind="stable")]:
            if blocked[c]:
                continue
            taken[c] = True
            blocked[R.indices[R.indptr[c] : R.indptr[c + 1]]] = True
        moved = taken[comp]
        lab[moved] = best[comp[moved]]
    return lab


def check_connectivity(connectivity: Any, n: int) -> sp.csr_matrix:
    """The mesh adjacency as CSR, checked against the number of samples."""
    if connectivity is None:
        raise ValueError("spatial_weight > 0 needs connectivity (the mesh adjacency).")
    A = sp.csr_matrix(connectivity)
    if A.shape != (n, n):
        raise ValueError(f"connectivity has shape {A.shape}; expected ({n}, {n}).")
    return A


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
            # the labels every vertex of the class sees: those before the class moves
            H = sp.csr_matrix((np.ones(n), (rows, lab)), shape=(n, k))
            # a bounded block of the class at a time, the sum made in place: a class is a
            # fifth or more of the vertices, and its n_class × K float64 arrays (four
            # of them at once) were a fine fit's peak
            for a in range(0, verts.size, _ICM_ROWS):
                part = verts[a : a + _ICM_ROWS]
                local = (A[part] @ H).toarray()
                local *= beta
                local += S[part]
                best = local.argmax(axis=1)
                # keep the current label on ties: a move must strictly lower the energy
                cur = local[np.arange(part.size), lab[part]]
                move = local[np.arange(part.size), best] > cur
                changed += int(move.sum())
                lab[part[move]] = best[move]
        if changed == 0:
            break
    return lab


#: vertices of a colour class that :func:`icm` scores at a time (4,096 × 1,200 float64:
#: 39 MB)
_ICM_ROWS = 4096


def potts_cost(S: Any, labels: np.ndarray, adjacency: sp.spmatrix, beta: float) -> float:
    """``J(l) = -sum_i S[i, l_i] + beta * (edges with different labels)``."""
    A = sp.triu(sp.coo_matrix(adjacency), k=1)
    cut = int(np.count_nonzero(labels[A.row] != labels[A.col]))
    own = float(np.asarray(S)[np.arange(labels.size), labels].sum())
    return -own + beta * cut
