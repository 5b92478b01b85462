"""The ``preprocess:`` section of a pipeline file, typed: what is done to each subject's
time series at ingest, before the group SVD (:mod:`lsd_dask.pipeline.stages.preprocess` does it)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from ...io.surface_files import SubjectFiles, subject_t_r
from .files import setting

__all__ = ["DENOISE_PRESETS", "PreprocessSettings", "denoise_setting", "subject_t_r_of"]


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
        ``load_confounds_strategy`` (simple, scrubbing, compcor); otherwise the
        mapping holds ``load_confounds``' arguments (``strategy``: motion, wm_csf,
        global_signal, scrub, high_pass...). Scrubbed volumes are left out of the data.
    """

    smoothing_mm: float = setting(0.0, note="FWHM along the mesh")
    detrend: bool = setting(False, note="remove each vertex's linear trend")
    high_pass: float | None = setting(
        None, note=("Hz, e.g. 0.01 (nilearn's signal.clean, Butterworth)")
    )
    low_pass: float | None = setting(None, note="Hz, e.g. 0.1")
    t_r: float | None = setting(None, note="seconds; null: from each file")
    confounds: str | None = setting(
        None, note=("a TSV per subject, e.g. confounds/{subject}_desc-confounds_timeseries.tsv")
    )
    confound_columns: list[str] = setting(
        factory=list, note=("its columns to regress out, e.g. [trans_x, csf, white_matter]")
    )
    denoise: dict[str, Any] | None = setting(
        None,
        note=(
            "nilearn's load_confounds beside each fMRIPrep BOLD file: a preset (simple, "
            "scrubbing, compcor), strategies [motion, wm_csf, global_signal, scrub, "
            "high_pass] or {strategy: [...], motion: basic, ...}"
        ),
    )

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

    def describe(self) -> str:
        """What is done to each subject, in a phrase a methods section can use."""
        steps = []
        if self.denoise is not None:
            if "preset" in self.denoise:
                preset = self.denoise["preset"]
                how = f"the {preset!r} strategy of nilearn's load_confounds_strategy"
            else:
                args = ", ".join(f"{k}={v}" for k, v in self.denoise.items())
                how = f"nilearn's load_confounds ({args})"
            steps.append(f"fMRIPrep's confounds regressed out with {how}")
        if self.confounds is not None:
            steps.append(f"the confounds {', '.join(self.confound_columns)} regressed out")
        if self.detrend:
            steps.append("linearly detrended")
        if self.band_pass:
            low = f"{self.high_pass:g}" if self.high_pass is not None else "0"
            high = f"{self.low_pass:g}" if self.low_pass is not None else "Nyquist"
            steps.append(f"band-passed {low}-{high} Hz (Butterworth)")
        if self.smoothing_mm > 0:
            steps.append(f"blurred along the mesh at FWHM {self.smoothing_mm:g} mm")
        return "; ".join(steps) if steps else "none (each vertex z-scored only)"

    def confound_path(self, subject: str) -> Path:
        """The subject's confounds file (``confounds`` must be set); an id that would lead
        the template out of its folder (a separator, or a leading ".") is refused."""
        if self.confounds is None:
            raise ValueError("preprocess.confounds is not set: no subject has a confounds file.")
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
        smoothing = _number(
            raw.get("smoothing_mm", cls.smoothing_mm), "preprocess.smoothing_mm", 0.0
        )
        detrend = raw.get("detrend", cls.detrend)
        if not isinstance(detrend, bool):
            raise ValueError(f"preprocess.detrend: true or false, got {detrend!r}.")
        hp, lp, tr = (
            None if raw.get(k) is None else _number(raw[k], f"preprocess.{k}", 0.0, strict=True)
            for k in ("high_pass", "low_pass", "t_r")
        )
        if hp is not None and lp is not None and hp >= lp:
            raise ValueError(f"preprocess: high_pass ({hp} Hz) must be below low_pass ({lp} Hz).")
        conf = raw.get("confounds")
        cols = raw.get("confound_columns", cls().confound_columns)
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


#: nilearn's ``load_confounds_strategy`` presets that surface data can use (its
#: ``ica_aroma`` needs fMRIPrep's volumetric ``desc-smoothAROMAnonaggr`` outputs, which
#: no surface file has)
DENOISE_PRESETS = ("simple", "scrubbing", "compcor")

_AROMA = (
    "ica_aroma needs fMRIPrep's volumetric desc-smoothAROMAnonaggr outputs, which surface "
    "data do not have; use simple, scrubbing or compcor"
)


def denoise_setting(raw: Any) -> dict[str, Any] | None:
    """``preprocess.denoise`` checked: a preset name, a list (or comma-separated string)
    of ``load_confounds`` strategies, or a mapping of its arguments; an error names what
    is wrong and what is allowed."""
    import inspect
    import typing

    from nilearn.interfaces.fmriprep import load_confounds

    if raw is None:
        return None
    if raw == "ica_aroma" or (isinstance(raw, dict) and raw.get("preset") == "ica_aroma"):
        raise ValueError(f"preprocess.denoise: {_AROMA}.")
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
    if "ica_aroma" in strategy:
        raise ValueError(f"preprocess.denoise.strategy: {_AROMA}.")
    bad = [str(x) for x in strategy if names and x not in names]
    if bad:
        raise ValueError(
            f"preprocess.denoise.strategy: unknown {bad}; nilearn's load_confounds knows "
            f"{list(names)} (scrubbing is 'scrub')."
        )
    return {**raw, "strategy": [str(x) for x in strategy]}


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
