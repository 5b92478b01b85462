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

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ...io.bids_index import confounds_file
from ...io.surface_files import SubjectFiles, timepoint_count
from ..settings.preprocess import PreprocessSettings, subject_t_r_of

__all__ = [
    "clean_subject",
    "denoise_confounds",
    "preprocess_subject",
    "read_confounds",
    "subject_qc",
]


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
    out: np.ndarray = values.fillna(values.mean()).to_numpy(np.float64)
    return out


#: the least share of a run's volumes that scrubbing may leave: below it the run fails in
#: one line (studies that censor motion leave such participants out, most by a stricter
#: rule)
MIN_KEPT = 0.5

#: vertices per call of nilearn's ``signal.clean`` (16 MB of float64 at 1,000 time points)
CLEAN_BLOCK = 2048


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
        with warnings.catch_warnings():
            # every volume an outlier, a column of n/a (scaled by scikit-learn): said below,
            # in one line naming the subject and the file
            warnings.filterwarnings("ignore", "All volumes were marked", RuntimeWarning)
            warnings.filterwarnings("ignore", "Mean of empty slice", RuntimeWarning)
            warnings.filterwarnings("ignore", "Numerical issues were encountered", UserWarning)
            if "preset" in denoise:
                table, mask = load_confounds_strategy(img, denoise_strategy=denoise["preset"])
            else:
                table, mask = load_confounds(img, **denoise)
    except (ValueError, FileNotFoundError, KeyError) as err:
        raise ValueError(f"subject {s.subject}: denoising {s.paths[0]}: {err}") from None
    names = [str(c) for c in getattr(table, "columns", [])]
    table = np.asarray(table, np.float64)
    if mask is not None and len(mask) < MIN_KEPT * table.shape[0]:
        raise ValueError(
            f"subject {s.subject}: scrubbing keeps {len(mask)} of its {table.shape[0]} volumes "
            f"(fewer than {MIN_KEPT:.0%}: it moved too much to be parcellated with the others); "
            "leave it out with --participant-label, or denoise without scrubbing."
        )
    where = confounds_file(s.paths[0]) or s.paths[0]
    finite = np.isfinite(table).all(axis=0)
    if not finite.all():
        cols = [n for n, ok in zip(names, finite, strict=False) if not ok][:5]
        raise ValueError(
            f"subject {s.subject}: {where} holds n/a or non-numbers in column(s) "
            f"{cols or 'of the strategy'}; denoising needs a number in every row it uses."
        )
    n = timepoint_count(s)
    if table.shape[0] != n:
        raise ValueError(
            f"subject {s.subject}: {where} has {table.shape[0]} rows, {s.paths[0]} {n} time points."
        )
    return table, None if mask is None else np.asarray(mask, np.int64)


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
    from ...surface import smooth_on_mesh

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


def subject_qc(s: SubjectFiles, pp: PreprocessSettings, kept: int) -> dict[str, Any]:
    """One subject's quality figures for the report: its volumes, the ``kept`` ones (after
    scrubbing), and its framewise displacement in mm (mean and largest, fMRIPrep's
    ``framewise_displacement``) when it has a confounds file that holds one: the file of
    ``preprocess.confounds``, or fMRIPrep's beside its BOLD file."""
    row: dict[str, Any] = {"subject": s.subject, "volumes": timepoint_count(s), "kept": kept}
    path = pp.confound_path(s.subject) if pp.confounds is not None else confounds_file(s.paths[0])
    if path is None or not path.is_file():
        return row
    import pandas as pd

    try:
        table = pd.read_csv(path, sep="\t", usecols=lambda c: c == "framewise_displacement")
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
        return row  # read in full, and checked, where the confounds are used
    if "framewise_displacement" not in table:
        return row
    fd = pd.to_numeric(table["framewise_displacement"], errors="coerce").to_numpy(np.float64)
    if s.time_slice is not None:
        fd = fd[s.time_slice[0] : s.time_slice[1]]
    if np.isfinite(fd).any():  # fMRIPrep's first row is n/a
        row["mean_fd"] = float(np.nanmean(fd))
        row["max_fd"] = float(np.nanmax(fd))
    return row
