"""Ward's linkage on the mesh: only clusters that touch on the mesh may merge.

Two uses of the one idea:

- :class:`MeshWard`, nilearn's parcellation approach, as a baseline method: agglomerative
  clustering of the vertices, so every cluster is one connected piece of the surface. It
  runs scikit-learn's ``AgglomerativeClustering(linkage="ward", connectivity=...)`` on the
  SVD features, as ``nilearn.regions.Parcellations(method="ward")`` does on its reduced
  data.
- :class:`WardMerge` and :func:`ward_merge`: any clustering fitted with more clusters than
  wanted (``oversegment`` × K), whose clusters Ward's linkage then merges, neighbours on
  the mesh only, down to K. The fine clustering places the boundaries; the merge makes
  large parcels that nest the fine ones, as Ward's parcels do.

Notes
-----
Memory: :class:`MeshWard` holds the features in memory (a dask array is computed: 64,984 ×
1,000 float32 is 260 MB) plus the merge tree, O(n) with a sparse mesh connectivity.
:func:`ward_merge` needs only the fine clusters' sums (one pass over the rows, lazy for dask
features) and their adjacency: O(K) memory beside the fine fit's. Both are deterministic.
"""

from __future__ import annotations

import heapq
import math
import warnings
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.cluster import AgglomerativeClustering

from .._validation import Array, RandomState, compute, to_numpy
from ..linalg.reductions import cluster_sums
from ._base import ClusterBase, _n_features, eager_labels
from ._spatial import check_connectivity

__all__ = ["MeshWard", "WardMerge", "cut_merges", "ward_merge"]


class MeshWard(ClusterBase):
    """Ward agglomeration constrained by the mesh (nilearn's ``Parcellations`` ward).

    Parameters
    ----------
    n_clusters : int, default=8
    connectivity : sparse matrix of shape (n_samples, n_samples) or None, default=None
        The mesh adjacency of the samples (vertices). None: unconstrained Ward.
    random_state : ignored
        Accepted so that every method of the pipeline takes the same arguments.

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        Always numpy int64, whatever X is.
    n_connected_components_ : int
        Pieces of the connectivity graph (scikit-learn joins pieces when there are several).

    Examples
    --------
    >>> from lsd_dask.cluster import MeshWard
    >>> from lsd_dask.datasets import brain_grid
    >>> from lsd_dask.metrics import ari
    >>> from lsd_dask.surface import grid_adjacency, split_connected
    >>> X, truth, _ = brain_grid(snr_db=0, n_features=20, n_regions=6, shape=(16, 16),
    ...                          random_state=0)
    >>> A = grid_adjacency(16, 16)
    >>> labels = MeshWard(6, connectivity=A).fit(X).labels_
    >>> # every parcel is one connected piece of the grid
    >>> int(split_connected(labels + 1, A, min_size=1).max()), bool(ari(truth, labels) > 0.95)
    (6, True)
    """

    _parameter_constraints = {
        "connectivity": [None, sp.spmatrix, sp.sparray, np.ndarray],
    }

    def __init__(
        self, n_clusters: int = 8, *, connectivity: Any = None, random_state: RandomState = None
    ) -> None:
        self.n_clusters = n_clusters
        self.connectivity = connectivity
        self.random_state = random_state

    def fit(self, X: Array, y: object = None) -> MeshWard:
        """Fit to features X (n_samples × n_features)."""
        X, k, _ = self._validate_fit(X)
        data = to_numpy(X)
        conn = self.connectivity
        if conn is not None and conn.shape != (data.shape[0], data.shape[0]):
            raise ValueError(
                f"connectivity has shape {conn.shape}; expected ({data.shape[0]}, "
                f"{data.shape[0]}), one row per sample."
            )
        model = AgglomerativeClustering(n_clusters=k, linkage="ward", connectivity=conn)
        with warnings.catch_warnings():
            # a cortical mesh is two pieces (the hemispheres): scikit-learn links them to
            # finish the tree, as it does under nilearn's Parcellations, and says so on every
            # fit; the count is kept in n_connected_components_
            warnings.filterwarnings("ignore", "the number of connected components", UserWarning)
            labels = model.fit(data).labels_.astype(np.int64)
        self.n_connected_components_ = int(getattr(model, "n_connected_components_", 1))
        self.labels_ = labels
        self.n_features_in_ = _n_features(X)
        return self


