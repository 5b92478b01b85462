"""BIDS-derivatives names and metadata for the parcellations a run writes.

Each parcellation a run makes is a group atlas on a surface template (BIDS 1.11's atlas
derivatives): a parcellation of split ``split1`` by a method ``directional`` at K = 200 on
the 32k_fs_LR mesh is written as::

    tpl-fsLR/anat/tpl-fsLR_hemi-L_atlas-directional200split1_scale-200_den-32k_dseg.label.gii
    tpl-fsLR/anat/tpl-fsLR_hemi-R_atlas-directional200split1_scale-200_den-32k_dseg.label.gii
    tpl-fsLR/anat/tpl-fsLR_atlas-directional200split1_scale-200_den-32k_dseg.dlabel.nii
    tpl-fsLR/anat/tpl-fsLR_atlas-directional200split1_scale-200_den-32k_dseg.tsv
    tpl-fsLR/anat/tpl-fsLR_atlas-directional200split1_scale-200_den-32k_dseg.json
    atlas-directional200split1_description.json

``tpl`` is the surface template (``fsLR``, ``fsaverage``; ``custom`` for any other mesh,
whose surfaces go into ``surfaces/`` and are named by each sidecar's ``SpatialReference``),
``atlas`` names one parcellation: the method, K and the split (:func:`atlas_label`), so that
a consumer that selects atlases by name alone (pybids, which does not know ``scale``;
xcp_d's ``--atlases``) finds one image per name, and its own ``.tsv`` and ``.json`` beside
it. ``scale`` is K again, for the tools that read BIDS's atlas entities, and ``den`` the mesh
density. Entities come in the order of the BIDS schema (``bidsschematools``); labels are
letters and digits only, so a method named ``spherical_kmeans`` becomes
``atlas-sphericalkmeans...``. The look-up table (``index``, ``name``, ``color``) is the one
BIDS describes for ``dseg`` files.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from .atomic import atomic_write_text

__all__ = [
    "BIDS_IGNORE",
    "BIDS_VERSION",
    "atlas_description",
    "atlas_label",
    "atlas_folder",
    "bids_label",
    "bids_name",
    "dataset_description",
    "density_description",
    "entity_order",
    "find_atlas_folder",
    "lookup_table",
    "parse_bids_name",
    "surface_template",
    "write_citation",
]

#: the BIDS version the derivative follows (atlas derivatives arrived in 1.11)
BIDS_VERSION = "1.11.0"

#: a standard mesh (as :func:`lsd_dask.datasets.templates.identify_template` names it) ->
#: (template, density, what the density means)
_TEMPLATES = {
    "fsaverage5": ("fsaverage", "10k", "fsaverage5: 10,242 vertices per hemisphere"),
    "conte69": ("fsLR", "32k", "32k_fs_LR: 32,492 vertices per hemisphere"),
}
_LABEL = re.compile(r"^[A-Za-z0-9]+$")

#: what a run writes beside the BIDS files, for the BIDS validator to skip (``.bidsignore``;
#: the validator matches a folder by its bare name, ``work``, not ``work/``)
#: (a subject's confidence map: BIDS names no suffix for a surface scalar map)
BIDS_IGNORE = (
    "report.json",
    "report.html",
    "*.png",
    "*.log",
    "work",
    "surfaces",
    "*_confidence.shape.gii",
    "*_confidence.dscalar.nii",
)


@functools.cache
def entity_order() -> tuple[str, ...]:
    """The short names of BIDS's entities in the order a file name gives them, read from
    the BIDS schema that ``bidsschematools`` ships (``rules.entities``)."""
    from bidsschematools import schema

    loaded = schema.load_schema()
    return tuple(str(loaded.objects.entities[key]["name"]) for key in loaded.rules.entities)


def bids_label(value: str) -> str:
    """A value as a BIDS label: its letters and digits only (``spherical_kmeans`` ->
    ``sphericalkmeans``)."""
    label = re.sub(r"[^A-Za-z0-9]", "", str(value))
    if not label:
        raise ValueError(f"{value!r} has no letters or digits to make a BIDS label of.")
    return label


def atlas_label(method: str, k: int, split: str) -> str:
    """The ``atlas`` label of one parcellation: the method's name, K and the split as BIDS
    letters and digits (``directional_merged``, 200, ``split1`` ->
    ``directionalmerged200split1``)."""
    return f"{bids_label(method)}{int(k)}{bids_label(split)}"


def bids_name(entities: Mapping[str, str], suffix: str, extension: str) -> str:
    """``key-value`` pairs in BIDS order, then ``_suffix`` and the extension."""
    order = entity_order()
    unknown = sorted(set(entities) - set(order))
    if unknown:
        raise ValueError(f"not BIDS entities: {unknown}.")
    parts = []
    for key in order:
        if key in entities:
            value = str(entities[key])
            if not _LABEL.match(value):
                raise ValueError(f"BIDS label {key}-{value!r} must be letters and digits only.")
            parts.append(f"{key}-{value}")
    return "_".join([*parts, suffix]) + extension


def parse_bids_name(name: str) -> tuple[dict[str, str], str, str]:
    """``(entities, suffix, extension)`` of a BIDS file name; a ValueError names the part
    that breaks the rules (unknown entity, order, label characters, missing suffix)."""
    order = entity_order()
    stem, dot, ext = name.partition(".")
    *pairs, suffix = stem.split("_")
    if not suffix or "-" in suffix or not _LABEL.match(suffix):
        raise ValueError(f"{name}: no suffix after the entities.")
    entities: dict[str, str] = {}
    last = -1
    for pair in pairs:
        key, sep, value = pair.partition("-")
        if not sep or key not in order:
            raise ValueError(f"{name}: {pair!r} is not a BIDS entity.")
        if not _LABEL.match(value):
            raise ValueError(f"{name}: label of {key} must be letters and digits only.")
        pos = order.index(key)
        if pos <= last:
            raise ValueError(f"{name}: entity {key} is out of BIDS order.")
        last = pos
        entities[key] = value
    return entities, suffix, dot + ext


def surface_template(hemisphere_sizes: list[int], standard: str | None) -> dict[str, str]:
    """``tpl`` and ``den`` entities of the run's mesh: those of the standard mesh it was
    found to be (``standard``, by its triangles: fsaverage5 -> fsaverage/10k, conte69 ->
    fsLR/32k); ``tpl-custom`` with the vertex count as density otherwise, whatever the
    count (an icosphere of 32,492 vertices is not fsLR)."""
    if standard in _TEMPLATES:
        template, den, _ = _TEMPLATES[standard]
        return {"tpl": template, "den": den}
    return {"tpl": "custom", "den": str(int(hemisphere_sizes[0]))}


def density_description(hemisphere_sizes: list[int], standard: str | None) -> str:
    """The sidecar's ``Density``: what the ``den`` entity of :func:`surface_template`
    means."""
    if standard in _TEMPLATES:
        return _TEMPLATES[standard][2]
    sizes = " and ".join(f"{int(s):,}" for s in hemisphere_sizes)
    return f"the run's own mesh: {sizes} vertices (left and right hemisphere)"


def atlas_folder(output: str | Path, template: str) -> Path:
    """Where a run's label files go: ``tpl-<template>/anat`` in the output folder."""
    return Path(output) / f"tpl-{template}" / "anat"


