"""The pipeline file's reference, generated from the configuration's own definitions.

Every key's default comes from the dataclass or mapping that defines it
(:class:`~lsd_dask.pipeline.settings.config.PipelineConfig`,
:class:`~lsd_dask.pipeline.settings.svd.SvdSettings`,
:class:`~lsd_dask.pipeline.settings.preprocess.PreprocessSettings`,
:class:`~lsd_dask.pipeline.settings.bids.BidsSettings`, the spatial options of
:data:`lsd_dask.cluster.SPATIAL_OPTIONS`); :func:`note` says what each key does: a spatial
option's note is its parameter's description in
:class:`~lsd_dask.cluster.MeshParcellation`'s docstring (so a new option is one estimator
parameter), every other key's is in :data:`NOTES`; a key without a note fails the tests, so
the reference cannot fall behind the code.

``lsd-dask config`` prints :func:`commented_defaults`; ``docs/pipeline_file.md`` is
:func:`markdown_reference`
(``python -m lsd_dask.pipeline.settings.reference > docs/pipeline_file.md``).
"""

from __future__ import annotations

import inspect
from dataclasses import MISSING, Field, asdict, fields
from typing import Any

import yaml

from ...cluster import SPATIAL_OPTIONS, MeshParcellation
from .bids import BidsSettings
from .config import PIPELINE_KEYS, PipelineConfig
from .methods import DEFAULT_METHOD
from .preprocess import PreprocessSettings
from .svd import SvdSettings

__all__ = ["NOTES", "commented_defaults", "defaults", "markdown_reference", "note"]

