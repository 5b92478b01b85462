"""The evaluation stage: every parcellation scored on the data it was not fitted on.

``evaluate/<method>/K<k>``: each split's parcels on the other split's features (unit rows
of its U·Σ: the correlations of the held-out split's rank-r data), with the measures of
:mod:`lsd_dask.evaluation`:

- held-out homogeneity (CBIG);
- DCBC over the vertex pairs within :data:`MAX_DIST_MM` along the mesh, in
  :data:`BIN_WIDTH_MM` bins;
- the silhouette against neighbouring parcels;

each beside its spin null (``null_repeats`` spins of the parcellation on the sphere, as the
split-half scores use) and its z. Both directions are kept, and their mean is the row's
value. The vertex pairs and the held-out features' pair correlations are computed once per
run and shared by every parcellation and spin.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import __version__
from .. import evaluation as ev
from ..spin import find_spheres, spin_indices
from .stages import RunContext, Unit
from .svd import svd_features

__all__ = ["BIN_WIDTH_MM", "EvaluationStage", "MAX_DIST_MM", "MEASURES"]

#: DCBC's vertex pairs: up to this distance along the mesh (Zhi et al. 2022's 35 mm)
MAX_DIST_MM = 35.0
#: DCBC's distance bins (1 mm, as in the reference)
BIN_WIDTH_MM = 1.0
#: the measures, by their name in the report
MEASURES = ("homogeneity", "dcbc", "silhouette")


class EvaluationStage:
    """``evaluate/<method>/K<k>``: the held-out measures of one method at one K, both
    directions, in ``work/evaluation/<method>_K<k>.json``."""

    name = "evaluate"

    def plan(self, ctx: RunContext) -> list[Unit]:
        wd, cfg = ctx.wd, ctx.cfg
        splits = list(ctx.splits)
        common = {
            "features": {s: wd.fingerprint_of(f"svd/{s}") for s in splits},
            "max_dist_mm": MAX_DIST_MM,
            "bin_width_mm": BIN_WIDTH_MM,
            "null_repeats": cfg.null_repeats,
            "random_state": cfg.random_state,
            "sphere": cfg.sphere,
            "lsd_dask": __version__,
        }
        return [
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

    def load(self, ctx: RunContext, unit: Unit) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(ctx.wd.read_text(unit.outputs[0]))
        return result

    def compute(self, ctx: RunContext, todo: list[Unit]) -> Iterator[tuple[Unit, Any]]:
        wd, log, kept = ctx.wd, ctx.log, ctx.kept
        V, A = ctx.kept_mesh(kept)
        pairs = ev.geodesic_pairs(V, A, MAX_DIST_MM)
        log(f"[evaluate] {len(pairs)} vertex pairs within {MAX_DIST_MM:g} mm along the mesh")
        features = {s: svd_features(wd.load_npy(wd.u(s)), wd.load_npy(wd.s(s))) for s in ctx.splits}
        correlations = {s: ev.pair_correlations(Z, pairs) for s, Z in features.items()}
        spins = _spins(ctx)
        splits = list(ctx.splits)
        for unit in todo:
            name, k = unit.item
            out: dict[str, Any] = {}
            for fitted, held_out in (splits, splits[::-1]):
                labels = wd.load_npy(wd.labels(fitted, name, k))
                Z, r = features[held_out], correlations[held_out]
                measures = {
                    "homogeneity": lambda lab, Z=Z: ev.homogeneity(Z, lab),
                    "dcbc": lambda lab, r=r: ev.dcbc(lab, pairs, r, bin_width=BIN_WIDTH_MM).value,
                    "silhouette": lambda lab, Z=Z: ev.neighbour_silhouette(Z, lab, A),
                }
                out[f"{fitted}_on_{held_out}"] = {
                    m: ev.spin_null(lambda full, f=f: f(full[kept]), labels, spins, kept)
                    for m, f in measures.items()
                }
            out["mean"] = _mean_of(out)
            wd.write_text(unit.outputs[0], json.dumps(out, indent=1))
            means = out["mean"]
            log(
                f"[evaluate] {name} K={k}: held-out homogeneity {means['homogeneity']:.3f}, "
                f"DCBC {means['dcbc']:.3f}, silhouette {means['silhouette']:.3f}"
            )
            yield unit, out


def _spins(ctx: RunContext) -> list[np.ndarray]:
    """The run's spin maps (those of the split-half scores), or none without a sphere."""
    sphere = find_spheres(ctx.meshes, ctx.cfg.sphere)
    if sphere["spheres"] is None or ctx.cfg.null_repeats <= 0:
        return []
    return spin_indices(
        sphere["spheres"], ctx.cfg.null_repeats, random_state=[ctx.cfg.random_state, 1]
    )


def _mean_of(directions: dict[str, dict[str, dict[str, Any]]]) -> dict[str, float | None]:
    """Each measure's value and z averaged over the two directions."""
    out: dict[str, float | None] = {}
    for m in MEASURES:
        vals = [d[m]["value"] for d in directions.values()]
        zs = [d[m]["z"] for d in directions.values()]
        out[m] = float(np.mean(vals))
        out[f"{m}_z"] = float(np.mean(zs)) if all(z is not None for z in zs) else None
    return out
