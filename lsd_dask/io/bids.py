"""BIDS-derivatives names and metadata for the parcellations a run writes.

A parcellation of split ``split1`` by a method ``directional`` at K = 200 on the 32k_fs_LR
mesh is written as::

    hemi-L_space-fsLR_seg-directional_den-32k_desc-K200split1_dseg.label.gii
    hemi-R_space-fsLR_seg-directional_den-32k_desc-K200split1_dseg.label.gii
    space-fsLR_seg-directional_den-32k_desc-K200split1_dseg.dlabel.nii   (CIFTI input)
    space-fsLR_seg-directional_den-32k_desc-K200split1_dseg.tsv          (look-up table)
    space-fsLR_seg-directional_den-32k_desc-K200split1_dseg.json         (sidecar)

Entities follow BIDS's order (``hemi``, ``space``, ``seg``, ``den``, ``desc``), labels are
alphanumeric (a method named ``spherical_kmeans`` becomes ``seg-sphericalkmeans``), and the
splits go into ``desc``: BIDS reserves the ``split-`` entity for split files of one
recording. The look-up table (``index``, ``name``, ``color``) is the one BIDS describes for
``dseg`` files, and nilearn reads it as a colour map as it is.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from .atomic import atomic_write_text

__all__ = [
    "BIDS_IGNORE",
    "ENTITY_ORDER",
    "bids_label",
    "bids_name",
    "dataset_description",
    "lookup_table",
    "parse_bids_name",
    "surface_space",
]

#: BIDS's order of the entities a file name may carry (the schema's ``rules.entities``)
ENTITY_ORDER = (
    "sub",
    "ses",
    "sample",
    "task",
    "tracksys",
    "acq",
    "nuc",
    "voi",
    "ce",
    "trc",
    "stain",
    "rec",
    "dir",
    "run",
    "mod",
    "echo",
    "flip",
    "inv",
    "mt",
    "part",
    "proc",
    "hemi",
    "space",
    "split",
    "recording",
    "chunk",
    "seg",
    "res",
    "den",
    "label",
    "desc",
)

#: vertices per hemisphere -> (space, density) of the standard surface meshes
_SPACES = {
    10242: ("fsaverage", "10k"),
    40962: ("fsaverage", "41k"),
    163842: ("fsaverage", "164k"),
    32492: ("fsLR", "32k"),
    59292: ("fsLR", "59k"),
}
_LABEL = re.compile(r"^[A-Za-z0-9]+$")


def bids_label(value: str) -> str:
    """A value as a BIDS label: its letters and digits only (``spherical_kmeans`` ->
    ``sphericalkmeans``)."""
    label = re.sub(r"[^A-Za-z0-9]", "", str(value))
    if not label:
        raise ValueError(f"{value!r} has no letters or digits to make a BIDS label of.")
    return label


def bids_name(entities: dict[str, str], suffix: str, extension: str) -> str:
    """``key-value`` pairs in BIDS order, then ``_suffix`` and the extension."""
    unknown = sorted(set(entities) - set(ENTITY_ORDER))
    if unknown:
        raise ValueError(f"not BIDS entities: {unknown}.")
    parts = []
    for key in ENTITY_ORDER:
        if key in entities:
            value = str(entities[key])
            if not _LABEL.match(value):
                raise ValueError(f"BIDS label {key}-{value!r} must be letters and digits only.")
            parts.append(f"{key}-{value}")
    return "_".join([*parts, suffix]) + extension


def parse_bids_name(name: str) -> tuple[dict[str, str], str, str]:
    """``(entities, suffix, extension)`` of a BIDS file name; a ValueError names the part
    that breaks the rules (unknown entity, order, label characters, missing suffix)."""
    stem, dot, ext = name.partition(".")
    *pairs, suffix = stem.split("_")
    if not suffix or "-" in suffix or not _LABEL.match(suffix):
        raise ValueError(f"{name}: no suffix after the entities.")
    entities: dict[str, str] = {}
    last = -1
    for pair in pairs:
        key, sep, value = pair.partition("-")
        if not sep or key not in ENTITY_ORDER:
            raise ValueError(f"{name}: {pair!r} is not a BIDS entity.")
        if not _LABEL.match(value):
            raise ValueError(f"{name}: label of {key} must be letters and digits only.")
        pos = ENTITY_ORDER.index(key)
        if pos <= last:
            raise ValueError(f"{name}: entity {key} is out of BIDS order.")
        last = pos
        entities[key] = value
    return entities, suffix, dot + ext


def surface_space(hemisphere_sizes: list[int]) -> dict[str, str]:
    """``space`` and ``den`` entities of a standard mesh from its vertices per hemisphere
    (fsaverage5 -> fsaverage/10k, 32k_fs_LR -> fsLR/32k); ``space-custom`` otherwise."""
    n = int(hemisphere_sizes[0])
    if n in _SPACES and all(int(s) == n for s in hemisphere_sizes):
        space, den = _SPACES[n]
        return {"space": space, "den": den}
    return {"space": "custom", "den": str(n)}


def lookup_table(colours: np.ndarray, ids: Any = None) -> str:
    """A BIDS ``dseg`` look-up table (TSV: index, name, color); id 0 is ``Background``,
    parcel i is ``parcel0001``... (the names of the label files' tables).

    ``colours`` holds RGB(A) rows in [0, 1] for ids 0..n; ``ids`` the ids to list (default
    all; 0 is always listed).
    """
    colours = np.asarray(colours)
    keep = range(len(colours)) if ids is None else sorted({0, *(int(i) for i in ids)})
    rows = ["index\tname\tcolor"]
    for i in keep:
        name = "Background" if i == 0 else f"parcel{i:04d}"
        hexa = "#" + "".join(f"{int(round(255 * float(v))):02x}" for v in colours[i][:3])
        rows.append(f"{i}\t{name}\t{hexa}")
    return "\n".join(rows) + "\n"


#: what a run writes beside the BIDS files, for the BIDS validator to skip (``.bidsignore``)
BIDS_IGNORE = ("report.json", "report.html", "*.png", "work/")


def dataset_description(path: Path, *, version: str, command: str | None) -> Path:
    """``dataset_description.json`` of a derivatives folder written by lsd-dask."""
    generated: dict[str, Any] = {"Name": "lsd-dask", "Version": version}
    if command:
        generated["Description"] = f"Run as: {command}"
    desc = {
        "Name": "lsd-dask split-half cortical parcellations",
        "BIDSVersion": "1.10.0",
        "DatasetType": "derivative",
        "GeneratedBy": [generated],
    }
    atomic_write_text(path, json.dumps(desc, indent=2) + "\n")
    atomic_write_text(path.parent / ".bidsignore", "\n".join(BIDS_IGNORE) + "\n")
    return path
