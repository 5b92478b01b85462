"""One subject's own parcels from a group parcellation: the group's parcels moved to the
subject's data, matched to the group's (parcel *i* is the same area in every subject).

:class:`IterativeIndividualParcellation` follows Wang et al. (2015, *Nat. Neurosci.* 18,
1853): each parcel's reference signal starts as the subject's mean signal over the group's
parcel; every vertex goes to the parcel whose reference it correlates with best; then each
reference is made again from the subject's own confident ("core") vertices of that parcel,
plus the group's reference with a weight that falls at each iteration, and the vertices
are assigned again, until few move. Each vertex's confidence is the ratio of its best
correlation to its second best.

:class:`PriorPottsIndividualParcellation` is a model in the spirit of Kong et al.'s
multi-session hierarchical Bayesian model (2019, 2021), fitted for one subject with the
group fixed: von Mises–Fisher parcels on the subject's unit series (a mean direction per
parcel, concentration ``kappa``), a spatial prior from the group parcellation (each
parcel's indicator averaged over ``prior_smoothing`` mesh steps, so the prior is sure
inside a group parcel and unsure near its borders), and a Potts term on the mesh. ICM
and mean-direction updates alternate (:func:`~lsd_dask.cluster._spatial.potts_phase`)
from the group labels; each vertex's confidence is the posterior probability of its
label given its neighbours'.

A subject's labels depend on its own data and the group parcellation only, never on other
subjects: fitting subjects one at a time, in any order or on any worker, gives each the
same map.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from .._validation import Array, check_array, compute
from ..linalg.reductions import cluster_sums
from ..similarity import unit_rows
from ..surface import smooth_on_mesh

__all__ = ["IterativeIndividualParcellation", "PriorPottsIndividualParcellation"]


class IterativeIndividualParcellation(BaseEstimator):  # type: ignore[misc]  # sklearn: untyped
    """A group parcellation adjusted to one subject by iterative reassignment (Wang et al.
    2015).

    Parameters
    ----------
    group_labels : array of shape (n_samples,)
        The group parcellation on the subject's vertices: integer ids, ``< 0`` for vertices
        outside every parcel (they stay outside). The subject's labels use the same ids.
    group_weight : float, default=1.0
        Weight of the group reference at the second iteration; it falls as
        ``group_weight / (iteration - 1)`` after (Wang et al.: the subject's own signal
        takes over as the iterations refine it).
    core_confidence : float, default=1.1
        A vertex is in its parcel's core, which makes the parcel's next reference, when
        its best correlation is at least this many times its second best.
    max_iter : int, default=10
    tol : float, default=0.02
        Stop after an iteration that moves at most this share of the labelled vertices
        (Wang et al. stop when 98 % stay).

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        The subject's parcel ids (the group's), -1 outside every parcel.
    confidence_ : ndarray of shape (n_samples,)
        Best correlation over second best, each floored at 1e-6 (>= 1; 0 outside every
        parcel).
    references_ : ndarray of shape (n_parcels, n_features)
        The last iteration's unit reference signals, one row per id in ``parcel_ids_``.
    parcel_ids_ : ndarray of shape (n_parcels,)
    n_iter_ : int
    moved_ : list of float
        The share of labelled vertices each iteration moved.

    Examples
    --------
    >>> import numpy as np
    >>> from lsd_dask.cluster import IterativeIndividualParcellation
    >>> rng = np.random.default_rng(0)
    >>> signals = rng.standard_normal((2, 50))
    >>> own = np.repeat([0, 1], [12, 8])          # the subject's border is at vertex 12
    >>> X = signals[own] + 0.3 * rng.standard_normal((20, 50))
    >>> group = np.repeat([0, 1], [10, 10])       # the group's at vertex 10
    >>> est = IterativeIndividualParcellation(group).fit(X)
    >>> bool((est.labels_ == own).all())
    True
    """

    def __init__(
        self,
        group_labels: Any = None,
        *,
        group_weight: float = 1.0,
        core_confidence: float = 1.1,
        max_iter: int = 10,
        tol: float = 0.02,
    ) -> None:
        self.group_labels = group_labels
        self.group_weight = group_weight
        self.core_confidence = core_confidence
        self.max_iter = max_iter
        self.tol = tol

    def fit(self, X: Array, y: object = None) -> IterativeIndividualParcellation:
        """Adjust the group parcellation to X: the subject's series, one row per vertex
        (n_samples × n_timepoints; or any features whose row correlations compare
        vertices)."""
        X = check_array(X)
        group = _checked_group(self.group_labels, X.shape[0])
        if self.group_weight < 0 or self.core_confidence < 1 or self.max_iter < 1:
            raise ValueError(
                "group_weight >= 0, core_confidence >= 1 and max_iter >= 1, got "
                f"{self.group_weight}, {self.core_confidence}, {self.max_iter}."
            )
        inside = group >= 0
        ids, index = np.unique(group[inside], return_inverse=True)
        k = ids.size
        # correlations are dot products of centred unit rows
        (Z,) = compute(unit_rows(X - X.mean(axis=1, keepdims=True)))
        Z = np.asarray(Z)[inside]
        first = unit_rows(_sums(Z, index, k))
        refs, labels = first, index
        self.moved_: list[float] = []
        conf = np.ones(index.size)
        for it in range(1, int(self.max_iter) + 1):
            if it > 1:
                core = conf >= self.core_confidence
                own = _sums(Z[core], labels[core], k)
                refs = unit_rows(unit_rows(own) + self.group_weight / (it - 1) * first)
            new, conf = _assign(Z, refs)
            moved = float(np.mean(new != labels)) if it > 1 else float(np.mean(new != index))
            self.moved_.append(moved)
            labels = new
            if moved <= self.tol:
                break
        self.n_iter_ = it
        self.parcel_ids_ = ids
        self.references_ = refs
        self.labels_ = np.full(group.size, -1, np.int64)
        self.labels_[inside] = ids[labels]
        self.confidence_ = np.zeros(group.size)
        self.confidence_[inside] = conf
        return self


class PriorPottsIndividualParcellation(BaseEstimator):  # type: ignore[misc]  # sklearn
    """A group parcellation adjusted to one subject by a von Mises–Fisher model with a group
    spatial prior and a Potts term on the mesh.

    Each vertex v with unit series ``z_v`` takes the parcel k of highest
    ``kappa · z_v·μ_k + prior_weight · log π_v(k) + spatial_weight · (neighbours in k)``:
    μ_k the unit mean of the subject's series over parcel k, π_v the group prior (the
    group's parcel indicators averaged over ``prior_smoothing`` mesh steps, floored at
    ``prior_floor``). ICM sweeps and the μ updates alternate until a round moves at most
    ``tol`` of the vertices; the combined cost never increases.

    Parameters
    ----------
    group_labels : array of shape (n_samples,)
        The group parcellation on the subject's vertices: integer ids, ``< 0`` outside
        every parcel (those vertices stay outside). The subject's labels use the same ids.
    connectivity : sparse matrix of shape (n_samples, n_samples)
        The mesh adjacency of the vertices.
    kappa : float, default=200.0
        Concentration of the parcels' von Mises–Fisher distributions: how much the
        subject's data weigh against the prior and the Potts term.
    prior_weight : float, default=1.0
    prior_smoothing : int, default=4
        Mesh steps over which the group's borders are made uncertain (about 2 mm each on
        32k_fs_LR): the prior lets a border move about this far.
    prior_floor : float, default=1e-4
        The least prior probability of a parcel at a vertex.
    spatial_weight : float, default=1.0
        The Potts penalty per cut mesh edge.
    max_iter : int, default=20
    tol : float, default=1e-3

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        The subject's parcel ids (the group's), -1 outside every parcel.
    confidence_ : ndarray of shape (n_samples,)
        The posterior probability of each vertex's label given its neighbours' (0 outside
        every parcel).
    means_ : ndarray of shape (n_parcels, n_features)
        The parcels' unit mean series, one row per id in ``parcel_ids_``.
    parcel_ids_ : ndarray of shape (n_parcels,)
    cost_history_ : list of float
        The combined cost after every ICM round (never increases).
    n_iter_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from lsd_dask.cluster import PriorPottsIndividualParcellation
    >>> from lsd_dask.surface import grid_adjacency
    >>> rng = np.random.default_rng(0)
    >>> signals = rng.standard_normal((2, 50))
    >>> own = np.repeat([0, 1], [12 * 4, 8 * 4])   # a 20 × 4 grid; the subject's border
    >>> X = signals[own] + 0.3 * rng.standard_normal((80, 50))
    >>> group = np.repeat([0, 1], [10 * 4, 10 * 4])  # the group's two rows earlier
    >>> est = PriorPottsIndividualParcellation(group, grid_adjacency(20, 4)).fit(X)
    >>> bool((est.labels_ == own).all())
    True
    """

    def __init__(
        self,
        group_labels: Any = None,
        connectivity: Any = None,
        *,
        kappa: float = 200.0,
        prior_weight: float = 1.0,
        prior_smoothing: int = 4,
        prior_floor: float = 1e-4,
        spatial_weight: float = 1.0,
        max_iter: int = 20,
        tol: float = 1e-3,
    ) -> None:
        self.group_labels = group_labels
        self.connectivity = connectivity
        self.kappa = kappa
        self.prior_weight = prior_weight
        self.prior_smoothing = prior_smoothing
        self.prior_floor = prior_floor
        self.spatial_weight = spatial_weight
        self.max_iter = max_iter
        self.tol = tol

    def fit(self, X: Array, y: object = None) -> PriorPottsIndividualParcellation:
        """Adjust the group parcellation to X: the subject's series, one row per vertex."""
        from ._spatial import check_connectivity, potts_phase

        X = check_array(X)
        group = _checked_group(self.group_labels, X.shape[0])
        if min(self.kappa, self.prior_weight, self.spatial_weight) < 0 or not (
            0 < self.prior_floor < 1 and self.max_iter >= 1 and self.prior_smoothing >= 0
        ):
            raise ValueError(
                "kappa, prior_weight, spatial_weight >= 0, prior_floor in (0, 1), "
                f"prior_smoothing >= 0 and max_iter >= 1; got {self.get_params(deep=False)}."
            )
        A = check_connectivity(self.connectivity, X.shape[0])
        inside = group >= 0
        ids, index = np.unique(group[inside], return_inverse=True)
        k = ids.size
        A = A[inside][:, inside].tocsr()
        (Z,) = compute(unit_rows(X - X.mean(axis=1, keepdims=True)))
        Z = np.asarray(Z, np.float64)[inside]
        log_prior = self.prior_weight * _log_prior(index, k, A, self.prior_smoothing,
                                                   self.prior_floor)  # fmt: skip
        state: dict[str, np.ndarray] = {"M": unit_rows(_sums(Z, index, k))}
        kappa = float(self.kappa)

        def scores() -> np.ndarray:
            out: np.ndarray = kappa * (Z @ state["M"].T) + log_prior
            return out

        def refit(labels: np.ndarray) -> None:
            new = unit_rows(_sums(Z, labels, k))
            empty = ~np.any(new, axis=1)  # an emptied parcel keeps its mean
            new[empty] = state["M"][empty]
            state["M"] = new

        labels, self.cost_history_, self.n_iter_ = potts_phase(
            scores, refit, index, A, float(self.spatial_weight),
            sweeps=2, max_iter=int(self.max_iter), tol=float(self.tol),
        )  # fmt: skip
        refit(labels)
        conf = _local_posterior(scores(), labels, A, float(self.spatial_weight))
        self.parcel_ids_ = ids
        self.means_ = state["M"]
        self.labels_ = np.full(group.size, -1, np.int64)
        self.labels_[inside] = ids[labels]
        self.confidence_ = np.zeros(group.size)
        self.confidence_[inside] = conf
        return self


