"""Split-half scores of a pair of parcellations, beside two nulls, with z-values.

Both splits' labels are first split into connected regions on the mesh and regions under
``min_region_size`` vertices dropped (Blumensath's protocol); every score compares split
1's regions with split 2's on the vertices labelled in both:

- Dice of region pairs matched greedily (largest overlap first), NMI (geometric), AMI and
  ARI;
- the region-size null: split 2's region sizes grown at random places on the mesh, as
  fragmented as the result but nowhere in particular;
- the spin null (when the meshes have spheres): split 2's parcellation rotated on the
  sphere (:mod:`lsd_dask.spin`), which keeps its parcels' shapes;
- each score's z-value against each null: ``(score - null mean) / null sd``.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np

from ... import evaluation as ev
from ... import metrics
from ...distributed import active_client, finished
from ...spin import find_spheres, spin_indices, spin_labels
from ...surface import grow_sized_regions, split_connected
from ..engine.context import RunContext
from .time_halves import time_halves_rows

__all__ = ["explain_scores", "score_pair", "score_run"]


def score_run(ctx: RunContext) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Split-half scores of every method and K, and what they were computed on (the
    report's ``scores`` and ``scores_explained``)."""
    cfg = ctx.cfg
    sphere = find_spheres(ctx.meshes, cfg.sphere)
    spins = None
    if sphere["spheres"] is not None and cfg.null_repeats > 0:
        spins = spin_indices(
            sphere["spheres"], cfg.null_repeats, random_state=[cfg.random_state, 1]
        )
    explained = explain_scores(
        min_region_size=cfg.min_region_size,
        null_repeats=cfg.null_repeats,
        spin_source=sphere["source"] if spins else None,
        n_spins=len(spins or []),
    )
    return _scores(ctx, spins), explained


def score_pair(
    a: np.ndarray,
    b: np.ndarray,
    *,
    kept: np.ndarray,
    adjacency: Any,
    min_region_size: int,
    null_repeats: int,
    seed: Any,
    spins: list[np.ndarray] | None = None,
) -> dict[str, Any]:
    """Scores of split 1's labels ``a`` against split 2's ``b`` (0 = background)."""
    pa = split_connected(a, adjacency, min_size=min_region_size)
    pb = split_connected(b, adjacency, min_size=min_region_size)
    dice = metrics.dice_matched(pa, pb, background=0)
    row: dict[str, Any] = {
        "dice": dice.mean,
        "nmi": metrics.nmi(pa, pb, background=0),
        "ami": metrics.ami(pa, pb, background=0),
        "ari": metrics.ari(pa, pb, background=0),
        "n_regions": list(dice.n_regions),
        # parcels in the written labels (K, or more with `contiguous`)
        "n_parcels": [int(len(np.unique(v[v > 0]))) for v in (a, b)],
    }
    rng = np.random.default_rng(seed)
    sizes = np.bincount(pb)[1:]
    sizes = sizes[sizes > 0]
    nulls: dict[str, list[np.ndarray]] = {"null": []}
    for _ in range(int(null_repeats)):
        q = grow_sized_regions(adjacency, sizes, random_state=rng, mask=kept)
        nulls["null"].append(q)
    if spins:
        nulls["spin"] = [
            split_connected(spin_labels(b, index, kept), adjacency, min_size=min_region_size)
            for index in spins
        ]
    for name, maps in nulls.items():
        prefix = "null" if name == "null" else "spin_null"
        for score, fn in (("dice", _dice), ("nmi", _nmi)):
            values = np.array([fn(pa, q) for q in maps]) if maps else np.array([np.nan])
            mean, sd = float(np.mean(values)), float(np.std(values))
            row[f"{prefix}_{score}_mean"] = mean
            row[f"{prefix}_{score}_sd"] = sd
            row[f"{prefix}_{score}_z"] = (row[score] - mean) / sd if sd > 0 else None
    return row


