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
and their mean is the row's value. The vertex pairs and the held-out features' pair
correlations are computed once per run and shared by every parcellation.

``evaluate/atlas/<name>``: each comparison atlas (:mod:`.atlases`), fitted on neither
split, on each split's features; the mean of the two is its row, shown beside the methods
at the run's K nearest its parcel count (:func:`atlas_rows`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import __version__
from .. import evaluation as ev
from ..spin import find_spheres
from .stages import RunContext, Unit
from .svd import svd_features
from .workdir import content_digest, mesh_digest

__all__ = [
    "BIN_WIDTH_MM",
    "EvaluationStage",
    "atlas_rows",
    "held_out_scores",
    "load_result",
    "log_means",
    "MAX_DIST_MM",
    "mean_of",
    "MEASURES",
    "NULL_PAIRS",
    "NULL_VERTICES",
    "spin_nulls",
    "vertex_pairs",
]

#: DCBC's vertex pairs: up to this distance along the mesh (Zhi et al. 2022's 35 mm)
MAX_DIST_MM = 35.0
#: DCBC's distance bins (1 mm, as in the reference)
BIN_WIDTH_MM = 1.0
#: the measures, by their name in the report
MEASURES = ("homogeneity", "dcbc", "silhouette", "pca_homogeneity")
#: the spin null's samples (:class:`lsd_dask.evaluation.SpinNull`): vertices for
#: homogeneity and the silhouette, and about how many vertex pairs score DCBC (those among
#: a sample of 1 vertex in 31 of the 58,558 of 32k_fs_LR's cortex, whose midthickness has
#: 58.6 million pairs within 35 mm)
NULL_VERTICES = 1000
NULL_PAIRS = 60_000


def load_result(ctx: RunContext, unit: Unit) -> dict[str, Any]:
    """A scored unit's saved result (its JSON output)."""
    result: dict[str, Any] = json.loads(ctx.wd.read_text(unit.outputs[0]))
    return result


class EvaluationStage:
    """``evaluate/<method>/K<k>``: the held-out measures of one method at one K, both
    directions, in ``work/evaluation/<method>_K<k>.json``."""

    name = "evaluate"

    def plan(self, ctx: RunContext) -> list[Unit]:
        wd, cfg = ctx.wd, ctx.cfg
        splits = list(ctx.splits)
        common = {
            "features": {s: wd.fingerprint_of(f"svd/{s}") for s in splits},
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
                    "labels": {
                        s: wd.fingerprint_of(f"cluster/{s}/{spec.name}/K{k}") for s in splits
                    },
                },
                [wd.folder.join("evaluation", f"{spec.name}_K{k}.json")],
                label=f"{spec.name} K={k}",
                item=(spec.name, k),
            )
            for spec in cfg.methods
            for k in cfg.ks
        ]

    load = staticmethod(load_result)

    def compute(self, ctx: RunContext, todo: list[Unit]) -> Iterator[tuple[Unit, Any]]:
        wd, log, kept = ctx.wd, ctx.log, ctx.kept
        _, A = ctx.kept_mesh(kept)
        pairs = vertex_pairs(ctx)
        features = {s: svd_features(wd.load_npy(wd.u(s)), wd.load_npy(wd.s(s))) for s in ctx.splits}
        correlations = {s: ev.pair_correlations(Z, pairs) for s, Z in features.items()}
        nulls = spin_nulls(ctx, features, pairs, correlations)
        splits = list(ctx.splits)
        for unit in todo:
            if unit.item[0] == "atlas":
                # fitted on neither split: scored on each split's data
                labels = np.where(kept, ctx.atlases[unit.item[1]], 0)
                out: dict[str, Any] = {
                    f"on_{s}": held_out_scores(
                        labels, features[s], pairs, correlations[s], A, kept, nulls.get(s)
                    )  # fmt: skip
                    for s in splits
                }
                out["mean"] = mean_of(out)
                out["n_parcels"] = int(np.unique(labels[labels > 0]).size)
                what = f"atlas {unit.item[1]} ({out['n_parcels']} parcels)"
            else:
                name, k = unit.item
                out = {}  # the two directions, then their mean
                for fitted, held_out in (splits, splits[::-1]):
                    out[f"{fitted}_on_{held_out}"] = held_out_scores(
                        wd.load_npy(wd.labels(fitted, name, k)), features[held_out], pairs,
                        correlations[held_out], A, kept, nulls.get(held_out),
                    )  # fmt: skip
                out["mean"] = mean_of(out)
                what = f"{name} K={k}"
            wd.write_text(unit.outputs[0], json.dumps(out, indent=1))
            log_means("evaluate", what, out["mean"], log)
            yield unit, out


