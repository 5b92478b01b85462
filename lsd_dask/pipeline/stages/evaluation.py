"""The evaluation stage: every parcellation scored on the data it was not fitted on.

``evaluate/<method>/K<k>``: each split's parcels on the other split's features (unit rows
of its U·Σ: the correlations of the held-out split's rank-r data), with the measures of
:mod:`lsd_dask.evaluation`:

- held-out homogeneity (CBIG), and Gordon et al.'s (the first component's variance share
  per parcel; reported without a null);
- DCBC over the vertex pairs within :data:`MAX_DIST_MM` along the mesh, in
  :data:`BIN_WIDTH_MM` bins;
- the silhouette against neighbouring parcels;

each beside its spin null (``spins`` rotations of the parcellation on the sphere, 1,000 by
default) and its z. The value is the measure on all the held-out data; the spins are scored
on a fixed sample of :data:`NULL_VERTICES` vertices (homogeneity, silhouette) and of the
about :data:`NULL_PAIRS` pairs within a second sample (DCBC), with the parcellation scored on the
same sample for its z (:class:`lsd_dask.evaluation.SpinNull`): that is what makes 1,000
spins cost a few seconds per parcellation at 2 × 32k vertices. Both directions are kept,
and their mean is the row's value. Each direction also keeps every parcel's held-out
homogeneity and DCBC, with its id and size (``parcels``: the report's per-parcel view;
no spin null). The vertex pairs and the held-out features' pair
correlations are computed once per run and shared by every parcellation.

``evaluate/atlas/<name>``: each comparison atlas (:mod:`..settings.atlases`), fitted on neither
split, on each split's features; the mean of the two is its row, shown beside the methods
at the run's K nearest its parcel count (:func:`atlas_rows`).

Where the scoring runs: on a cluster whose workers each hold one scoring task per thread
(:func:`~lsd_dask.pipeline.engine.placement.scoring_on_workers`: the features, the vertex pairs,
the spins), as tasks by held-out split, each finding the pairs and the spin null itself
(they depend on the mesh, the spheres and the seed alone, so every task draws the same);
otherwise in this process, with the pairs and the rotations made once.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ... import evaluation as ev
from ...distributed import active_client, finished
from ..engine import placement
from ..engine.context import RunContext
from ..engine.contract import Column, RowKey, StageBase, Unit
from ..engine.workdir import WorkDir, content_digest
from .held_out import (
    MAX_DIST_MM,
    NullSettings,
    held_out_scores,
    load_result,
    log_means,
    mean_of,
    measure_columns,
    measure_rows,
    parcel_scores,
    scoring_key,
    spin_nulls,
    spin_nulls_from,
    vertex_pairs,
)
from .svd import svd_features

__all__ = ["EvaluationStage", "atlas_rows"]


class EvaluationStage(StageBase):
    """``evaluate/<method>/K<k>``: the held-out measures of one method at one K, both
    directions, in ``work/evaluation/<method>_K<k>.json``."""

    name = "evaluate"
    reads = ("svd", "cluster")
    sidecar_section = "HeldOutScores"

    @property
    def columns(self) -> tuple[Column, ...]:  # type: ignore[override]
        return measure_columns("heldout_", table=True)

    def plan(self, ctx: RunContext) -> list[Unit]:
        wd, cfg = ctx.wd, ctx.cfg
        splits = list(ctx.splits)
        common = {
            "features": {s: ctx.fingerprint(f"svd/{s}") for s in splits},
            **scoring_key(ctx),
        }
        atlases = [
            Unit(
                f"evaluate/atlas/{spec.name}",
                {**common, "atlas": content_digest(ctx.atlases[spec.name])},
                [wd.folder.join("evaluation", f"atlas_{spec.name}.json")],
                label=f"atlas {spec.name}",
                item=("atlas", spec.name),
            )
            for spec in cfg.compare_atlases
        ]
        if "splits" not in cfg.held_out:
            return atlases
        return atlases + [
            Unit(
                f"evaluate/{spec.name}/K{k}",
                {
                    **common,
                    "labels": {s: ctx.fingerprint(f"cluster/{s}/{spec.name}/K{k}") for s in splits},
                },
                [wd.folder.join("evaluation", f"{spec.name}_K{k}.json")],
                label=f"{spec.name} K={k}",
                item=(spec.name, k),
            )
            for spec in cfg.methods
            for k in cfg.ks
        ]

    load = staticmethod(load_result)

    def rows(self, ctx: RunContext) -> dict[RowKey, dict[str, Any]]:
        return measure_rows(ctx, self.name, "heldout_")

    def explain(self, ctx: RunContext) -> dict[str, str]:
        return {
            "heldout": (
                "Each split's parcels scored on the other split's data (unit rows of its "
                "U·Σ), averaged over both directions, each with its z against spins of the "
                "parcellation: "
                + "; ".join(f"heldout_{m.name}, {m.explanation}" for m in ev.MEASURES)
                + ". Blurring the features raises split-half Dice by making both splits "
                "smooth alike; these measures compare the parcels with data the fit never "
                "saw, and DCBC compares pairs only at equal distance, so smoothness alone "
                "cannot raise them. The values use all the held-out data; the spins "
                "(spins:, 1,000 by default) are scored on a fixed sample of vertices (and "
                "of the pairs among a second sample for DCBC), the parcellation on the same "
                "sample for its z."
            )
        }

    def compute(self, ctx: RunContext, todo: list[Unit]) -> Iterator[tuple[Unit, Any]]:
        wd, log = ctx.wd, ctx.log
        jobs = _scorings(ctx, todo)
        expected = Counter(j.unit for j in jobs)
        parts: dict[str, dict[str, Any]] = {u.name: {} for u in todo}
        client = active_client()
        if client is not None and placement.scoring_on_workers(
            client,
            wd.load_npy(wd.u(jobs[0].split), mmap=True).nbytes,
            _pair_estimate(ctx),
            ctx.cfg.spins,
        ):
            done = _score_as_tasks(client, ctx, jobs)
        else:
            done = _score_here(ctx, jobs)
        units = {u.name: u for u in todo}
        kept = ctx.kept
        parcels: dict[str, dict[str, Any]] = {u.name: {} for u in todo}
        for job, (scores, per_parcel) in done:
            parts[job.unit][job.direction] = scores
            parcels[job.unit][job.direction] = per_parcel
            if len(parts[job.unit]) < expected[job.unit]:
                continue
            unit = units[job.unit]
            # the directions in the plan's order, then their mean
            out: dict[str, Any] = {
                j.direction: parts[unit.name][j.direction] for j in jobs if j.unit == unit.name
            }
            out["mean"] = mean_of(out)
            # each parcel's measures per direction (the report's per-parcel view)
            out["parcels"] = parcels[unit.name]
            if unit.item[0] == "atlas":
                labels = ctx.atlases[unit.item[1]][kept]
                out["n_parcels"] = int(np.unique(labels[labels > 0]).size)
                what = f"atlas {unit.item[1]} ({out['n_parcels']} parcels)"
            else:
                what = f"{unit.item[0]} K={unit.item[1]}"
            wd.write_text(unit.outputs[0], json.dumps(out, indent=1))
            log_means("evaluate", what, out["mean"], log)
            yield unit, out


def atlas_rows(ctx: RunContext) -> list[dict[str, Any]]:
    """Each comparison atlas' held-out measures, at the run's K nearest its parcel count
    (the report's rows beside the methods')."""
    results = ctx.results.get("evaluate", {})
    rows = []
    for spec in ctx.cfg.compare_atlases:
        result = results.get(f"evaluate/atlas/{spec.name}")
        if result is None:
            continue
        n = result["n_parcels"]
        rows.append({
            "atlas": spec.name,
            "n_parcels": n,
            "k": min(ctx.cfg.ks, key=lambda k: (abs(k - n), k)),
            **{f"heldout_{m}": v for m, v in result["mean"].items()},
        })  # fmt: skip
    return rows


@dataclass(frozen=True)
class _Scoring:
    """One parcellation to score on one held-out data set: the unit it belongs to, its
    direction's key in the unit's JSON, the held-out split, and the labels over every
    vertex (or their path in the work folder)."""

    unit: str
    direction: str
    split: str
    labels: np.ndarray | str = field(repr=False)

    def labels_in(self, wd: WorkDir) -> np.ndarray:
        """The labels, read from ``wd`` when they are a path."""
        return wd.load_npy(self.labels) if isinstance(self.labels, str) else self.labels


def _scorings(ctx: RunContext, todo: list[Unit]) -> list[_Scoring]:
    """Every (parcellation, held-out data) pair of the units, unit by unit."""
    splits, kept = list(ctx.splits), ctx.kept
    jobs = []
    for unit in todo:
        if unit.item[0] == "atlas":
            # fitted on neither split: scored on each split's data
            labels = np.where(kept, ctx.atlases[unit.item[1]], 0)
            jobs += [_Scoring(unit.name, f"on_{s}", s, labels) for s in splits]
        else:
            name, k = unit.item
            jobs += [
                _Scoring(unit.name, f"{fitted}_on_{held}", held, ctx.wd.labels(fitted, name, k))
                for fitted, held in (splits, splits[::-1])
            ]
    return jobs


def _score_here(ctx: RunContext, jobs: list[_Scoring]) -> Iterator[tuple[_Scoring, Any]]:
    """The scorings in this process, in order: the vertex pairs, each split's features,
    correlations and spin null made once."""
    wd, kept = ctx.wd, ctx.kept
    _, A = ctx.kept_mesh(kept)
    pairs = vertex_pairs(ctx)
    splits = list(dict.fromkeys(j.split for j in jobs))
    features = {s: svd_features(wd.load_npy(wd.u(s)), wd.load_npy(wd.s(s))) for s in splits}
    correlations = {s: ev.pair_correlations(Z, pairs) for s, Z in features.items()}
    nulls = spin_nulls(ctx, features, pairs, correlations)
    for j in jobs:
        labels = j.labels_in(wd)
        Z, r = features[j.split], correlations[j.split]
        yield (
            j,
            (
                held_out_scores(labels, Z, pairs, r, A, kept, nulls.get(j.split)),
                parcel_scores(labels, Z, pairs, r, kept),
            ),
        )


def _score_as_tasks(
    client: Any, ctx: RunContext, jobs: list[_Scoring]
) -> Iterator[tuple[_Scoring, Any]]:
    """The scorings as tasks, by held-out split: each task loads its split's features from
    the work folder, finds the vertex pairs and the spin null itself and scores its share
    of the parcellations; a split's share is cut into as many tasks as there are worker
    threads per split. Yields each scoring as its task finishes."""
    wd, kept = ctx.wd, ctx.kept
    V, A = ctx.kept_mesh(kept)
    shared = client.scatter([V, A, kept, NullSettings.of(ctx)], broadcast=True, hash=False)
    threads = max(1, sum(client.nthreads().values()))
    splits = list(dict.fromkeys(j.split for j in jobs))
    futures = {}
    for split in splits:
        mine = [j for j in jobs if j.split == split]
        n_tasks = max(1, min(len(mine), threads // len(splits)))
        for part in np.array_split(np.arange(len(mine)), n_tasks):
            share = [mine[i] for i in part]
            fut = client.submit(
                _score_on_split, wd.root, wd.folder.storage_options, split, share, *shared,
                pure=False,
            )  # fmt: skip
            futures[fut] = share
    ctx.log(
        f"[evaluate] {len(jobs)} parcellations on held-out data as {len(futures)} tasks "
        f"on {len(client.nthreads())} workers"
    )
    for share, results in finished(client, futures):
        yield from zip(share, results, strict=True)


def _score_on_split(
    root: str,
    storage_options: Any,
    split: str,
    jobs: list[_Scoring],
    V: np.ndarray,
    A: Any,
    kept: np.ndarray,
    nulls: NullSettings,
) -> list[Any]:
    """One task: ``jobs``' parcellations scored on ``split``'s held-out features."""
    wd = WorkDir(root, lambda line: None, storage_options)
    Z = svd_features(wd.load_npy(wd.u(split)), wd.load_npy(wd.s(split)))
    pairs = ev.geodesic_pairs(V, A, MAX_DIST_MM)
    r = ev.pair_correlations(Z, pairs)
    null = spin_nulls_from(nulls, kept, {split: Z}, pairs, {split: r}).get(split)
    out = []
    for j in jobs:
        labels = j.labels_in(wd)
        out.append(
            (
                held_out_scores(labels, Z, pairs, r, A, kept, null),
                parcel_scores(labels, Z, pairs, r, kept),
            )
        )
    return out


def _pair_estimate(ctx: RunContext) -> int:
    """About how many vertex pairs the scoring finds (the tasks' memory)."""
    if "vertex_pairs" in ctx.shared:
        return len(ctx.shared["vertex_pairs"])
    V, A = ctx.kept_mesh()
    return ev.pair_count_estimate(V, A, MAX_DIST_MM, random_state=ctx.cfg.random_state)