#: what each key of a pipeline file does (``section.key`` for a section's keys)
NOTES: dict[str, str] = {
    "subjects": "each subject: {id: sub-01, cifti: f.dtseries.nii}, or {id, left: "
    "L.func.gii, right: R.func.gii}, or {id, zarr: x.zarr}; time_slice: [start, stop] keeps "
    "part of a run",
    "globs": 'subjects found by pattern, e.g. {cifti: "data/*.dtseries.nii"} or {left: '
    '"data/*.L.func.gii", right: "data/*.R.func.gii"}; the id is the file stem',
    "bids": "an fMRIPrep derivatives tree as input (ids from sub-; a participant's runs stay "
    "in one split)",
    "bids.root": "the derivatives folder, holding sub-*/[ses-*/]func/",
    "bids.participant_label": "participants to keep, with or without sub- (empty: all)",
    "bids.space": "the BOLD files' space (fsLR: fMRIPrep's CIFTI; fsaverage5: GIFTI pairs)",
    "bids.den": "their density, e.g. 91k (null: any)",
    "bids.res": "their resolution (null: any)",
    "bids.task": "their task, e.g. rest (null: any)",
    "bids.ses": "their session (null: all, each a subject id of its own)",
    "bids.run": "their run (null: all, each a subject id of its own)",
    "bids.acq": "their acquisition (null: any)",
    "bids.desc": "their description (null: any)",
    "splits": "null: the sorted participants halved; random: halved at random "
    "(random_state); or {split1: [ids], split2: [ids]}",
    "mesh": "{left: lh.surf.gii, right: rh.surf.gii}, or conte69 / fsaverage5; null: the "
    "standard mesh with the data's vertex count",
    "display_mesh": "{left: lh.inflated.surf.gii, right: ...} to draw the figures on "
    "(null: nilearn's inflated fsaverage5 for fsaverage5, else the mesh)",
    "sphere": "{left: lh.sphere.surf.gii, right: ...} for the spin nulls (null: found for "
    "fsaverage5 and 32k_fs_LR)",
    "methods": "method names (directional, lsd, hierarchical_lsd, spherical_kmeans, kmeans, "
    "spectral, ward: no spatial option), or variants {name, method, <spatial option>...}",
    "ks": "the cluster counts K",
    "svd": "the group SVD of each split",
    "svd.method": "randomized (passes over the data) or streaming (one pass)",
    "svd.rank": "singular vectors kept (at most half of a split's time points is sensible)",
    "svd.n_power_iter": "power iterations of the randomized SVD",
    "svd.fuse_passes": "one read of the data per power iteration (q + 2 reads in all)",
    "svd.final_pass": "false: the last power iteration's row basis stands in for the last "
    "read (q + 1 reads; accuracy between q - 1 and q iterations); true where fuse_passes is "
    "false or n_power_iter 0",
    "svd.test_matrix": "sparse (8 entries ±1 a row; its product a quarter of a Gaussian "
    "one's) or gaussian: the randomized SVD's test matrix",
    "svd.sketch_width": "the first sketch reads whole subjects, drawn at random, until they "
    "hold sketch_width × (rank + 10) time points (the power iterations read them all); 0: "
    "every subject, the default where n_power_iter is 0",
    "svd.n_keep": "streaming SVD: rows kept between blocks (null: its default)",
    "svd.blur_halves_start": "split: the blur choice's half SVDs start from the split's U "
    "(one read of each half); sketch: from their own sketch, as the split's SVD",
    "min_region_size": "vertices; smaller connected pieces do not count as regions in the "
    "split-half scores",
    "features": "null: each method's own; us: unit rows of U·Σ; u: unit rows of U",
    "nonfinite": "error, or mask: drop vertices with NaN/inf in any subject",
    "preprocess": "per subject at ingest, before the SVD (default: nothing)",
    "preprocess.smoothing_mm": "FWHM along the mesh",
    "preprocess.detrend": "remove each vertex's linear trend",
    "preprocess.high_pass": "Hz, e.g. 0.01 (nilearn's signal.clean, Butterworth)",
    "preprocess.low_pass": "Hz, e.g. 0.1",
    "preprocess.t_r": "seconds; null: from each file",
    "preprocess.confounds": "a TSV per subject, e.g. confounds/{subject}_desc-confounds"
    "_timeseries.tsv",
    "preprocess.confound_columns": "its columns to regress out, e.g. [trans_x, csf, white_matter]",
    "preprocess.denoise": "nilearn's load_confounds beside each fMRIPrep BOLD file: a "
    "preset (simple, scrubbing, compcor, ica_aroma), strategies [motion, wm_csf, "
    "global_signal, scrub, high_pass] or {strategy: [...], motion: basic, ...}",
    "output": "the output folder (relative to this file)",
    "work": "null: <output>/work; or a folder or URL every worker reads, e.g. s3://bucket/run/work",
    "storage_options": "fsspec options for a work URL (key, secret, endpoint...)",
    "cluster": "a cluster_configs/*.yaml, or a scheduler address (null: a local cluster)",
    "random_state": "the seed of every random draw",
    "null_repeats": "repeats of the split-half scores' region-size and spin nulls",
    "spins": "spins per parcellation for the held-out measures' z (0: none)",
    "input_identity": "stat: an input is unchanged when its size and mtime are; content: "
    "a SHA-1 of every byte (one more read of the inputs)",
    "held_out": "splits: each split's parcels scored on the other split's data; add "
    "time_halves to fit on one half of a split's time points and score on the other",
    "compare_atlases": "published parcellations scored beside the run's: schaefer_100..400, "
    "vosdewael_100..400, or {name, dlabel: f.dlabel.nii} / {name, left, right}",
}

#: what a spatial option can be in a pipeline file beyond its estimator's values
_PIPELINE_VALUES = {"feature_smoothing_mm": "auto: each split's two halves choose it"}


def note(key: str) -> str:
    """What a pipeline-file key does (``section.key`` for a section's keys)."""
    if key in SPATIAL_OPTIONS:
        text = _parameter_notes(MeshParcellation)[key]
        extra = _PIPELINE_VALUES.get(key)
        return text.rstrip(".") + (f"; {extra}" if extra else "")
    return NOTES[key]


def _parameter_notes(obj: Any) -> dict[str, str]:
    """Each parameter's description in ``obj``'s numpydoc ``Parameters`` section, as one
    line (an empty description: its type line)."""
    lines = (inspect.getdoc(obj) or "").splitlines()
    start = lines.index("Parameters") + 2
    out: dict[str, str] = {}
    name: str | None = None
    kind = ""
    text: list[str] = []
    for line in lines[start:]:
        if line and not line.startswith(" "):
            if set(line) <= {"-"} or line in ("Attributes", "Returns", "Notes", "Examples"):
                break
            if name:
                out[name] = " ".join(text) or kind
            name, _, kind = (part.strip() for part in line.partition(" : "))
            text = []
        elif line.strip():
            text.append(line.strip())
    if name:
        out[name] = " ".join(text) or kind
    return out


