"""Per-subject preprocessing at ingest, before the group SVD: what a resting-state study
usually does to the time series first.

- spatial smoothing on the mesh (FWHM in mm, :func:`~lsd_dask.surface.smoothing_steps`),
  over the unmasked vertices only, so the medial wall's zeros do not bleed into cortex;
- temporal clean-up through nilearn's ``signal.clean``: detrending, confound regression
  from a per-subject TSV (fMRIPrep's ``*_desc-confounds_timeseries.tsv``, columns chosen by
  name, or a denoising strategy of nilearn's ``load_confounds`` for the TSV beside each
  fMRIPrep BOLD file, scrubbing included) and a Butterworth band-pass, which needs the
  repetition time (read from the file, or given as ``t_r``).

Each subject is then z-scored per vertex by the ingest stage, as without preprocessing.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..io.surface_files import SubjectFiles, subject_t_r

__all__ = [
    "DENOISE_PRESETS",
    "PreprocessSettings",
    "clean_subject",
    "denoise_confounds",
    "denoise_setting",
    "preprocess_subject",
    "read_confounds",
    "subject_t_r_of",
]


@dataclass(frozen=True)
class PreprocessSettings:
    """The ``preprocess:`` section, typed; its defaults (do nothing) are stated here only.

    Attributes
    ----------
    smoothing_mm : float
        FWHM of a blur along the mesh, per subject (0: none).
    detrend : bool
        Remove each vertex's linear trend.
    high_pass, low_pass : float or None
        Band-pass edges in Hz (e.g. 0.01 and 0.1); None: that edge is open.
    t_r : float or None
        Repetition time in seconds; None: read from each subject's file (a band-pass
        fails before any work when neither gives one).
    confounds : str or None
        Per-subject confound TSV, a path with ``{subject}`` in it, relative to the
        pipeline file's folder (e.g. ``confounds/{subject}_desc-confounds_timeseries.tsv``).
    confound_columns : list of str
        The TSV's columns to regress out (e.g. ``[trans_x, trans_y, csf, white_matter]``).
    denoise : dict or None
        A denoising strategy of nilearn's ``load_confounds`` on fMRIPrep's files: the
        confounds TSV is found beside each subject's BOLD file. ``{"preset": name}`` runs
        ``load_confounds_strategy`` (simple, scrubbing, compcor, ica_aroma); otherwise the
        mapping holds ``load_confounds``' arguments (``strategy``: motion, wm_csf,
        global_signal, scrub, high_pass...). Scrubbed volumes are left out of the data.
    """

    smoothing_mm: float = 0.0
    detrend: bool = False
    high_pass: float | None = None
    low_pass: float | None = None
    t_r: float | None = None
    confounds: str | None = None
    confound_columns: list[str] = field(default_factory=list)
    denoise: dict[str, Any] | None = None

    @property
    def temporal(self) -> bool:
        """Whether nilearn's ``signal.clean`` has anything to do."""
        return bool(self.detrend or self.band_pass or self.confounds or self.denoise)

    @property
    def band_pass(self) -> bool:
        return self.high_pass is not None or self.low_pass is not None

    @property
    def active(self) -> bool:
        return self.temporal or self.smoothing_mm > 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def confound_path(self, subject: str) -> Path | None:
        """The subject's confounds file; an id that would lead the template out of its
        folder (a separator, or a leading ".") is refused."""
        if self.confounds is None:
            return None
        if "/" in subject or "\\" in subject or subject.startswith("."):
            raise ValueError(
                f"subject {subject!r}: an id with a path separator or a leading '.' cannot "
                "name a confounds file."
            )
        return Path(self.confounds.format(subject=subject))

    @classmethod
    def from_mapping(cls, raw: dict[str, Any], where: str, base: Path) -> PreprocessSettings:
        """Checked settings from a YAML mapping; an error names the key."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(
                f"{where}: unknown key(s) {unknown} in preprocess; known: {sorted(known)}."
            )
        smoothing = _number(raw.get("smoothing_mm", 0.0), "preprocess.smoothing_mm", 0.0)
        detrend = raw.get("detrend", False)
        if not isinstance(detrend, bool):
            raise ValueError(f"preprocess.detrend: true or false, got {detrend!r}.")
        hp, lp, tr = (
            None if raw.get(k) is None else _number(raw[k], f"preprocess.{k}", 0.0, strict=True)
            for k in ("high_pass", "low_pass", "t_r")
        )
        if hp is not None and lp is not None and hp >= lp:
            raise ValueError(f"preprocess: high_pass ({hp} Hz) must be below low_pass ({lp} Hz).")
        conf = raw.get("confounds")
        cols = raw.get("confound_columns", [])
        if conf is not None:
            if not isinstance(conf, str) or "{subject}" not in conf:
                raise ValueError(
                    "preprocess.confounds: a path with {subject} in it, e.g. "
                    f"'confounds/{{subject}}_desc-confounds_timeseries.tsv'; got {conf!r}."
                )
            conf = str(base / conf) if not Path(conf).is_absolute() else conf
            if not isinstance(cols, list) or not cols or not all(isinstance(c, str) for c in cols):
                raise ValueError(
                    "preprocess.confound_columns: a non-empty list of the TSV's column names "
                    f"to regress out; got {cols!r}."
                )
        elif cols:
            raise ValueError("preprocess.confound_columns is set but preprocess.confounds is not.")
        denoise = denoise_setting(raw.get("denoise"))
        if denoise is not None and conf is not None:
            raise ValueError(
                "preprocess: give confounds (a TSV's columns) or denoise (a strategy), not both."
            )
        return cls(smoothing, detrend, hp, lp, tr, conf, list(cols), denoise)


def read_confounds(
    path: Path,
    columns: list[str],
    subject: str,
    *,
    n_timepoints: int | None = None,
    time_slice: tuple[int, int] | None = None,
) -> np.ndarray:
    """The chosen columns of a confound TSV as (T, n_columns) float64, checked.

    The TSV covers the whole run; ``time_slice`` keeps the rows of a subject that is part
    of a run, and the result must then have ``n_timepoints`` rows (when given).

    fMRIPrep leaves the first row of derivative columns empty (``n/a``): such leading gaps
    are filled with the column's mean, as nilearn's ``load_confounds`` does for them. A gap
    after a column's first number is an error naming the column and the row.
    """
    import pandas as pd

    if not path.exists():
        raise FileNotFoundError(f"subject {subject}: confound file {path} does not exist.")
    try:
        table = pd.read_csv(path, sep="\t")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise ValueError(f"subject {subject}: {path} is not a readable TSV ({err}).") from None
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(
            f"subject {subject}: {path} has no column(s) {missing}; it has "
            f"{list(table.columns)[:12]}{' ...' if table.shape[1] > 12 else ''}."
        )
    values = table[columns].apply(pd.to_numeric, errors="coerce")
    for c in columns:
        # a leading gap is fMRIPrep's (derivatives start at the second row); a gap after a
        # number is a damaged row, and filling it would hide it
        known = values[c].notna().to_numpy()
        if known.any() and not known[int(np.argmax(known)) :].all():
            row = int(np.argmax(known)) + int(np.argmin(known[int(np.argmax(known)) :]))
            raise ValueError(
                f"subject {subject}: {path}: column {c!r} has no number in data row {row + 1} "
                "(only the first rows may be n/a, as fMRIPrep leaves them)."
            )
    if time_slice is not None:
        values = values.iloc[time_slice[0] : time_slice[1]]
    if n_timepoints is not None and len(values) != n_timepoints:
        raise ValueError(
            f"subject {subject}: {path} has {len(values)} rows"
            f"{' in its time_slice' if time_slice else ''}, the data {n_timepoints} time points."
        )
    if values.isna().all().any():
        bad = [c for c in columns if values[c].isna().all()]
        raise ValueError(f"subject {subject}: {path}: column(s) {bad} hold no numbers.")
    return values.fillna(values.mean()).to_numpy(np.float64)


#: vertices per call of nilearn's ``signal.clean`` (16 MB of float64 at 1,000 time points)
CLEAN_BLOCK = 2048
#: nilearn's ``load_confounds_strategy`` presets
DENOISE_PRESETS = ("simple", "scrubbing", "compcor", "ica_aroma")


def denoise_setting(raw: Any) -> dict[str, Any] | None:
    """``preprocess.denoise`` checked: a preset name, a list (or comma-separated string)
    of ``load_confounds`` strategies, or a mapping of its arguments; an error names what
    is wrong and what is allowed."""
    import inspect
    import typing

    from nilearn.interfaces.fmriprep import load_confounds

    if raw is None:
        return None
    if isinstance(raw, str) and raw in DENOISE_PRESETS:
        return {"preset": raw}
    if isinstance(raw, str):
        raw = [part.strip() for part in raw.split(",") if part.strip()]
    if isinstance(raw, list):
        raw = {"strategy": raw}
    if not isinstance(raw, dict):
        raise ValueError(
            f"preprocess.denoise: a preset ({', '.join(DENOISE_PRESETS)}), a list of "
            f"strategies or a mapping of load_confounds' arguments; got {raw!r}."
        )
    if "preset" in raw:
        if set(raw) != {"preset"} or raw["preset"] not in DENOISE_PRESETS:
            raise ValueError(
                f"preprocess.denoise.preset: one of {list(DENOISE_PRESETS)}, alone; got {raw!r}."
            )
        return dict(raw)
    params = inspect.signature(load_confounds).parameters
    unknown = sorted(set(raw) - (set(params) - {"img_files"}))
    if unknown:
        raise ValueError(
            f"preprocess.denoise: unknown key(s) {unknown}; nilearn's load_confounds takes "
            f"{sorted(set(params) - {'img_files'})}."
        )
    strategy = raw.get("strategy", ["motion", "high_pass", "wm_csf"])
    allowed = typing.get_args(typing.get_args(params["strategy"].annotation)[0])
    names = typing.get_args(allowed[0]) if allowed else ()
    if not isinstance(strategy, list | tuple) or not strategy:
        raise ValueError(f"preprocess.denoise.strategy: a list of names, got {strategy!r}.")
    bad = [str(x) for x in strategy if names and x not in names]
    if bad:
        raise ValueError(
            f"preprocess.denoise.strategy: unknown {bad}; nilearn's load_confounds knows "
            f"{list(names)} (scrubbing is 'scrub')."
        )
    return {**raw, "strategy": [str(x) for x in strategy]}


def denoise_confounds(
    s: SubjectFiles, denoise: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray | None]:
    """The confounds (T, n) of the subject's denoising strategy and its sample mask (the
    volumes kept; None: all), from fMRIPrep's TSV beside its BOLD file."""
    from nilearn.interfaces.fmriprep import load_confounds, load_confounds_strategy

    if s.time_slice is not None:
        raise ValueError(
            f"subject {s.subject}: preprocess.denoise reads fMRIPrep's confounds of a whole "
            "run, so it cannot take a time_slice."
        )
    img: Any = str(s.paths[0]) if s.kind == "cifti" else [str(p) for p in s.paths]
    try:
        if "preset" in denoise:
            table, mask = load_confounds_strategy(img, denoise_strategy=denoise["preset"])
        else:
            table, mask = load_confounds(img, **denoise)
    except (ValueError, FileNotFoundError, KeyError) as err:
        raise ValueError(f"subject {s.subject}: denoising {s.paths[0]}: {err}") from None
    return np.asarray(table, np.float64), None if mask is None else np.asarray(mask, np.int64)