def scoring_key(ctx: RunContext) -> dict[str, Any]:
    """What every held-out score depends on besides its data and labels: the mesh the
    distances run along, the bins, the spins and their sample, the sphere."""
    cfg = ctx.cfg
    return {
        "mesh": mesh_digest(*ctx.kept_mesh()),
        "max_dist_mm": MAX_DIST_MM,
        "bin_width_mm": BIN_WIDTH_MM,
        "spins": cfg.spins,
        "null_sample": [NULL_VERTICES, NULL_PAIRS],
        "random_state": cfg.random_state,
        "sphere": cfg.sphere,
        "lsd_dask": __version__,
    }


def vertex_pairs(ctx: RunContext) -> ev.VertexPairs:
    """The kept vertices' pairs within :data:`MAX_DIST_MM` along the mesh, computed once
    per run (every evaluation stage scores DCBC on them)."""
    if "vertex_pairs" not in ctx.shared:
        V, A = ctx.kept_mesh()
        pairs = ev.geodesic_pairs(V, A, MAX_DIST_MM, n_jobs=_cores())
        ctx.log(f"[evaluate] {len(pairs)} vertex pairs within {MAX_DIST_MM:g} mm along the mesh")
        ctx.shared["vertex_pairs"] = pairs
    pairs: ev.VertexPairs = ctx.shared["vertex_pairs"]
    return pairs


def held_out_scores(
    labels: np.ndarray,
    Z: np.ndarray,
    pairs: ev.VertexPairs,
    r: np.ndarray,
    A: Any,
    kept: np.ndarray,
    null: ev.SpinNull | None,
) -> dict[str, dict[str, Any]]:
    """The measures of ``labels`` (every vertex) on one held-out data set: ``Z`` its
    features on the kept vertices, ``r`` their correlations over ``pairs``; each beside
    ``null``'s spins, when given."""
    lab = labels[kept]
    values = {
        "homogeneity": ev.homogeneity(Z, lab),
        "dcbc": ev.dcbc(lab, pairs, r, bin_width=BIN_WIDTH_MM).value,
        "silhouette": ev.neighbour_silhouette(Z, lab, A),
        "pca_homogeneity": ev.pca_homogeneity(Z, lab),
    }
    zs = null.z_scores(labels, A) if null is not None else {}
    return {m: _with_null(v, zs.get(m)) for m, v in values.items()}


def log_means(stage: str, what: str, means: dict[str, float | None], log: Any) -> None:
    """One line per scored parcellation."""
    log(
        f"[{stage}] {what}: held-out homogeneity {means['homogeneity']:.3f}, "
        f"DCBC {means['dcbc']:.3f}, silhouette {means['silhouette']:.3f}"
    )


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


def spin_nulls(
    ctx: RunContext,
    features: dict[str, np.ndarray],
    pairs: ev.VertexPairs,
    correlations: dict[str, np.ndarray],
) -> dict[str, ev.SpinNull]:
    """A spin null for each held-out data set, by name: the rotations drawn once, each
    set's data scored under them (none without a sphere or with ``spins: 0``)."""
    sphere = find_spheres(ctx.meshes, ctx.cfg.sphere)
    if sphere["spheres"] is None or ctx.cfg.spins <= 0:
        return {}
    (first, Z), *others = features.items()
    null = ev.SpinNull(
        Z,
        pairs,
        correlations[first],
        sphere["spheres"],
        ctx.kept,
        n_spins=ctx.cfg.spins,
        n_vertices=NULL_VERTICES,
        n_pairs=NULL_PAIRS,
        bin_width=BIN_WIDTH_MM,
        random_state=[ctx.cfg.random_state, 2],
    )
    return {first: null, **{s: null.with_data(Zs, correlations[s]) for s, Zs in others}}


def _with_null(value: float, null: dict[str, Any] | None) -> dict[str, Any]:
    """A measure's value on all the held-out data, beside its spin null on the sample."""
    if null is None:
        return {"value": float(value), "on_sample": None, "null_mean": None, "null_sd": None,
                "z": None}  # fmt: skip
    return {"value": float(value), "on_sample": null["value"], **{
        k: null[k] for k in ("null_mean", "null_sd", "z")}}  # fmt: skip


def _cores() -> int:
    """The cores this process may use (the geodesic pairs' threads)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def mean_of(directions: dict[str, dict[str, dict[str, Any]]]) -> dict[str, float | None]:
    """Each measure's value and z averaged over the two directions (or data sets)."""
    out: dict[str, float | None] = {}
    for m in MEASURES:
        vals = [d[m]["value"] for d in directions.values()]
        zs = [d[m]["z"] for d in directions.values()]
        out[m] = float(np.mean(vals))
        out[f"{m}_z"] = float(np.mean(zs)) if all(z is not None for z in zs) else None
    return out
