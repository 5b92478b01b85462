"""Seeding shared by the iterative clusterers: k-means++ on a seeded subsample."""

from __future__ import annotations

import hashlib
import pickle
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validation import Array, to_numpy
from ..similarity import unit_rows
from ._bounds import ANGLE_MARGIN

__all__ = ["kmeanspp_rows", "sample_rows", "seeding_candidates", "shared_starts"]

#: rows used for seeding; numpy and dask input use the same rows, so they seed alike
SEED_SAMPLE = 20000
#: the most starts one :func:`shared_starts` block keeps (at K = 1,200 on 1,000 features a
#: start is 9.6 MB); the oldest goes first
MAX_SHARED_STARTS = 16


@contextmanager
def shared_starts(starts: OrderedDict[tuple[Any, ...], _Seeding] | None = None) -> Iterator[None]:
    """Within the block, make each k-means++ start once, and a start at K from one at
    another K where they can share their centres.

    Two seedings from the same rows, with the same metric, number of candidates and
    generator state, pick the same centres in the same order: the first K of a longer
    start are the start at K, and a longer start goes on from a shorter one's last step.
    Inside the block a seeding gets its centres from the start stored for its rows (the
    first K of it, or that start carried on to K), and its generator is left in the state
    it would have after making them itself, so every fit is bit for bit what it is outside
    the block. Directional clustering and spherical k-means seed alike from the same
    features and ``random_state`` (both on unit rows, under the cosine metric), and every
    K with the same number of candidates (``2 + int(log K)``: 7 for K = 149…403) shares
    one start: at full scale (59,784 × 1,000 features) the starts at K = 50…400 took
    11.6 s of one thread per method and split, the largest alone 3.1 s. The block is per
    thread (a context variable): each task on a worker has its own.

    Parameters
    ----------
    starts : OrderedDict or None
        Where the block keeps its starts: pass the same (empty at first) mapping to
        several blocks to share them across blocks, as a loop that yields between fits
        must (a block must not stay open across a ``yield``); None: the block's own.
    """
    token = _STARTS.set(OrderedDict() if starts is None else starts)
    try:
        yield
    finally:
        _STARTS.reset(token)


def seeding_candidates(k: int) -> int:
    """The candidates per centre of a k-means++ start at K: ``2 + int(log K)``
    (scikit-learn's rule). Starts with as many candidates share their centres (the first
    K of one are the start at K: :func:`shared_starts`)."""
    return 2 + int(np.log(k))


def sample_rows(X: Array, rng: np.random.Generator, n_max: int = SEED_SAMPLE) -> np.ndarray:
    """A seeded, sorted subsample of row indices (all rows when n <= n_max)."""
    n = X.shape[0]
    if n <= n_max:
        return np.arange(n)
    return np.sort(rng.choice(n, size=n_max, replace=False))


def kmeanspp_rows(
    X: Array,
    k: int,
    rng: np.random.Generator,
    *,
    metric: str = "cosine",
    n_local_trials: int | None = None,
) -> np.ndarray:
    """Greedy k-means++ seeding (D² sampling) on a subsample of the rows of X.

    Each new centre is the best of ``n_local_trials`` D²-sampled candidates: the one that
    lowers the summed distance to the nearest centre most (Arthur and Vassilvitskii's
    greedy variant, scikit-learn's default). On the realistic 32k-surface study at
    K = 400 it lifts spherical k-means' NMI from 0.951 to the level of scikit-learn's KMeans
    (see ``docs/benchmarks.md``). Under the cosine metric a row is compared with the
    candidates only when one of them is within twice its angle of its nearest centre
    (the triangle inequality on the sphere says no other can be nearer): the same centres,
    and at K = 400 on full-scale features 5.7 -> 2.0 s.

    Parameters
    ----------
    metric : {"cosine", "euclidean"}
        "cosine" uses ``1 - x·c`` on unit rows (spherical k-means, directional clustering).
    n_local_trials : int or None
        Candidates per centre; None: ``2 + int(log(k))``. 1 is plain k-means++.

    Returns
    -------
    ndarray of shape (k, n_features), float64
        Rows of the subsample (in float32 precision for float32 ``X``).
    """
    starts = _STARTS.get()
    # the whole state, as bytes (a repr would summarise a long state array)
    before = pickle.dumps(rng.bit_generator.state) if starts is not None else b""
    idx = sample_rows(X, rng)
    # float32 features seed in float32 under the cosine metric: each centre is one pass over
    # the sample, bound by reading it, so half the bytes is about half the time (unit rows
    # keep 1 - x·c accurate; squared Euclidean distances would cancel, and stay float64)
    single = np.dtype(X.dtype) == np.float32 and metric == "cosine"
    dtype = np.float32 if single else np.float64
    S = to_numpy(X[idx], dtype)
    if metric == "cosine":  # directions only: the seeding ignores row lengths (weights)
        S = unit_rows(S)
    trials = seeding_candidates(k) if n_local_trials is None else int(n_local_trials)
    if starts is None:
        return _Seeding.first(S, rng, metric).extend(S, k, trials, rng, metric).centres(S, k)
    # the state before the sample and the sample's content fix the rows, and with them
    # and the state after the sample, every start's centres in order
    key = (before, X.shape[0], S.shape, S.dtype.str, _digest(S), trials, metric)
    seeding = starts.get(key)
    if seeding is None:
        seeding = _Seeding.first(S, rng, metric)
    else:
        starts.move_to_end(key)
        # a longer start's first k centres; a shorter one's carried on from its last step
        rng.bit_generator.state = seeding.states[min(k, seeding.n) - 1]
    seeding = seeding.extend(S, k, trials, rng, metric)
    starts[key] = seeding
    while len(starts) > MAX_SHARED_STARTS:
        starts.popitem(last=False)
    return seeding.centres(S, k)


