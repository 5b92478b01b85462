"""Refining a partition by spherical k-means, started from its clusters' mean directions.

LSD's and hierarchical LSD's partitions are fitted to a similarity, not to the samples'
nearest centres: on cortical features a sample often ends in the cluster whose members it
resembles on average but not in direction. A short spherical k-means run started from the
partition's own mean directions keeps the partition's K clusters and moves each sample to
its nearest one by cosine. Measured on the realistic 32k-surface study at K = 100 (rank-100
features, 58,558 vertices): hierarchical LSD alone reaches NMI 0.49 against the atlas,
refined 0.83, level with spherical k-means from k-means++ seeding (0.83).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from .._validation import Array, RandomState, check_array, compute
from ..linalg.reductions import cluster_sums
from ..similarity import unit_rows
from .kmeans import SphericalKMeans

__all__ = ["REFINE_OPTIONS", "refine_spherical", "refined_labels"]

REFINE_OPTIONS = frozenset({"auto", "spherical_kmeans"})


def refine_spherical(
    X: Array,
    labels: Any,
    n_clusters: int,
    *,
    max_iter: int = 100,
    random_state: RandomState = None,
) -> SphericalKMeans:
    """Spherical k-means started from a partition: its clusters' mean directions.

    Parameters
    ----------
    X : ndarray or dask array of shape (n_samples, n_features)
    labels : ndarray or dask array of shape (n_samples,)
        Integers in ``[0, n_clusters)``. A label no sample carries starts as a zero centre
        and is re-seeded if it stays empty.
    n_clusters : int
    max_iter : int, default=100
    random_state : int, Generator or None
        Seeds the re-seeding of empty clusters.

    Returns
    -------
    SphericalKMeans
        The fitted estimator (``labels_``, ``cluster_centers_``, ``n_iter_``).
    """
    Xn = unit_rows(check_array(X))
    (sums,) = compute(cluster_sums(Xn, labels, n_clusters))
    est = SphericalKMeans(
        n_clusters, init=np.asarray(sums, np.float64), max_iter=max_iter, random_state=random_state
    )
    with warnings.catch_warnings():
        # a refinement capped at max_iter is what the caller asked for
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(Xn)


def refined_labels(
    refine: str | None,
    similarity: str,
    X: Array,
    labels: Any,
    n_clusters: int,
    *,
    max_iter: int,
    random_state: RandomState,
) -> Any | None:
    """Apply an estimator's ``refine`` option; None when it asks for no refinement.

    "auto" refines whenever X holds features (every similarity but "precomputed");
    "spherical_kmeans" insists on it; None keeps the paper's partition.
    """
    if refine is None or max_iter == 0:
        return None
    if similarity == "precomputed":
        if refine == "auto":
            return None
        raise ValueError(
            "refine='spherical_kmeans' needs features, but similarity='precomputed' gives a "
            "similarity matrix; use refine=None or 'auto'."
        )
    return refine_spherical(
        X, labels, n_clusters, max_iter=max_iter, random_state=random_state
    ).labels_
