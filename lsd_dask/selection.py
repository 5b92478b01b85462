r"""Choosing the feature blur from the data: held-out parcel homogeneity.

How far to blur the SVD features along the mesh (``feature_smoothing_mm``) depends on the
data's noise: brainspace's real single-subject run reproduces best with 20 mm FWHM, while a
33-subject group study keeps its true boundaries only without a blur. The data choose it
here, by cross-validation between two halves of one split's time points:

- each half gets its own SVD features (so neither has seen the other's noise);
- for each blur on a grid, one half's features are blurred and parcellated (plain
  spherical k-means, a cheap stand-in for every method: without a Potts term its parcels
  show the noise that a blur removes), and the parcels are scored on the *other* half's
  unblurred features by their within-parcel sum of squares (:func:`within_sum_of_squares`);
  both directions, several seeds;
- the choice is the least blur whose mean error is within ``rtol`` (1 %) of the best mean,
  or within one standard error of it (the paired differences over seeds and directions),
  whichever is wider: as in cross-validation's one-standard-error rule, the simpler model
  wins when the data cannot tell them apart, and a blur must explain the held-out half
  clearly better to be worth the boundary detail it costs;
- the blurs are tried from the least up, and once one is worse than the best so far by
  more than twice that tolerance (``early_stop``) the larger ones are not tried: past its
  best, a wider blur merges across more boundaries and the held-out error only grows, so
  when the error is unimodal in the blur the choice is the one the whole grid gives. The
  most blurred are the costliest to score (their smoother features take more iterations),
  and a data set that wants no blur (a large group study) stops after one or two.

The 1 % was set on the two data sets this was developed on: on brainspace's real run no
blur is 5.9 % and 6.0 % worse than 20 mm (split 1 and 2) and 10 mm is 1.4 % and 2.0 %
worse, while on the realistic study (Vos de Wael 400 truth) no blur is only 0.6 % and 0.5 %
worse than 5 mm, which costs the truth there.

Only a few fits at one K are needed, so the choice is made once per split.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from .cluster import SphericalKMeans
from .distributed import finished
from .linalg.reductions import cluster_sums
from .similarity import unit_rows
from .surface import smooth_on_mesh, smoothing_steps

__all__ = [
    "BlurChoice",
    "choose_feature_blur",
    "half_columns",
    "within_sum_of_squares",
    "EARLY_STOP",
    "GRID_MM",
]

#: the blurs tried by default (FWHM, mm): doubling steps from 5 mm, and none
GRID_MM = (0.0, 5.0, 10.0, 20.0)
#: the larger blurs are not tried once one is worse than the best by this many tolerances
EARLY_STOP = 2.0


@dataclass(frozen=True)
class BlurChoice:
    """The outcome of :func:`choose_feature_blur`.

    Attributes
    ----------
    fwhm_mm : float
        The chosen blur.
    grid_mm : list of float
        The grid of blurs; the first :attr:`tried` of them were tried, the rest came after
        the stop.
    errors : ndarray of shape (len(grid_mm), 2 * n_seeds)
        Held-out within-parcel sum of squares per row, for each blur, seed and direction
        (half a's parcels on half b, then b's on a, for each seed in turn); NaN for the
        blurs not tried (:attr:`tried`).
    steps : list of int
        Averaging steps of each blur on this mesh.
    k : int
        Clusters of the parcellations scored.
    rtol : float
        The relative tolerance of the choice.
    """

    fwhm_mm: float
    grid_mm: list[float]
    errors: np.ndarray = field(repr=False)
    steps: list[int]
    k: int
    rtol: float

    @property
    def tried(self) -> int:
        """How many blurs of the grid were tried (the least ones; the rest stopped early)."""
        return int(np.sum(~np.isnan(self.errors).any(axis=1)))

    @property
    def mean(self) -> np.ndarray:
        """Mean error of each blur (NaN for those not tried)."""
        return np.asarray(self.errors.mean(axis=1))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (for ``report.json``): errors are None for the blurs not
        tried."""
        t = self.tried
        se = _paired_se(self.errors[:t])
        none: list[float | None] = [None] * (len(self.grid_mm) - t)
        return {
            "fwhm_mm": self.fwhm_mm,
            "k": self.k,
            "rtol": self.rtol,
            "grid_mm": self.grid_mm,
            "steps": self.steps,
            "mean_error": [round(float(e), 6) for e in self.mean[:t]] + none,
            "standard_error": [round(float(e), 6) for e in se] + none,
        }


