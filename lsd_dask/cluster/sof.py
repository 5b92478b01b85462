"""SoF: soft-cluster matrix factorisation (Zhao, Poupart, Zhang, Lysy).

Co-cluster probabilities ``P_ij = exp(-L'(v_i, v_j))`` from the relative distance
``L' = L / sqrt(σ_i σ_j)`` (L Euclidean, σ_i the distance to the n-th nearest neighbour,
n = 10), then ``min_W ||P - W W^T||_F^2 - λ1 Σ min(0, W_ij) + λ2 ||W 1 - 1||^2`` by gradient
descent, raising λ1, λ2 by μ > 1 and shrinking the step by μ after every inner loop until
both exceed 1/ε2 (their Algorithm 1). Labels are the row maxima of W; the row entropy marks
cluster boundaries.

P is n × n: SoF is a dense method for data sets of up to a few thousand samples (dask input
is gathered first and refused above ``max_samples``).
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.distance import cdist

from .._validation import Array, RandomState, to_numpy
from ..linalg.simplex import project_rows_simplex
from ._base import ClusterBase, _n_features, eager_labels
from .kmeans import KMeans

__all__ = ["SoF"]


class SoF(ClusterBase):
    """Probabilistic clustering by penalised symmetric factorisation.

    Parameters
    ----------
    n_clusters : int, default=8
    n_neighbors : int, default=10
        Which neighbour's distance sets each point's scale σ_i.
    lambda_init : float, default=1.0
        Initial λ1 = λ2.
    mu : float, default=1.5
        Factor by which λ grows (and the step shrinks) per outer round.
    eps : tuple (ε1, ε2), default=(1e-4, 1e-3)
        Inner-loop stop ``||ΔW||_F < ε1``; outer stop once λ > 1/ε2.
    step : float, default=2.0
        Initial learning rate, relative to ``1 / (4 ||P||_2)`` (the gradient's scale).
    max_inner : int, default=300
    max_samples : int, default=5000
    random_state : int, Generator or None
        Seeds the k-means start (the paper asks for a sparse initial W).

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
    probabilities_ : ndarray of shape (n_samples, n_clusters)
        W with rows projected onto the simplex.
    entropy_ : ndarray of shape (n_samples,)
        Row entropy (nats): high on cluster boundaries.
    objective_ : float
        ``||P - W W^T||_F^2`` of the returned W.

    Examples
    --------
    >>> from lsd_dask.cluster import SoF
    >>> from lsd_dask.datasets import blumensath_dataset
    >>> from lsd_dask.metrics import ari
    >>> X, truth = blumensath_dataset(1, 0.0, n_features=40, n_samples=60, n_clusters=4,
    ...                               random_state=0)
    >>> est = SoF(4, random_state=0).fit(X)
    >>> float(ari(truth, est.labels_))
    1.0
    """

    _parameter_constraints = {
        "n_neighbors": [("int", 1, None)],
        "lambda_init": [("real", 0, None)],
        "mu": [("real", 1.0001, None)],
        "eps": [tuple],
        "step": [("real", 0, None)],
        "max_inner": [("int", 1, None)],
        "max_samples": [("int", 1, None)],
    }

    def __init__(
        self,
        n_clusters: int = 8,
        *,
        n_neighbors: int = 10,
        lambda_init: float = 1.0,
        mu: float = 1.5,
        eps: tuple[float, float] = (1e-4, 1e-3),
        step: float = 2.0,
        max_inner: int = 300,
        max_samples: int = 5000,
        random_state: RandomState = None,
    ) -> None:
        self.n_clusters = n_clusters
        self.n_neighbors = n_neighbors
        self.lambda_init = lambda_init
        self.mu = mu
        self.eps = eps
        self.step = step
        self.max_inner = max_inner
        self.max_samples = max_samples
        self.random_state = random_state

    def fit(self, X: Array, y: object = None) -> SoF:
        X, k, rng = self._validate_fit(X)
        n = X.shape[0]
        if n > self.max_samples:
            raise ValueError(
                f"SoF forms an n×n matrix; {n} samples exceed max_samples={self.max_samples}."
            )
        data = to_numpy(X)  # the n × n matrix needs every row here
        if self.n_neighbors >= n:
            raise ValueError(f"n_neighbors={self.n_neighbors} must be below n_samples={n}.")
        P = soft_cluster_matrix(data, self.n_neighbors)
        seed = int(rng.integers(2**31 - 1))
        init = KMeans(k, n_init=1, random_state=seed).fit(data).labels_
        W = 0.9 * np.eye(k)[init] + 0.1 / k
        W = _penalty_descent(
            P,
            W,
            lam=self.lambda_init,
            mu=self.mu,
            eps=self.eps,
            step=self.step,
            max_inner=self.max_inner,
        )
        probs = project_rows_simplex(W)
        self.probabilities_ = probs
        self.labels_ = eager_labels(probs.argmax(axis=1))
        self.n_features_in_ = _n_features(X)
        with np.errstate(divide="ignore", invalid="ignore"):
            ent = -np.sum(np.where(probs > 0, probs * np.log(probs), 0.0), axis=1)
        self.entropy_ = ent
        self.objective_ = float(np.sum((P - W @ W.T) ** 2))
        return self


def soft_cluster_matrix(X: np.ndarray, n_neighbors: int = 10) -> np.ndarray:
    """``P_ij = exp(-||x_i - x_j|| / sqrt(σ_i σ_j))``, σ_i the n-th neighbour's distance."""
    L = cdist(X, X)
    sigma = np.sort(L, axis=1)[:, n_neighbors]  # column 0 is the point itself
    # duplicated samples give σ = 0 (and 0/0): floor σ at the smallest distance between
    # distinct samples, so duplicates get P = 1 and every other pair a finite scale
    positive = L[L > 0]
    sigma = np.maximum(sigma, positive.min() if positive.size else 1.0)
    return np.asarray(np.exp(-L / np.sqrt(np.outer(sigma, sigma))))


def _penalty_descent(
    P: np.ndarray,
    W: np.ndarray,
    *,
    lam: float,
    mu: float,
    eps: tuple[float, float],
    step: float,
    max_inner: int,
) -> np.ndarray:
    e1, e2 = eps
    n, k = W.shape
    lip = 4.0 * np.linalg.norm(P, 2) + 4.0 * n  # scale of the gradient's Lipschitz constant
    gamma = step / lip
    lam1 = lam2 = lam
    ones_k = np.ones(k)
    tau = 20
    while True:
        for _ in range(min(tau, max_inner)):
            R = W @ W.T - P
            grad = 4.0 * R @ W - lam1 * (W < 0) + 2.0 * lam2 * np.outer(W @ ones_k - 1.0, ones_k)
            W_new = W - gamma * grad
            delta = np.linalg.norm(W_new - W)
            W = W_new
            if delta < e1:
                break
        if lam1 > 1.0 / e2 and lam2 > 1.0 / e2:
            return W
        lam1 *= mu
        lam2 *= mu
        gamma /= mu
        tau = int(tau * 1.2) + 1  # more steps per round as the penalties grow