def _log_prior(index: np.ndarray, k: int, A: Any, steps: int, floor: float) -> np.ndarray:
    """log π_v(k): the group's parcel indicators averaged over ``steps`` mesh steps
    (:func:`~lsd_dask.surface.smooth_on_mesh`, kept sparse), floored."""
    import scipy.sparse as sp

    n = index.size
    onehot = sp.csr_matrix((np.ones(n), (np.arange(n), index)), shape=(n, k))
    P = smooth_on_mesh(onehot, A, steps)
    out = np.full((n, k), np.log(floor))
    P = P.tocoo()
    out[P.row, P.col] = np.log(np.maximum(P.data, floor))
    return out


def _local_posterior(S: np.ndarray, labels: np.ndarray, A: Any, beta: float) -> np.ndarray:
    """Each vertex's probability of its label given its neighbours': a softmax over the
    parcels of ``S + beta · (neighbours in the parcel)``."""
    import scipy.sparse as sp

    n, k = S.shape
    onehot = sp.csr_matrix((np.ones(n), (np.arange(n), labels)), shape=(n, k))
    E = S + beta * (A @ onehot).toarray()
    E -= E.max(axis=1, keepdims=True)
    np.exp(E, out=E)
    return np.asarray(E[np.arange(n), labels] / E.sum(axis=1))