def find_atlas_folder(output: str | Path) -> Path:
    """The one ``tpl-*/anat`` folder of a run's output folder (FileNotFoundError when
    there is none, ValueError when there are several)."""
    found = sorted(Path(output).glob("tpl-*/anat"))
    if not found:
        raise FileNotFoundError(f"{output} holds no tpl-*/anat folder of label files.")
    if len(found) > 1:
        raise ValueError(f"{output} holds {len(found)} tpl-*/anat folders; pass one.")
    return found[0]


def lookup_table(
    colours: np.ndarray, ids: Any = None, columns: dict[str, dict[int, Any]] | None = None
) -> str:
    """A BIDS ``dseg`` look-up table (TSV: index, name, color, then ``columns``); id 0 is
    ``Background``, parcel i is ``parcel0001``... (the names of the label files' tables).

    ``colours`` holds RGB(A) rows in [0, 1] for ids 0..n; ``ids`` the ids to list (default
    all; 0 is always listed); ``columns`` more columns by name, each a value per id (``n/a``
    where it has none).
    """
    colours = np.asarray(colours)
    columns = columns or {}
    keep = range(len(colours)) if ids is None else sorted({0, *(int(i) for i in ids)})
    rows = ["\t".join(["index", "name", "color", *columns])]
    for i in keep:
        name = "Background" if i == 0 else parcel_name(i)
        hexa = hex_colour(colours[i])
        more = [str(values.get(i, "n/a")) for values in columns.values()]
        rows.append("\t".join([str(i), name, hexa, *more]))
    return "\n".join(rows) + "\n"