#: the starts of the current :func:`shared_starts` block, or None outside one
_STARTS: ContextVar[OrderedDict[tuple[Any, ...], _Seeding] | None] = ContextVar(
    "lsd_dask_kmeanspp_starts", default=None
)


def _digest(S: np.ndarray) -> str:
    """The sample's bytes, hashed (about 0.08 s for 20,000 × 1,000 float32)."""
    return hashlib.blake2b(np.ascontiguousarray(S).data.cast("B")).hexdigest()


@dataclass(frozen=True)
class _Seeding:
    """The greedy D² seeding of :func:`kmeanspp_rows` on the sample S, after ``n`` centres.

    ``chosen``: the centres' rows of S, in order; ``d2``: each row's distance to its
    nearest centre; ``own``: that centre, as a position in ``chosen``; ``states``: the
    generator's state after each centre (``states[j]`` after ``j + 1`` of them), so a
    start at any K up to ``n`` leaves the generator as making it alone would.
    """

    chosen: tuple[int, ...]
    d2: np.ndarray
    own: np.ndarray
    states: tuple[Mapping[str, Any], ...]

    @property
    def n(self) -> int:
        return len(self.chosen)

    @classmethod
    def first(cls, S: np.ndarray, rng: np.random.Generator, metric: str) -> _Seeding:
        """The first centre: a row drawn uniformly."""
        j = int(rng.integers(S.shape[0]))
        d2 = _dist(S, S[j : j + 1], metric)[:, 0].astype(np.float64)
        own = np.zeros(S.shape[0], np.int64)
        return cls((j,), d2, own, (rng.bit_generator.state,))

    def extend(
        self, S: np.ndarray, k: int, trials: int, rng: np.random.Generator, metric: str
    ) -> _Seeding:
        """This seeding carried on to ``k`` centres (itself if it has as many), ``rng`` in
        the state after its ``n``-th centre; the arrays are copied, never changed."""
        if k <= self.n:
            return self
        m = S.shape[0]
        chosen, states = list(self.chosen), list(self.states)
        d2, own = self.d2.copy(), self.own.copy()
        for _ in range(self.n, k):
            total = d2.sum()
            if total <= 0:  # fewer distinct rows than clusters: pick any unused row
                j = int(rng.integers(m))
                best = _dist(S, S[j : j + 1], metric)[:, 0].astype(np.float64)
            else:
                cand = rng.choice(m, size=trials, p=d2 / total)
                # every candidate's new distances at once; keep the one with the least potential
                new = np.repeat(d2[:, None], cand.size, axis=1)
                rows = _rows_a_candidate_may_take(S, chosen, own, d2, cand, metric)
                part = S if rows.size == m else S[rows]
                new[rows] = np.minimum(d2[rows, None], _dist(part, S[cand], metric))
                pick = int(np.argmin(new.sum(axis=0)))
                j, best = int(cand[pick]), new[:, pick]
            own[best < d2] = len(chosen)
            chosen.append(j)
            d2 = np.minimum(d2, best)
            states.append(rng.bit_generator.state)
        return _Seeding(tuple(chosen), d2, own, tuple(states))

    def centres(self, S: np.ndarray, k: int) -> np.ndarray:
        """The first ``k`` centres, float64 (a new array)."""
        return np.asarray(S[list(self.chosen[:k])], np.float64)


def _rows_a_candidate_may_take(
    S: np.ndarray,
    chosen: list[int],
    own: np.ndarray,
    d2: np.ndarray,
    cand: np.ndarray,
    metric: str,
) -> np.ndarray:
    """The rows that some candidate could be nearer to than their nearest centre.

    Under the cosine metric the angle is a distance on the sphere: a row at angle ``r``
    from its centre c is nearer to a candidate than to c only if the candidate is within
    ``2 r`` of c. The others keep their distance without a product with the candidates
    (most rows, once the centres are many and the rows near them). Euclidean distances
    are checked for every row.
    """
    m = S.shape[0]
    if metric != "cosine":
        return np.arange(m)
    # angle from each centre to its nearest candidate; a float32 cosine near 1 gives its
    # angle to about 4e-4 rad, below the margin, so a row near the bound is always checked
    reach = np.arccos(np.clip(S[chosen] @ S[cand].T, -1.0, 1.0)).min(axis=1)
    r = np.arccos(np.clip(1.0 - d2, -1.0, 1.0))
    rows = np.flatnonzero(reach[own] < 2.0 * r + ANGLE_MARGIN)
    # gathering most of the rows costs about what the product over all of them does
    return rows if rows.size < m // 2 else np.arange(m)


def _dist(S: np.ndarray, C: np.ndarray, metric: str) -> np.ndarray:
    """Distances of every row of S to every row of C: (m, len(C))."""
    if metric == "cosine":
        return np.asarray(np.maximum(1.0 - S @ C.T, 0.0))
    sq = np.einsum("ij,ij->i", S, S)[:, None] - 2.0 * (S @ C.T) + np.einsum("ij,ij->i", C, C)
    return np.asarray(np.maximum(sq, 0.0))