def clean_subject(
    x: np.ndarray,
    settings: PreprocessSettings,
    *,
    t_r: float | None = None,
    confounds: np.ndarray | None = None,
    sample_mask: np.ndarray | None = None,
    smoothing: tuple[int, sp.spmatrix] | None = None,
) -> np.ndarray:
    """Preprocess one subject's (n_vertices, T) time series of the unmasked vertices.

    Parameters
    ----------
    x : ndarray of shape (n_vertices, n_timepoints)
    settings : PreprocessSettings
    t_r : float, optional
        Seconds per time point (needed for a band-pass).
    confounds : ndarray of shape (n_timepoints, n_confounds), optional
    sample_mask : ndarray of int, optional
        The time points to keep (scrubbing); the others are left out of the result.
    smoothing : (steps, adjacency), optional
        Averaging steps of :func:`~lsd_dask.surface.smooth_on_mesh` on the vertices of x.

    Returns
    -------
    ndarray of shape (n_vertices, n_kept), float64
    """
    from ..surface import smooth_on_mesh

    if settings.temporal:
        from nilearn import signal
        from threadpoolctl import threadpool_limits

        out = np.array(x, np.float64)  # its own: cleaned in place, block by block
        if settings.band_pass and t_r is None:
            raise ValueError("a band-pass needs the repetition time: set preprocess.t_r.")
        kept_t = out.shape[1]
        # vertices a block at a time, each block in one call: clean treats every vertex
        # alone, and nilearn's in-place default filters vertex by vertex (20,000 scipy
        # calls for a 20,000-vertex subject: 14 s, against 1 s in blocks), while one call
        # for all would hold several more float64 copies of the subject. One BLAS thread:
        # the confound regression's last bits change with the thread count, and a subject
        # must come out the same on a Dask worker (one thread) as in this process
        with threadpool_limits(1):
            for start in range(0, out.shape[0], CLEAN_BLOCK):
                rows = slice(start, start + CLEAN_BLOCK)
                cleaned = signal.clean(
                    out[rows].T,
                    detrend=settings.detrend,
                    standardize=None,
                    confounds=confounds,
                    sample_mask=sample_mask,
                    filter="butterworth" if settings.band_pass else False,
                    low_pass=settings.low_pass,
                    high_pass=settings.high_pass,
                    t_r=t_r,
                    butterworth__copy=True,
                )
                kept_t = cleaned.shape[0]  # fewer with a sample mask
                out[rows, :kept_t] = cleaned.T
        out = out[:, :kept_t]
    else:
        out = np.asarray(x, np.float64)
    if smoothing is not None and smoothing[0] > 0:
        out = smooth_on_mesh(out, smoothing[1], n_iter=smoothing[0])
    return out