def _checked_group(labels: Any, n: int) -> np.ndarray:
    """The group labels as int64, one per row, at least one parcel."""
    if labels is None:
        raise ValueError("group_labels: the group parcellation, one integer per vertex.")
    group = np.asarray(labels)
    if group.shape != (n,) or not np.issubdtype(group.dtype, np.integer):
        raise ValueError(
            f"group_labels: {n} integers (one per vertex of X), got shape {group.shape} "
            f"of {group.dtype}."
        )
    if not np.any(group >= 0):
        raise ValueError("group_labels: no vertex is in a parcel (every id < 0).")
    return group.astype(np.int64)


def _sums(Z: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    (S,) = compute(cluster_sums(Z, labels, k))
    return np.asarray(S, np.float64)


def _assign(Z: np.ndarray, refs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's best-correlated reference, and best over second best (floored at 1e-6)."""
    C = Z @ refs.T.astype(Z.dtype)
    if C.shape[1] == 1:
        return np.zeros(C.shape[0], np.int64), np.ones(C.shape[0])
    top2 = np.partition(C, -2, axis=1)[:, -2:]
    best = np.asarray(C.argmax(axis=1), np.int64)
    floor = 1e-6
    conf = np.maximum(top2[:, 1], floor) / np.maximum(top2[:, 0], floor)
    return best, conf.astype(np.float64)