class WardMerge(ClusterBase):
    """Fit a clustering with ``oversegment`` × K clusters, then merge them to K with Ward's
    linkage, only clusters that touch on the mesh merging.

    Ward's parcels nest fine parcels, which is why mesh-constrained Ward scores well
    against atlases at coarse K; here the fine parcels come from a method that follows
    the data more closely (for example directional clustering with its Potts term).

    Parameters
    ----------
    estimator : clustering estimator
        Takes ``n_clusters`` (set to ``ceil(oversegment * n_clusters)``) and has
        ``labels_`` after fitting; cloned, not changed.
    n_clusters : int, default=8
    oversegment : float, default=2.0
        Fine clusters per final cluster (>= 1; 1 fits K clusters and merges none).
    connectivity : sparse matrix of shape (n_samples, n_samples) or None, default=None
        The mesh adjacency of the samples. None: any two clusters may merge.
    random_state : int, Generator or None, default=None
        Given to the fine estimator when not None (its own otherwise).

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        Numpy int64 in ``[0, n_clusters)``, whatever X is.
    fine_labels_ : ndarray of shape (n_samples,)
        The fine estimator's labels.
    estimator_ : estimator
        The fitted fine estimator.
    n_iter_ : int
        The fine estimator's iterations, where it reports them.
    merges_ : ndarray of shape (n_fine - n_clusters, 3)
        Each merge as (fine cluster a, fine cluster b, Ward cost), in order; a merged
        cluster keeps the smaller of its two ids.

    Examples
    --------
    >>> from lsd_dask.cluster import SphericalKMeans, WardMerge
    >>> from lsd_dask.datasets import brain_grid
    >>> from lsd_dask.surface import grid_adjacency
    >>> X, truth, _ = brain_grid(snr_db=0, n_features=20, n_regions=6, shape=(16, 16),
    ...                          random_state=0)
    >>> est = WardMerge(SphericalKMeans(), 6, oversegment=3, connectivity=grid_adjacency(16, 16),
    ...                 random_state=0).fit(X)
    >>> int(est.fine_labels_.max()) + 1, int(est.labels_.max()) + 1
    (18, 6)
    """

    _parameter_constraints = {
        "oversegment": [("real", 1, None)],
        "connectivity": [None, sp.spmatrix, sp.sparray, np.ndarray],
    }

    def __init__(
        self,
        estimator: Any = None,
        n_clusters: int = 8,
        *,
        oversegment: float = 2.0,
        connectivity: Any = None,
        random_state: RandomState = None,
    ) -> None:
        self.estimator = estimator
        self.n_clusters = n_clusters
        self.oversegment = oversegment
        self.connectivity = connectivity
        self.random_state = random_state

    def fit(self, X: Array, y: object = None) -> WardMerge:
        """Fit the fine clustering to X (n_samples × n_features), then merge."""
        X, k, _ = self._validate_fit(X)
        if self.estimator is None or not hasattr(self.estimator, "get_params"):
            raise TypeError(f"estimator: a clustering estimator, got {self.estimator!r}.")
        fine_k = min(X.shape[0], max(k, math.ceil(self.oversegment * k)))
        est = clone(self.estimator).set_params(n_clusters=fine_k)
        if self.random_state is not None and "random_state" in est.get_params():
            est.set_params(random_state=self.random_state)
        est.fit(X)
        self.estimator_ = est
        if hasattr(est, "n_iter_"):  # the fine fit's iterations (the pipeline logs them)
            self.n_iter_ = est.n_iter_
        self.fine_labels_ = eager_labels(est.labels_)
        self.labels_, self.merges_ = ward_merge(
            X, self.fine_labels_, k, connectivity=self.connectivity
        )
        self.n_features_in_ = _n_features(X)
        return self

    def cut(self, n_clusters: int) -> np.ndarray:
        """The labels at ``n_clusters``, from the fitted K up to the fine fit's clusters,
        cut from the one merge sequence fitted (:func:`cut_merges`): bit for bit what
        merging the same fine labels down to that K gives."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "merges_")
        return cut_merges(self.fine_labels_, self.merges_, n_clusters)


def ward_merge(
    X: Array, labels: Any, n_clusters: int, *, connectivity: Any = None
) -> tuple[np.ndarray, np.ndarray]:
    """Merge the clusters of ``labels`` down to ``n_clusters`` with Ward's linkage.

    Each step merges the two touching clusters whose merge least increases the
    within-cluster sum of squares of ``X``: ``n_a n_b / (n_a + n_b) · |m_a - m_b|²``, with
    sizes ``n`` and means ``m``, exactly as Ward's linkage over the samples would once each
    cluster were one node. Clusters touch when the connectivity joins one of their samples;
    when no touching pair is left (separate pieces of the mesh), any two may merge.

    Parameters
    ----------
    X : ndarray or dask array of shape (n_samples, n_features)
        Only the per-cluster sums are computed from it (one pass, lazy for dask).
    labels : array of shape (n_samples,)
        Integers >= 0.
    n_clusters : int
        Clusters to merge down to; fewer non-empty clusters are kept as they are.
    connectivity : sparse matrix of shape (n_samples, n_samples) or None

    Returns
    -------
    labels : ndarray of shape (n_samples,), int64
        In ``[0, n)``, numbered in the order of the fine clusters' smallest ids.
    merges : ndarray of shape (n_merges, 3)
        Each merge as (a, b, cost); the merged cluster keeps id ``min(a, b)``.
    """
    lab = np.asarray(labels, dtype=np.int64)
    if lab.ndim != 1 or lab.shape[0] != X.shape[0] or (lab.size and lab.min() < 0):
        raise ValueError(f"labels: {X.shape[0]} integers >= 0, one per row of X.")
    n_fine = int(lab.max()) + 1 if lab.size else 0
    (sums,) = compute(cluster_sums(X, lab, n_fine))
    sizes = np.bincount(lab, minlength=n_fine).astype(np.float64)
    edges = _cluster_edges(lab, n_fine, connectivity, X.shape[0])
    merges, root = _merge(np.asarray(sums, np.float64), sizes, edges, n_clusters)
    return _relabel(lab, root, sizes), np.asarray(merges, dtype=np.float64).reshape(-1, 3)


def cut_merges(labels: Any, merges: np.ndarray, n_clusters: int) -> np.ndarray:
    """The labels :func:`ward_merge` gives at ``n_clusters``, from the merges it made down
    to fewer clusters: its merges are greedy and never depend on where they stop, so one
    merge sequence down to the smallest K holds every larger K's answer, bit for bit.

    Parameters
    ----------
    labels : array of shape (n_samples,)
        The fine labels the merges started from.
    merges : ndarray of shape (n_merges, 3)
        :func:`ward_merge`'s merges, (kept id, merged id, cost) in order.
    n_clusters : int
        At least the clusters the merges ended with; at most the fine clusters (the
        labels then come back as they are, renumbered).

    Returns
    -------
    ndarray of shape (n_samples,), int64
        In ``[0, n_clusters)``, numbered as :func:`ward_merge` numbers them.
    """
    lab = np.asarray(labels, dtype=np.int64)
    n_fine = int(lab.max()) + 1 if lab.size else 0
    sizes = np.bincount(lab, minlength=n_fine).astype(np.float64)
    alive = int((sizes > 0).sum())
    steps = alive - int(n_clusters)
    if steps < 0 or steps > len(merges):
        raise ValueError(
            f"n_clusters={n_clusters}: the merges reach from {alive} clusters down to "
            f"{alive - len(merges)}."
        )
    root = np.arange(n_fine)
    for keep, gone, _ in np.asarray(merges)[:steps]:
        root[int(gone)] = int(keep)
    return _relabel(lab, root, sizes)


def _relabel(lab: np.ndarray, root: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Each fine cluster's root, numbered 0.. in the order of the roots' ids."""
    keep = np.flatnonzero(sizes > 0)
    final = np.array([_find(root, c) for c in range(root.size)], dtype=np.int64)
    ids = np.unique(final[keep])
    out: np.ndarray = np.searchsorted(ids, final)[lab].astype(np.int64)
    return out


