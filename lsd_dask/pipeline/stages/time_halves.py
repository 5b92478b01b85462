"""The time-halves evaluation (``held_out: [splits, time_halves]``): each method fitted on
one half of every subject's time points within a split and scored on the other half.

The cross-split scores (:mod:`.evaluation`) ask whether a split's parcels hold on other
subjects' data. These ask whether they hold on the same subjects' data at another time,
as studies that fit on some sessions and test on the rest do (Gordon et al. 2016; Kong et
al. 2019), and they need only one split's subjects.

``evaluate_halves/<method>/K<k>``, per split:

- a randomized SVD of each half (the run's rank and power iterations, capped at the half's
  width; the blur stage's halves, :meth:`~lsd_dask.io.zarr_store.ColumnBlocks.halves`);
- the method's estimator at K (with the split's own blur, for ``feature_smoothing_mm:
  auto``) fitted on each half's features (a ``fine_fit: shared`` variant: every K of the
  run from one fine fit per half, as the cluster stage fits it);
- its labels scored on the other half's features (unit rows of that half's U·Σ) with the
  measures and spin nulls of :mod:`.evaluation`, on the same vertex pairs.

The row's value is the mean over the splits and both directions. The cost: per split, two
SVDs of half the width (about one more SVD stage), and per split, method and K two more
fits, in this process, and their scores: on brainspace's real fsaverage5 run (directional
clustering and Ward at K = 50, 100, 200, rank 200) the stage took 296 s against the
cluster stage's 92 s and the evaluation stage's 89 s (commit ``4292f37``, the
development machine with another benchmark running beside it). The half SVDs are not
kept between runs: a run that stops in this stage computes them again.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import numpy as np

from ... import evaluation as ev
from ...cluster import MultiScaleParcellation
from ...cluster._init import shared_starts
from ...io.zarr_store import open_split
from ..engine.context import RunContext
from ..engine.contract import Column, RowKey, StageBase, Unit
from ..engine.log import prefixed
from .cluster import estimator_key, split_estimator
from .fits import fit_every_k, fit_labels
from .held_out import (
    held_out_scores,
    load_result,
    log_means,
    mean_of,
    measure_columns,
    measure_rows,
    scoring_key,
    spin_nulls,
    vertex_pairs,
)
from .svd import group_svd, svd_features

__all__ = ["TimeHalvesStage"]

#: the report's prefix of these measures (``timehalves_homogeneity``, ...)
PREFIX = "timehalves_"


class TimeHalvesStage(StageBase):
    """``evaluate_halves/<method>/K<k>``: the held-out measures of each method fitted on
    one time half of a split and scored on the other, in
    ``work/evaluation/halves_<method>_K<k>.json`` (no unit unless ``held_out`` asks)."""

    name = "evaluate_halves"
    reads = ("ingest",)
    sidecar_section = "TimeHalvesScores"

    @property
    def columns(self) -> tuple[Column, ...]:  # type: ignore[override]
        return measure_columns(PREFIX, table=False, title=", time halves")

    def rows(self, ctx: RunContext) -> dict[RowKey, dict[str, Any]]:
        return measure_rows(ctx, self.name, PREFIX)

    def explain(self, ctx: RunContext) -> dict[str, str]:
        return {
            "timehalves": (
                "With held_out: [..., time_halves]: each method fitted at K on one half of "
                "every subject's time points within a split and scored on the other half, "
                "with the measures and spins of heldout_*; averaged over the splits and "
                f"both directions ({', '.join(f'{PREFIX}{m.name}' for m in ev.MEASURES)}, "
                "each with its _z)."
            )
        }

    def plan(self, ctx: RunContext) -> list[Unit]:
        cfg, wd = ctx.cfg, ctx.wd
        if "time_halves" not in cfg.held_out:
            return []
        splits = list(ctx.splits)
        mesh = ctx.kept_mesh()
        common = {
            "ingest": {s: ctx.fingerprint(f"ingest/{s}") for s in splits},
            "svd": cfg.svd.split_key(),
            **scoring_key(ctx),
        }
        return [
            Unit(
                f"evaluate_halves/{spec.name}/K{k}",
                {
                    **common,
                    "method": spec.method,
                    "features_kind": spec.features,
                    "params": {
                        s: estimator_key(split_estimator(ctx, spec, k, s, mesh)) for s in splits
                    },  # fmt: skip
                    # a shared fine fit's K comes down from the larger K's, as in the fits
                    "fine_fit": sorted((x for x in cfg.ks if x >= k), reverse=True)
                    if spec.shared
                    else "per_k",
                },
                [wd.folder.join("evaluation", f"halves_{spec.name}_K{k}.json")],
                label=f"{spec.name} K={k} (time halves)",
                item=(spec, k),
            )
            for spec in cfg.methods
            for k in cfg.ks
        ]

    load = staticmethod(load_result)

    def compute(self, ctx: RunContext, todo: list[Unit]) -> Iterator[tuple[Unit, Any]]:
        wd, log, kept = ctx.wd, ctx.log, ctx.kept
        mesh = ctx.kept_mesh()
        pairs = vertex_pairs(ctx)
        # per split, each half's U and singular values, its scoring features (unit rows of
        # U·Σ), their pair correlations and spin null; a split at a time in memory
        results: dict[str, dict[str, Any]] = {u.name: {} for u in todo}
        for split in ctx.splits:
            halves = _half_svds(ctx, split)
            scored = {h: svd_features(U, s) for h, (U, s) in halves.items()}
            corr = {h: ev.pair_correlations(Z, pairs) for h, Z in scored.items()}
            nulls = spin_nulls(ctx, scored, pairs, corr)
            starts: OrderedDict[Any, Any] = OrderedDict()  # alike starts: once per half
            every_k: dict[Any, list[dict[str, Any]]] = {}  # shared fine fits: once per half
            for unit in todo:
                spec, k = unit.item
                for fitted, other in (("half1", "half2"), ("half2", "half1")):
                    U, s = halves[fitted]
                    est = split_estimator(ctx, spec, k, split, mesh)
                    F = svd_features(U, s, spec.features)
                    if spec.shared:  # every K of the run from one fine fit, as in the fits
                        ks = sorted(ctx.cfg.ks)
                        if (fitted, spec.name) not in every_k:
                            multi = MultiScaleParcellation(est, ks)
                            every_k[(fitted, spec.name)] = fit_every_k(multi, F, kept, ks)
                        fit = every_k[(fitted, spec.name)][ks.index(k)]
                    else:
                        with shared_starts(starts):
                            fit = fit_labels(est, F, kept)
                    results[unit.name][f"{split}_{fitted}_on_{other}"] = held_out_scores(
                        fit["labels"], scored[other], pairs, corr[other], mesh[1], kept,
                        nulls.get(other),
                    )  # fmt: skip
                    log(
                        f"[evaluate_halves] {split} {spec.name} K={k} fitted on {fitted}: "
                        f"{fit['seconds']:.1f} s"
                    )
        for unit in todo:
            spec, k = unit.item
            out = results[unit.name]
            out["mean"] = mean_of(out)
            wd.write_text(unit.outputs[0], json.dumps(out, indent=1))
            log_means("evaluate_halves", f"{spec.name} K={k} (time halves)", out["mean"], log)
            yield unit, out


def _half_svds(ctx: RunContext, split: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each time half's U (float32) and singular values, in memory."""
    cfg, wd, log = ctx.cfg, ctx.wd, ctx.log
    st = open_split(wd.store(split), storage_options=wd.folder.storage_options)
    out = {}
    for i, half in enumerate(st.column_blocks.halves(), 1):
        log(f"[evaluate_halves] {split} half {i} of 2: SVD of {half.shape[0]} x {half.shape[1]}")
        U, s = group_svd(
            half, cfg.svd, cfg.random_state,
            progress=prefixed(log, f"[evaluate_halves] {split} half {i}"),
        )  # fmt: skip
        U = U.compute() if hasattr(U, "compute") else U
        out[f"half{i}"] = (np.asarray(U, np.float32), np.asarray(s, np.float64))
    return out
