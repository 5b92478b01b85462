"""A realistic split-half surface study: a real mesh, a published atlas as the truth, and
parcel time series correlated like real HCP group connectivity.

Each subject of split ``g`` is generated independently (resting-state subjects are not
time-locked), on the cortical vertices of the template (the medial wall stays 0):

1. parcel time series ``Z`` (T × P) drawn from ``N(0, C_g)``, with ``C_g`` the group
   connectivity of the atlas' parcels (HCP "main" group for split 1, "holdout" for split 2;
   clipped to the nearest positive definite correlation), filtered by an AR(1) with
   coefficient ``autocorrelation`` so that neighbouring time points correlate as BOLD does;
2. each vertex takes its parcel's series, and the signal is blurred across parcel borders by
   ``border_blur`` neighbour-averaging steps on the mesh (each about one edge, ~2 mm on
   32k_fs_LR), then brought back to unit variance per vertex;
3. a per-subject gain field ``exp(gain_sd · g)``, ``g`` a mesh-smoothed unit Gaussian
   field, scales the signal (vessels, coil sensitivity);
4. noise of total variance ``1 / snr``: a share ``smooth_noise`` of it smoothed on the mesh
   by ``noise_smoothing`` steps (physiological and motion noise are spatially coherent),
   the rest white;
5. a positive baseline around 1,000 per vertex, as in scanner units.

The truth is the atlas (parcels ``1..P``, ``0`` on the medial wall). With
``border_shift`` > 0 every subject has its own borders (:meth:`RealisticStudy.subject_labels`,
used by step 2): each parcel's indicator is averaged over ``border_shift`` neighbour steps
on the mesh (so a vertex may change parcel only within about ``border_shift`` edges of a
border, ~2 mm each on 32k_fs_LR), and the vertex takes the parcel of highest
``averaged indicator + border_jitter · (a_p + b_p · h(v))``: ``a_p``, ``b_p`` standard
normal per parcel and subject, ``h`` a unit Gaussian field smoothed by 10 steps on the
mesh. A parcel thus grows or shrinks as a whole (``a_p``) and unevenly along its border
(``b_p h``); ``border_jitter`` 0.2 with ``border_shift`` 4 moves about a tenth of the
vertices (see :meth:`RealisticStudy.subject_labels`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.signal import lfilter

from .._validation import RandomState, check_random_state
from ..surface import Mesh, combine_meshes, smooth_on_mesh
from ._study import SplitStudy
from .templates import load_atlas, load_group_connectivity, load_template

__all__ = ["RealisticStudy", "realistic_study"]

_GROUPS = ("main", "holdout")


@dataclass(frozen=True)
class RealisticStudy(SplitStudy):
    """A two-split study on a real template; subjects are generated on demand.

    Attributes
    ----------
    meshes : dict of str to Mesh
    labels : ndarray of shape (n_vertices,)
        The atlas: parcels ``1..n_parcels``, 0 on the medial wall.
    cortex : ndarray of bool, shape (n_vertices,)
        Vertices in the data (CIFTI files leave the rest out of their brain models).
    splits : dict of str to list of str
    connectivity : dict of str to ndarray
        The parcel correlation each split's subjects are drawn from.
    tr : float
        Repetition time in seconds (HCP: 0.72).
    """

    meshes: dict[str, Mesh]
    labels: np.ndarray
    cortex: np.ndarray
    splits: dict[str, list[str]]
    connectivity: dict[str, np.ndarray] = field(repr=False)
    n_timepoints: int = 300
    snr: float = 0.5
    autocorrelation: float = 0.5
    border_blur: int = 2
    gain_sd: float = 0.3
    smooth_noise: float = 0.5
    noise_smoothing: int = 3
    tr: float = 0.72
    border_shift: int = 0
    border_jitter: float = 0.2
    seed: int = 0
    template: str = "conte69"
    atlas: str = "vosdewael_400"
    #: mesh adjacency among the cortical vertices (built once, used by every subject)
    _adjacency: sp.csr_matrix | None = field(default=None, repr=False)

    def subject_labels(self, subject: str) -> np.ndarray:
        """One subject's own parcels (``1..P``, 0 off the cortex): the atlas, or with
        ``border_shift`` > 0 the atlas with this subject's borders (module docstring)."""
        if self.border_shift <= 0:
            return self.labels
        g, i = self._locate(subject)
        rng = np.random.default_rng([self.seed, g, i, 1])  # apart from the data's draws
        lab = self.labels[self.cortex] - 1
        nc, n_parcels = int(lab.size), int(self.labels.max())
        onehot = sp.csr_matrix((np.ones(nc), (np.arange(nc), lab)), shape=(nc, n_parcels))
        # kept sparse: a vertex reaches few parcels
        S = smooth_on_mesh(onehot, self._adjacency, self.border_shift)
        a, b = rng.standard_normal(n_parcels), rng.standard_normal(n_parcels)
        h = _unit_std(smooth_on_mesh(rng.standard_normal(nc), self._adjacency, 10))
        S = S.tocoo()
        score = S.data + self.border_jitter * (a[S.col] + b[S.col] * h[S.row])
        # each vertex's best parcel among those its averaged indicators reach
        order = np.lexsort((-score, S.row))
        first = np.r_[True, S.row[order][1:] != S.row[order][:-1]]
        own = np.empty(nc, np.int64)
        own[S.row[order][first]] = S.col[order][first]
        out = np.zeros_like(self.labels)
        out[self.cortex] = own + 1
        return out

    def subject_data(self, subject: str) -> np.ndarray:
        """Time series of one subject, shape (n_vertices, n_timepoints), float32."""
        g, i = self._locate(subject)
        split = list(self.splits)[g]
        rng = np.random.default_rng([self.seed, g, i])
        A = self._adjacency
        lab = self.subject_labels(subject)[self.cortex] - 1
        nc, T = int(lab.size), self.n_timepoints
        # 1. correlated parcel series with BOLD-like autocorrelation
        L = _correlation_factor(self.connectivity[split])
        Z = rng.standard_normal((T, L.shape[0])) @ L.T
        phi = self.autocorrelation
        Z = lfilter([np.sqrt(1.0 - phi * phi)], [1.0, -phi], Z, axis=0)
        # 2. every vertex its parcel's series, blurred across borders
        S = _unit_rows_var(smooth_on_mesh(Z.T[lab], A, self.border_blur))
        # 3. gain field
        gfield = _unit_std(smooth_on_mesh(rng.standard_normal(nc), A, 10))
        S *= np.exp(self.gain_sd * gfield)[:, None]
        # 4. noise: spatially smooth and white parts
        smooth = _unit_std(smooth_on_mesh(rng.standard_normal((nc, T)), A, self.noise_smoothing))
        white = rng.standard_normal((nc, T))
        f = self.smooth_noise
        S += np.sqrt(1.0 / self.snr) * (np.sqrt(f) * smooth + np.sqrt(1.0 - f) * white)
        # 5. baseline in scanner-like units
        S += 1000.0 + 50.0 * rng.random(nc)[:, None]
        out = np.zeros((self.n_vertices, T), np.float32)
        out[self.cortex] = S
        return out


