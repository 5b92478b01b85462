"""Synthetic data sets with known ground truth.

Conventions: rows are samples (vertices), columns are features (time points), so a data
set ``X`` has shape ``(n_samples, n_features)``; the papers' ``X`` is its transpose. Every
generator takes ``random_state`` and returns the ground-truth labels ``0..K-1``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.ndimage as ndi
import scipy.sparse as sp

from .._validation import RandomState, check_random_state
from ..surface import Mesh, combine_meshes, grid_adjacency, grow_regions, smooth_on_mesh
from ._study import SplitStudy

__all__ = [
    "blumensath_table_data",
    "blumensath_dataset",
    "brain_grid",
    "LSDableData",
    "lsdable_similarity",
    "SurfaceStudy",
    "surface_study",
]

#: Cluster sizes of Blumensath's datasets 2 and 3 (99 observations).
UNEQUAL_SIZES = (1, 1, 1, 3, 3, 6, 10, 14, 24, 36)


def blumensath_table_data(
    noise_std: float,
    *,
    sizes: str = "equal",
    n_features: int = 1000,
    n_clusters: int = 10,
    n_samples: int = 100,
    random_state: RandomState = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Data of Blumensath's Tables I and II: ``X = D* S* + E``.

    ``D*`` is ``n_features × n_clusters`` standard Gaussian, ``S*`` binary with one 1 per
    observation, ``E`` Gaussian with standard deviation ``noise_std`` (the paper: 0.01, 0.1,
    1, 2).

    Parameters
    ----------
    sizes : {"equal", "unequal"}
        "equal": each observation's cluster drawn uniformly (equal sizes on average, as in
        the paper); "unequal": one cluster of ``n_samples - n_clusters + 1`` (91) and the
        others singletons.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
    labels : ndarray of shape (n_samples,)
    """
    rng = check_random_state(random_state)
    if sizes == "equal":
        labels = rng.integers(n_clusters, size=n_samples)
    elif sizes == "unequal":
        labels = np.concatenate(
            [np.zeros(n_samples - n_clusters + 1, np.int64), np.arange(1, n_clusters)]
        )
        labels = rng.permutation(labels)
    else:
        raise ValueError(f"sizes must be 'equal' or 'unequal', got {sizes!r}.")
    D = rng.standard_normal((n_features, n_clusters))
    X = D[:, labels].T + noise_std * rng.standard_normal((n_samples, n_features))
    return X, labels.astype(np.int64)


