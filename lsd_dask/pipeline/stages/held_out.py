"""What every held-out score shares: the measures of one parcellation on one held-out data
set (:func:`held_out_scores`), their spin nulls, the vertex pairs DCBC is scored on, the
key the scores depend on, and their mean over the two directions. The evaluation stage
(:mod:`.evaluation`) and the time-halves stage (:mod:`.time_halves`) score with these.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import evaluation as ev
from ..._version import __version__
from ..engine.context import RunContext
from ..engine.contract import SPIN_Z_HELP, Column, RowKey, Unit
from ..engine.workdir import mesh_digest

__all__ = [
    "BIN_WIDTH_MM",
    "MAX_DIST_MM",
    "NULL_PAIRS",
    "NULL_VERTICES",
    "NullSettings",
    "cores",
    "held_out_scores",
    "load_result",
    "measure_columns",
    "measure_rows",
    "log_means",
    "mean_of",
    "scoring_key",
    "spin_nulls",
    "spin_nulls_from",
    "vertex_pairs",
]


#: DCBC's vertex pairs: up to this distance along the mesh (Zhi et al. 2022's 35 mm)
MAX_DIST_MM = 35.0
#: DCBC's distance bins (1 mm, as in the reference)
BIN_WIDTH_MM = 1.0
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
        "sphere": ctx.sphere_digest if cfg.spins > 0 else None,
        # the evaluation's per-parcel measures (results written before them lack them)
        "per_parcel": ["homogeneity", "dcbc"],
        "lsd_dask": __version__,
    }


def vertex_pairs(ctx: RunContext) -> ev.VertexPairs:
    """The kept vertices' pairs within :data:`MAX_DIST_MM` along the mesh, computed once
    per run (every evaluation stage scores DCBC on them)."""
    if "vertex_pairs" not in ctx.shared:
        V, A = ctx.kept_mesh()
        found = ev.geodesic_pairs(V, A, MAX_DIST_MM, n_jobs=cores())
        ctx.log(f"[evaluate] {len(found)} vertex pairs within {MAX_DIST_MM:g} mm along the mesh")
        ctx.shared["vertex_pairs"] = found
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
    from threadpoolctl import threadpool_limits

    lab = labels[kept]
    data = ev.HeldOutData(Z, pairs, r, A, bin_width=BIN_WIDTH_MM)
    # one BLAS thread, as on a Dask worker: a threaded GEMM's last bits follow its thread
    # count, and the scores must be the same with a cluster, with threads or without one
    with threadpool_limits(1):
        zs = null.z_scores(labels, A) if null is not None else {}
        return {m.name: _with_null(m.score(data, lab), zs.get(m.name)) for m in ev.MEASURES}


def parcel_scores(
    labels: np.ndarray, Z: np.ndarray, pairs: ev.VertexPairs, r: np.ndarray, kept: np.ndarray
) -> dict[str, list[Any]]:
    """Each parcel's held-out homogeneity and DCBC on one held-out data set (``Z``, ``r``
    as for :func:`held_out_scores`), with its id and size: the report's per-parcel view.
    NaN (a parcel with no bin holding both kinds of pair) is written as None."""
    lab = labels[kept]
    hom = ev.parcel_homogeneity(Z, lab)
    dc = ev.parcel_dcbc(lab, pairs, r, bin_width=BIN_WIDTH_MM)
    return {
        "ids": hom.ids.tolist(),
        "sizes": hom.sizes.tolist(),
        "homogeneity": _finite(hom.values),
        "dcbc": _finite(dc.values),
    }


def _finite(values: np.ndarray) -> list[float | None]:
    """Values for JSON, NaN as None."""
    return [float(v) if np.isfinite(v) else None for v in values]


def log_means(stage: str, what: str, means: dict[str, float | None], log: Any) -> None:
    """One line per scored parcellation."""
    shown = ", ".join(f"{m.title} {means[m.name]:.3f}" for m in ev.MEASURES if m.spin_null)
    log(f"[{stage}] {what}: {shown}")


def spin_nulls(
    ctx: RunContext,
    features: dict[str, np.ndarray],
    pairs: ev.VertexPairs,
    correlations: dict[str, np.ndarray],
) -> dict[str, ev.SpinNull]:
    """A spin null for each held-out data set, by name: the rotations drawn once, each
    set's data scored under them (none without a sphere or with ``spins: 0``)."""
    return spin_nulls_from(NullSettings.of(ctx), ctx.kept, features, pairs, correlations)


