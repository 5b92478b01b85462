"""Scores for clusterings and parcellations.

Background convention
---------------------
Parcellations (the output of :func:`lsd_dask.surface.split_connected`, label files written
by the pipeline) use ``0`` (:data:`BACKGROUND`) for vertices that belong to no parcel: the
medial wall and regions dropped as too small. Parcels are numbered from 1. Every score here
takes a ``background`` keyword: pass ``background=BACKGROUND`` to score parcellations, and
the samples labelled background in *either* labeling are excluded (for Dice, background is
simply not a region). The default ``background=None`` counts every label as a cluster, as
scikit-learn does, so estimator labels ``0..K-1`` are scored as they are.

References
----------
.. [1] Arora, Gupta, Kapila, Fazel (2013). Similarity-based clustering by left-stochastic
   matrix factorization. JMLR 14. Eq. (17), misclassification rate, perplexity.
.. [2] Blumensath et al. Directional clustering through matrix factorisation. NMI eq. (47),
   Dice with greedy matching.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linear_sum_assignment

from ._validation import check_labels, compute, is_dask
from .linalg.reductions import cluster_sums

__all__ = [
    "BACKGROUND",
    "DiceResult",
    "dice_matched",
    "dice_per_id",
    "dice_same_ids",
    "dice_matrix",
    "nmi",
    "ami",
    "ari",
    "purity",
    "accuracy",
    "misclassification_rate",
    "perplexity",
    "contingency",
    "within_cluster_similarity",
    "average_leaf_similarity",
    "lsd_objective",
]

BACKGROUND = 0


@dataclass(frozen=True)
class DiceResult:
    """Result of :func:`dice_matched`.

    Attributes
    ----------
    mean : float
        Mean Dice over the matched pairs (the mean of the permuted diagonal).
    pairs : ndarray of shape (n_pairs, 2)
        Matched ``(label_a, label_b)`` pairs in the order they were matched (best first).
    dice : ndarray of shape (n_pairs,)
        Dice of each matched pair.
    n_regions : tuple of int
        Number of regions in each labeling (background excluded).
    """

    mean: float
    pairs: np.ndarray
    dice: np.ndarray
    n_regions: tuple[int, int]


def dice_matched(labels_a: Any, labels_b: Any, *, background: int | None = None) -> DiceResult:
    """Dice between two parcellations after greedy matching of their regions.

    For every pair of regions ``Dice(A, B) = 2|A ∩ B| / (|A| + |B|)``. The regions are then
    matched greedily as in Blumensath et al.: repeatedly take the largest remaining entry of
    the Dice matrix and remove its row and column. Equal entries are taken in the order of
    the regions' first samples, so relabeling either parcellation never changes the score.
    The score is the mean Dice over the ``min(n_a, n_b)`` matched pairs (the diagonal of the
    permuted matrix).

    Parameters
    ----------
    labels_a, labels_b : array-like of shape (n_samples,)
        Integer labelings of the same samples.
    background : int or None, default=None
        Label that marks no region (use :data:`BACKGROUND` for parcellations). Background
        samples count in no region.

    Returns
    -------
    DiceResult
    """
    a, b = _pair(labels_a, labels_b)
    D, ua, ub = dice_matrix(a, b, background=background)
    # ties are broken by where the regions first occur (their lowest sample index), which
    # depends neither on how regions are numbered nor on the argument order
    rows, cols = _greedy_match(D, _first_index(a, ua), _first_index(b, ub))
    dice = D[rows, cols]
    pairs = np.column_stack([ua[rows], ub[cols]]) if rows.size else np.empty((0, 2), np.int64)
    mean = float(dice.mean()) if dice.size else 0.0
    return DiceResult(mean=mean, pairs=pairs, dice=dice, n_regions=(ua.size, ub.size))


def dice_same_ids(labels_a: Any, labels_b: Any, *, background: int | None = None) -> float:
    """Mean Dice of the regions that share an id: for parcellations whose ids already
    name the same areas (a subject's own parcels and the group's, or two of a subject's
    maps), ``mean_i 2|A_i ∩ B_i| / (|A_i| + |B_i|)`` over the ids in either (an id in one
    only scores 0). No matching: a region that moved to another id counts as moved.

    Parameters
    ----------
    labels_a, labels_b : array-like of shape (n_samples,)
    background : int or None, default=None
        The id of no region.
    """
    ids, dice = dice_per_id(labels_a, labels_b, background=background)
    return float(np.mean(dice)) if ids.size else 0.0


def dice_per_id(
    labels_a: Any, labels_b: Any, *, background: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The ids in either parcellation (sorted, ``background`` left out) and each one's
    Dice ``2|A_i ∩ B_i| / (|A_i| + |B_i|)``, with no matching (an id in one only: 0)."""
    a, b = _pair(labels_a, labels_b)
    ids = np.union1d(a, b)
    if background is not None:
        ids = ids[ids != background]
    size_a = np.bincount(np.searchsorted(ids, a[np.isin(a, ids)]), minlength=ids.size)
    size_b = np.bincount(np.searchsorted(ids, b[np.isin(b, ids)]), minlength=ids.size)
    same = (a == b) & np.isin(a, ids)
    both = np.bincount(np.searchsorted(ids, a[same]), minlength=ids.size)
    return ids, 2.0 * both / np.maximum(size_a + size_b, 1)


