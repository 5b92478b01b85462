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

from .._validation import compute, float_type, is_dask

__all__ = [
    "POTTS_TOL",
    "ScoreColumns",
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
        data cost is a constant minus the score of each sample's label. It may return the
        same array each time, updated in place: a round is done with its scores before
        the refit and the next call.
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
        # in the scores' own type: ICM and the region moves weigh the few entries they
        # use in float64 (an n × K float64 copy was 0.57 GB at 59,784 × 1,200)
        S = np.asarray(scores())
        new = icm(S, labels, A, beta, sweeps=sweeps, colours=colours)
        new = component_moves(S, new, A, beta)
        history.append(potts_cost(S, new, A, beta))
        # not held while the next scores are made, unless they are made in place: two
        # n × K float64 arrays at once were a fine fit's peak (0.57 GB each at 59,784 × 1,200)
        del S
        moved = int(np.count_nonzero(new != labels))
        labels = new
        if moved == 0:
            break
        refit(labels)
        if moved <= tol * labels.size:
            break
    return labels, history, n_iter


class ScoreColumns:
    """``X @ Cᵀ`` in X's float type for the Potts phase's successive centres C, made in
    one n × K array that each call updates in place.

    Only the columns of the centres that changed since the last call are made again: after
    the first refit few clusters change members (at 1,200 clusters on the full-scale
    study, the rounds' moves touched 1,066, 484, 252 and 135 of them), and a cluster whose
    members stay keeps its centre exactly. Reusing the array also spares each round a new
    0.29 GB (59,784 × 1,200 float32), whose first touch cost about as much as a product.
    Where more than ``_ALL_COLUMNS`` of the centres changed, the whole product is made
    again in place (its columns may then differ from the last call's in the last bit,
    another product's rounding). A dask X is computed whole each call.
    """

    def __init__(self, X: Any) -> None:
        self.X = X
        self._S: np.ndarray | None = None
        self._C: np.ndarray | None = None

    def __call__(self, C: np.ndarray) -> np.ndarray:
        X = self.X
        dtype = float_type(X)
        C = np.array(C, dtype)  # a copy: the caller's centres may change in place
        if is_dask(X):
            (S,) = compute(X @ C.T)
            return np.asarray(S)
        S = self._S
        if S is None or self._C is None or self._C.shape != C.shape:
            S = self._S = np.asarray(X @ C.T)
            self._C = C
            return S
        changed = np.flatnonzero(np.any(C != self._C, axis=1))
        self._C = C
        if changed.size > _ALL_COLUMNS * C.shape[0]:
            np.matmul(X, C.T, out=S)
        elif changed.size:
            # a block of rows at a time, so that the scatter into S's columns reads its
            # product from cache: scattered whole, it cost as much again as the product
            W = np.ascontiguousarray(C[changed].T)
            part = np.empty((_ROWS, changed.size), dtype)
            for a in range(0, S.shape[0], _ROWS):
                b = min(a + _ROWS, S.shape[0])
                np.matmul(X[a:b], W, out=part[: b - a])
                S[a:b, changed] = part[: b - a]
        return S


#: the share of changed centres above which :class:`ScoreColumns` makes the whole product
#: (in place): column by column it costs more there (1,066 of 1,200 columns: 0.94 s against
#: 0.82 s, 59,784 × 1,000 float32 rows on one thread)
_ALL_COLUMNS = 0.75

#: rows of the product that :class:`ScoreColumns` scatters into its columns at a time
_ROWS = 512


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
        region_label = np.empty(n_comp, np.int64)
        region_label[comp] = lab
        # each label keeps its largest region: moves clean up fragments, never drop a label.
        # Only the others are weighed, on their own vertices' scores: a few thousand rows
        # of S, not all n
        size = np.bincount(comp, minlength=n_comp)
        order = np.lexsort((-size, region_label))
        first = np.ones(n_comp, bool)
        first[1:] = region_label[order][1:] != region_label[order][:-1]
        movable = np.ones(n_comp, bool)
        movable[order[first]] = False
        regions = np.flatnonzero(movable)
        if regions.size == 0:
            break
        verts = np.flatnonzero(movable[comp])
        sub = np.searchsorted(regions, comp[verts])
        m = regions.size
        C = sp.csr_matrix((np.ones(verts.size), (sub, np.arange(verts.size))), (m, verts.size))
        S_sub = np.asarray(S[verts], np.float64)
        own = np.bincount(sub, weights=S_sub[np.arange(verts.size), lab[verts]], minlength=m)
        # edges from each region to each label
        H = sp.csr_matrix((np.ones(n), (np.arange(n), lab)), shape=(n, k))
        E = (C @ A[verts] @ H).toarray()
        E[np.arange(m), region_label[regions]] = 0.0
        gain = np.asarray(C @ S_sub) - own[:, None] + beta * E
        gain[np.arange(m), region_label[regions]] = 0.0
        best = gain.argmax(axis=1)
        top = gain[np.arange(m), best]
        cand = np.flatnonzero(top > 1e-12 * max(1.0, s_max))
        if cand.size == 0:
            break
        # which regions touch: a region that moves blocks its neighbours this round
        Call = sp.csr_matrix((np.ones(n), (comp, np.arange(n))), shape=(n_comp, n))
        R = (Call @ A @ Call.T).tocsr()
        taken = np.zeros(n_comp, bool)
        blocked = np.zeros(n_comp, bool)
        target = np.zeros(n_comp, np.int64)
        target[regions] = best
        for c in regions[cand[np.argsort(-top[cand], kind="stable")]]:
            if blocked[c]:
                continue
            taken[c] = True
            blocked[R.indices[R.indptr[c] : R.indptr[c + 1]]] = True
        moved = taken[comp]
        lab[moved] = target[comp[moved]]
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
    """ICM from ``labels`` on the scores S (n × K); returns the new labels.

    A vertex's best label is its best-scoring one or one its neighbours hold: every other
    label gets no Potts bonus and scores no more than the best-scoring one. So each vertex
    weighs only those few candidates (and its own label), in float64 whatever S's type, and
    ICM costs O(edges) a sweep rather than O(n K). Ties go to the lowest label, as an
    argmax over all K would, and a vertex moves only where that strictly lowers its energy.
    """
    A = sp.csr_matrix(adjacency)
    n, k = S.shape
    lab = np.asarray(labels, np.int64).copy()
    col = greedy_colouring(A) if colours is None else colours
    classes = [np.flatnonzero(col == c) for c in range(int(col.max()) + 1)]
    top = np.asarray(S.argmax(axis=1), np.int64)
    for _ in range(int(sweeps)):
        changed = 0
        for verts in classes:
            best, gain = _icm_moves(S, lab, A, beta, verts, top)
            move = gain > 0
            changed += int(move.sum())
            lab[verts[move]] = best[move]
        if changed == 0:
            break
    return lab


def _icm_moves(
    S: np.ndarray,
    lab: np.ndarray,
    A: sp.csr_matrix,
    beta: float,
    verts: np.ndarray,
    top: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """For each vertex of ``verts``: the label of highest local energy
    ``S[i, l] + beta * (edge weight to neighbours labelled l)`` (the lowest such label),
    and how much that energy exceeds its current label's."""
    k = S.shape[1]
    m = verts.size
    start, stop = A.indptr[verts], A.indptr[verts + 1]
    deg = stop - start
    # the class's edges, vertex by vertex: offsets into A.indices
    edge = np.arange(int(deg.sum())) + np.repeat(start - np.cumsum(deg) + deg, deg)
    own = np.arange(m)
    row = np.concatenate([np.repeat(own, deg), own, own])
    cand = np.concatenate([lab[A.indices[edge]], lab[verts], top[verts]])
    weight = np.concatenate([A.data[edge].astype(np.float64), np.zeros(2 * m)])
    key, inv = np.unique(row * k + cand, return_inverse=True)
    bonus = np.bincount(inv.ravel(), weights=weight, minlength=key.size)
    r, c = np.divmod(key, k)
    # the same float64 operations as an n × K energy array would make: bonus·β, then + S
    energy = bonus * beta
    energy += S[verts[r], c]
    # keys are sorted: each vertex's candidates are one run, in increasing label order
    first = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
    emax = np.maximum.reduceat(energy, first)
    at_max = np.where(energy == emax[r], np.arange(key.size), key.size)
    best = c[np.minimum.reduceat(at_max, first)]
    current = energy[np.searchsorted(key, own * k + lab[verts])]
    return best, emax - current


def potts_cost(S: Any, labels: np.ndarray, adjacency: sp.spmatrix, beta: float) -> float:
    """``J(l) = -sum_i S[i, l_i] + beta * (edges with different labels)``."""
    A = sp.triu(sp.coo_matrix(adjacency), k=1)
    cut = int(np.count_nonzero(labels[A.row] != labels[A.col]))
    own = float(np.asarray(S)[np.arange(labels.size), labels].astype(np.float64).sum())
    return -own + beta * cut