@dataclass(frozen=True)
class NullSettings:
    """What the spin nulls are drawn from: the spheres (None: no null), the spins and the
    run's seed. The sample and the rotations depend on these alone, so a null built on
    one data set equals another's :meth:`~lsd_dask.evaluation.SpinNull.with_data`."""

    spheres: dict[str, np.ndarray] | None
    spins: int
    random_state: int

    @classmethod
    def of(cls, ctx: RunContext) -> NullSettings:
        return cls(ctx.spheres["spheres"], ctx.cfg.spins, ctx.cfg.random_state)


def spin_nulls_from(
    settings: NullSettings,
    kept: np.ndarray,
    features: dict[str, np.ndarray],
    pairs: ev.VertexPairs,
    correlations: dict[str, np.ndarray],
) -> dict[str, ev.SpinNull]:
    """:func:`spin_nulls` from its settings (in a task as in this process)."""
    if settings.spheres is None or settings.spins <= 0:
        return {}
    from threadpoolctl import threadpool_limits

    (first, Z), *others = features.items()
    with threadpool_limits(1):  # as in held_out_scores: the same bits everywhere
        null = ev.SpinNull(
            Z,
            pairs,
            correlations[first],
            settings.spheres,
            kept,
            n_spins=settings.spins,
            n_vertices=NULL_VERTICES,
            n_pairs=NULL_PAIRS,
            bin_width=BIN_WIDTH_MM,
            random_state=[settings.random_state, 2],
        )
        return {first: null, **{s: null.with_data(Zs, correlations[s]) for s, Zs in others}}


def _with_null(value: float, null: dict[str, Any] | None) -> dict[str, Any]:
    """A measure's value on all the held-out data, beside its spin null on the sample."""
    if null is None:
        return {"value": float(value), "on_sample": None, "null_mean": None, "null_sd": None,
                "z": None}  # fmt: skip
    return {"value": float(value), "on_sample": null["value"], **{
        k: null[k] for k in ("null_mean", "null_sd", "z")}}  # fmt: skip


def cores() -> int:
    """The cores this process may use (the geodesic pairs' threads)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def mean_of(directions: dict[str, dict[str, dict[str, Any]]]) -> dict[str, float | None]:
    """Each measure's value and z averaged over the two directions (or data sets)."""
    out: dict[str, float | None] = {}
    for m in ev.MEASURES:
        vals = [d[m.name]["value"] for d in directions.values()]
        zs = [d[m.name]["z"] for d in directions.values()]
        out[m.name] = float(np.mean(vals))
        out[f"{m.name}_z"] = float(np.mean(zs)) if all(z is not None for z in zs) else None
    return out


def measure_columns(prefix: str, *, table: bool, title: str = "") -> tuple[Column, ...]:
    """The score columns of :data:`lsd_dask.evaluation.MEASURES` under ``prefix``
    (``heldout_``, ``timehalves_``): each measure's mean over the directions (its title
    followed by ``title``), and its spin z; in the sidecar under the measure's own name."""
    cols: list[Column] = []
    for m in ev.MEASURES:
        cols.append(
            Column(
                f"{prefix}{m.name}",
                f"{m.title}{title}",
                m.higher_is_better,
                table,
                m.name,
                help=f"{m.explanation}; {'higher' if m.higher_is_better else 'lower'} is better",
            )
        )
        cols.append(
            Column(
                f"{prefix}{m.name}_z", "z (spin)", None, table and m.spin_null, f"{m.name}_z",
                help=SPIN_Z_HELP,
            )
        )  # fmt: skip
    return tuple(cols)


def measure_rows(ctx: RunContext, stage: str, prefix: str) -> dict[RowKey, dict[str, Any]]:
    """A scoring stage's means per (method, K), as ``prefix``-named columns."""
    results = ctx.results.get(stage, {})
    rows = {}
    for spec in ctx.cfg.methods:
        for k in ctx.cfg.ks:
            result = results.get(f"{stage}/{spec.name}/K{k}")
            if result is not None:
                rows[spec.name, k] = {f"{prefix}{m}": v for m, v in result["mean"].items()}
    return rows