def dice_matrix(
    labels_a: Any, labels_b: Any, *, background: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dice of every region of ``labels_a`` against every region of ``labels_b``.

    Returns
    -------
    D : ndarray of shape (n_a, n_b)
    regions_a, regions_b : ndarray
        The labels of the rows and columns of ``D``.
    """
    a, b = _pair(labels_a, labels_b)
    ua, ia = np.unique(a, return_inverse=True)
    ub, ib = np.unique(b, return_inverse=True)
    size_a = np.bincount(ia, minlength=ua.size).astype(np.float64)
    size_b = np.bincount(ib, minlength=ub.size).astype(np.float64)
    C = sp.coo_matrix((np.ones(a.size), (ia, ib)), shape=(ua.size, ub.size)).toarray()
    keep_a = ua != background if background is not None else np.ones(ua.size, bool)
    keep_b = ub != background if background is not None else np.ones(ub.size, bool)
    C = C[np.ix_(keep_a, keep_b)]
    D = 2.0 * C / (size_a[keep_a][:, None] + size_b[keep_b][None, :])
    return D, ua[keep_a], ub[keep_b]


def contingency(labels_true: Any, labels_pred: Any, *, background: int | None = None) -> np.ndarray:
    """Contingency table ``C[i, j]`` = samples in class i and cluster j.

    Samples labelled ``background`` in either labeling are dropped first.
    """
    a, b = _pair(labels_true, labels_pred)
    a, b = _drop_background(a, b, background)
    _, ia = np.unique(a, return_inverse=True)
    _, ib = np.unique(b, return_inverse=True)
    n_a = int(ia.max()) + 1 if ia.size else 0
    n_b = int(ib.max()) + 1 if ib.size else 0
    return sp.coo_matrix((np.ones(ia.size, np.int64), (ia, ib)), shape=(n_a, n_b)).toarray()


def nmi(labels_a: Any, labels_b: Any, *, background: int | None = None) -> float:
    """Normalised mutual information, geometric normalisation (Blumensath eq. 47).

    ``NMI = I(A; B) / sqrt(H(A) H(B))``. Two labelings that each put everything in one
    cluster score 1 when identical; one constant labeling against a non-constant one scores 0.
    """
    C = contingency(labels_a, labels_b, background=background).astype(np.float64)
    n = C.sum()
    if n == 0:
        raise ValueError("no samples left to score after removing the background.")
    h_a, h_b = _entropy(C.sum(1) / n), _entropy(C.sum(0) / n)
    if h_a == 0.0 and h_b == 0.0:
        return 1.0
    if h_a == 0.0 or h_b == 0.0:
        return 0.0
    P = C / n
    pa, pb = P.sum(1, keepdims=True), P.sum(0, keepdims=True)
    nz = P > 0
    mi = float(np.sum(P[nz] * np.log(P[nz] / (pa @ pb)[nz])))
    return float(np.clip(mi / np.sqrt(h_a * h_b), 0.0, 1.0))


def ami(labels_a: Any, labels_b: Any, *, background: int | None = None) -> float:
    """Adjusted mutual information (Vinh et al.), geometric normalisation as :func:`nmi`.

    NMI of two random labellings with many clusters is far above 0 (at K = 400 on 60,000
    vertices about 0.5); AMI subtracts the mutual information expected by chance, so
    unrelated labellings score about 0. It costs seconds at K in the hundreds.
    """
    from sklearn.metrics import adjusted_mutual_info_score

    a, b = _drop_background(*_pair(labels_a, labels_b), background)
    if a.size == 0:
        raise ValueError("no samples left to score after removing the background.")
    return float(adjusted_mutual_info_score(a, b, average_method="geometric"))


def ari(labels_a: Any, labels_b: Any, *, background: int | None = None) -> float:
    """Adjusted Rand index (Hubert and Arabie), from pair counts."""
    C = contingency(labels_a, labels_b, background=background).astype(np.float64)
    n = C.sum()

    def comb2(x: np.ndarray | float) -> np.ndarray | float:
        return x * (x - 1) / 2.0

    sum_ij = comb2(C).sum()
    sum_a, sum_b = comb2(C.sum(1)).sum(), comb2(C.sum(0)).sum()
    total = comb2(n)
    if total == 0:
        return 1.0
    expected = sum_a * sum_b / total
    max_index = (sum_a + sum_b) / 2.0
    if max_index == expected:  # both labelings trivial in the same way
        return 1.0
    return float((sum_ij - expected) / (max_index - expected))


def purity(labels_true: Any, labels_pred: Any, *, background: int | None = None) -> float:
    """Fraction of samples whose cluster's majority class is their class."""
    C = contingency(labels_true, labels_pred, background=background)
    return float(C.max(axis=0).sum() / C.sum())


def accuracy(labels_true: Any, labels_pred: Any, *, background: int | None = None) -> float:
    """Accuracy under the best one-to-one matching of clusters to classes (Hungarian)."""
    C = contingency(labels_true, labels_pred, background=background)
    rows, cols = linear_sum_assignment(C, maximize=True)
    return float(C[rows, cols].sum() / C.sum())


def misclassification_rate(
    labels_true: Any, labels_pred: Any, *, background: int | None = None
) -> float:
    """``1 - accuracy``: the smallest error rate over matchings of labels (Arora et al.)."""
    return 1.0 - accuracy(labels_true, labels_pred, background=background)


def perplexity(labels_true: Any, labels_pred: Any, *, background: int | None = None) -> float:
    """Conditional perplexity ``2 ** H(L | C)`` of the classes L given the clusters C.

    The average number of classes per cluster: 1 for a clustering that never mixes classes.
    """
    C = contingency(labels_true, labels_pred, background=background).astype(np.float64)
    n = C.sum()
    p_c = C.sum(0) / n
    h = 0.0
    for j in np.flatnonzero(p_c):
        h += p_c[j] * _entropy(C[:, j] / C[:, j].sum(), base=2.0)
    return float(2.0**h)


def within_cluster_similarity(
    labels: Any,
    *,
    K: Any = None,
    features: Any = None,
    background: int | None = None,
) -> float:
    """Average within-cluster similarity, Arora et al. eq. (17).

    ``sum_m sum_{i, j in C_m} K_ij / sum_m n_m**2``: the mean similarity over all ordered
    within-cluster pairs (the diagonal included). Give either a similarity matrix ``K`` or
    ``features`` F with ``K = F F^T`` (cosine similarity of unit rows, or any Gram kernel);
    with features no n×n array is formed: ``sum_{i, j in C} K_ij = ||sum_{i in C} f_i||**2``.

    Parameters
    ----------
    labels : array-like of shape (n_samples,)
    K : array-like of shape (n_samples, n_samples), optional
    features : array-like of shape (n_samples, n_features), optional
    background : int or None
        Samples with this label are left out.
    """
    lab = check_labels(labels)
    keep = lab != background if background is not None else np.ones(lab.size, bool)
    _, inv = np.unique(lab[keep], return_inverse=True)
    sizes = np.bincount(inv).astype(np.float64)
    total = _within_sums(inv, keep, K=K, features=features, diagonal_only=False)
    return float(total.sum() / np.sum(sizes**2))


def average_leaf_similarity(labels: Any, *, K: Any = None, features: Any = None) -> np.ndarray:
    """Per-cluster average similarity over pairs i ≤ j (Arora et al. section 3.3).

    ``w(C) = 2 / (n (n + 1)) * sum_{i <= j in C} K_ij``, the criterion hierarchical LSD uses
    to pick the next leaf to split. For a Gram kernel,
    ``sum_{i<=j} K_ij = (||sum_i f_i||**2 + sum_i ||f_i||**2) / 2``.

    Returns
    -------
    ndarray of shape (n_clusters,)
        In the order of ``np.unique(labels)``.
    """
    lab = check_labels(labels)
    keep = np.ones(lab.size, bool)
    _, inv = np.unique(lab, return_inverse=True)
    sizes = np.bincount(inv).astype(np.float64)
    full = _within_sums(inv, keep, K=K, features=features, diagonal_only=False)
    diag = _within_sums(inv, keep, K=K, features=features, diagonal_only=True)
    return (full + diag) / (sizes * (sizes + 1.0))


def lsd_objective(P: Any, *, scale: float, K: Any = None, features: Any = None) -> float:
    """LSD objective ``||c K - P^T P||_F**2`` (Arora et al. problem (3)).

    Parameters
    ----------
    P : array-like of shape (n_clusters, n_samples)
        Left-stochastic cluster probabilities.
    scale : float
        The scaling factor c.
    K : array-like of shape (n_samples, n_samples), optional
        Dense similarity.
    features : array-like of shape (n_samples, n_features), optional
        F with ``K = F F^T``. Then
        ``||cFF^T - P^TP||^2 = c^2 ||F^TF||^2 - 2c ||PF||^2 + ||PP^T||^2``,
        O(n (d + k)^2) work and no n×n array.
    """
    if (K is None) == (features is None):
        raise ValueError("give exactly one of K or features.")
    c = float(scale)
    if K is not None:
        R = c * K - P.T @ P
        (val,) = compute((R * R).sum())
        return float(val)
    F = features
    FtF, PF, PPt = F.T @ F, P @ F, P @ P.T
    FtF, PF, PPt = compute(FtF, PF, PPt)
    FtF, PF, PPt = (np.asarray(x, dtype=np.float64) for x in (FtF, PF, PPt))
    val = c * c * np.sum(FtF**2) - 2.0 * c * np.sum(PF**2) + np.sum(PPt**2)
    return float(max(val, 0.0))


# --------------------------------------------------------------------------- helpers


def _pair(labels_a: Any, labels_b: Any) -> tuple[np.ndarray, np.ndarray]:
    a = check_labels(labels_a, name="labels_a")
    b = check_labels(labels_b, name="labels_b")
    if a.shape != b.shape:
        raise ValueError(f"labelings differ in length: {a.shape[0]} and {b.shape[0]}.")
    return a, b


def _drop_background(
    a: np.ndarray, b: np.ndarray, background: int | None
) -> tuple[np.ndarray, np.ndarray]:
    if background is None:
        return a, b
    keep = (a != background) & (b != background)
    return a[keep], b[keep]


def _entropy(p: np.ndarray, base: float = np.e) -> float:
    p = p[p > 0]
    return float(-np.sum(p * np.log(p)) / np.log(base))


def _first_index(labels: np.ndarray, regions: np.ndarray) -> np.ndarray:
    """Lowest sample index of each region in ``regions``."""
    uniq, first = np.unique(labels, return_index=True)
    return first[np.searchsorted(uniq, regions)]


def _greedy_match(
    D: np.ndarray, row_key: np.ndarray | None = None, col_key: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Repeatedly take the largest remaining entry, removing its row and column.

    Ties go to the pair with the smaller ``(min, max)`` of its row and column keys (default:
    the row and column indices), then to the lower flat index, so the result is
    deterministic; with keys that do not depend on labels or on argument order it is
    invariant to both.
    """
    n_pairs = min(D.shape)
    if n_pairs == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    flat = D.ravel()
    rk = np.arange(D.shape[0]) if row_key is None else np.asarray(row_key)
    ck = np.arange(D.shape[1]) if col_key is None else np.asarray(col_key)
    kr, kc = np.meshgrid(rk, ck, indexing="ij")
    lo, hi = np.minimum(kr, kc).ravel(), np.maximum(kr, kc).ravel()
    order = np.lexsort((np.arange(flat.size), hi, lo, -flat))  # value descending, then keys
    r_all, c_all = np.divmod(order, D.shape[1])
    used_r = np.zeros(D.shape[0], bool)
    used_c = np.zeros(D.shape[1], bool)
    rows, cols = [], []
    for r, c in zip(r_all.tolist(), c_all.tolist(), strict=True):
        if used_r[r] or used_c[c]:
            continue
        used_r[r] = used_c[c] = True
        rows.append(r)
        cols.append(c)
        if len(rows) == n_pairs:
            break
    return np.asarray(rows, np.int64), np.asarray(cols, np.int64)


def _within_sums(
    inv: np.ndarray,
    keep: np.ndarray,
    *,
    K: Any,
    features: Any,
    diagonal_only: bool,
) -> np.ndarray:
    """Per-cluster sum of K over ordered within-cluster pairs (or of its diagonal)."""
    if (K is None) == (features is None):
        raise ValueError("give exactly one of K or features.")
    n_clusters = int(inv.max()) + 1 if inv.size else 0
    idx = np.flatnonzero(keep)
    if K is not None:
        if is_dask(K):
            K = K.compute()
        K = K.toarray() if sp.issparse(K) else np.asarray(K)
        K = K[np.ix_(idx, idx)]
        if diagonal_only:
            return np.bincount(inv, weights=np.diag(K), minlength=n_clusters)
        # one-hot H (n x m): diag(H^T K H), without an n×n dense product
        H = sp.csr_matrix((np.ones(idx.size), (np.arange(idx.size), inv)))
        KH = np.asarray(K @ H)
        return np.asarray((H.T @ KH).diagonal()).ravel()
    F = features
    if is_dask(F) and idx.size < F.shape[0]:
        F = F[idx]
    elif not is_dask(F):
        F = np.asarray(F)[idx]
    if diagonal_only:
        (sq,) = compute((F * F).sum(axis=1))
        return np.bincount(inv, weights=np.asarray(sq, np.float64), minlength=n_clusters)
    (sums,) = compute(cluster_sums(F, inv, n_clusters))
    return np.sum(np.asarray(sums, np.float64) ** 2, axis=1)
