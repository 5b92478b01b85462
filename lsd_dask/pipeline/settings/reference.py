"""The pipeline file's reference, generated from the configuration's own definitions.

Every key's default comes from the dataclass or mapping that defines it
(:class:`~lsd_dask.pipeline.settings.config.PipelineConfig`,
:class:`~lsd_dask.pipeline.settings.svd.SvdSettings`,
:class:`~lsd_dask.pipeline.settings.preprocess.PreprocessSettings`,
:class:`~lsd_dask.pipeline.settings.bids.BidsSettings`,
:class:`~lsd_dask.pipeline.settings.individual.IndividualSettings`, the spatial options of
:data:`lsd_dask.cluster.SPATIAL_OPTIONS`); :func:`note` says what each key does: a spatial
option's note is its parameter's description in
:class:`~lsd_dask.cluster.MeshParcellation`'s docstring (so a new option is one estimator
parameter), every other key's is on its settings field (with its default and bound); a key
without a note fails the tests, so the reference cannot fall behind the code.

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
from .config import PipelineConfig
from .individual import IndividualSettings
from .load import PIPELINE_KEYS
from .methods import DEFAULT_METHOD
from .preprocess import PreprocessSettings
from .svd import SvdSettings

__all__ = ["NOTES", "commented_defaults", "defaults", "markdown_reference", "note"]

#: what the pipeline-file keys that are no settings field do (every other key's note is on
#: its field: :func:`lsd_dask.pipeline.settings.files.setting`)
NOTES: dict[str, str] = {
    "globs": 'subjects found by pattern, e.g. {cifti: "data/*.dtseries.nii"} or {left: '
    '"data/*.L.func.gii", right: "data/*.R.func.gii"}; the id is the file stem',
}

#: what a spatial option can be in a pipeline file beyond its estimator's values
_PIPELINE_VALUES = {"feature_smoothing_mm": "auto: each split's two halves choose it"}


def note(key: str) -> str:
    """What a pipeline-file key does (``section.key`` for a section's keys)."""
    if key in SPATIAL_OPTIONS:
        text = _parameter_notes(MeshParcellation)[key]
        extra = _PIPELINE_VALUES.get(key)
        return text.rstrip(".") + (f"; {extra}" if extra else "")
    section, _, name = key.rpartition(".")
    owner = _SECTIONS[section] if section else PipelineConfig
    field = next((f for f in fields(owner) if f.name == name), None)
    if field is not None and "note" in field.metadata:
        return str(field.metadata["note"])
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
    "individual": {"method": "prior_potts", "prior": None, "ks": None},
}

#: sections whose keys are listed one by one
_SECTIONS = {
    "svd": SvdSettings,
    "preprocess": PreprocessSettings,
    "bids": BidsSettings,
    "individual": IndividualSettings,
}


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
            out[key] = _section_defaults(key)
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
            value = value if value is not None else _section_defaults(key)  # a section off
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


def _section_defaults(key: str) -> dict[str, Any]:
    """A section's keys at their defaults."""
    return {f.name: _field_default(f) for f in fields(_SECTIONS[key])}


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
