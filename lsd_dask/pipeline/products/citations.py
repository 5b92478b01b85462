"""How to cite what a run used: the papers of its methods, spatial options and measures,
as Citation File Format references (``CITATION.cff``), atlas descriptions and the
derivative's ``README.md``."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import evaluation
from ...io.bids import bids_label
from ..settings.methods import MethodSpec
from .references import REFERENCES

__all__ = [
    "REFERENCES",
    "citation_line",
    "derivative_readme",
    "method_references",
    "methods_text",
    "run_references",
]


#: the method of :data:`~lsd_dask.pipeline.settings.methods.METHODS` -> its papers' keys
_METHOD_PAPERS = {
    "directional": ("directional",),
    "lsd": ("lsd",),
    "hierarchical_lsd": ("lsd",),
    "spherical_kmeans": ("spherical_kmeans",),
    "kmeans": ("kmeans",),
    "spectral": ("spectral",),
    "ward": ("ward",),
}


def _measure_papers() -> list[str]:
    """The held-out measures' papers (:data:`lsd_dask.evaluation.MEASURES`), the spins'."""
    return [*(m.citation for m in evaluation.MEASURES if m.citation), "spin"]


def method_references(spec: MethodSpec) -> list[str]:
    """Keys of :data:`REFERENCES` for a method as run: its paper, Ward's for a merge."""
    keys = list(_METHOD_PAPERS.get(spec.method, ()))
    if float(spec.options.get("oversegment") or 1) > 1 and "ward" not in keys:
        keys.append("ward")
    return keys


def run_references(
    methods: list[MethodSpec], *, held_out: bool, individual: str | None = None
) -> list[str]:
    """Keys of :data:`REFERENCES` for a whole run, methods first, then the measures, then
    the individual parcels' method (``individual``: its name, when the run makes them)."""
    keys: list[str] = []
    for spec in methods:
        keys += [key for key in method_references(spec) if key not in keys]
    if held_out:
        keys += [k for k in _measure_papers() if k not in keys]
    if individual is not None:
        keys.append(_INDIVIDUAL_PAPERS[individual])
    return keys


#: the individual parcels' method (:mod:`..settings.individual`) -> its paper's key
_INDIVIDUAL_PAPERS = {"prior_potts": "kong2019", "iterative": "wang2015"}


def citation_line(key: str) -> str:
    """One reference as a line of text: authors (year). Title. Journal. doi."""
    ref = REFERENCES[key]
    names = [
        a.get("name") or f"{a['family-names']} {''.join(p[0] for p in a['given-names'].split())}"
        for a in ref["authors"]
    ]
    who = ", ".join(names[:3]) + (" et al." if len(names) > 3 else "")
    where = ref.get("journal") or ref.get("collection-title", "")
    doi = f" doi:{ref['doi']}" if "doi" in ref else ""
    return f"{who} ({ref['year']}). {ref['title']}. {where}.{doi}"


def derivative_readme(methods: list[MethodSpec], *, version: str, held_out: bool) -> str:
    """The derivative's ``README.md``: what the files are and how to cite them."""
    rows = []
    for spec in methods:
        cites = "; ".join(citation_line(k) for k in method_references(spec))
        name = f"atlas-{bids_label(spec.name)}<K><split>"
        rows.append(f"- `{name}` ({spec.name}): {spec.method} clustering. {cites}")
    measures = [f"- {citation_line(k)}" for k in _measure_papers()] if held_out else []
    lines = [
        "# lsd-dask split-half cortical parcellations",
        "",
        f"Made by lsd-dask {version}. Each method's parcellation of each split of the",
        "subjects at each K is a group atlas on a surface template, in `tpl-<template>/anat/`:",
        "`hemi-L`/`hemi-R` GIFTI label files, a CIFTI `.dlabel.nii` when the input was CIFTI,",
        "a look-up table (`.tsv`) and a sidecar (`.json`) with the settings and the scores.",
        "Each parcellation's `atlas-` label is the method, K and the split of the subjects",
        "(`atlas-directional200split1`); `scale-<K>` repeats K.",
        "`report.html` compares the parcellations; `report.json` holds every score.",
        "",
        "## Methods (cite these)",
        "",
        *rows,
        "",
        *(["## Measures", "", *measures, ""] if measures else []),
        "`CITATION.cff` lists the same references in the Citation File Format.",
        "",
    ]
    return "\n".join(lines)


