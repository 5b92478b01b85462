"""A parcellation as BIDS ``dseg`` files (:func:`write_dseg`), and one method's parcels at
one K in every split under the same ids and colours (:func:`matched_labels`): what the
group's label files write and each participant's own parcels inherit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ...io.atomic import atomic_write_text
from ...io.bids import bids_name, lookup_table
from ...io.surface_files import write_dlabel, write_label_gifti
from ..engine.context import RunContext

__all__ = ["matched_labels", "write_dseg"]


def write_dseg(
    folder: Path,
    entities: dict[str, str],
    labels: np.ndarray,
    sizes: list[int],
    *,
    colours: np.ndarray,
    title: str,
    sidecar: dict[str, Any],
    vertices: dict[str, np.ndarray] | None = None,
    columns: dict[str, dict[int, Any]] | None = None,
) -> list[Path]:
    """One parcellation's files under ``entities``: a ``_dseg.label.gii`` per hemisphere,
    a ``.dlabel.nii`` with the input's brain models (``vertices``, for CIFTI input), the
    look-up table (``columns``: more of it per parcel) and the sidecar; their paths."""
    out = []
    for hemi, part in (("left", labels[: sizes[0]]), ("right", labels[sizes[0] :])):
        name = bids_name({"hemi": hemi[0].upper(), **entities}, "dseg", ".label.gii")
        out.append(
            write_label_gifti(folder / name, part, hemisphere=hemi, colours=colours, name=title)
        )
    if vertices is not None:
        out.append(
            write_dlabel(folder / bids_name(entities, "dseg", ".dlabel.nii"), labels, sizes,
                         name=title, colours=colours, vertices=vertices)
        )  # fmt: skip
    table = lookup_table(colours, ids=np.unique(labels), columns=columns)
    out.append(atomic_write_text(folder / bids_name(entities, "dseg", ".tsv"), table))
    out.append(
        atomic_write_text(
            folder / bids_name(entities, "dseg", ".json"), json.dumps(sidecar, indent=2)
        )
    )
    return out


def matched_labels(ctx: RunContext, method: str, k: int) -> tuple[dict[str, Any], np.ndarray]:
    """A method's labels at K per split as the label files write them, and their colours:
    later splits take the ids of the first split's parcels they overlap most, so parcel 7
    names the same region in every split (and gets the same colour). Made once per run
    (the label files, the report's tables and its viewer read the same)."""
    from ...plotting import match_labels, parcel_colours

    cached = ctx.shared.setdefault("matched_labels", {})
    if (method, k) not in cached:
        wd, splits = ctx.wd, list(ctx.splits)
        labs = {split: wd.load_npy(wd.labels(split, method, k)) for split in splits}
        for split in splits[1:]:
            labs[split] = match_labels(labs[splits[0]], labs[split])
        n = max(int(v.max(initial=0)) for v in labs.values())
        cached[method, k] = (labs, parcel_colours(list(labs.values()), ctx.adjacency, n))
    labs, colours = cached[method, k]
    return dict(labs), colours