def realistic_study(
    *,
    template: str = "conte69",
    atlas: str = "vosdewael",
    scale: int = 400,
    n_subjects: tuple[int, int] = (3, 3),
    n_timepoints: int = 300,
    snr: float = 0.5,
    autocorrelation: float = 0.5,
    border_blur: int = 2,
    gain_sd: float = 0.3,
    smooth_noise: float = 0.5,
    noise_smoothing: int = 3,
    tr: float = 0.72,
    border_shift: int = 0,
    border_jitter: float = 0.2,
    random_state: RandomState = 0,
) -> RealisticStudy:
    """Build a realistic two-split study (see the module docstring for the model).

    Parameters
    ----------
    template : {"conte69"}
        The surface; the shipped atlases exist only for conte69 (32k_fs_LR).
    atlas : {"vosdewael", "schaefer"}
        The truth. Tune on Vos de Wael; keep Schaefer for independent checks.
    scale : {100, 200, 300, 400}
        Parcels in the atlas.
    n_subjects : (int, int)
        Subjects per split.
    n_timepoints : int
        Time points per subject.
    snr : float
        Signal variance over noise variance per vertex (before the gain field).
    autocorrelation : float in [0, 1)
        AR(1) coefficient of the parcel series.
    border_blur, noise_smoothing : int
        Neighbour-averaging steps on the mesh for the signal and for the smooth noise.
    gain_sd : float
        Standard deviation of the log gain field.
    smooth_noise : float in [0, 1]
        Share of the noise variance that is spatially smooth.
    tr : float
        Repetition time written into the files.
    border_shift : int
        Neighbour steps within which a subject's borders may move from the atlas' (0: every
        subject has the atlas' borders).
    border_jitter : float
        How strongly each subject's parcels grow, shrink and bend within that reach.
    random_state : int, Generator or None
    """
    if template != "conte69":
        raise ValueError(
            f"realistic_study needs an atlas on the template; only 'conte69' has one, "
            f"got {template!r}."
        )
    if snr <= 0 or not np.isfinite(snr):
        raise ValueError(f"snr must be positive, got {snr}.")
    if not 0.0 <= autocorrelation < 1.0:
        raise ValueError(f"autocorrelation must lie in [0, 1), got {autocorrelation}.")
    if not 0.0 <= smooth_noise <= 1.0:
        raise ValueError(f"smooth_noise must lie in [0, 1], got {smooth_noise}.")
    if border_shift < 0 or border_jitter < 0:
        raise ValueError(
            f"border_shift and border_jitter must be >= 0, got {border_shift}, {border_jitter}."
        )
    if min(n_subjects) < 1 or n_timepoints < 2:
        raise ValueError("each split needs a subject and every subject 2 time points or more.")
    tpl = load_template(template)
    labels = load_atlas(atlas, scale)
    cortex = tpl.cortex & (labels > 0)
    rng = check_random_state(random_state)
    splits = {
        "split1": [f"sub-{i + 1:03d}" for i in range(n_subjects[0])],
        "split2": [f"sub-{i + 1 + n_subjects[0]:03d}" for i in range(n_subjects[1])],
    }
    groups = zip(splits, _GROUPS, strict=True)
    conn = {s: load_group_connectivity(atlas, scale, g) for s, g in groups}
    combined, _ = combine_meshes(tpl.meshes)
    return RealisticStudy(
        _adjacency=combined.adjacency()[cortex][:, cortex].tocsr(),
        meshes=tpl.meshes,
        labels=np.where(cortex, labels, 0),
        cortex=cortex,
        splits=splits,
        connectivity=conn,
        n_timepoints=int(n_timepoints),
        snr=float(snr),
        autocorrelation=float(autocorrelation),
        border_blur=int(border_blur),
        gain_sd=float(gain_sd),
        smooth_noise=float(smooth_noise),
        noise_smoothing=int(noise_smoothing),
        tr=float(tr),
        border_shift=int(border_shift),
        border_jitter=float(border_jitter),
        seed=int(rng.integers(2**31 - 1)),
        template=template,
        atlas=f"{atlas}_{scale}",
    )


# --------------------------------------------------------------------------- helpers


def _correlation_factor(C: np.ndarray, floor: float = 1e-3) -> np.ndarray:
    """L with ``L L^T`` the nearest correlation matrix to C with eigenvalues >= floor."""
    C = (np.asarray(C, np.float64) + np.asarray(C, np.float64).T) / 2.0
    w, V = np.linalg.eigh(C)
    B = V * np.sqrt(np.maximum(w, floor))
    d = np.sqrt(np.sum(B * B, axis=1))
    return B / d[:, None]  # unit diagonal


def _unit_std(x: np.ndarray) -> np.ndarray:
    return x / max(float(x.std()), np.finfo(float).tiny)


def _unit_rows_var(x: np.ndarray) -> np.ndarray:
    sd = x.std(axis=1, keepdims=True)
    return x / np.where(sd > 0, sd, 1.0)