def methods_text(report: dict[str, Any], methods: list[MethodSpec]) -> str:
    """A methods paragraph to paste into a paper, as fMRIPrep writes one: what the run did,
    with the versions, settings and figures of ``report`` (``report.json`` so far) and
    numbered references."""
    cited: list[str] = []

    def cite(*keys: str) -> str:
        for key in keys:
            if key not in cited:
                cited.append(key)
        return "[" + ", ".join(str(cited.index(k) + 1) for k in keys) + "]"

    v = report.get("versions", {})
    cfg = report.get("config", {})
    mask = report.get("mask", {})
    subjects = report.get("subjects", [])
    splits: dict[str, list[dict[str, Any]]] = {}
    for row in subjects:
        splits.setdefault(row["split"], []).append(row)
    kept = [r["kept"] for r in subjects]
    wall = int(mask.get("n_medial_wall", 0))
    masked = int(mask.get("n_masked", 0))
    why = (
        f"{wall} on the template's medial wall, {masked - wall} constant or non-finite"
        if wall else "constant or non-finite in some subject"
    )  # fmt: skip
    parts = [
        f"Cortical parcellations were computed with lsd-dask {v.get('lsd_dask', '')} "
        f"(Python {v.get('python', '')}; Dask {v.get('dask', '')}, NumPy {v.get('numpy', '')}, "
        f"SciPy {v.get('scipy', '')}, scikit-learn {v.get('scikit-learn', '')}, nibabel "
        f"{v.get('nibabel', '')}).",
        f"The surface time series of {len(subjects)} subjects ({mask.get('n_vertices', '?')} "
        f"vertices, of which {masked} were masked: {why}) were preprocessed: "
        f"{report.get('preprocessing', 'none')}; each vertex's series was then demeaned and "
        "scaled to unit variance.",
    ]
    if kept:
        lo, hi = min(kept), max(kept)
        parts.append(
            f"Each subject kept {lo} volumes." if lo == hi
            else f"Subjects kept {lo} to {hi} volumes (median {int(np.median(kept))})."
        )  # fmt: skip
    if splits:
        counts = " and ".join(str(len(rows)) for rows in splits.values())
        parts.append(
            f"The subjects were divided into {len(splits)} splits of {counts} subjects, "
            "balanced by their volumes."
        )
    svd = next(iter(report.get("svd", {}).values()), None)
    if svd:
        how = "randomized" if svd.get("method") == "randomized" else "streaming"
        ref = f" {cite('randomized_svd')}" if how == "randomized" else ""
        parts.append(
            f"Each split's concatenated time series were reduced by a {how} singular value "
            f"decomposition, X = UΣVᵀ, of rank {svd.get('rank')}{ref}."
        )
    ks = ", ".join(str(k) for k in cfg.get("ks", []))
    for spec in methods:
        keys = [k for k in _METHOD_PAPERS.get(spec.method, ()) if k in REFERENCES]
        own = f" {cite(*keys)}" if keys else ""  # numbered in the order they are read
        spatial = []
        if float(spec.options.get("spatial_weight") or 0) > 0:
            spatial.append(
                f"a Potts term of weight {spec.options['spatial_weight']:g} per cut mesh edge"
            )
        over = float(spec.options.get("oversegment") or 1)
        if over > 1:  # one fine fit for every K, or one per K
            ward = f"Ward's linkage on the mesh {cite('ward')}"
            spatial.append(
                f"one fit per split at {over:g} times the largest K clusters, merged by {ward}"
                " to each K in turn (largest first, each from the one above) and refined "
                "there by the Potts term" if spec.shared
                else f"a fit at {over:g} K clusters merged to K by {ward}"
            )  # fmt: skip
        blur = spec.options.get("feature_smoothing_mm")
        if blur:
            spatial.append(f"features blurred along the mesh ({blur} mm FWHM)")
        extra = f", with {' and '.join(spatial)}" if spatial else ""
        parts.append(
            f"Parcellation {spec.name!r}: {spec.method.replace('_', ' ')} clustering"
            f"{own} of the unit rows of "
            f"{'U·Σ' if spec.features == 'us' else 'U'}{extra}, at K = {ks}, "
            "in each split."
        )
    if cfg.get("held_out"):
        spins = cfg.get("spins", 0)
        null = (
            f", each against {spins} spins of the parcellation on the sphere {cite('spin')}"
            if spins
            else ""
        )
        parts.append(
            "Each split's parcels were scored on the other split's data by held-out "
            f"homogeneity {cite('homogeneity')}, the distance-controlled boundary coefficient "
            f"{cite('dcbc')} and the neighbour silhouette{null}; the two splits' parcellations "
            "were compared by split-half Dice."
        )
    individual = cfg.get("individual")
    if individual:
        prior = individual["prior"]
        from_run = any(m.get("name") == prior for m in cfg.get("methods", []))
        where = (
            f"parcellation {prior!r} of the other split, fitted without the participant" if from_run
            else f"the atlas {prior}"
        )  # fmt: skip
        how = (
            "von Mises-Fisher parcels on the participant's series with a spatial prior from it "
            "(each parcel's indicator averaged over 4 mesh steps) and a Potts term on the mesh, "
            f"after the multi-session hierarchical Bayesian model {cite('kong2019')}"
            if individual["method"] == "prior_potts"
            else f"iterative adjustment {cite('wang2015')}"
        )
        parts.append(
            f"Each participant's own parcellation was made from {where} by {how}. It was "
            "fitted on each half of the participant's time points and scored on the other "
            "half, beside the prior scored on the same half."
        )
    refs = [f"{i}. {citation_line(k)}" for i, k in enumerate(cited, 1)]
    return " ".join(parts) + ("\n\nReferences\n" + "\n".join(refs) if refs else "")
