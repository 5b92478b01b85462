"""Every parcel's own scores, for the report (:func:`parcel_tables`): per method, K and
split, each parcel under the id the label files give it, with its name, size, held-out
homogeneity and DCBC (from the evaluation stage, on the other split's data) and its Dice
with the parcel of the same id in the other split."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...io.bids import parcel_name
from ...metrics import dice_per_id
from ..engine.context import RunContext
from .dseg import matched_labels

__all__ = ["parcel_tables"]


def parcel_tables(ctx: RunContext) -> dict[str, dict[str, dict[str, dict[str, list[Any]]]]]:
    """``{method: {K: {split: table}}}``: each table has a row per parcel (columns ``ids``,
    ``names``, ``sizes``, ``homogeneity``, ``dcbc``, ``dice``), ids as in the label files
    (a later split's parcels take the ids of the first split's they overlap most).

    The held-out measures are those of the direction that scored the split's parcels on
    the other split's data (``split1_on_split2`` for split 1); Dice is
    ``2|A_i ∩ B_i| / (|A_i| + |B_i|)`` for the parcel's id in both splits (0 where the
    other split has no parcel of that id). Empty without held-out scores of the splits.
    """
    results = ctx.results.get("evaluate", {})
    splits, kept = list(ctx.splits), ctx.kept
    out: dict[str, dict[str, dict[str, dict[str, list[Any]]]]] = {}
    for spec in ctx.cfg.methods:
        for k in ctx.cfg.ks:
            result = results.get(f"evaluate/{spec.name}/K{k}")
            if not result or "parcels" not in result:
                continue
            matched, _ = matched_labels(ctx, spec.name, k)
            per_split = {}
            for split, other in zip(splits, splits[::-1], strict=True):
                raw = ctx.wd.load_npy(ctx.wd.labels(split, spec.name, k))
                scored = result["parcels"][f"{split}_on_{other}"]
                per_split[split] = _table(raw, matched[split], matched[other], scored, kept)
            out.setdefault(spec.name, {})[str(k)] = per_split
    return out


def _table(
    raw: np.ndarray,
    ids: np.ndarray,
    other: np.ndarray,
    scored: dict[str, list[Any]],
    kept: np.ndarray,
) -> dict[str, list[Any]]:
    """One split's parcels under their file ids (``ids``: the same vertices as ``raw``,
    relabelled), with the scores the evaluation gave their raw ids."""
    # each raw id's file id: matching relabels whole parcels, so one pair per parcel
    fg = kept & (raw > 0)
    pairs = np.unique(np.stack([raw[fg], ids[fg]]), axis=1)
    to_file = dict(zip(pairs[0].tolist(), pairs[1].tolist(), strict=True))
    row = {to_file[int(i)]: n for n, i in enumerate(scored["ids"])}
    order = sorted(row)
    dice_ids, dice = dice_per_id(ids[kept], other[kept], background=0)
    dice_of = dict(zip(dice_ids.tolist(), dice.tolist(), strict=True))
    return {
        "ids": order,
        "names": [parcel_name(i) for i in order],
        "sizes": [scored["sizes"][row[i]] for i in order],
        "homogeneity": [scored["homogeneity"][row[i]] for i in order],
        "dcbc": [scored["dcbc"][row[i]] for i in order],
        "dice": [dice_of.get(i, 0.0) for i in order],
    }
