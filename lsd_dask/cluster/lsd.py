"""Left-stochastic decomposition (LSD) clustering.

Model: ``c K ≈ P^T P`` with P (k × n) left-stochastic (columns on the probability simplex);
the paper's hard label of sample j is ``argmax_i P_ij``. By default that partition is then
refined by spherical k-means on the features (``refine``; see ``_refine``).

References
----------
.. [1] R. Arora, M. R. Gupta, A. Kapila, M. Fazel (2013). Similarity-based clustering by
   left-stochastic matrix factorization. JMLR 14, 1715-1746. Algorithm 1, Subroutines 1-2,
   section 3.1 (multiplicative updates), Proposition 2 (scaling factor).

Notes
-----
Memory: features stay n × d (lazy for dask input); everything the solvers hold is n × k
(one row per sample, persisted between iterations for dask input) or k × k. No n × n array
is formed except for a dense ``similarity="precomputed"`` input or an exact RBF kernel on at
most 3000 samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np

from .._validation import (
    Array,
    ClippedEigenvalueWarning,
    RandomState,
    compute,
    is_dask,
    warn,
)
from ..linalg.rotations import procrustes_about_axis, rotate_givens
from ..linalg.simplex import project_rows_simplex
from ..similarity import SIMILARITIES, SimilarityFactor, SimilarityOperator, similarity_operator
from ._base import ClusterBase, _n_features, eager_labels
from ._refine import REFINE_OPTIONS, refined_labels

__all__ = ["LSD", "LSDResult", "lsd_scale", "max_clusters", "solve_lsd"]

_OBJ_EVERY = 10
_TINY = 1e-8


class LSD(ClusterBase):
    """Left-stochastic decomposition clustering (Arora et al. 2013).

    Parameters
    ----------
    n_clusters : int, default=8
    solver : {"rotation", "multiplicative"}, default="rotation"
        "rotation": Algorithm 1 (eigen factorisation, hyperplane and Givens rotations, then
        Rotate_Simplex by alternating Procrustes fits; no iterations for k = 2).
        "multiplicative": damped Lee–Seung updates on ``||cK - P^T P||`` with each column
        projected onto the simplex every iteration (section 3.1).
    similarity : {"cosine", "shifted_cosine", "rbf", "precomputed"}, default="cosine"
        How ``X`` becomes a similarity. "precomputed": ``X`` is the n × n similarity.
        "cosine": cosine of rows (``F F^T`` with unit rows F). "shifted_cosine":
        ``(1 + cos) / 2``, non-negative and still a Gram matrix. "rbf":
        ``exp(-gamma ||x - y||^2)``, exact on up to 3000 numpy samples, Nyström features
        otherwise.
    gamma : float, optional
        RBF parameter; default: the median heuristic ``1 / (2 median_dist^2)`` over a seeded
        subsample of 1000 rows.
    n_landmarks : int, default=1000
        Nyström landmarks for RBF on large or dask input.
    max_iter : int or None, default=None
        Iterations of Rotate_Simplex or of the multiplicative updates. None: 25 when the
        partition is refined, 100 when it is not. On the realistic 32k-surface study
        Rotate_Simplex never meets ``tol``, and the refined labels do not need the
        iterations (K = 200, 58,558 × 1,000 features: NMI 0.913 after 25 iterations, 0.912
        after 50, 0.913 after 100), while the unrefined ones do (0.567, 0.581, ...).
    tol : float, default=1e-8
        Relative decrease under which iterations stop.
    rotation_sample : int or None, default=20000
        Rows on which Rotate_Simplex fits its rotation: a seeded uniform subsample when the
        similarity is a factor of more rows than this (None: every row). The rotation has
        k (k - 1) / 2 parameters; every row is then projected with it. Each iteration costs
        n k^2, so at K = 200 on 58,558 rows the iterations take a third of their time on
        every row, for the same refined NMI (see ``docs/benchmarks.md``).
    refine : {"auto", "spherical_kmeans"} or None, default="auto"
        What turns the LSD partition into ``labels_``. None: ``argmax`` of P, the paper's
        rule. "spherical_kmeans": a spherical k-means run on the features started from the
        partition's mean directions (see :mod:`lsd_dask.cluster._refine`). "auto": refine
        when X holds features, not for a precomputed similarity.
    refine_iter : int, default=100
        Iterations of the refinement at most.
    random_state : int, Generator or None
        Seeds Nyström landmarks, the bandwidth subsample, randomized eigen solvers and the
        multiplicative solver's start.

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        Always numpy int64 (n integers: small and eager), whatever X is.
        The refined partition, or ``lsd_labels_`` when no refinement ran.
    lsd_labels_ : ndarray of shape (n_samples,)
        ``argmax`` of P over clusters: the paper's hard labels.
    probabilities_ : ndarray or dask array of shape (n_clusters, n_samples)
        Left-stochastic P.
    scale_ : float
        The scaling factor c* of Proposition 2.
    objective_ : float
        ``||c* K - P^T P||_F^2`` (with Nyström K for large RBF).
    n_iter_ : int
    eigenvalues_ : ndarray of shape (n_clusters,)
        Leading eigenvalues of the (unscaled) similarity.
    rotation_ : ndarray of shape (n_clusters, n_clusters)
        The final rotation applied after the Givens step (rotation solver).
    gamma_ : float or None

    Examples
    --------
    >>> from lsd_dask.cluster import LSD
    >>> from lsd_dask.datasets import blumensath_dataset
    >>> from lsd_dask.metrics import ari
    >>> X, truth = blumensath_dataset(1, 0.0, n_features=40, n_samples=60, n_clusters=4,
    ...                               random_state=0)
    >>> est = LSD(4, random_state=0).fit(X)
    >>> float(ari(truth, est.labels_))
    1.0
    """

    _parameter_constraints = {
        "solver": [frozenset({"rotation", "multiplicative"})],
        "similarity": [frozenset(SIMILARITIES)],
        "gamma": [None, ("real", 0, None)],
        "n_landmarks": [("int", 2, None)],
        "max_iter": [None, ("int", 0, None)],
        "tol": [("real", 0, None)],
        "rotation_sample": [None, ("int", 2, None)],
        "refine": [REFINE_OPTIONS, None],
        "refine_iter": [("int", 0, None)],
    }

    def __init__(
        self,
        n_clusters: int = 8,
        *,
        solver: str = "rotation",
        similarity: str = "cosine",
        gamma: float | None = None,
        n_landmarks: int = 1000,
        max_iter: int | None = None,
        tol: float = 1e-8,
        rotation_sample: int | None = 20_000,
        refine: str | None = "auto",
        refine_iter: int = 100,
        random_state: RandomState = None,
    ) -> None:
        self.n_clusters = n_clusters
        self.solver = solver
        self.similarity = similarity
        self.gamma = gamma
        self.n_landmarks = n_landmarks
        self.max_iter = max_iter
        self.tol = tol
        self.rotation_sample = rotation_sample
        self.refine = refine
        self.refine_iter = refine_iter
        self.random_state = random_state

    def fit(self, X: Array, y: object = None) -> LSD:
        """Fit LSD to features X (n_samples × n_features) or a precomputed similarity."""
        name = "similarity matrix" if self.similarity == "precomputed" else "X"
        X, k, rng = self._validate_fit(X, name=name)
        op = similarity_operator(
            X, self.similarity, gamma=self.gamma, n_landmarks=self.n_landmarks, rng=rng
        )
        refining = (
            self.refine is not None and self.similarity != "precomputed" and self.refine_iter > 0
        )
        max_iter = self.max_iter if self.max_iter is not None else (25 if refining else 100)
        res = solve_lsd(
            op,
            k,
            solver=self.solver,
            max_iter=max_iter,
            tol=self.tol,
            rng=rng,
            rotation_sample=self.rotation_sample,
        )
        self.probabilities_ = res.P.T
        self.lsd_labels_ = eager_labels(res.P.argmax(axis=1))
        refined = refined_labels(
            self.refine,
            self.similarity,
            X,
            self.lsd_labels_,
            k,
            max_iter=self.refine_iter,
            random_state=rng,
        )
        self.labels_ = self.lsd_labels_ if refined is None else eager_labels(refined)
        self.n_features_in_ = _n_features(X)
        self.scale_ = res.scale
        self.objective_ = res.objective
        self.n_iter_ = res.n_iter
        self.eigenvalues_ = res.eigenvalues
        self.rotation_ = res.rotation
        self.gamma_ = op.gamma
        return self


def lsd_scale(eigvals: np.ndarray, ones_proj: np.ndarray) -> float:
    """Scaling factor of Proposition 2: ``c* = (1/k) sum_i (v_i^T 1)^2 / lambda_i``.

    Parameters
    ----------
    eigvals : ndarray of shape (k,), positive
    ones_proj : ndarray of shape (k,), ``v_i^T 1_n`` for the eigenvectors
    """
    eigvals = np.asarray(eigvals, np.float64)
    return float(np.sum(np.asarray(ones_proj, np.float64) ** 2 / eigvals) / eigvals.size)


# --------------------------------------------------------------------------- solvers


@dataclass
class LSDResult:
    P: Any  # n × k, rows on the simplex
    scale: float
    objective: float
    n_iter: int
    eigenvalues: np.ndarray
    rotation: np.ndarray


def solve_lsd(
    op: SimilarityOperator,
    k: int,
    *,
    solver: str,
    max_iter: int,
    tol: float,
    rng: np.random.Generator,
    score: bool = True,
    rotation_sample: int | None = None,
) -> LSDResult:
    """LSD of ``op`` into k clusters. ``score=False`` skips ``||K||_F^2`` and the final
    objective (``objective`` is NaN) where no solver step needs them: the closed-form
    k = 2 rotation of each hierarchical split, whose ``||K||_F^2`` costs n r^2."""
    lazy = op.is_lazy
    if k == 1:
        P = da.ones((op.n, 1), chunks=(_row_chunks(op), 1)) if lazy else np.ones((op.n, 1))
        return LSDResult(P, 1.0, _objective(op, P, 1.0, op.frobenius2()), 0, np.zeros(1), np.eye(1))
    _check_rank(op, k)
    # independent streams, so the solver's start does not depend on the eigen solver used
    eig_rng, init_rng = (np.random.default_rng(s) for s in rng.integers(2**63, size=2))
    w, V = op.eigenpairs(k, eig_rng)
    w = _clip_eigenvalues(w, k)
    (ones_proj,) = compute(V.sum(axis=0))
    c = lsd_scale(w, ones_proj)
    M = V * np.sqrt(c * w)  # rows are the columns of M = (c Λ)^{1/2} V^T
    if lazy:
        M = M.persist()
    needs_fro2 = score or k > 2 or solver != "rotation"
    fro2 = op.frobenius2() if needs_fro2 else float("nan")
    if solver == "rotation":
        P, R, n_iter = _rotation_solver(
            op, M, k, c, fro2, max_iter=max_iter, tol=tol, sample=rotation_sample, rng=init_rng
        )
    else:
        P, n_iter = _multiplicative_solver(op, k, c, fro2, max_iter=max_iter, tol=tol, rng=init_rng)
        R = np.eye(k)
    objective = _objective(op, P, c, fro2) if score else float("nan")
    return LSDResult(P, c, objective, n_iter, w, R)


def _rotation_solver(
    op: SimilarityOperator,
    M: Any,
    k: int,
    c: float,
    fro2: float,
    *,
    max_iter: int,
    tol: float,
    sample: int | None = None,
    rng: np.random.Generator | None = None,
) -> tuple[Any, np.ndarray, int]:
    """Algorithm 1 on the rows of M; returns (P rows, R_u, iterations).

    With ``sample`` below the number of rows (and K a factor), Rotate_Simplex runs on a
    seeded uniform row subsample of Q, scored against the similarity of those rows."""
    G, s = compute(M.T @ M, M.sum(axis=0))
    m = np.linalg.solve(np.asarray(G, np.float64), np.asarray(s, np.float64))
    nm = np.linalg.norm(m)
    u = np.ones(k) / np.sqrt(k)
    R_s = rotate_givens(m, u)
    # Q = R_s [(I - m m^T/|m|^2) M + m 1^T / (sqrt(k) |m|)], as an affine map of the rows
    A = (np.eye(k) - np.outer(m, m) / nm**2) @ R_s.T
    b = (R_s @ m) / (np.sqrt(k) * nm)
    Q = M @ A + b
    if is_dask(Q):
        Q = Q.persist()
    if k == 2:
        return project_rows_simplex(Q), np.eye(2), 0
    if sample is not None and op.factor is not None and op.n > sample:
        idx = np.sort((rng or np.random.default_rng(0)).choice(op.n, sample, replace=False))
        Qs, Fs = compute(Q[idx], op.factor.F[idx])
        sub = SimilarityOperator(n=sample, factor=SimilarityFactor(np.asarray(Fs), "sample"))
        R, n_iter = rotate_simplex(
            np.asarray(Qs), max_iter=max_iter, tol=tol, op=sub, scale=c, fro2=sub.frobenius2()
        )
    else:
        R, n_iter = rotate_simplex(Q, max_iter=max_iter, tol=tol, op=op, scale=c, fro2=fro2)
    return project_rows_simplex(Q @ R.T), R, n_iter


def rotate_simplex(
    Q: Any,
    *,
    max_iter: int = 100,
    tol: float = 1e-6,
    op: SimilarityOperator | None = None,
    scale: float = 1.0,
    fro2: float | None = None,
    history: list[float] | None = None,
) -> tuple[np.ndarray, int]:
    """Rotate_Simplex: the rotation about ``u = 1/sqrt(k)`` fitting Q's rows into the simplex.

    Alternating minimisation of ``J(R) = ||Q R^T - (Q R^T)_Δ||_F^2``: fix the targets
    ``Y = (Q R^T)_Δ``, then take the rotation about u that best maps Q onto Y (orthogonal
    Procrustes in the (k-1)-dimensional plane). J never increases. Iteration stops when no
    row lies outside the simplex, when J decreases by less than ``tol`` relatively, or after
    ``max_iter`` iterations. With ``op`` given, the rotation with the lowest LSD objective
    among every tenth iterate and the last is returned (the paper keeps the best by its
    objective (12)); otherwise the last.

    Parameters
    ----------
    Q : ndarray or dask array of shape (n, k)
        Rows on the simplex's hyperplane.
    history : list, optional
        Receives J after every iteration (the first entry is J at R = I).
    """
    k = Q.shape[1]
    u = np.ones(k) / np.sqrt(k)
    e = np.zeros(k)
    e[-1] = 1.0
    R_ue = rotate_givens(u, e)
    R = np.eye(k)
    stats = _simplex_stats(Q, R, op)
    J, C = stats[0], stats[1]
    best_R, best_obj = R, _obj_from(stats, scale, fro2) if op is not None else np.inf
    scored = R  # the last rotation whose LSD objective was evaluated
    if history is not None:
        history.append(J)
    n = Q.shape[0]
    n_iter = 0
    for n_iter in range(1, max_iter + 1):  # noqa: B007 - n_iter is reported
        if J <= 1e-14 * n:
            n_iter -= 1
            break
        # C = Y^T Q (k × k) = B A^T in column notation with A = Q^T, B = Y^T
        R_new = procrustes_about_axis(C, None, R_ue)
        # the objective terms cost n·d·k, more than the iteration itself (n·k²) when d > k:
        # evaluate them every _OBJ_EVERY iterations and at the end
        score = op is not None and n_iter % _OBJ_EVERY == 0
        stats = _simplex_stats(Q, R_new, op if score else None)
        J_new, C_new = stats[0], stats[1]
        if history is not None:
            history.append(J_new)
        if score:
            scored = R_new
            obj = _obj_from(stats, scale, fro2)
            if obj < best_obj:
                best_R, best_obj = R_new, obj
        elif op is None:
            best_R = R_new
        converged = J - J_new <= tol * max(J, 1e-300)
        R, J, C = R_new, J_new, C_new
        if converged:
            break
    if op is not None and scored is not R:
        if _obj_from(_simplex_stats(Q, R, op), scale, fro2) < best_obj:
            best_R = R
    return best_R, n_iter


def _simplex_stats(Q: Any, R: np.ndarray, op: SimilarityOperator | None) -> list[Any]:
    """One pass over Q: J(R), Y^T Q and (with op) the LSD objective terms of Y."""
    X = Q @ R.T
    Y = project_rows_simplex(X)
    D = X - Y
    parts = [(D * D).sum(), Y.T @ Q]
    if op is not None:
        parts += list(op.objective_terms(Y))
    done = compute(*parts)
    return [float(done[0]), np.asarray(done[1], np.float64), *done[2:]]


def _obj_from(stats: list[Any], c: float, fro2: float | None) -> float:
    assert fro2 is not None  # given whenever the objective is scored (op is not None)
    quad, pp = float(stats[2]), float(stats[3])
    return c * c * float(fro2) - 2.0 * c * quad + pp


def _objective(op: SimilarityOperator, P: Any, c: float, fro2: float) -> float:
    quad, pp = compute(*op.objective_terms(P))
    return max(c * c * fro2 - 2.0 * c * float(quad) + float(pp), 0.0)


def _multiplicative_solver(
    op: SimilarityOperator,
    k: int,
    c: float,
    fro2: float,
    *,
    max_iter: int,
    tol: float,
    rng: np.random.Generator,
) -> tuple[Any, int]:
    """Damped multiplicative updates with a simplex projection every iteration.

    ``P <- P * (1/2 + 1/2 [cKP]_+ / (P P^T P))`` (rows notation, Ding et al.'s damped
    symmetric-NMF rule for ``||cK - P^T P||``), then each row projected onto the simplex.
    """
    P0 = rng.dirichlet(np.ones(k), size=op.n)
    P: Any = da.from_array(P0, chunks=(_row_chunks(op), k)) if op.is_lazy else P0
    prev = _objective(op, P, c, fro2)
    n_iter = 0
    for n_iter in range(1, max_iter + 1):  # noqa: B007 - n_iter is reported
        KP = op.matmul(P)
        (PtP,) = compute(P.T @ P)
        denom = P @ np.asarray(PtP) + 1e-12
        ratio = (c * KP) / denom
        P = project_rows_simplex(P * (0.5 + 0.5 * (ratio * (ratio > 0))))
        if is_dask(P):
            P = P.persist()
        obj = _objective(op, P, c, fro2)
        if abs(prev - obj) <= tol * max(prev, 1e-300):
            break
        prev = obj
    return P, n_iter


def max_clusters(similarity: str, n_features: int, n_landmarks: int = 1000) -> int:
    """The most clusters LSD can form: the rank bound of the similarity.

    LSD needs ``k`` positive eigenvalues of ``K``. Cosine on d features is ``F F^T`` with F
    n × d, so its rank is at most d; ``(1 + cos) / 2`` adds the constant column (d + 1);
    Nyström RBF has rank at most ``n_landmarks``. Precomputed or exact RBF: no bound here.
    """
    if similarity == "cosine":
        return int(n_features)
    if similarity == "shifted_cosine":
        return int(n_features) + 1
    if similarity == "rbf":
        return int(n_landmarks)
    return np.iinfo(np.int64).max


def _check_rank(op: SimilarityOperator, k: int) -> None:
    """Fail before the eigen step when K = F F^T cannot have k positive eigenvalues."""
    if op.factor is None:
        return
    r = int(op.factor.F.shape[1])
    if k > r:
        raise ValueError(
            f"LSD with n_clusters={k}: the {op.factor.kind} similarity K = F F^T has rank at "
            f"most {r}, so it cannot have {k} positive eigenvalues. Use n_clusters <= {r}, "
            "features of higher rank (e.g. the pipeline's svd.rank), or similarity='rbf' "
            "with n_landmarks >= n_clusters."
        )


def _clip_eigenvalues(w: np.ndarray, k: int) -> np.ndarray:
    w = np.asarray(w, np.float64)
    n_pos = int(np.sum(w > 0))
    if n_pos < k:
        raise ValueError(
            f"only {n_pos} of the top {k} eigenvalues of the similarity are positive; LSD "
            f"needs {k}. Use fewer clusters (at most {n_pos}) or a positive semi-definite "
            "similarity ('shifted_cosine' or 'rbf')."
        )
    floor = _TINY * w[0]
    if np.any(w < floor):
        warn(
            f"{int(np.sum(w < floor))} of the top {k} eigenvalues are below {_TINY:g} times "
            "the largest and were clipped; the similarity is close to rank-deficient.",
            ClippedEigenvalueWarning,
        )
        w = np.maximum(w, floor)
    return w


def _row_chunks(op: SimilarityOperator) -> Any:
    arr = op.K if op.factor is None else op.factor.F
    return arr.chunks[0] if is_dask(arr) else op.n