def explain_scores(
    *, min_region_size: int, null_repeats: int, spin_source: str | None, n_spins: int
) -> dict[str, str]:
    """What each score of the report was computed on, in words (the report's section)."""
    spin = (
        f"{n_spins} spins of split 2's parcellation on the sphere ({spin_source}); the "
        "right hemisphere turns by the left's rotation mirrored across the midline."
        if spin_source
        else "not computed: no sphere for these meshes (set `sphere: {left, right}`)."
    )
    return {
        "regions": (
            "Before scoring, each split's labels are split into connected regions on the mesh "
            f"and regions under {min_region_size} vertices are dropped; n_regions counts what "
            "is left per split, n_parcels the parcels written (K, or more with contiguous)."
        ),
        "dice": "Mean Dice of region pairs matched greedily, largest overlap first.",
        "nmi": "Normalised mutual information between the splits' regions (geometric mean).",
        "ami": "Adjusted mutual information: 0 for unrelated parcellations, 1 for equal ones.",
        "ari": "Adjusted Rand index between the splits' regions.",
        "null": (
            f"{null_repeats} repeats: split 2's region sizes grown at random places on the "
            "mesh, as fragmented as the result but nowhere in particular (null_dice_*, "
            "null_nmi_*)."
        ),
        "spin_null": spin,
        "z": "z-value of a score against a null: (score - null mean) / null sd (*_z).",
        "heldout": (
            "Each split's parcels scored on the other split's data (unit rows of its U·Σ), "
            "averaged over both directions, each with its z against spins of the "
            "parcellation: "
            + "; ".join(f"heldout_{m.name}, {m.explanation}" for m in ev.MEASURES)
            + ". Blurring the features raises split-half Dice by "
            "making both splits smooth alike; these measures compare the parcels with data "
            "the fit never saw, and DCBC compares pairs only at equal distance, so "
            "smoothness alone cannot raise them. The values use all the held-out data; "
            "the spins (spins:, 1,000 by default) are scored on a fixed sample of vertices "
            "(and of the pairs among a second sample for DCBC), the parcellation on the "
            "same sample for its z."
        ),
        "timehalves": (
            "With held_out: [..., time_halves]: each method fitted at K on one half of every "
            "subject's time points within a split and scored on the other half, with the "
            "measures and spins of heldout_*; averaged over the splits and both directions "
            f"({', '.join(f'timehalves_{m.name}' for m in ev.MEASURES)}, each with its _z)."
        ),
    }


def _dice(pa: np.ndarray, q: np.ndarray) -> float:
    return metrics.dice_matched(pa, q, background=0).mean


def _nmi(pa: np.ndarray, q: np.ndarray) -> float:
    return metrics.nmi(pa, q, background=0)


def _scores(ctx: RunContext, spins: list[np.ndarray] | None) -> list[dict[str, Any]]:
    """Split-half scores of every method and K (:func:`.scores.score_pair`), in the
    configuration's order; as tasks on the workers when a cluster is active."""
    cfg, log = ctx.cfg, ctx.log
    rows = {}
    for (method, k), scored in _score_pairs(ctx, spins):
        row = {"method": method, "k": k}
        row |= scored
        row |= _held_out(ctx, method, k)
        row |= time_halves_rows(ctx, method, k)
        rows[method, k] = row
        spin = f", spin null {row['spin_null_dice_mean']:.3f}" if spins else ""
        log(
            f"[scores] {method} K={k}: Dice {row['dice']:.3f} (null "
            f"{row['null_dice_mean']:.3f} ± {row['null_dice_sd']:.3f}{spin}), NMI "
            f"{row['nmi']:.3f} (null {row['null_nmi_mean']:.3f}), AMI {row['ami']:.3f}, "
            f"ARI {row['ari']:.3f}"
        )
    return [rows[m.name, k] for m in cfg.methods for k in cfg.ks]


def _score_pairs(
    ctx: RunContext, spins: list[np.ndarray] | None
) -> Iterator[tuple[tuple[str, int], dict[str, Any]]]:
    """Each (method, K)'s :func:`score_pair`, as it is done: a task each on the workers
    (the mesh and the spins sent once), else here one after the other."""
    cfg, wd, splits = ctx.cfg, ctx.wd, list(ctx.splits)
    jobs = [(m.name, k) for m in cfg.methods for k in cfg.ks]
    score = partial(score_pair, min_region_size=cfg.min_region_size, null_repeats=cfg.null_repeats)

    client = active_client()
    shared: list[Any] = [ctx.kept, ctx.adjacency, spins]
    if client is not None:  # sent to the workers once
        shared = client.scatter(shared, broadcast=True, hash=False)
    kept, adjacency, spun = shared
    futures = {}
    for job in jobs:
        a, b = (wd.load_npy(wd.labels(s, *job)) for s in splits)
        seed = [cfg.random_state, job[1]]
        if client is None:
            yield job, score(a, b, kept=kept, adjacency=adjacency, seed=seed, spins=spun)
        else:
            fut = client.submit(
                score, a, b, kept=kept, adjacency=adjacency, seed=seed, spins=spun, pure=False
            )
            futures[fut] = job
    if futures:
        yield from finished(client, futures)


def _held_out(ctx: RunContext, method: str, k: int) -> dict[str, Any]:
    """The evaluation stage's means for a row (:mod:`.evaluate`), when it ran."""
    result = ctx.results.get("evaluate", {}).get(f"evaluate/{method}/K{k}")
    if result is None:
        return {}
    return {f"heldout_{m}": v for m, v in result["mean"].items()}