# --------------------------------------------------------------------------- merging


def _cluster_edges(lab: np.ndarray, n_fine: int, connectivity: Any, n: int) -> set[tuple[int, int]]:
    """Pairs (a < b) of clusters joined by at least one connectivity edge."""
    if connectivity is None:
        return set()
    A = check_connectivity(connectivity, n).tocoo()
    a, b = lab[A.row], lab[A.col]
    cut = a != b
    pairs = np.unique(np.stack([np.minimum(a, b)[cut], np.maximum(a, b)[cut]], 1), axis=0)
    return {(int(x), int(y)) for x, y in pairs}


def _merge(
    sums: np.ndarray, sizes: np.ndarray, edges: set[tuple[int, int]], k: int
) -> tuple[list[tuple[int, int, float]], np.ndarray]:
    """Greedy Ward merges over the cluster graph (a heap of candidate pairs, stale entries
    skipped by version); returns the merges and a union-find parent array."""
    n_fine = sizes.size
    root = np.arange(n_fine)
    alive = {int(c) for c in np.flatnonzero(sizes > 0)}
    means = np.divide(sums, sizes[:, None], out=np.zeros_like(sums), where=sizes[:, None] > 0)
    size = sizes.copy()
    version = np.zeros(n_fine, dtype=np.int64)
    nbrs: dict[int, set[int]] = {c: set() for c in alive}
    for a, b in edges:
        if a in alive and b in alive:
            nbrs[a].add(b)
            nbrs[b].add(a)

    def cost(a: int, b: int) -> float:
        d = means[a] - means[b]
        return float(size[a] * size[b] / (size[a] + size[b]) * (d @ d))

    heap = [(cost(a, b), a, b, 0, 0) for a in nbrs for b in nbrs[a] if a < b]
    heapq.heapify(heap)
    merges: list[tuple[int, int, float]] = []
    while len(alive) > k:
        if not heap:  # no touching pair left: let any two clusters merge
            live = sorted(alive)
            heap = [
                (cost(a, b), a, b, version[a], version[b])
                for i, a in enumerate(live)
                for b in live[i + 1 :]
            ]
            heapq.heapify(heap)
        c, a, b, va, vb = heapq.heappop(heap)
        if a not in alive or b not in alive or version[a] != va or version[b] != vb:
            continue  # a stale pair: one side has merged since
        keep, gone = min(a, b), max(a, b)
        total = size[keep] + size[gone]
        means[keep] = (size[keep] * means[keep] + size[gone] * means[gone]) / total
        size[keep] = total
        alive.discard(gone)
        root[gone] = keep
        version[keep] += 1
        merges.append((keep, gone, c))
        nbrs[keep] = (nbrs[keep] | nbrs.pop(gone)) - {keep, gone}
        for o in nbrs[keep]:
            nbrs[o].discard(gone)
            nbrs[o].add(keep)
            lo, hi = min(keep, o), max(keep, o)
            heapq.heappush(heap, (cost(lo, hi), lo, hi, version[lo], version[hi]))
    return merges, root


def _find(root: np.ndarray, c: int) -> int:
    while root[c] != c:
        c = int(root[c])
    return c