def choose_feature_blur(
    features_a: np.ndarray,
    features_b: np.ndarray,
    vertices: np.ndarray,
    adjacency: sp.spmatrix,
    n_clusters: int,
    *,
    grid_mm: Sequence[float] = GRID_MM,
    n_seeds: int = 3,
    spatial_weight: float = 0.0,
    rtol: float = 0.01,
    early_stop: float | None = EARLY_STOP,
    random_state: int = 0,
    progress: Callable[[str], None] | None = None,
    client: Any = None,
) -> BlurChoice:
    """Choose the blur of the features along the mesh by held-out parcel homogeneity.

    Parameters
    ----------
    features_a, features_b : ndarray of shape (n_vertices, r_a) and (n_vertices, r_b)
        Each half's features (unit rows of its own U·Σ), on the same vertices; with a
        ``client``, also futures of such arrays (kept on the workers).
    vertices : ndarray of shape (n_vertices, 3)
        Coordinates (mm), for the blur's averaging steps.
    adjacency : sparse matrix of shape (n_vertices, n_vertices)
    n_clusters : int
        Clusters of the parcellations scored (the run's smallest K: the fits are cheapest
        and the parcels largest there).
    grid_mm : sequence of float, default=GRID_MM
        Blurs to try (FWHM, mm); 0 is no blur.
    n_seeds : int, default=3
        Seeds of the fits for each blur and direction; their spread gives the standard
        error of the one-standard-error rule, so at least 2.
    spatial_weight : float, default=0.0
        The Potts weight of the spherical k-means fits (0: none, which separates noisy data
        from clean data best).
    rtol : float, default=0.01
        A blur within this fraction of the best blur's mean error (or within one standard
        error, if wider) counts as good as the best; the least such blur is chosen.
    early_stop : float or None, default=2.0
        The blurs are tried from the least up; once one's mean error is above the best so
        far by more than ``early_stop`` times its tolerance (the larger of ``rtol`` times
        the best and its standard error), the larger blurs are not tried. None: all are.
        The choice does not depend on the client or its workers: a blur past the stop is
        left out even when it was scored beside the others.
    random_state : int, default=0
    progress : callable, optional
        Receives one line per blur tried.
    client : distributed.Client, optional
        Score each blur and direction as one task on the cluster's workers (side by side;
        each holds the two halves and one blurred copy), not in this process: as many
        blurs at a time as there are pairs of worker threads (at least one).

    Returns
    -------
    BlurChoice
    """
    if client is None:
        features_a, features_b = np.asarray(features_a), np.asarray(features_b)
    rows = [getattr(F, "shape", (adjacency.shape[0],))[0] for F in (features_a, features_b)]
    if rows[0] != rows[1] or rows[0] != adjacency.shape[0]:
        raise ValueError(
            f"the halves' features have {rows[0]} and {rows[1]} rows but the mesh "
            f"{adjacency.shape[0]} vertices."
        )
    grid = sorted({float(h) for h in grid_mm})
    if not grid or grid[0] < 0:
        raise ValueError(f"grid_mm must be blurs >= 0 mm, got {list(grid_mm)}.")
    if not 0 <= rtol < 1:
        raise ValueError(f"rtol must be in [0, 1), got {rtol}.")
    if n_seeds < 2:
        raise ValueError(f"n_seeds must be at least 2 (for the standard error), got {n_seeds}.")
    if early_stop is not None and early_stop < 0:
        raise ValueError(f"early_stop must be >= 0 or None, got {early_stop}.")
    seeds = np.random.default_rng(random_state).integers(0, 2**31 - 1, size=n_seeds)
    steps = [smoothing_steps(vertices, adjacency, h) for h in grid]
    errors = np.full((len(grid), 2 * n_seeds), np.nan)
    fit = (n_clusters, spatial_weight, seeds)
    halves: tuple[Any, Any] = (features_a, features_b)
    at_a_time = 1
    if client is not None:
        a, b, adjacency = _on_workers(client, features_a, features_b, adjacency)
        halves = (a, b)
        at_a_time = max(1, sum(client.nthreads().values()) // 2)
    # the blurs in rounds of as many as the workers take at a time (a task a direction: one
    # half blurred and fitted, scored on the other), judged in order
    tried, stopped = 0, False
    while tried < len(grid) and not stopped:
        batch = range(tried, min(tried + at_a_time, len(grid)))
        for (g, d), row in _scored(client, batch, steps, halves, adjacency, fit):
            errors[g, d::2] = row  # each seed's a-on-b, then its b-on-a
        for g in batch:
            tried = g + 1
            if progress is not None:
                progress(
                    f"{grid[g]:g} mm ({steps[g]} steps): held-out error {errors[g].mean():.5f}"
                )
            stopped = early_stop is not None and _rose_past_best(errors[:tried], rtol, early_stop)
            if stopped:
                break
    # a blur past the stop is left out even when its batch scored it: the choice does not
    # depend on how many workers there were
    errors[tried:] = np.nan
    if progress is not None and tried < len(grid):
        rest = ", ".join(f"{h:g}" for h in grid[tried:])
        progress(f"{rest} mm not tried: the held-out error rose past its best")
    chosen = _least_within_tolerance(grid[:tried], errors[:tried], rtol)
    return BlurChoice(chosen, grid, errors, steps, int(n_clusters), rtol)


def half_columns(widths: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The columns of the two halves of a split's time points: the first and the second
    half of every subject's, so each subject is in both halves.

    Parameters
    ----------
    widths : sequence of int
        Time points of each subject, in column order.

    Returns
    -------
    (ndarray, ndarray) of column indices
    """
    first, second, start = [], [], 0
    for w in widths:
        if w < 2:
            raise ValueError(f"a subject has {w} time point(s): it cannot be halved.")
        first.append(np.arange(start, start + w // 2))
        second.append(np.arange(start + w // 2, start + w))
        start += w
    return np.concatenate(first), np.concatenate(second)


def within_sum_of_squares(features: Any, labels: Any) -> float:
    """Within-cluster sum of squares of the rows of ``features``, per row.

    ``(Σ_i |f_i|² − Σ_c |Σ_{i∈c} f_i|² / n_c) / n``: one pass over the rows (lazy for dask
    features until the end).
    """
    labels = np.asarray(labels)
    k = int(labels.max()) + 1
    sums = np.asarray(cluster_sums(features, labels, k))
    n = np.bincount(labels, minlength=k)
    keep = n > 0
    total = float(np.asarray((features * features).sum()))
    return (total - float(np.sum((sums[keep] ** 2).sum(axis=1) / n[keep]))) / int(labels.size)


# --------------------------------------------------------------------------- helpers


def _held_out_errors(
    n: int,
    fit_on: np.ndarray,
    score_on: np.ndarray,
    adjacency: sp.spmatrix,
    n_clusters: int,
    spatial_weight: float,
    seeds: np.ndarray,
) -> np.ndarray:
    """For each seed: ``fit_on`` blurred by ``n`` steps and parcellated, the parcels scored
    on ``score_on`` (the other half's features, unblurred). Runs here or as a task."""
    blurred = unit_rows(smooth_on_mesh(fit_on, adjacency, n_iter=n)) if n else fit_on
    out = []
    with warnings.catch_warnings():
        # a fit capped at its iterations still gives parcels to score: part of the criterion
        warnings.simplefilter("ignore", ConvergenceWarning)
        for seed in seeds:
            est = SphericalKMeans(
                n_clusters,
                spatial_weight=spatial_weight,
                connectivity=adjacency,
                random_state=int(seed),
            )
            out.append(within_sum_of_squares(score_on, est.fit(blurred).labels_))
    return np.asarray(out)


def _scored(
    client: Any,
    blurs: Sequence[int],
    steps: list[int],
    halves: Sequence[Any],
    adjacency: Any,
    fit: tuple[Any, ...],
) -> Iterator[tuple[tuple[int, int], np.ndarray]]:
    """``((blur, direction), per-seed errors)`` for each of ``blurs`` and both directions:
    here, one after the other, or as tasks on ``client``'s workers as they finish."""
    if client is None:
        for g in blurs:
            for d in (0, 1):
                yield (g, d), _held_out_errors(steps[g], *_ways(halves, d), adjacency, *fit)
        return
    futures = {
        client.submit(
            _held_out_errors, steps[g], *_ways(halves, d), adjacency, *fit, pure=False
        ): (g, d)
        for g in blurs
        for d in (0, 1)
    }  # fmt: skip
    yield from finished(client, futures)


def _rose_past_best(errors: np.ndarray, rtol: float, margin: float) -> bool:
    """Whether the last blur's mean error is above the best of ``errors`` (the blurs
    tried so far, every row complete) by more than ``margin`` times its tolerance."""
    mean = errors.mean(axis=1)
    return bool(mean[-1] > mean.min() + margin * _tolerance(errors, rtol)[-1])


def _ways(halves: Sequence[Any], d: int) -> tuple[Any, Any]:
    """Direction ``d``: (the half fitted, the half scored): a on b, then b on a."""
    return (halves[0], halves[1]) if d == 0 else (halves[1], halves[0])


def _on_workers(client: Any, *values: Any) -> list[Any]:
    """Futures of the values on the workers (futures already there are kept)."""
    from distributed import Future

    out = list(values)
    local = [i for i, v in enumerate(values) if not isinstance(v, Future)]
    for i, fut in zip(local, client.scatter([values[i] for i in local], hash=False), strict=True):
        out[i] = fut
    return out


def _paired_se(errors: np.ndarray) -> np.ndarray:
    """Standard error of each blur's mean error minus the best blur's (paired by seed and
    direction)."""
    d = errors - errors[int(np.argmin(errors.mean(axis=1)))]
    return np.asarray(d.std(axis=1, ddof=1) / np.sqrt(errors.shape[1]))


def _least_within_tolerance(grid: list[float], errors: np.ndarray, rtol: float) -> float:
    """The least blur whose mean error is within ``rtol`` of the best one's, or within one
    standard error of it if that is wider."""
    mean = errors.mean(axis=1)
    best = int(np.argmin(mean))
    allowed = _tolerance(errors, rtol)
    for g in range(best + 1):
        if mean[g] <= mean[best] + allowed[g]:
            return grid[g]
    return grid[best]


def _tolerance(errors: np.ndarray, rtol: float) -> np.ndarray:
    """How far above the best mean error each blur's may be and still count as good as
    the best: ``rtol`` times the best, or the paired standard error if that is wider."""
    return np.asarray(np.maximum(_paired_se(errors), rtol * errors.mean(axis=1).min()))
