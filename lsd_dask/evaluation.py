"""Parcels judged as the field judges them, on data they were not fitted on.

Three measures, each a function of a parcellation and of **held-out** data given as unit
rows ``Z`` (n_vertices × d): row v is vertex v's zero-mean series scaled to unit norm, so
that ``z_v · z_w`` is the correlation of the two vertices. For a subject's standardised
time series that is :func:`unit_series`; for a split's SVD features (unit rows of U·Σ of
row-centred data) it is the correlation of the rank-r reconstructions, over the split's
subjects concatenated.

- :func:`homogeneity`: CBIG's resting-state homogeneity (Schaefer et al. 2018, Kong et al.
  2019; ``CBIG_ComputeParcellationHomogeneity_fslr.m``): per parcel the mean correlation
  of its vertex pairs, ``c_i``; overall ``H = Σ s_i c_i / Σ s_i`` with parcel sizes
  ``s_i``. Higher: parcels whose vertices share their signal. :func:`pca_homogeneity`
  is Gordon et al. (2016)'s variant: the variance share of each parcel's first component.
- :func:`dcbc`: the distance-controlled boundary coefficient (Zhi et al. 2022,
  DiedrichsenLab's ``dcbc.py``): vertex pairs within ``max_dist`` mm binned by distance
  (``bin_width`` mm), per bin the mean correlation of pairs within a parcel minus that of
  pairs across parcels, weighted by ``1 / (1/n_within + 1/n_between)``. A parcellation
  that ignores the data scores about 0 however smooth the data, because within and
  between pairs are compared at equal distance; that is why smoothing, which raises
  split-half Dice, cannot raise it.
- :func:`neighbour_silhouette`: the silhouette with correlation distance ``1 - r``
  against neighbouring parcels only (Arslan et al. 2018): ``(b - a) / max(a, b)`` per
  vertex, ``a`` its mean distance to its own parcel, ``b`` the least mean distance to a
  parcel that touches its own on the mesh; averaged over vertices.

Each needs only K-sized sums of the rows or one pass over the vertex pairs within
``max_dist``: no vertex × vertex matrix is formed. :data:`MEASURES` is the table every
caller iterates (the pipeline's evaluation, its report and its citations): a measure is
one row there. :func:`spin_null` scores spun copies of
a parcellation (:mod:`lsd_dask.spin`) for the z-score of each measure.

Notes
-----
Where these differ from the reference code:

- CBIG averages each pair's correlation over a subject's runs as Fisher z, then takes the
  tanh; here the per-parcel mean is over pairs of one data set (a run, a subject, or a
  split's features), and several data sets are averaged by the caller. For a single data
  set the two are identical (tested against the dense pairwise definition).
- DCBC's reference divides the mean covariance by the mean product of standard deviations
  in each bin; with unit rows every standard deviation is 1, so both are the mean
  correlation.
- Pair distances are geodesic along the mesh's edges (Dijkstra): the DCBC paper's choice,
  which follows the folded cortex, where a Euclidean distance would join the two banks of
  a sulcus. Edge paths overestimate the true geodesic by a few percent on a triangle mesh.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components, dijkstra

from ._validation import Array, compute, is_dask, to_numpy
from .linalg.reductions import cluster_sums
from .similarity import squared_row_norms

__all__ = [
    "MEASURES",
    "DCBCResult",
    "HeldOutData",
    "Measure",
    "ParcelValues",
    "SpinNull",
    "VertexPairs",
    "dcbc",
    "geodesic_pairs",
    "homogeneity",
    "neighbour_silhouette",
    "pair_correlations",
    "parcel_dcbc",
    "parcel_homogeneity",
    "pair_count_estimate",
    "pca_homogeneity",
    "spin_null",
    "unit_series",
]


@dataclass(frozen=True)
class HeldOutData:
    """One held-out data set as the measures read it.

    Attributes
    ----------
    Z : array of shape (n_vertices, d)
        Unit rows of the held-out data on the vertices scored.
    pairs : VertexPairs
        The vertex pairs within the DCBC's distance (:func:`geodesic_pairs`).
    correlations : ndarray
        ``Z``'s correlation over each pair (:func:`pair_correlations`).
    adjacency : sparse matrix
        The mesh adjacency of the vertices scored (the silhouette's neighbours).
    bin_width : float
        DCBC's distance bins, in mm.
    """

    Z: Any
    pairs: VertexPairs
    correlations: np.ndarray
    adjacency: Any
    bin_width: float = 1.0


@dataclass(frozen=True)
class Measure:
    """One measure of a parcellation on held-out data.

    Attributes
    ----------
    name : str
        Its key in results (``heldout_<name>``, ``timehalves_<name>`` in a report).
    title : str
        Its name in a report's columns.
    score : callable
        ``score(data, labels)``: its value for labels (0 = background) on a
        :class:`HeldOutData`.
    higher_is_better : bool
    spin_null : bool
        Whether :class:`SpinNull` scores it on spun parcellations (its z).
    citation : str or None
        The key of the paper to cite for it in a run's references.
    explanation : str
        What it is, in a sentence, for a report.
    """

    name: str
    title: str
    score: Callable[[HeldOutData, np.ndarray], float]
    higher_is_better: bool = True
    spin_null: bool = True
    citation: str | None = None
    explanation: str = ""


def _homogeneity(data: HeldOutData, labels: np.ndarray) -> float:
    return homogeneity(data.Z, labels)


def _dcbc(data: HeldOutData, labels: np.ndarray) -> float:
    return dcbc(labels, data.pairs, data.correlations, bin_width=data.bin_width).value


def _silhouette(data: HeldOutData, labels: np.ndarray) -> float:
    return neighbour_silhouette(data.Z, labels, data.adjacency)


def _pca_homogeneity(data: HeldOutData, labels: np.ndarray) -> float:
    return pca_homogeneity(data.Z, labels)


#: the measures, in the order reports show them
MEASURES: tuple[Measure, ...] = (
    Measure(
        "homogeneity", "held-out homogeneity", _homogeneity, citation="homogeneity",
        explanation="the mean correlation of vertex pairs within a parcel weighted by "
        "parcel size (CBIG)",
    ),
    Measure(
        "dcbc", "DCBC", _dcbc, citation="dcbc",
        explanation="within- minus between-parcel correlation of vertex pairs at equal "
        "distance along the mesh, 1 mm bins to 35 mm (DCBC)",
    ),
    Measure(
        "silhouette", "neighbour silhouette", _silhouette,
        explanation="the silhouette against neighbouring parcels with correlation distance",
    ),
    Measure(
        "pca_homogeneity", "Gordon homogeneity", _pca_homogeneity, spin_null=False,
        explanation="the share of a parcel's variance its first principal component "
        "explains, averaged over parcels (Gordon et al. 2016; no spin null)",
    ),
)  # fmt: skip


def unit_series(X: Array) -> Array:
    """Rows of X (n_vertices × T) centred and scaled to unit norm: ``z_v · z_w`` is the
    correlation of vertices v and w. Constant rows stay 0. Lazy for dask input."""
    X = X - X.mean(axis=1, keepdims=True)
    norms = squared_row_norms(X)[:, None] ** 0.5
    return X / np.where(norms > 0, norms, 1.0)


def homogeneity(Z: Array, labels: Any, *, background: int = 0) -> float:
    """CBIG's homogeneity of ``labels`` on the unit rows ``Z``: ``Σ s_i c_i / Σ s_i``.

    ``c_i`` is the mean correlation over the pairs of distinct vertices of parcel i,
    ``(|Σ_v z_v|² - Σ_v |z_v|²) / (s_i (s_i - 1))``, from the parcel's row sum alone;
    a parcel of one vertex has ``c_i = 0`` (and still counts in the weights), as in CBIG.

    Parameters
    ----------
    Z : ndarray or dask array of shape (n_vertices, d)
        Unit rows (:func:`unit_series`, or unit rows of SVD features); one pass for dask.
    labels : array of shape (n_vertices,)
        Parcel ids; ``background`` marks vertices outside every parcel.
    """
    per = parcel_homogeneity(Z, labels, background=background)
    return float(np.sum(per.sizes * per.values) / max(np.sum(per.sizes), 1.0))


@dataclass(frozen=True)
class ParcelValues:
    """One measure parcel by parcel.

    Attributes
    ----------
    ids : ndarray of int64
        The parcel ids, sorted (the background left out).
    sizes : ndarray of int64
        Each parcel's vertices.
    values : ndarray of float64
        Each parcel's value (NaN where the measure is undefined for it).
    """

    ids: np.ndarray
    sizes: np.ndarray
    values: np.ndarray


def parcel_homogeneity(Z: Array, labels: Any, *, background: int = 0) -> ParcelValues:
    """Each parcel's term of :func:`homogeneity`: ``c_i``, the mean correlation over the
    pairs of distinct vertices of parcel i (0 for a parcel of one vertex, as in CBIG).

    Parameters
    ----------
    Z : ndarray or dask array of shape (n_vertices, d)
        Unit rows; one pass for dask.
    labels : array of shape (n_vertices,)
    """
    lab, n_parcels = _compact(labels, background)
    # one pass for dask: the parcels' row sums and every row's squared norm
    sums, row_sq = compute(cluster_sums(Z, lab, n_parcels), squared_row_norms(Z))
    fg = lab >= 0
    sizes = np.bincount(lab[fg], minlength=n_parcels)
    self_sq = np.bincount(lab[fg], weights=np.asarray(row_sq)[fg], minlength=n_parcels)
    c = _within_mean(np.asarray(sums, np.float64), self_sq, sizes.astype(np.float64))
    return ParcelValues(_ids(labels, background), sizes, c)


def parcel_dcbc(
    labels: Any,
    pairs: VertexPairs,
    correlations: np.ndarray,
    *,
    bin_width: float = 1.0,
    background: int = 0,
    block: int = 1 << 22,
) -> ParcelValues:
    """Each parcel's DCBC: :func:`dcbc` on the pairs with an end in the parcel.

    Per distance bin, the mean correlation of the pairs within parcel i minus that of the
    pairs from parcel i to another parcel, weighted by ``1 / (1/n_within + 1/n_between)``
    as the whole parcellation's DCBC is (pairs with an end on the background are left
    out). NaN for a parcel with no bin that holds both kinds of pair. The pairs are read
    ``block`` at a time, so that the extra memory stays a few bytes per pair of a block.
    """
    lab, n_parcels = _compact(labels, background)
    lab32 = lab.astype(np.int32)
    n_bins = int(np.floor(pairs.max_dist / bin_width))
    bins = pairs.bin_index(bin_width)
    cells = n_parcels * n_bins
    # per cell (parcel, bin) two slots: 2c + 1 within the parcel, 2c to another parcel;
    # 2 × cells collects the pairs left out. A pair counts at its first end (either slot)
    # and, across two parcels, at its second end too: four bincounts a block
    counts, sums = np.zeros(2 * cells + 1), np.zeros(2 * cells + 1)
    for start in range(0, len(pairs), block):
        end = min(start + block, len(pairs))
        a, b = lab32[pairs.rows[start:end]], lab32[pairs.cols[start:end]]
        bin_, r = bins[start:end], correlations[start:end]
        out = (a < 0) | (b < 0) | (bin_ < 0)
        same = a == b
        first = (a * n_bins + bin_) * 2 + same
        first[out] = 2 * cells
        second = (b * n_bins + bin_) * 2
        second[out | same] = 2 * cells
        for key in (first, second):
            counts += np.bincount(key, minlength=2 * cells + 1)
            sums += np.bincount(key, weights=r, minlength=2 * cells + 1)
    n_w, s_w = counts[1 : 2 * cells : 2], sums[1 : 2 * cells : 2]
    n_b, s_b = counts[0 : 2 * cells : 2], sums[0 : 2 * cells : 2]
    shape = (n_parcels, n_bins)
    n_w, s_w, n_b, s_b = (x.reshape(shape) for x in (n_w, s_w, n_b, s_b))
    with np.errstate(divide="ignore", invalid="ignore"):
        both = (n_w > 0) & (n_b > 0)
        w = np.where(both, 1.0 / (1.0 / n_w + 1.0 / n_b), 0.0)
        total = w.sum(axis=1)
        diff = np.where(both, s_w / n_w - s_b / n_b, 0.0)
        values = np.where(total > 0, (diff * w).sum(axis=1) / total, np.nan)
    sizes = np.bincount(lab[lab >= 0], minlength=n_parcels)
    return ParcelValues(_ids(labels, background), sizes, values)


def pca_homogeneity(Z: Array, labels: Any, *, background: int = 0) -> float:
    """Gordon et al. (2016)'s homogeneity: the share of variance of a parcel's vertex
    series that its first principal component explains, averaged over parcels.

    For a parcel's unit rows ``Z_i`` (s_i × d) that share is ``λ_max(Z_i Z_iᵀ) / s_i``
    (the largest eigenvalue of the parcels' correlation matrix over its trace), found
    from the smaller of the two Gram matrices ``Z_i Z_iᵀ`` and ``Z_iᵀ Z_i``. A parcel of
    one vertex scores 1. Needs the rows of one parcel at a time (a dask Z is computed).
    """
    lab, n_parcels = _compact(labels, background)
    data = to_numpy(Z) if is_dask(Z) else np.asarray(Z)
    order = np.argsort(lab, kind="stable")
    bounds = np.searchsorted(lab[order], np.arange(n_parcels + 1))
    shares = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        Zi = data[order[a:b]].astype(np.float64)
        shares.append(_largest_eigenvalue(Zi) / Zi.shape[0])
    return float(np.mean(shares)) if shares else 0.0


@dataclass(frozen=True)
class VertexPairs:
    """Vertex pairs ``i < j`` within a distance of each other, and their distances.

    Attributes
    ----------
    rows, cols : ndarray of int32
    distances : ndarray of float64
        In the mesh's units (mm).
    max_dist : float
    groups : ndarray of int64 or None
        Offsets ``0 = g_0 < ... < g_m = len(pairs)``: the pairs ``g_i:g_i+1`` start at the
        sources of one compact patch of the mesh (:func:`geodesic_pairs` finds them so),
        which lets :func:`pair_correlations` go patch by patch without sorting them. None:
        no such order.
    """

    rows: np.ndarray
    cols: np.ndarray
    distances: np.ndarray
    max_dist: float
    groups: np.ndarray | None = field(default=None, repr=False, compare=False)
    _bins: dict[float, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return int(self.rows.size)

    def bin_index(self, width: float) -> np.ndarray:
        """Each pair's distance bin (``(b w, (b + 1) w]`` is bin b; -1 outside
        ``max_dist`` or at distance 0), computed once per width and kept: every
        parcellation and spin scored on these pairs reuses it."""
        if width not in self._bins:
            n_bins = int(np.floor(self.max_dist / width))
            b = np.ceil(self.distances / width).astype(np.int64) - 1
            b[(self.distances <= 0) | (b >= n_bins)] = -1
            self._bins[width] = b.astype(np.int16 if n_bins < 2**15 else np.int32)
        return self._bins[width]


def geodesic_pairs(
    vertices: np.ndarray,
    adjacency: sp.spmatrix,
    max_dist: float = 35.0,
    *,
    batch: int = 512,
    n_jobs: int | None = None,
) -> VertexPairs:
    """Every vertex pair joined by a path along mesh edges of at most ``max_dist``.

    Dijkstra from each vertex, stopped at ``max_dist``, within its connected piece of the
    mesh (a hemisphere: vertices in different pieces are never paired), ``batch`` sources
    at a time. The sources of a batch lie close together (a k-d split of the piece), and
    each batch runs on the piece's vertices within ``max_dist`` of the batch's bounding box
    only: a path of length at most ``max_dist`` never leaves that box, so the pairs are
    exactly those of the whole piece, without a dense row over the whole piece per source
    (at 58,558 cortical vertices of 32k_fs_LR, 58.6 million pairs: 31.9 s on one thread,
    against 36.8 s over whole pieces; Dijkstra's own search is the rest).

    Parameters
    ----------
    vertices : ndarray of shape (n_vertices, 3)
    adjacency : sparse matrix of shape (n_vertices, n_vertices)
        Which vertices share an edge (:func:`lsd_dask.surface.mesh_adjacency`).
    n_jobs : int, optional
        Threads running the batches (scipy's Dijkstra releases the GIL); None is 1.
    """
    from concurrent.futures import ThreadPoolExecutor

    V = np.asarray(vertices, np.float64)
    W = _edge_lengths(V, adjacency)
    _, piece = connected_components(W, directed=False)
    jobs = [
        sources
        for p in np.flatnonzero(np.bincount(piece) > 1)
        for sources in _kd_groups(V, np.flatnonzero(piece == p), batch)
    ]

    def run(sources: np.ndarray) -> tuple[np.ndarray, ...]:
        lo = V[sources].min(axis=0) - max_dist
        hi = V[sources].max(axis=0) + max_dist
        box = np.flatnonzero(((V >= lo) & (V <= hi)).all(axis=1) & (piece == piece[sources[0]]))
        src = np.searchsorted(box, sources)  # both sorted: the sources' places in the box
        D = dijkstra(W[box][:, box], directed=False, indices=src, limit=max_dist)
        i, j = np.nonzero(np.isfinite(D))
        keep = box[j] > sources[i]  # each pair once
        i, j = i[keep], j[keep]
        # int32 ids at once: the parts and their concatenation are the peak
        return sources[i].astype(np.int32), box[j].astype(np.int32), D[i, j]

    with ThreadPoolExecutor(max(int(n_jobs or 1), 1)) as pool:
        parts = list(pool.map(run, jobs))
    if not parts:
        parts = [(np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0))]
    rows, cols, dists = zip(*parts, strict=True)
    # 16 bytes a pair (about 30 million pairs within 35 mm at 32k_fs_LR's 2 mm spacing);
    # float64 distances, so that a pair on a bin's edge falls where the reference puts it
    return VertexPairs(
        np.concatenate(rows),
        np.concatenate(cols),
        np.concatenate(dists),
        float(max_dist),
        groups=np.cumsum([0, *(r.size for r in rows)]),
    )


def pair_count_estimate(
    vertices: np.ndarray,
    adjacency: sp.spmatrix,
    max_dist: float = 35.0,
    *,
    n_sources: int = 256,
    random_state: Any = 0,
) -> int:
    """About how many pairs :func:`geodesic_pairs` finds, from Dijkstra out of a random
    sample of ``n_sources`` vertices (each vertex's reach times n, halved): what the pairs'
    arrays will weigh, known before they are made (a task's memory, for one).

    Parameters
    ----------
    vertices : ndarray of shape (n_vertices, 3)
    adjacency : sparse matrix of shape (n_vertices, n_vertices)
    max_dist : float, default=35.0
    n_sources : int, default=256
    random_state : int, Generator or None
    """
    V = np.asarray(vertices, np.float64)
    n = V.shape[0]
    if n < 2:
        return 0
    W = _edge_lengths(V, adjacency)
    sources = np.random.default_rng(random_state).choice(n, min(n, int(n_sources)), replace=False)
    reach = [
        np.isfinite(dijkstra(W, directed=False, indices=part, limit=max_dist)).sum(axis=1) - 1
        for part in np.array_split(sources, max(1, sources.size // 64))
    ]
    return int(round(n * float(np.mean(np.concatenate(reach))) / 2))


def _edge_lengths(V: np.ndarray, adjacency: sp.spmatrix) -> sp.csr_matrix:
    """The mesh's edges weighted by their length, both directions."""
    A = sp.triu(sp.coo_matrix(adjacency), k=1)
    n = V.shape[0]
    length = np.linalg.norm(V[A.row] - V[A.col], axis=1)
    W = sp.csr_matrix((length, (A.row, A.col)), shape=(n, n))
    return (W + W.T).tocsr()


def _kd_groups(V: np.ndarray, members: np.ndarray, size: int) -> list[np.ndarray]:
    """``members`` in groups of at most ``size`` lying close together: split at the median
    of the widest coordinate until small enough (each group sorted)."""
    if members.size <= size:
        return [np.sort(members)]
    P = V[members]
    axis = int(np.argmax(P.max(axis=0) - P.min(axis=0)))
    half = members.size // 2
    order = np.argpartition(P[:, axis], half)
    return _kd_groups(V, members[order[:half]], size) + _kd_groups(V, members[order[half:]], size)


@dataclass(frozen=True)
class DCBCResult:
    """DCBC and its bins.

    Attributes
    ----------
    value : float
    corr_within, corr_between : ndarray of shape (n_bins,)
        Mean correlation of within- and between-parcel pairs per distance bin (NaN where
        a bin has none).
    n_within, n_between : ndarray of shape (n_bins,)
    weights : ndarray of shape (n_bins,)
        ``1 / (1/n_within + 1/n_between)``, normalised to sum to 1.
    """

    value: float
    corr_within: np.ndarray = field(repr=False)
    corr_between: np.ndarray = field(repr=False)
    n_within: np.ndarray = field(repr=False)
    n_between: np.ndarray = field(repr=False)
    weights: np.ndarray = field(repr=False)


def pair_correlations(Z: Array, pairs: VertexPairs, *, block: int | None = None) -> np.ndarray:
    """``z_i · z_j`` for every pair (float64).

    The pairs go by compact patches of the mesh; per patch, one GEMM of its rows against
    the rows they pair with, then the pairs are read off it. The patches are the pairs'
    own ``groups`` (:func:`geodesic_pairs`' batches of nearby sources) when they have
    them and ``block`` is None; otherwise graph Voronoi cells of random seeds on the mesh
    of about ``block`` vertices (512 when None), the pairs sorted by them (a file's own
    numbering may scatter neighbours, as 32k_fs_LR's does). A patch whose partners span
    over 16 times its size is done pair by pair, a bounded chunk at a time. A dask Z is
    computed: it is the n × d features the cluster stage holds anyway.
    """
    data = to_numpy(Z) if is_dask(Z) else np.asarray(Z)
    n = data.shape[0]
    size = 512 if block is None else int(block)
    order: np.ndarray | None = None
    if pairs.groups is not None and block is None:
        rows, cols = pairs.rows, pairs.cols
        bounds = np.asarray(pairs.groups, np.int64)
    else:
        cell = _cells(pairs, n, size)[pairs.rows]
        order = np.argsort(cell, kind="stable")
        rows, cols = pairs.rows[order], pairs.cols[order]
        cuts = np.flatnonzero(np.diff(cell[order])) + 1
        bounds = np.concatenate([[0], cuts, [len(pairs)]])
    out = np.empty(len(pairs), np.float64)
    scratch = (np.zeros(n, bool), np.empty(n, np.int64))
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        if a == b:
            continue
        r_ids, r_at = _local_ids(rows[a:b], *scratch)
        c_ids, c_at = _local_ids(cols[a:b], *scratch)
        if c_ids.size <= 16 * max(r_ids.size, size):
            G = data[r_ids] @ data[c_ids].T
            out[slice(a, b) if order is None else order[a:b]] = G[r_at, c_at]
            continue
        step = 16 * 512
        for c in range(a, b, step):  # partners spread: pair by pair, memory bounded
            e = min(c + step, b)
            out[slice(c, e) if order is None else order[c:e]] = np.einsum(
                "ij,ij->i", data[rows[c:e]], data[cols[c:e]], dtype=np.float64
            )
    return out


def dcbc(
    labels: Any,
    pairs: VertexPairs,
    correlations: np.ndarray,
    *,
    bin_width: float = 1.0,
    background: int = 0,
) -> DCBCResult:
    """The distance-controlled boundary coefficient of ``labels``.

    Parameters
    ----------
    labels : array of shape (n_vertices,)
    pairs : VertexPairs
        From :func:`geodesic_pairs`; their ``max_dist`` sets the bins' range.
    correlations : ndarray of shape (n_pairs,)
        :func:`pair_correlations` of the held-out data (computed once, reused for every
        parcellation and spin).
    bin_width : float, default=1.0
        Bin ``b`` holds the pairs at a distance in ``(b w, (b + 1) w]``.
    """
    lab, _ = _compact(labels, background)
    # small ids (the gathers over tens of millions of pairs are the cost)
    lab = lab.astype(np.int16 if lab.max(initial=0) < 2**15 - 1 else np.int32)
    n_bins = int(np.floor(pairs.max_dist / bin_width))
    # each pair's key: 2 × its bin, plus 1 within a parcel; pairs left out (an end off
    # every parcel, or outside the bins) go to key 2 × n_bins. One key array in the
    # bincounts' own integer type and two bincounts over it (counts, correlation sums),
    # not four over two key arrays: 0.84 → 0.47 s a parcellation on 24.4 M pairs
    key = pairs.bin_index(bin_width).astype(np.intp)
    a, b = lab[pairs.rows], lab[pairs.cols]
    key *= 2
    key += a == b
    key[(a < 0) | (b < 0) | (key < 0)] = 2 * n_bins
    del a, b
    counts = np.bincount(key, minlength=2 * n_bins + 1).astype(np.float64)
    sums = np.bincount(key, weights=correlations, minlength=2 * n_bins + 1)
    n_b, n_w = counts[0 : 2 * n_bins : 2], counts[1 : 2 * n_bins : 2]
    s_b, s_w = sums[0 : 2 * n_bins : 2], sums[1 : 2 * n_bins : 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        c_w, c_b = s_w / n_w, s_b / n_b
        w = np.where((n_w > 0) & (n_b > 0), 1.0 / (1.0 / n_w + 1.0 / n_b), 0.0)
    w = w / w.sum() if w.sum() > 0 else w
    value = float(np.nansum((c_w - c_b) * w))
    return DCBCResult(value, c_w, c_b, n_w, n_b, w)


def neighbour_silhouette(
    Z: Array, labels: Any, adjacency: sp.spmatrix, *, background: int = 0
) -> float:
    """The silhouette against neighbouring parcels, with correlation distance ``1 - r``.

    For a vertex v of parcel i: ``a = 1 - (z_v · S_i - |z_v|²) / (s_i - 1)``, its mean
    distance to the rest of its parcel, and ``b = min_j 1 - z_v · S_j / s_j`` over the
    parcels j that share a mesh edge with i (``S``: parcel row sums, ``s``: sizes);
    ``(b - a) / max(a, b)``, 0 for a vertex alone in its parcel or in a parcel with no
    neighbour. Returns the mean over the parcellated vertices.
    """
    lab, n_parcels = _compact(labels, background)
    data = to_numpy(Z) if is_dask(Z) else np.asarray(Z)
    (sums,) = compute(cluster_sums(data, lab, n_parcels))
    sums = np.asarray(sums, np.float64)
    sizes = np.bincount(lab[lab >= 0], minlength=n_parcels).astype(np.float64)
    touching = _touching(lab, adjacency, n_parcels)
    scores = np.zeros(int(np.sum(lab >= 0)))
    order = np.flatnonzero(lab >= 0)
    pos = np.empty(lab.size, np.int64)
    pos[order] = np.arange(order.size)
    for i in range(n_parcels):
        members = np.flatnonzero(lab == i)
        nb = touching.indices[touching.indptr[i] : touching.indptr[i + 1]]
        if members.size < 2 or nb.size == 0:
            continue
        Zi = data[members].astype(np.float64)
        own = (Zi @ sums[i] - np.einsum("ij,ij->i", Zi, Zi)) / (sizes[i] - 1)
        other = (Zi @ sums[nb].T) / sizes[nb]
        a, b = 1.0 - own, 1.0 - other.max(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            s = np.where(np.maximum(a, b) > 0, (b - a) / np.maximum(a, b), 0.0)
        scores[pos[members]] = s
    return float(scores.mean()) if scores.size else 0.0


def spin_null(
    score: Any, labels: np.ndarray, spins: list[np.ndarray], kept: np.ndarray | None = None
) -> dict[str, float | None]:
    """A measure of ``labels`` beside the same measure of its spun copies.

    Parameters
    ----------
    score : callable
        ``score(labels) -> float`` (a measure with its data bound).
    labels : ndarray of shape (n_vertices,)
    spins : list of ndarray
        Vertex maps from :func:`lsd_dask.spin.spin_indices`.
    kept : ndarray of bool, optional
        Vertices with data; a parcel spun onto the medial wall loses those vertices.

    Returns
    -------
    dict
        ``value``, ``null_mean``, ``null_sd`` and ``z`` (None when the spins do not vary).
    """
    from .spin import spin_labels

    null = np.array([score(spin_labels(labels, index, kept)) for index in spins], np.float64)
    return _z(float(score(labels)), null)


class SpinNull:
    """Spin-null z-scores of the three measures for many spins, on a sample of vertices.

    Scoring every spin on all the data costs what scoring the parcellation does, a
    thousand times over (at 2 × 32k vertices a DCBC pass over 27 M pairs takes seconds).
    The null is scored instead on a fixed random sample of the kept vertices, drawn once
    per held-out data set and shared by every parcellation and spin:

    - homogeneity and the neighbour silhouette on ``n_vertices`` vertices, from their
      correlation matrix (``n_vertices²`` work per spin);
    - DCBC on the pairs of :class:`VertexPairs` whose two ends both lie in a second sample
      of vertices, as many as make about ``n_pairs`` pairs (``n √(n_pairs / all pairs)``
      vertices: a pair is kept when both its ends are drawn).

    On its sample each measure is the measure's own definition restricted to the sampled
    vertices (a parcel's size is its count of sampled vertices). The parcellation itself
    is scored on the same sample, so its z compares like with like: ``z = (value on the
    sample - mean of the spins) / sd of the spins``. With the whole vertex set as the
    sample, homogeneity and DCBC equal :func:`homogeneity` and :func:`dcbc` exactly
    (tested). The silhouette's neighbouring parcels are those of the unspun parcellation
    for every spin (a rotation keeps which parcels touch, up to the medial wall), which
    spares a pass over the mesh per spin.

    Parameters
    ----------
    Z : ndarray or dask array of shape (n_kept, d)
        Unit rows of the held-out data, on the kept vertices.
    pairs : VertexPairs
        Over the kept vertices.
    correlations : ndarray of shape (n_pairs,)
        :func:`pair_correlations` of ``Z``.
    spheres : {"left": ndarray, "right": ndarray}
        Sphere coordinates of every vertex (kept or not), left then right.
    kept : ndarray of bool of shape (n_left + n_right,)
    n_spins : int
    n_vertices : int
        The first sample's size (capped at the kept count).
    n_pairs : int
        About how many pairs the DCBC sample holds (all of them when there are fewer).
    bin_width : float
        DCBC's distance bins.
    random_state : int, Generator or None
        Draws the sample and the rotations.
    """

    def __init__(
        self,
        Z: Array,
        pairs: VertexPairs,
        correlations: np.ndarray,
        spheres: dict[str, np.ndarray],
        kept: np.ndarray,
        *,
        n_spins: int = 1000,
        n_vertices: int = 1000,
        n_pairs: int = 60_000,
        bin_width: float = 1.0,
        random_state: Any = None,
    ) -> None:
        from .spin import spin_indices

        rng = np.random.default_rng(random_state)
        self.kept = np.asarray(kept, bool)
        kept_at = np.flatnonzero(self.kept)
        n = kept_at.size
        self.n_spins = int(n_spins)
        self.bin_width = float(bin_width)
        self.n_bins = int(np.floor(pairs.max_dist / bin_width))
        # the homogeneity / silhouette sample and the pair sample, in kept order
        self.vertices = np.sort(rng.choice(n, min(int(n_vertices), n), replace=False))
        share = np.sqrt(min(1.0, n_pairs / max(len(pairs), 1)))
        n_pair_vertices = min(n, int(np.ceil(n * share)))
        pair_vertices = np.sort(rng.choice(n, n_pair_vertices, replace=False))
        inside = np.zeros(n, bool)
        inside[pair_vertices] = True
        local = np.full(n, -1, np.int64)
        local[pair_vertices] = np.arange(pair_vertices.size)
        take = inside[pairs.rows] & inside[pairs.cols] & (pairs.bin_index(bin_width) >= 0)
        self.pair_a = local[pairs.rows[take]]
        self.pair_b = local[pairs.cols[take]]
        self.pair_bin = pairs.bin_index(bin_width)[take].astype(np.int64)
        self._take = take
        self.pair_vertices = pair_vertices
        self._set_data(Z, correlations)
        # each spin's vertex map at the sampled vertices only (full-vertex indices)
        both = np.concatenate([kept_at[self.vertices], kept_at[pair_vertices]])
        spun = np.array(
            spin_indices(spheres, self.n_spins, random_state=rng, at=both), dtype=np.int64
        ).reshape(self.n_spins, both.size)
        self._spun_vertices = spun[:, : self.vertices.size]
        self._spun_pairs = spun[:, self.vertices.size :]
        self._kept_at = kept_at

    def with_data(self, Z: Array, correlations: np.ndarray) -> SpinNull:
        """The same sample and spins on other held-out data (the other split's): the
        rotations are found once per run."""
        other = copy.copy(self)
        other._set_data(Z, correlations)
        return other

    def _set_data(self, Z: Array, correlations: np.ndarray) -> None:
        data = to_numpy(Z) if is_dask(Z) else np.asarray(Z)
        # float32: the per-spin product with it is the null's main cost; sums of a few
        # thousand products keep ~1e-6 of their value
        Zs = data[self.vertices].astype(np.float32)
        self.gram = Zs @ Zs.T
        self.pair_corr = np.asarray(correlations, np.float64)[self._take]

    @property
    def n_pairs(self) -> int:
        """The DCBC pairs of the sample."""
        return int(self.pair_a.size)

    def z_scores(
        self, labels: np.ndarray, adjacency: sp.spmatrix, *, background: int = 0
    ) -> dict[str, dict[str, float | None]]:
        """Each measure of ``labels`` on the sample beside its spun copies.

        Parameters
        ----------
        labels : ndarray of shape (n_left + n_right,)
            Over every vertex (0 off the kept ones), as spun.
        adjacency : sparse matrix over the kept vertices
            For the silhouette's neighbouring parcels.

        Returns
        -------
        dict
            Per measure (``homogeneity``, ``dcbc``, ``silhouette``): ``on_sample``,
            ``null_mean``, ``null_sd`` and ``z`` (None when the spins do not vary or there
            are none).
        """
        full = np.asarray(labels).astype(np.int64, copy=False)
        ids = np.unique(full[self._kept_at])
        ids = ids[ids != background]
        # compact ids 0..P-1 over every vertex, -1 for background and unkept vertices
        at = np.minimum(np.searchsorted(ids, full), max(ids.size - 1, 0))
        ok = self.kept & (full != background) & (ids.size > 0)
        # int16 where it fits: the null's cost is mostly gathering these labels
        small = np.int16 if ids.size < 2**15 - 1 else np.int32
        compact = np.where(ok & (ids[at] == full), at, -1).astype(small)
        own = compact[self._kept_at]
        touching = _touching(own.astype(np.int64), adjacency, ids.size)
        # observed then spun labels at the samples (a vertex spun off the kept set: -1)
        lab_v = np.concatenate([own[self.vertices][None, :], compact[self._spun_vertices]])
        lab_p = np.concatenate([own[self.pair_vertices][None, :], compact[self._spun_pairs]])
        homog, silh = self._homogeneity_silhouette(lab_v, touching, ids.size)
        scores = {"homogeneity": homog, "dcbc": self._dcbc(lab_p), "silhouette": silh}
        return {m: _z(v[0], v[1:]) for m, v in scores.items()}

    def _homogeneity_silhouette(
        self, lab: np.ndarray, touching: sp.csr_matrix, n_parcels: int, *, cells: int = 2 * 10**7
    ) -> tuple[np.ndarray, np.ndarray]:
        """Both measures for each row of ``lab`` (labels at the vertex sample).

        Rows go in batches of ``cells / (parcels × sample)``: one sparse product gives
        every (row, parcel) its sums of the sample's correlations with each vertex.
        """
        K, m = max(n_parcels, 1), self.vertices.size
        step = max(1, cells // (K * m))
        homog, silh = np.zeros(lab.shape[0]), np.zeros(lab.shape[0])
        for start in range(0, lab.shape[0], step):
            part = lab[start : start + step]
            h, sv = self._batch_scores(part, touching, K)
            homog[start : start + step], silh[start : start + step] = h, sv
        return homog, silh

    def _batch_scores(
        self, lab: np.ndarray, touching: sp.csr_matrix, K: int
    ) -> tuple[np.ndarray, np.ndarray]:
        B, m = lab.shape
        diag = np.diag(self.gram).astype(np.float64)
        row, v = np.nonzero(lab >= 0)
        k = lab[row, v].astype(np.int64)
        g = row * K + k  # a parcel of one row: one row of the product
        counts = np.bincount(g, minlength=B * K)
        indptr = np.concatenate([[0], np.cumsum(counts)])
        ones = np.ones(v.size, self.gram.dtype)
        M = sp.csr_matrix((ones, v[np.argsort(g, kind="stable")], indptr), shape=(B * K, m))
        T = np.asarray(M @ self.gram)  # T[g, w]: Σ of G[u, w] over u in parcel g
        sizes = counts.astype(np.float64)
        own = T[g, v].astype(np.float64) - diag[v]  # Σ over the rest of v's parcel
        within = np.bincount(g, weights=own, minlength=B * K)
        pairs = sizes * (sizes - 1.0)
        c = np.where(pairs > 0, within / np.where(pairs > 0, pairs, 1.0), 0.0)
        weight = sizes.reshape(B, K).sum(axis=1)
        homog = (sizes * c).reshape(B, K).sum(axis=1) / np.maximum(weight, 1.0)
        # silhouette: b from the parcels that touch each vertex's own, one entry per
        # (vertex, touching parcel), the best of each vertex's run by reduceat
        deg = np.diff(touching.indptr)[k]
        first = np.cumsum(deg) - deg
        at = np.repeat(touching.indptr[k] - first, deg) + np.arange(deg.sum())
        who = np.repeat(np.arange(v.size), deg)
        gn = row[who] * K + touching.indices[at]
        with np.errstate(divide="ignore", invalid="ignore"):
            vals = np.where(sizes[gn] > 0, T[gn, v[who]] / sizes[gn], -np.inf)
            a = 1.0 - own / (sizes[g] - 1.0)
        best = np.full(v.size, -np.inf)
        has = deg > 0
        if vals.size:
            best[has] = np.maximum.reduceat(vals, first[has])
        b = 1.0 - best
        ok = (sizes[g] > 1) & np.isfinite(b)
        with np.errstate(divide="ignore", invalid="ignore"):
            sv = np.nan_to_num(np.where(ok, (b - a) / np.maximum(a, b), 0.0))
        n_fg = np.bincount(row, minlength=B)
        silh = np.bincount(row, weights=sv, minlength=B) / np.maximum(n_fg, 1)
        return homog, silh

    def _dcbc(self, lab: np.ndarray, *, batch: int = 100) -> np.ndarray:
        """DCBC for each row of ``lab`` (labels at the pair sample).

        Per bin, the count and correlation sum of scored and of within-parcel pairs are
        two GEMMs of the rows' 0/1 pair indicators against the pairs' bin one-hots
        (``batch`` rows at a time), the cheapest way through ~10⁸ spin-pair cells.
        """
        nb = self.n_bins
        # float32 GEMMs (half the memory traffic): counts are exact, and the correlation
        # sums of a bin carry float32's relative error, ~1e-6 of a DCBC of ~0.1
        onehot = np.zeros((self.n_pairs, 2 * nb), np.float32)
        onehot[np.arange(self.n_pairs), self.pair_bin] = 1.0
        onehot[np.arange(self.n_pairs), nb + self.pair_bin] = self.pair_corr
        out = np.empty(lab.shape[0])
        for start in range(0, lab.shape[0], batch):
            part = lab[start : start + batch]
            a, b = part[:, self.pair_a], part[:, self.pair_b]
            scored = ((a >= 0) & (b >= 0)).astype(np.float32)
            same = ((a == b) & (a >= 0)).astype(np.float32)
            all_ = (scored @ onehot).astype(np.float64)
            within = (same @ onehot).astype(np.float64)
            n_w, s_w = within[:, :nb], within[:, nb:]
            n_b, s_b = all_[:, :nb] - n_w, all_[:, nb:] - s_w
            with np.errstate(divide="ignore", invalid="ignore"):
                c_w, c_b = s_w / n_w, s_b / n_b
                w = np.where((n_w > 0) & (n_b > 0), 1.0 / (1.0 / n_w + 1.0 / n_b), 0.0)
            total = w.sum(axis=1, keepdims=True)
            w = np.where(total > 0, w / np.where(total > 0, total, 1.0), 0.0)
            out[start : start + batch] = np.nansum((c_w - c_b) * w, axis=1)
        return out


# --------------------------------------------------------------------------- helpers


def _z(value: float, null: np.ndarray) -> dict[str, float | None]:
    """A value beside its null: mean, sd and z (None when the null does not vary)."""
    mean = float(null.mean()) if null.size else float("nan")
    sd = float(null.std()) if null.size else float("nan")
    return {
        "value": float(value),
        "null_mean": mean,
        "null_sd": sd,
        "z": (float(value) - mean) / sd if null.size and sd > 0 else None,
    }


def _largest_eigenvalue(Zi: np.ndarray) -> float:
    """``λ_max(Zi Ziᵀ)``: from the smaller Gram matrix, by Lanczos (a few products with
    ``Zi`` and ``Ziᵀ``) once that matrix is over 200 wide, where a full eigendecomposition
    of each large parcel would cost seconds at 32k vertices and rank 1,000."""
    from scipy.sparse.linalg import LinearOperator, eigsh

    small = min(Zi.shape)
    if small <= 200:
        G = Zi @ Zi.T if Zi.shape[0] <= Zi.shape[1] else Zi.T @ Zi
        return float(np.linalg.eigvalsh(G)[-1])
    side = Zi.shape[1] if Zi.shape[0] > Zi.shape[1] else Zi.shape[0]
    # a fixed start, the parcel's mean direction (the same value every run): its rows are
    # alike, so the top eigenvector lies near it. Zi Ziᵀ's is the all-ones vector; Ziᵀ Zi's
    # the rows' sum
    if side == Zi.shape[1]:
        op = LinearOperator((side, side), matvec=lambda v: Zi.T @ (Zi @ v), dtype=np.float64)
        v0 = Zi.sum(axis=0)
        v0 = v0 if np.any(v0) else np.ones(side)
    else:
        op = LinearOperator((side, side), matvec=lambda v: Zi @ (Zi.T @ v), dtype=np.float64)
        v0 = np.ones(side)
    # 10 Lanczos vectors, not ARPACK's default 20: where the parcel's rows are alike (a
    # parcellation of real data) about 11 products reach the tolerance, against 21 (the
    # value the same to 1e-15; a K = 100 parcellation's 100 parcels of about 600 vertices
    # at rank 1,000: 1.10 → 0.60 s). Where they are not (random rows: no gap below the top
    # eigenvalue) restarts take 83 products against 73 with 20 vectors; 6 vectors would
    # take 132 there
    return float(
        eigsh(
            op, k=1, which="LA", tol=1e-10, v0=v0 / np.linalg.norm(v0), ncv=min(10, side),
            return_eigenvectors=False,
        )[0]
    )  # fmt: skip


def _cells(pairs: VertexPairs, n: int, size: int) -> np.ndarray:
    """Compact cells of about ``size`` vertices: each vertex's nearest of ``n / size``
    random seeds along the shortest 1 % of the pairs (mesh neighbours); -1 unreached."""
    if len(pairs) == 0:
        return np.zeros(n, np.int64)
    cut = np.quantile(pairs.distances, 0.01)
    near = pairs.distances <= cut
    graph = sp.csr_matrix(
        (pairs.distances[near], (pairs.rows[near], pairs.cols[near])), shape=(n, n)
    )
    seeds = np.random.default_rng(0).choice(n, max(1, n // size), replace=False)
    _, _, source = dijkstra(
        graph, directed=False, indices=seeds, min_only=True, return_predecessors=True
    )
    return np.asarray(source, np.int64)


def _local_ids(
    values: np.ndarray, mark: np.ndarray, lut: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` for vertex ids below ``mark.size``,
    without sorting: ``mark`` (all False) and ``lut`` are scratch of that size, and
    ``mark`` is all False again after."""
    mark[values] = True
    ids = np.flatnonzero(mark)
    mark[ids] = False
    lut[ids] = np.arange(ids.size)
    return ids, lut[values]


def _touching(lab: np.ndarray, adjacency: sp.spmatrix, n_parcels: int) -> sp.csr_matrix:
    """Which parcels share a mesh edge (``lab``: compact ids, -1 background)."""
    A = sp.coo_matrix(adjacency)
    la, lb = lab[A.row], lab[A.col]
    cut = (la != lb) & (la >= 0) & (lb >= 0)
    touching = sp.csr_matrix(
        (np.ones(int(cut.sum())), (la[cut], lb[cut])), shape=(n_parcels, n_parcels)
    )
    touching.sum_duplicates()
    return touching


def _compact(labels: Any, background: int) -> tuple[np.ndarray, int]:
    """Parcel ids as ``0..P-1`` (-1 for background) and P."""
    lab = np.asarray(labels).astype(np.int64, copy=False)
    ids, inverse = np.unique(lab, return_inverse=True)
    inverse = inverse.reshape(lab.shape)
    fg = ids != background
    new = np.where(fg, np.cumsum(fg) - 1, -1)
    return new[inverse], int(fg.sum())


def _ids(labels: Any, background: int) -> np.ndarray:
    """The parcel ids of ``labels``, sorted, as :func:`_compact` numbers them."""
    ids = np.unique(np.asarray(labels).astype(np.int64, copy=False))
    return ids[ids != background]


def _within_mean(sums: np.ndarray, self_sq: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Mean ``z_v · z_w`` over distinct pairs of each parcel, from its row sum ``S``:
    ``(|S|² - Σ|z_v|²) / (s (s - 1))``; 0 for parcels of fewer than 2 vertices."""
    pairs = sizes * (sizes - 1.0)
    total = np.einsum("ij,ij->i", sums, sums) - self_sq
    return np.where(pairs > 0, total / np.where(pairs > 0, pairs, 1.0), 0.0)