def hex_colour(rgb: Any) -> str:
    """An RGB(A) row in [0, 1] as ``#rrggbb`` (the look-up tables' colours)."""
    return "#" + "".join(f"{int(round(255 * float(v))):02x}" for v in list(rgb)[:3])


def parcel_name(i: int) -> str:
    """Parcel ``i``'s name in the look-up tables: ``parcel0007``."""
    return f"parcel{int(i):04d}"


def dataset_description(
    path: Path,
    *,
    version: str,
    command: str | None,
    readme: str | None = None,
    source: Path | None = None,
) -> Path:
    """``dataset_description.json`` of a derivatives folder written by lsd-dask, with its
    ``.bidsignore`` and, given ``readme`` text, its ``README.md``. It names no
    ``Authors``: the validator wants those in ``CITATION.cff`` alone.

    ``GeneratedBy`` gives the command with each absolute path shortened to its name (a
    shared derivative names no folder of the machine it was made on). ``source``: the
    BIDS dataset the run read (an fMRIPrep tree), named in ``SourceDatasets`` by its path
    relative to the output folder and the version of the pipeline that made it.
    """
    generated: dict[str, Any] = {"Name": "lsd-dask", "Version": version}
    if command:
        generated["Description"] = f"Run as: {_portable(command)}"
    desc: dict[str, Any] = {
        "Name": "lsd-dask split-half cortical parcellations",
        "BIDSVersion": BIDS_VERSION,
        "DatasetType": "derivative",
        "GeneratedBy": [generated],
    }
    if source is not None:
        desc["SourceDatasets"] = [_source_dataset(Path(source), path.parent)]
    atomic_write_text(path, json.dumps(desc, indent=2) + "\n")
    atomic_write_text(path.parent / ".bidsignore", "\n".join(BIDS_IGNORE) + "\n")
    if readme is not None:
        atomic_write_text(path.parent / "README.md", readme)
    return path


def _portable(command: str) -> str:
    """A command line with each absolute path shortened to its last part."""
    words = shlex.split(command)
    return shlex.join(Path(w).name if os.path.isabs(w) else w for w in words)


def _source_dataset(source: Path, output: Path) -> dict[str, str]:
    """A ``SourceDatasets`` entry: the dataset's path from the output folder, and the
    version of what generated it (fMRIPrep's, from its own description)."""
    entry = {"URL": Path(os.path.relpath(source.resolve(), output.resolve())).as_posix()}
    try:
        described = json.loads((source / "dataset_description.json").read_text())
        entry["Version"] = str(described["GeneratedBy"][0]["Version"])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        pass  # a description without a version: the path alone
    return entry


def atlas_description(
    output: Path, atlas: str, *, name: str, description: str, references: Iterable[str]
) -> Path:
    """``atlas-<atlas>_description.json``: the atlas's name, what it is and how to cite
    the method that made it."""
    desc = {
        "AtlasName": name,
        "Description": description,
        "Species": "Homo sapiens",
        "ReferencesAndLinks": list(references),
    }
    path = output / bids_name({"atlas": atlas}, "description", ".json")
    return atomic_write_text(path, json.dumps(desc, indent=2) + "\n")


def write_citation(path: Path, *, version: str, references: Iterable[Mapping[str, Any]]) -> Path:
    """``CITATION.cff`` (Citation File Format 1.2.0) for the derivative: the software that
    made it, then the papers of the methods and measures it used (``references``: CFF
    reference entries, each with ``type``, ``title``, ``authors`` and ``year``)."""
    cff = {
        "cff-version": "1.2.0",
        "message": (
            "If you use these parcellations, cite the software and the papers of the "
            "methods and measures that made them (references below)."
        ),
        "type": "dataset",
        "title": "lsd-dask split-half cortical parcellations",
        "version": version,
        "authors": [{"name": "lsd-dask"}],
        "references": [dict(ref) for ref in references],
    }
    return atomic_write_text(path, yaml.safe_dump(cff, sort_keys=False, allow_unicode=True))
