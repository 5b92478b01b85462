"""One method's parcels at one K in every split under the same ids and colours: what the
label files write and the individual parcels inherit."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..engine.context import RunContext

__all__ = ["matched_labels"]


def matched_labels(ctx: RunContext, method: str, k: int) -> tuple[dict[str, Any], np.ndarray]:
    """A method's labels at K per split as the label files write them, and their colours:
    later splits take the ids of the first split's parcels they overlap most, so parcel 7
    names the same region in every split (and gets the same colour)."""
    from ...plotting import match_labels, parcel_colours

    wd, splits = ctx.wd, list(ctx.splits)
    labs = {split: wd.load_npy(wd.labels(split, method, k)) for split in splits}
    for split in splits[1:]:
        labs[split] = match_labels(labs[splits[0]], labs[split])
    n = max(int(v.max(initial=0)) for v in labs.values())
    return labs, parcel_colours(list(labs.values()), ctx.adjacency, n)