#: example values shown for keys with no default (commented out in the printed file)
_EXAMPLES: dict[str, Any] = {
    "subjects": [{"id": "sub-01", "cifti": "data/sub-01.dtseries.nii"}],
    "globs": {"cifti": "data/*.dtseries.nii"},
    "bids": {"root": "fmriprep/", "participant_label": ["01", "02"], "task": "rest"},
}

#: sections whose keys are listed one by one
_SECTIONS = {"svd": SvdSettings, "preprocess": PreprocessSettings, "bids": BidsSettings}


def defaults() -> dict[str, Any]:
    """Every key of a pipeline file with its default (None where it has none)."""
    out: dict[str, Any] = {}
    for key in _keys():
        if key in SPATIAL_OPTIONS:
            out[key] = SPATIAL_OPTIONS[key]
        elif key == "svd":
            out[key] = asdict(SvdSettings())
        elif key == "preprocess":
            out[key] = PreprocessSettings().to_dict()
        elif key == "bids":
            out[key] = {f.name: _field_default(f) for f in fields(BidsSettings)}
        elif key == "methods":
            out[key] = [dict(DEFAULT_METHOD)]
        elif key == "output":
            out[key] = "lsd_dask_output"
        else:
            f = next((f for f in fields(PipelineConfig) if f.name == key), None)
            out[key] = None if f is None else _field_default(f)
    return out


def commented_defaults() -> str:
    """A pipeline file of every key at its default, each with what it does; keys with no
    default (the inputs) shown as commented-out examples."""
    values = defaults()
    lines = [
        "# lsd-dask pipeline file: every key at its default (lsd-dask config).",
        "# Give the subjects (subjects, globs or bids); the rest may stay as it is.",
    ]
    for key in _keys():
        example = key in _EXAMPLES
        value = _EXAMPLES[key] if example else values[key]
        prefix = "# " if example else ""
        if key in _SECTIONS and isinstance(value, dict):
            lines.append(f"{prefix}{key}:{'':<{max(1, 30 - len(key))}}# {note(key)}")
            for sub, v in value.items():
                lines.append(_line(f"{prefix}  {sub}: {_flow(v)}", note(f"{key}.{sub}")))
        else:
            lines.append(_line(f"{prefix}{key}: {_flow(value)}", note(key)))
    return "\n".join(lines) + "\n"


def markdown_reference() -> str:
    """The reference as a Markdown page: the commented file, then a table of the keys."""
    values = defaults()
    rows = ["| key | default | what it does |", "|---|---|---|"]
    for key in _keys():
        value = values[key]
        if key in _SECTIONS:
            rows.append(f"| `{key}` | | {note(key)} |")
            for sub, v in value.items():
                rows.append(f"| `{key}.{sub}` | `{_flow(v)}` | {note(f'{key}.{sub}')} |")
        else:
            default = "" if key in _EXAMPLES else f"`{_flow(value)}`"
            rows.append(f"| `{key}` | {default} | {note(key)} |")
    return "\n".join(
        [
            "# The pipeline file",
            "",
            "Generated from the configuration's definitions by "
            "`python -m lsd_dask.pipeline.settings.reference > docs/pipeline_file.md`; the tests "
            "fail when this page and the code differ. `lsd-dask config` prints the same file, "
            "`lsd-dask validate FILE` checks one. Relative paths are resolved against the "
            "file's folder; `pkg://NAME/path` points into an installed package.",
            "",
            "```yaml",
            commented_defaults().rstrip(),
            "```",
            "",
            *rows,
            "",
        ]
    )


def _keys() -> list[str]:
    """The top-level keys in the order a file usually gives them."""
    first = ["subjects", "globs", "bids", "splits", "mesh", "display_mesh", "sphere"]
    first += ["methods", "ks", "svd", "min_region_size", "features", *SPATIAL_OPTIONS]
    rest = sorted(PIPELINE_KEYS - set(first))
    return [k for k in first if k in PIPELINE_KEYS] + rest


def _field_default(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def _flow(value: Any) -> str:
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    text: str = yaml.safe_dump(value, default_flow_style=True, width=10**6, allow_unicode=True)
    return text.strip().removesuffix("...").strip()


def _line(text: str, note: str) -> str:
    return f"{text:<32}# {note}" if len(text) < 32 else f"{text}  # {note}"


if __name__ == "__main__":  # pragma: no cover
    print(markdown_reference(), end="")