def blumensath_dataset(
    which: int,
    noise_var: float,
    *,
    n_features: int = 1000,
    n_clusters: int = 10,
    n_samples: int = 100,
    random_state: RandomState = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Blumensath's datasets 1–3 (section IV.B), observations normalised to unit length.

    1. Gaussian centres, each observation's cluster drawn uniformly.
    2. Cluster sizes (1, 1, 1, 3, 3, 6, 10, 14, 24, 36): 99 observations.
    3. As 2, each centre scaled by a factor drawn from U(0, 1).

    Gaussian noise of variance ``noise_var`` (the paper: 0, 1, 4, 9) is added before the
    rows are normalised. The paper does not give the feature dimension; we use 1000 as in
    its section IV.A.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features), unit-norm rows
    labels : ndarray of shape (n_samples,)
    """
    rng = check_random_state(random_state)
    if which == 1:
        labels = rng.integers(n_clusters, size=n_samples)
    elif which in (2, 3):
        if n_clusters != len(UNEQUAL_SIZES):
            raise ValueError("datasets 2 and 3 have exactly 10 clusters.")
        labels = rng.permutation(np.repeat(np.arange(n_clusters), UNEQUAL_SIZES))
    else:
        raise ValueError(f"which must be 1, 2 or 3, got {which!r}.")
    D = rng.standard_normal((n_features, n_clusters))
    if which == 3:
        D = D * rng.uniform(0.0, 1.0, size=n_clusters)
    X = D[:, labels].T + np.sqrt(noise_var) * rng.standard_normal((labels.size, n_features))
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), np.finfo(float).tiny)
    return X, labels.astype(np.int64)


def brain_grid(
    variant: str = "gaussian",
    *,
    snr_db: float = 0.0,
    n_features: int = 100,
    shape: tuple[int, int] = (64, 64),
    n_regions: int = 40,
    sigma_range: tuple[float, float] = (0.2, 5.0),
    beta_variance: float = 0.2,
    random_state: RandomState = None,
) -> tuple[np.ndarray, np.ndarray, sp.csr_matrix]:
    """Blumensath's brain-like grid: 40 connected regions grown on a 64×64 grid.

    Variants (section IV.C):

    - ``"gaussian"``: each region's mean drawn from N(0, 1) per feature; observations add
      Gaussian noise of variance ``10 ** (-snr_db / 10)`` (0, -3, -9 dB give 1, 2, 7.9).
    - ``"smoothed"``: as "gaussian", then every pixel is replaced by a Gaussian-weighted
      average of its neighbourhood, with a kernel width that grows linearly across the
      grid's columns from ``sigma_range[0]`` to ``sigma_range[1]`` pixels (the paper's
      spatially varying smoothing; widths are quantised to 16 levels).
    - ``"beta"``: region means from Beta(2, 2); observations from a Beta with that mean and
      variance ``beta_variance`` (0.2). Where that variance is impossible for the mean
      (a Beta's variance is below ``m (1 - m)``), ``0.9 m (1 - m)`` is used instead.

    Returns
    -------
    X : ndarray of shape (n_rows * n_cols, n_features), row-major pixels
    labels : ndarray of shape (n_rows * n_cols,)
    adjacency : csr_matrix, the grid's 4-neighbour adjacency
    """
    rng = check_random_state(random_state)
    A = grid_adjacency(*shape)
    labels = grow_regions(A, n_regions, random_state=rng)
    n = labels.size
    if variant in ("gaussian", "smoothed"):
        means = rng.standard_normal((n_regions, n_features))
        noise_var = 10.0 ** (-snr_db / 10.0)
        X = means[labels] + np.sqrt(noise_var) * rng.standard_normal((n, n_features))
        if variant == "smoothed":
            X = _smooth_varying(X, shape, sigma_range)
    elif variant == "beta":
        m = rng.beta(2.0, 2.0, size=(n_regions, n_features))[labels]
        v = np.minimum(beta_variance, 0.9 * m * (1.0 - m))
        s = m * (1.0 - m) / v - 1.0
        X = rng.beta(m * s, (1.0 - m) * s)
    else:
        raise ValueError(f"variant must be 'gaussian', 'smoothed' or 'beta', got {variant!r}.")
    return X, labels, A


@dataclass(frozen=True)
class LSDableData:
    """An LSDable similarity ``K = P^T P`` with its known factor.

    Attributes
    ----------
    K : ndarray of shape (n_samples, n_samples)
    P : ndarray of shape (n_clusters, n_samples), left-stochastic
    labels : ndarray of shape (n_samples,), ``argmax`` of each column of P
    features : ndarray of shape (n_samples, n_clusters), ``P^T`` (so ``K = F F^T``)
    """

    K: np.ndarray
    P: np.ndarray
    labels: np.ndarray
    features: np.ndarray


def lsdable_similarity(
    n_samples: int,
    n_clusters: int,
    *,
    max_mixing: float = 0.3,
    n_pure: int = 1,
    random_state: RandomState = None,
) -> LSDableData:
    """A left-stochastic P with a planted hard clustering, and ``K = P^T P``.

    Column j of P is ``(1 - a_j) e_{l_j} + a_j u_j`` with ``u_j ~ Dirichlet(1)`` and
    ``a_j ~ U(0, max_mixing)``; with ``max_mixing < 0.5`` the planted label is the argmax.
    ``n_pure`` columns per cluster are exactly one-hot, which makes the factorisation
    unique up to a permutation of the clusters (the simplex's corners are attained).
    """
    if not 0.0 <= max_mixing < 0.5:
        raise ValueError("max_mixing must be in [0, 0.5) for the argmax to be the label.")
    if n_samples < n_clusters * max(n_pure, 1):
        raise ValueError("n_samples must be at least n_clusters * n_pure.")
    rng = check_random_state(random_state)
    labels = np.concatenate(
        [
            np.repeat(np.arange(n_clusters), n_pure),
            rng.integers(n_clusters, size=n_samples - n_clusters * n_pure),
        ]
    )
    labels = rng.permutation(labels)
    a = rng.uniform(0.0, max_mixing, size=n_samples)
    pure = np.zeros(n_samples, bool)
    for c in range(n_clusters):
        pure[np.flatnonzero(labels == c)[:n_pure]] = True
    a[pure] = 0.0
    U = rng.dirichlet(np.ones(n_clusters), size=n_samples).T
    P = (1.0 - a) * np.eye(n_clusters)[:, labels] + a * U
    return LSDableData(K=P.T @ P, P=P, labels=labels.astype(np.int64), features=P.T.copy())


@dataclass(frozen=True)
class SurfaceStudy(SplitStudy):
    """A synthetic two-split surface fMRI study; subjects are generated on demand.

    Every subject's data is ``(n_vertices, n_timepoints)`` float32: parcel signals plus
    spatially smoothed noise. Within a split, each parcel has one base time course;
    subject s sees ``sqrt(1 - v) * base + sqrt(v) * own`` with ``v = subject_variability``.
    The two splits have independent time courses (as two groups scanned separately) but the
    same parcels, so a method that finds the parcels reproduces across splits.

    Attributes
    ----------
    meshes : dict of str to Mesh
        Hemisphere meshes, left first.
    labels : ndarray of shape (n_vertices,)
        Ground truth: parcels ``1..n_parcels``, ``0`` on the masked medial wall.
    splits : dict of str to list of str
        Subject ids of each split.
    """

    meshes: dict[str, Mesh]
    labels: np.ndarray
    splits: dict[str, list[str]]
    n_timepoints: int
    subject_variability: float
    noise_std: float
    smoothing_iter: int
    seed: int
    _adjacency: sp.csr_matrix = field(repr=False)

    def subject_data(self, subject: str) -> np.ndarray:
        """Time series of one subject, shape (n_vertices, n_timepoints), float32."""
        split_idx, subj_idx = self._locate(subject)
        base_rng = np.random.default_rng([self.seed, 1, split_idx])
        base = base_rng.standard_normal((self.n_parcels, self.n_timepoints))
        rng = np.random.default_rng([self.seed, 2, split_idx, subj_idx])
        own = rng.standard_normal((self.n_parcels, self.n_timepoints))
        v = self.subject_variability
        signal = np.sqrt(1.0 - v) * base + np.sqrt(v) * own
        noise = rng.standard_normal((self.n_vertices, self.n_timepoints))
        noise = smooth_on_mesh(noise, self._adjacency, self.smoothing_iter)
        noise *= self.noise_std / max(float(noise.std()), np.finfo(float).tiny)
        data = np.zeros((self.n_vertices, self.n_timepoints))
        fg = self.labels > 0
        data[fg] = signal[self.labels[fg] - 1] + noise[fg]
        return data.astype(np.float32)


def surface_study(
    meshes: dict[str, Mesh] | Mesh,
    *,
    n_parcels: int = 50,
    n_subjects: tuple[int, int] = (2, 2),
    n_timepoints: int = 100,
    subject_variability: float = 0.5,
    noise_std: float = 1.0,
    smoothing_iter: int = 2,
    medial_wall_fraction: float = 0.0,
    random_state: RandomState = None,
) -> SurfaceStudy:
    """Build a synthetic split-half surface study with parcels grown on ``meshes``.

    Parameters
    ----------
    meshes : dict of str to Mesh, or Mesh
        Hemispheres (e.g. :func:`lsd_dask.surface.two_hemisphere_mesh`).
    n_parcels : int
        Parcels in all, spread over the hemispheres in proportion to their size.
    n_subjects : (int, int)
        Subjects in each of the two splits.
    n_timepoints : int
        Time points per subject.
    subject_variability : float in [0, 1]
        Share of each subject's parcel signal that is its own rather than the split's.
    noise_std : float
        Standard deviation of the (spatially smoothed) noise, relative to unit signal.
    smoothing_iter : int
        Neighbour-averaging passes applied to the noise.
    medial_wall_fraction : float
        Share of each hemisphere (the vertices with the lowest z) that is constant zero and
        labelled 0, like the medial wall.
    random_state : int, Generator or None
    """
    if not 0.0 <= subject_variability <= 1.0:
        raise ValueError("subject_variability must lie in [0, 1].")
    rng = check_random_state(random_state)
    if isinstance(meshes, Mesh):
        meshes = {"left": meshes}
    combined, offsets = combine_meshes(meshes)
    A = combined.adjacency()
    labels = np.zeros(combined.n_vertices, np.int64)
    counts = [m.n_vertices for m in meshes.values()]
    per_hemi = _split_count(n_parcels, counts)
    next_label = 1
    for m, off, k in zip(meshes.values(), offsets, per_hemi, strict=True):
        sl = slice(off, off + m.n_vertices)
        mask = np.ones(m.n_vertices, bool)
        if medial_wall_fraction > 0:
            z = m.vertices[:, 2]
            mask = z > np.quantile(z, medial_wall_fraction)
        r = grow_regions(A[sl][:, sl], k, random_state=rng, mask=mask)
        labels[sl] = np.where(r >= 0, r + next_label, 0)
        next_label += k
    seed = int(rng.integers(2**31 - 1))
    splits = {
        "split1": [f"sub-{i + 1:03d}" for i in range(n_subjects[0])],
        "split2": [f"sub-{i + 1 + n_subjects[0]:03d}" for i in range(n_subjects[1])],
    }
    return SurfaceStudy(
        meshes=meshes,
        labels=labels,
        splits=splits,
        n_timepoints=int(n_timepoints),
        subject_variability=float(subject_variability),
        noise_std=float(noise_std),
        smoothing_iter=int(smoothing_iter),
        seed=seed,
        _adjacency=A,
    )


# --------------------------------------------------------------------------- helpers


def _split_count(total: int, weights: list[int]) -> list[int]:
    """Split ``total`` into integer parts proportional to ``weights``, each at least 1."""
    w = np.asarray(weights, float)
    raw = total * w / w.sum()
    parts = np.maximum(np.floor(raw).astype(int), 1)
    while parts.sum() < total:
        parts[np.argmax(raw - parts)] += 1
    while parts.sum() > total:
        parts[np.argmax(parts)] -= 1
    return parts.tolist()


def _smooth_varying(
    X: np.ndarray, shape: tuple[int, int], sigma_range: tuple[float, float]
) -> np.ndarray:
    n_rows, n_cols = shape
    img = X.reshape(n_rows, n_cols, -1)
    sigma_col = np.linspace(sigma_range[0], sigma_range[1], n_cols)
    levels = np.linspace(sigma_range[0], sigma_range[1], 16)
    level_of_col = np.abs(sigma_col[:, None] - levels[None, :]).argmin(axis=1)
    out = np.empty_like(img)
    for li, s in enumerate(levels):
        cols = np.flatnonzero(level_of_col == li)
        if cols.size == 0:
            continue
        sm = ndi.gaussian_filter(img, sigma=(s, s, 0), mode="nearest")
        out[:, cols] = sm[:, cols]
    return out.reshape(X.shape)
