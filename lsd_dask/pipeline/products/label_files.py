"""The derivatives folder: BIDS-named ``_dseg`` label files per split, method and K (see
:mod:`lsd_dask.io.bids`), their look-up tables and sidecars, the surfaces they lie on,
how to cite them (:mod:`.citations`), and the figures."""

from __future__ import annotations

import gzip
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ..._version import __version__
from ...cluster import SPATIAL_OPTIONS
from ...io.atomic import atomic_copy, atomic_write_bytes
from ...io.bids import (
    atlas_description,
    atlas_folder,
    atlas_label,
    bids_name,
    dataset_description,
    density_description,
    surface_template,
    write_citation,
)
from ...io.surface_files import (
    HEMISPHERES,
    cifti_vertices,
)
from ..engine.context import RunContext
from ..settings.methods import MethodSpec
from ..stages.blur import chosen_blurs
from .citations import (
    REFERENCES,
    citation_line,
    derivative_readme,
    method_references,
    run_references,
)
from .dseg import matched_labels, write_dseg
from .individuals import write_individual_files
from .scores import sidecar_sections
from .viewer import display_meshes

__all__ = ["write_outputs"]


def write_outputs(
    ctx: RunContext, scores: list[dict[str, Any]], command: str | None, files: list[Path]
) -> list[Path]:
    """Write every label file, table, sidecar and figure of the run; return their paths,
    ``files`` with them added as each is written (a failure leaves in it what was).

    ``command`` (the command line, when there is one) goes into
    ``dataset_description.json``.
    """
    from ...plotting import plot_dice_vs_k, plot_parcellations

    cfg, wd, meshes, sizes = ctx.cfg, ctx.wd, ctx.meshes, ctx.sizes
    out, splits = cfg.output, list(ctx.splits)
    held_out = bool(cfg.held_out)
    files += [
        dataset_description(
            out / "dataset_description.json",
            version=__version__,
            command=command,
            readme=derivative_readme(cfg.methods, version=__version__, held_out=held_out),
            source=Path(cfg.bids.root) if cfg.bids is not None else None,
        ),
        out / ".bidsignore",
        out / "README.md",
        write_citation(
            out / "CITATION.cff",
            version=__version__,
            references=[
                REFERENCES[k]
                for k in run_references(
                    cfg.methods,
                    held_out=held_out,
                    individual=cfg.individual.method if cfg.individual else None,
                )
            ],  # fmt: skip
        ),
    ]
    # the input's own brain models, when every subject is CIFTI
    cifti = cfg.subjects[0].paths[0] if all(s.kind == "cifti" for s in cfg.subjects) else None
    vertices = cifti_vertices(cifti) if cifti is not None else None
    template = surface_template(sizes, ctx.template)
    surfaces = _copy_surfaces(out, cfg.mesh, template)
    files += surfaces.values()
    common = {
        "Density": density_description(sizes, ctx.template),
        "SpatialReference": {h: p.relative_to(out).as_posix() for h, p in surfaces.items()},
    }
    rows = {(r["method"], r["k"]): r for r in scores}
    label_dir = atlas_folder(out, template["tpl"])
    for spec in cfg.methods:
        references = [citation_line(key) for key in method_references(spec)]
        for k in cfg.ks:
            files += [
                atlas_description(
                    out,
                    atlas_label(spec.name, k, split),
                    name=f"lsd-dask {spec.name} K={k} {split}",
                    description=(
                        f"{spec.name}: {spec.method} clustering of the cortex into {k} "
                        f"parcels, fitted on {split} of the subjects."
                    ),
                    references=references,
                )
                for split in splits
            ]
            labs, colours = matched_labels(ctx, spec.name, k)
            for split, lab in labs.items():
                ent = {**template, "atlas": atlas_label(spec.name, k, split), "scale": str(k)}
                sidecar = {
                    **common,
                    **_sidecar(ctx, spec, k, split, lab, rows.get((spec.name, k))),
                    **LOCATION_COLUMNS,
                }
                files += write_dseg(
                    label_dir, ent, lab, sizes, colours=colours, title=f"{spec.name} K={k} {split}",
                    sidecar=sidecar, vertices=vertices, columns=_locations(lab, meshes),
                )  # fmt: skip
    write_individual_files(ctx, files, template=template, vertices=vertices, common=common)
    files.append(plot_dice_vs_k(scores, out / "dice_vs_k.png"))
    # every method and split at the middle K, in colours matched to the first row
    k = sorted(cfg.ks)[len(cfg.ks) // 2]
    panels = {
        f"{m.name}, {split}": wd.load_npy(wd.labels(split, m.name, k))
        for m in cfg.methods
        for split in splits
    }
    files.append(
        plot_parcellations(
            meshes,
            panels,
            out / f"parcellations_K{k}.png",
            title=f"K = {k}",
            display=display_meshes(ctx),
        )  # fmt: skip
    )
    return files


def _copy_surfaces(out: Path, mesh: dict[str, str], template: dict[str, str]) -> dict[str, Path]:
    """The run's meshes, copied into ``surfaces/`` so that the label files' sidecars can
    name the surfaces they lie on (``SpatialReference``) within the derivative."""
    copied = {}
    for hemi in HEMISPHERES:
        name = bids_name({**template, "hemi": hemi[0].upper()}, "mesh", ".surf.gii")
        if mesh[hemi].endswith(".gz"):  # nilearn's fsaverage5 comes gzipped
            data = gzip.decompress(Path(mesh[hemi]).read_bytes())
            copied[hemi] = atomic_write_bytes(out / "surfaces" / name, data)
        else:
            copied[hemi] = atomic_copy(mesh[hemi], out / "surfaces" / name)
    return copied


#: the look-up table's columns beyond index, name and color, as its sidecar describes them
LOCATION_COLUMNS: dict[str, dict[str, str]] = {
    "hemisphere": {"Description": "The hemisphere the parcel lies on: L, R, or LR for both."},
    "n_vertices": {"Description": "The parcel's vertices on the surface."},
    **{
        axis: {
            "Description": f"{axis} coordinate of the parcel's central vertex (the one nearest "
            "the mean of its vertices) on the surface the run read (SpatialReference).",
            "Units": "mm",
        }
        for axis in "xyz"
    },
}


def _locations(labels: np.ndarray, meshes: dict[str, Any]) -> dict[str, dict[int, Any]]:
    """Where each parcel lies (:data:`LOCATION_COLUMNS`): its hemisphere, its size, and
    its central vertex's coordinates on the run's meshes."""
    xyz = np.vstack([np.asarray(meshes[h].vertices, np.float64) for h in HEMISPHERES])
    side = np.repeat(["L", "R"], [len(meshes[h].vertices) for h in HEMISPHERES])
    cols: dict[str, dict[int, Any]] = {name: {} for name in LOCATION_COLUMNS}
    for parcel in np.unique(labels[labels > 0]):
        members = np.flatnonzero(labels == parcel)
        centre = members[np.argmin(((xyz[members] - xyz[members].mean(0)) ** 2).sum(1))]
        p = int(parcel)
        cols["hemisphere"][p] = "".join(sorted(set(side[members]), key="LR".index))
        cols["n_vertices"][p] = int(members.size)
        for axis, value in zip("xyz", xyz[centre], strict=True):
            cols[axis][p] = f"{value:.1f}"
    return cols


def _sidecar(
    ctx: RunContext,
    spec: MethodSpec,
    k: int,
    split: str,
    labels: np.ndarray,
    score: dict[str, Any] | None,
) -> dict[str, Any]:
    """What a ``_dseg.json`` says of one parcellation: how it was made and how it scored."""
    cfg, splits = ctx.cfg, list(ctx.splits)
    parcels = np.unique(labels[labels > 0])
    out: dict[str, Any] = {
        "Description": (
            f"Split-half parcellation of the cortex: {spec.method} clustering of split {split} "
            f"into K = {k} clusters; 0 is background (masked vertices)."
        ),
        "Method": spec.method,
        "MethodName": spec.name,
        "NumberOfClusters": k,
        "NumberOfParcels": int(parcels.size),
        "Split": split,
        "Subjects": cfg.resolved_splits()[split],
        "Features": "unit rows of U·Σ" if spec.features == "us" else "unit rows of U",
        "SVD": asdict(cfg.svd),
        **_spatial_settings(spec, k, cfg.random_state, chosen_blurs(ctx).get(split)),
        "Preprocessing": cfg.preprocess.to_dict(),
        "RandomState": cfg.random_state,
    }
    if split != splits[0]:
        out["LabelsMatchedTo"] = (
            f"split {splits[0]}: each parcel takes the id of the {splits[0]} parcel it "
            "overlaps most (Hungarian method); unmatched parcels take ids above those."
        )
    # each scoring stage's section (report.json's scores_explained says what each is)
    out.update(sidecar_sections(score))
    return out


def _spatial_settings(
    spec: MethodSpec, k: int, random_state: int, chosen_blur: float | None
) -> dict[str, Any]:
    """The sidecar's spatial settings: the fitted estimator's parameters, by name."""
    params = spec.estimator(k, random_state, blur_mm=chosen_blur).get_params()
    out: dict[str, Any] = {}
    for name in SPATIAL_OPTIONS:
        out[_SIDECAR_NAMES.get(name, name.title().replace("_", ""))] = params[name]
        if name == "feature_smoothing_mm":
            out["FeatureSmoothingChosenByData"] = spec.auto_blur
    return out


#: sidecar keys that are not the option's name in CamelCase
_SIDECAR_NAMES = {"feature_smoothing_mm": "FeatureSmoothingFWHM"}
