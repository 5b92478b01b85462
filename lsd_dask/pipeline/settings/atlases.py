"""Comparison atlases: published parcellations scored beside the run's own.

``compare_atlases:`` in the pipeline file lists them::

    compare_atlases:
      - schaefer_400                       # built in: schaefer_ and vosdewael_ 100 to 400,
                                           # on 32k_fs_LR (brainspace's conte69 files)
      - {name: gordon, dlabel: Gordon333.32k_fs_LR.dlabel.nii}
      - {name: schaefer_fsa5, left: lh.Schaefer2018_400Parcels_7Networks_order.annot,
         right: rh.Schaefer2018_400Parcels_7Networks_order.annot}   # or .label.gii pairs

An atlas is scored with the run's held-out measures on both splits' data (it was fitted on
neither) and shown beside the methods at the K nearest its parcel count. The built-in
atlases exist on 32k_fs_LR only: for data on another mesh (fsaverage5, say) give the
atlas' files on that mesh. Nothing is resampled between meshes here: that needs the
registration spheres that do it properly (Workbench's ``-label-resample``).

Every atlas is read and checked before any data is: its files, its vertex counts against
the mesh; once the mask is known, that it labels the vertices with data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...datasets.templates import ATLASES, load_atlas
from ...io.label_files import LABEL_KEYS, read_parcellation
from . import files

__all__ = [
    "BUILTIN_ATLASES",
    "MIN_COVERAGE",
    "AtlasSpec",
    "check_coverage",
    "load_atlases",
    "parse_atlases",
]

#: the built-in names: ``<atlas>_<parcels>``
BUILTIN_ATLASES = tuple(f"{name}_{scale}" for name, scales in ATLASES.items() for scale in scales)
#: the share of the vertices with data an atlas must label (a medial wall drawn a little
#: wider than the data's is fine; an atlas of another surface labels far fewer)
MIN_COVERAGE = 0.9
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_FS_LR_32K = [32492, 32492]


@dataclass(frozen=True)
class AtlasSpec:
    """One comparison atlas: a built-in name, or files (``dlabel`` or ``left``/``right``)."""

    name: str
    files: dict[str, str] | None = None

    @property
    def source(self) -> str:
        """What the atlas was read from, for messages."""
        if self.files is None:
            return f"the built-in atlas {self.name}"
        return ", ".join(self.files.values())

    def to_dict(self) -> str | dict[str, str]:
        return self.name if self.files is None else {"name": self.name, **self.files}


def parse_atlases(raw: Any, base: Path) -> list[AtlasSpec]:
    """The ``compare_atlases`` list, checked (names, keys, files present); paths resolved
    against the pipeline file's folder."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ValueError(f"compare_atlases: a list of atlas names or files, got {raw!r}.")
    out: list[AtlasSpec] = []
    for entry in raw:
        if isinstance(entry, str):
            if entry not in BUILTIN_ATLASES:
                raise ValueError(
                    f"compare_atlases: unknown atlas {entry!r}; the built-in ones are "
                    f"{', '.join(BUILTIN_ATLASES)}, or give files: {{name: ..., dlabel: ...}}."
                )
            spec = AtlasSpec(entry)
        elif isinstance(entry, dict):
            files.check_keys(entry, {"name", *LABEL_KEYS}, "compare_atlases")
            name = str(entry.get("name", ""))
            if not _NAME.match(name):
                raise ValueError(
                    f"compare_atlases: each atlas given by files needs a name of letters, "
                    f"digits, '_' and '-' (it names files), got {name!r}."
                )
            given = {k: entry[k] for k in LABEL_KEYS if k in entry}
            if set(given) not in ({"dlabel"}, {"left", "right"}):
                raise ValueError(
                    f"compare_atlases: atlas {name!r} needs either dlabel: or both left: and "
                    f"right:, got {sorted(given)}."
                )
            paths = {k: str(files.resolve(v, base)) for k, v in given.items()}
            for p in paths.values():
                if not Path(p).exists():
                    raise FileNotFoundError(f"compare_atlases: atlas {name!r}: {p} does not exist.")
            spec = AtlasSpec(name, paths)
        else:
            raise ValueError(f"compare_atlases: an atlas is a name or a mapping, got {entry!r}.")
        if any(s.name == spec.name for s in out):
            raise ValueError(f"compare_atlases: atlas {spec.name!r} is listed twice.")
        out.append(spec)
    return out


def load_atlases(specs: list[AtlasSpec], sizes: list[int]) -> dict[str, np.ndarray]:
    """Each atlas' parcel ids over every vertex (left then right, 0 where none), checked
    against the mesh's vertex counts."""
    out = {}
    for spec in specs:
        if spec.files is None:
            if list(sizes) != _FS_LR_32K:
                raise ValueError(
                    f"compare_atlases: {spec.name} is on 32k_fs_LR (2 x 32,492 vertices) but "
                    f"the mesh has {sizes} vertices per hemisphere; give the atlas' files on "
                    "this mesh instead ({name: ..., left: ..., right: ...})."
                )
            atlas, scale = spec.name.rsplit("_", 1)
            out[spec.name] = load_atlas(atlas, int(scale))
            continue
        labels, found = read_parcellation(spec.files)
        if found != list(sizes):
            raise ValueError(
                f"compare_atlases: {spec.source} labels {found} vertices per hemisphere; the "
                f"mesh has {list(sizes)}. The atlas must be on the run's mesh."
            )
        if not np.any(labels > 0):
            raise ValueError(
                f"compare_atlases: {spec.source} labels no vertex (every value is 0, the "
                "background); is it the right file?"
            )
        out[spec.name] = labels
    return out


def check_coverage(
    specs: list[AtlasSpec], atlases: dict[str, np.ndarray], kept: np.ndarray
) -> None:
    """Fail when an atlas leaves more than ``1 - MIN_COVERAGE`` of the vertices with data
    unlabelled (one line, naming the atlas' files)."""
    n = int(kept.sum())
    for spec in specs:
        share = float(np.mean(atlases[spec.name][kept] > 0)) if n else 1.0
        if share < MIN_COVERAGE:
            raise ValueError(
                f"compare_atlases: {spec.source} labels {share:.0%} of the {n} vertices with "
                f"data (at least {MIN_COVERAGE:.0%} needed); is it on this mesh?"
            )