def _number(v: Any, key: str, low: float, *, strict: bool = False) -> float:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    if not ok or v < low or (strict and v <= low):
        rel = ">" if strict else ">="
        raise ValueError(f"{key}: a number {rel} {low:g}, got {v!r}.")
    return float(v)


def subject_t_r_of(pp: PreprocessSettings, s: SubjectFiles) -> float:
    """The subject's TR: ``preprocess.t_r``, else its file's."""
    if pp.t_r is not None:
        return pp.t_r
    tr = subject_t_r(s)
    if tr is None:
        raise ValueError(
            f"subject {s.subject}: a band-pass needs the repetition time and "
            f"{', '.join(str(p) for p in s.paths)} states none; set preprocess.t_r (seconds)."
        )
    return tr


def preprocess_subject(
    pp: PreprocessSettings, s: SubjectFiles, x: np.ndarray, smoothing: tuple[int, Any] | None
) -> np.ndarray:
    """One subject's time series (n_vertices × T, float64) through ``preprocess``: its
    confounds read, its TR found, then :func:`clean_subject`."""
    confounds, sample_mask = None, None
    if pp.denoise is not None:
        confounds, sample_mask = denoise_confounds(s, pp.denoise)
    if pp.confounds is not None:
        confounds = read_confounds(
            pp.confound_path(s.subject),
            pp.confound_columns,
            s.subject,
            n_timepoints=x.shape[1],
            time_slice=s.time_slice,
        )
    tr = subject_t_r_of(pp, s) if pp.band_pass else None
    return clean_subject(
        x, pp, t_r=tr, confounds=confounds, sample_mask=sample_mask, smoothing=smoothing
    )
