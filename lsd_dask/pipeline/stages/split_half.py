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

The stage (:class:`SplitHalfStage`): ``scores/<method>/K<k>``, one unit per method and K,
in ``work/scores/<method>_K<k>.json``, as tasks on the workers when a cluster is active.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np

from ... import metrics
from ..._version import __version__
from ...distributed import active_client, finished
from ...spin import spin_indices, spin_labels
from ...surface import grow_sized_regions, split_connected
from ..engine.context import RunContext
from ..engine.contract import SPIN_Z_HELP, Column, RowKey, StageBase, Unit
from ..engine.workdir import mesh_digest

__all__ = ["SplitHalfStage", "score_pair"]


#: the nulls' names in a row, and the scores each null is drawn for
_NULLS = ("null", "spin_null")
_NULL_SCORES = ("dice", "nmi")


def _columns() -> tuple[Column, ...]:
    """Every column of a row: the sidecar's first, in the order it lists them."""
    cols = [
        Column("dice", "split-half Dice", higher_is_better=True, sidecar_key="dice",
               help="mean Dice of split 1's regions with split 2's, matched greedily "
               "(largest overlap first); blur raises it, so it never decides alone"),
        Column("nmi", "NMI", sidecar_key="nmi",
               help="normalised mutual information of the two splits' regions"),
        Column("ari", "ARI", sidecar_key="ari",
               help="adjusted Rand index of the two splits' regions"),
        Column("null_dice_mean", "null Dice", sidecar_key="null_dice_mean",
               help="Dice when split 2's region sizes grow at random places on the mesh"),
        Column("null_dice_sd", "null Dice sd", table=False, sidecar_key="null_dice_sd"),
        Column("n_regions", "regions", sidecar_key="n_regions",
               help="connected regions of at least the minimum size, per split"),
        Column("null_dice_z", "z", help="Dice's z against the random-region null"),
        Column("spin_null_dice_mean", "spin-null Dice",
               help="Dice of split 1 with split 2 spun on the sphere"),
        Column("spin_null_dice_z", "z (spin)", help=SPIN_Z_HELP),
        Column("null_nmi_mean", "null NMI", help="NMI under the random-region null"),
        Column("ami", "AMI", help="adjusted mutual information: 0 unrelated, 1 equal"),
        Column("n_parcels", "parcels", table=False),
    ]  # fmt: skip
    named = {c.name for c in cols}
    cols += [
        Column(f"{null}_{score}_{stat}", f"{null} {score} {stat}", table=False)
        for null in _NULLS
        for score in _NULL_SCORES
        for stat in ("mean", "sd", "z")
        if f"{null}_{score}_{stat}" not in named
    ]
    return tuple(cols)


class SplitHalfStage(StageBase):
    """``scores/<method>/K<k>``: split 1's parcellation against split 2's, beside the
    region-size and spin nulls (:func:`score_pair`)."""

    name = "scores"
    reads = ("cluster",)
    columns = _columns()
    sidecar_section = "SplitHalfScores"

    def plan(self, ctx: RunContext) -> list[Unit]:
        cfg, wd, splits = ctx.cfg, ctx.wd, list(ctx.splits)
        common = {
            "mesh": mesh_digest(*ctx.kept_mesh()),
            "sphere": ctx.sphere_digest if cfg.null_repeats > 0 else None,
            "min_region_size": cfg.min_region_size,
            "null_repeats": cfg.null_repeats,
            "random_state": cfg.random_state,
            "lsd_dask": __version__,
        }
        return [
            Unit(
                f"scores/{spec.name}/K{k}",
                {
                    **common,
                    "labels": {s: ctx.fingerprint(f"cluster/{s}/{spec.name}/K{k}") for s in splits},
                },
                [wd.folder.join("scores", f"{spec.name}_K{k}.json")],
                label=f"{spec.name} K={k}",
                item=(spec.name, k),
            )
            for spec in cfg.methods
            for k in cfg.ks
        ]

    def load(self, ctx: RunContext, unit: Unit) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(ctx.wd.read_text(unit.outputs[0]))
        return result

    def compute(self, ctx: RunContext, todo: list[Unit]) -> Iterator[tuple[Unit, Any]]:
        spins = _spins(ctx)
        units = {u.item: u for u in todo}
        for job, row in _score_pairs(ctx, spins, list(units)):
            unit = units[job]
            ctx.wd.write_text(unit.outputs[0], json.dumps(row, indent=1))
            spin = f", spin null {row['spin_null_dice_mean']:.3f}" if spins else ""
            ctx.log(
                f"[scores] {job[0]} K={job[1]}: Dice {row['dice']:.3f} (null "
                f"{row['null_dice_mean']:.3f} ± {row['null_dice_sd']:.3f}{spin}), NMI "
                f"{row['nmi']:.3f} (null {row['null_nmi_mean']:.3f}), AMI {row['ami']:.3f}, "
                f"ARI {row['ari']:.3f}"
            )
            yield unit, row

    def rows(self, ctx: RunContext) -> dict[RowKey, dict[str, Any]]:
        results = ctx.results.get(self.name, {})
        return {
            (spec.name, k): results[f"scores/{spec.name}/K{k}"]
            for spec in ctx.cfg.methods
            for k in ctx.cfg.ks
            if f"scores/{spec.name}/K{k}" in results
        }

    def explain(self, ctx: RunContext) -> dict[str, str]:
        cfg = ctx.cfg
        sphere = ctx.spheres
        n_spins = cfg.null_repeats if sphere["spheres"] is not None else 0
        return explain_scores(
            min_region_size=cfg.min_region_size,
            null_repeats=cfg.null_repeats,
            spin_source=sphere["source"] if n_spins else None,
            n_spins=n_spins,
        )


def _spins(ctx: RunContext) -> list[np.ndarray] | None:
    """The spin null's vertex maps (None without a sphere or with ``null_repeats: 0``)."""
    cfg = ctx.cfg
    spheres = ctx.spheres["spheres"]
    if spheres is None or cfg.null_repeats <= 0:
        return None
    return spin_indices(spheres, cfg.null_repeats, random_state=[cfg.random_state, 1])


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
    if not np.any((pa > 0) & (pb > 0)):
        largest = [int(np.bincount(split_connected(v, adjacency, min_size=1))[1:].max(initial=0))
                   for v in (a, b)]  # fmt: skip
        raise ValueError(
            f"min_region_size: {min_region_size} leaves the two splits no labelled vertex in "
            f"common (their largest connected regions: {largest[0]} and {largest[1]} "
            "vertices); lower min_region_size."
        )
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
    }


def _dice(pa: np.ndarray, q: np.ndarray) -> float:
    if not np.any((pa > 0) & (q > 0)):  # a null map that shares no vertex agrees in none
        return 0.0
    return metrics.dice_matched(pa, q, background=0).mean


def _nmi(pa: np.ndarray, q: np.ndarray) -> float:
    if not np.any((pa > 0) & (q > 0)):
        return 0.0
    return metrics.nmi(pa, q, background=0)


def _score_pairs(
    ctx: RunContext, spins: list[np.ndarray] | None, jobs: list[RowKey]
) -> Iterator[tuple[RowKey, dict[str, Any]]]:
    """Each (method, K)'s :func:`score_pair`, as it is done: a task each on the workers
    (the mesh and the spins sent once), else here one after the other."""
    cfg, wd, splits = ctx.cfg, ctx.wd, list(ctx.splits)
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
