"""The pipeline's clustering methods: one table that the configuration, the run and the CLI
all read, and the configured variants a pipeline file may ask for.

Adding a method to the pipeline: write its estimator in :mod:`lsd_dask.cluster`, export it,
and add one :class:`Method` row to :data:`METHODS`.

A pipeline file lists methods by name, or as variants with their own spatial settings, so
that one run can put two settings of a method side by side::

    methods:
      - ward
      - {name: directional_merged, method: directional, spatial_weight: 2,
         oversegment: 2}

A variant's ``name`` names its label files and its rows in the report.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["METHODS", "Method", "MethodSpec", "build_estimator", "parse_methods"]


@dataclass(frozen=True)
class Method:
    """One clustering method of the pipeline.

    Attributes
    ----------
    build : callable
        ``build(k, random_state, **extra)`` returns an unfitted estimator.
    potts : bool
        Whether it takes ``spatial_weight`` and ``connectivity`` (a Potts term).
    needs_mesh : bool
        Whether it always needs the mesh adjacency (``connectivity``).
    features : {"us", "u"}
        The features it clusters by default: unit rows of U·Σ or of U (see
        :class:`MethodSpec`).
    summary : str
        One line for the CLI's help.
    """

    build: Callable[..., Any]
    potts: bool = False
    needs_mesh: bool = False
    features: str = "us"
    summary: str = ""


def _cluster(name: str) -> Callable[..., Any]:
    def build(k: int, random_state: int, **extra: Any) -> Any:
        from .. import cluster

        return getattr(cluster, name)(k, random_state=random_state, **extra)

    return build


#: method name -> how the pipeline builds it. LSD and hierarchical LSD cluster rows of U
#: (the paper's protocol): with U·Σ the few leading components dominate the cosine
#: similarity whose top-K eigenvectors LSD rotates, and LSD's NMI on the realistic study
#: (K = 100, rank 300) was 0.792 against 0.842 with U. The other methods cluster rows of
#: U·Σ: with U every component weighs the same, noise included, and directional
#: clustering's NMI there fell from 0.826 to 0.754 (spherical k-means' split-half Dice on
#: brainspace's real run from 0.391 to 0.278). On that real run LSD too reproduced better
#: with U·Σ (Dice 0.375 against 0.258): set ``features: us`` to try it on real data.
METHODS: dict[str, Method] = {
    "directional": Method(_cluster("DirectionalClustering"), potts=True, summary="Blumensath"),
    "lsd": Method(_cluster("LSD"), features="u", summary="Arora et al., rotation solver"),
    "hierarchical_lsd": Method(_cluster("HierarchicalLSD"), features="u", summary="divisive LSD"),
    "spherical_kmeans": Method(_cluster("SphericalKMeans"), potts=True, summary="cosine"),
    "kmeans": Method(_cluster("KMeans"), summary="Euclidean"),
    "spectral": Method(_cluster("SpectralClustering"), summary="Ng-Jordan-Weiss"),
    "ward": Method(_cluster("MeshWard"), needs_mesh=True, summary="mesh-constrained Ward"),
}


@dataclass(frozen=True)
class MethodSpec:
    """A method as a pipeline runs it: its name in outputs, the method, its spatial settings.

    Attributes
    ----------
    name : str
        Names the label files and the report's rows (the method's name by default).
    method : str
        A key of :data:`METHODS`.
    feature_smoothing_mm : float or "auto"
        Blur of the SVD features along the mesh before clustering (FWHM, mm; 0: none);
        ``"auto"``: each split's data choose it (:mod:`lsd_dask.pipeline.blur`).
    spatial_weight : float
        Potts penalty per cut mesh edge (methods with ``potts`` only).
    contiguous : bool
        Split clusters into connected parcels, merging small fragments.
    oversegment : float
        Fit ``oversegment`` × K clusters, then merge clusters that touch on the mesh with
        Ward's linkage down to K (1: no merge).
    features : {"us", "u"}
        Unit rows of U·Σ (the cosine of two vertices is the correlation of their rank-r
        reconstructions) or of U (every component weighs the same). Default: the method's.
    """

    name: str
    method: str
    feature_smoothing_mm: float | str = 0.0
    spatial_weight: float = 0.0
    contiguous: bool = False
    features: str = "us"
    oversegment: float = 1.0

    @property
    def needs_mesh(self) -> bool:
        return (
            METHODS[self.method].needs_mesh
            or self.feature_smoothing_mm == AUTO
            or self.feature_smoothing_mm > 0
            or self.contiguous
            or self.oversegment > 1
            or (self.spatial_weight > 0 and METHODS[self.method].potts)
        )


def build_estimator(spec: MethodSpec, k: int, random_state: int, connectivity: Any = None) -> Any:
    """The unfitted estimator of a configured method at K clusters (wrapped in
    :class:`~lsd_dask.cluster.WardMerge` when ``oversegment`` > 1)."""
    m = METHODS[spec.method]
    extra: dict[str, Any] = {}
    if m.needs_mesh:
        extra["connectivity"] = connectivity
    if m.potts:
        extra["spatial_weight"] = spec.spatial_weight
        extra["connectivity"] = connectivity if spec.spatial_weight > 0 else None
    est = m.build(k, random_state, **extra)
    if spec.oversegment > 1:
        from ..cluster import WardMerge

        est = WardMerge(
            est, k, oversegment=spec.oversegment, connectivity=connectivity,
            random_state=random_state,
        )
    return est


def parse_methods(raw: Any, defaults: dict[str, Any]) -> list[MethodSpec]:
    """Method specs from the ``methods:`` entry; errors name the entry and the key.

    ``defaults`` holds the top-level ``feature_smoothing_mm``, ``spatial_weight``,
    ``contiguous``, ``oversegment`` and ``features`` (None: each method's own), which a variant may
    override.
    """
    entries = [raw] if isinstance(raw, str | dict) else raw
    if not isinstance(entries, list | tuple) or not entries:
        raise ValueError(f"methods: a list of method names or variants, got {raw!r}.")
    specs = []
    for i, entry in enumerate(entries):
        if isinstance(entry, str):
            entry = {"method": entry}
        if not isinstance(entry, dict):
            raise ValueError(f"methods[{i}]: a method name or a mapping, got {entry!r}.")
        unknown = sorted(set(entry) - _VARIANT_KEYS)
        if unknown:
            raise ValueError(
                f"methods[{i}]: unknown key(s) {unknown}; known: {sorted(_VARIANT_KEYS)}."
            )
        method = entry.get("method")
        if method not in METHODS:
            raise ValueError(
                f"methods[{i}]: unknown method {method!r}; choose from {list(METHODS)}."
            )
        name = str(entry.get("name", method))
        if not _NAME.match(name):
            raise ValueError(
                f"methods[{i}]: name {name!r}: use letters, digits and '_' only (it names files)."
            )
        settings = {**defaults, **{k: v for k, v in entry.items() if k in defaults}}
        for key, low in _LOWEST.items():
            v = settings[key]
            if key == "feature_smoothing_mm" and v == AUTO:
                continue
            number = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            if not number or v < low:
                also = " or 'auto'" if key == "feature_smoothing_mm" else ""
                raise ValueError(f"methods[{i}].{key}: a number >= {low}{also}, got {v!r}.")
        if not isinstance(settings["contiguous"], bool):
            raise ValueError(f"methods[{i}].contiguous: true or false.")
        features = settings.get("features") or METHODS[method].features
        if features not in ("us", "u"):
            raise ValueError(f"methods[{i}].features: 'us' (U·Σ) or 'u' (U), got {features!r}.")
        if not METHODS[method].potts:
            if entry.get("spatial_weight", 0) > 0:
                raise ValueError(
                    f"methods[{i}]: {method} has no Potts term; spatial_weight applies to "
                    f"{[m for m, v in METHODS.items() if v.potts]}."
                )
            settings["spatial_weight"] = 0.0  # the top-level default does not apply
        specs.append(
            MethodSpec(
                name=name,
                method=method,
                feature_smoothing_mm=_blur(settings["feature_smoothing_mm"]),
                spatial_weight=float(settings["spatial_weight"]),
                contiguous=settings["contiguous"],
                features=features,
                oversegment=float(settings["oversegment"]),
            )
        )
    names = [s.name for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"methods: name(s) {dup} used twice; give each variant its own name.")
    return specs


def _blur(v: float | str) -> float | str:
    return AUTO if v == AUTO else float(v)


#: the value of ``feature_smoothing_mm`` that lets each split's data choose the blur
AUTO = "auto"
#: the numeric settings of a variant and their least values (oversegment 1: no merge)
_LOWEST = {"feature_smoothing_mm": 0, "spatial_weight": 0, "oversegment": 1}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_]{0,63}$")
_VARIANT_KEYS = {
    "name",
    "method",
    "feature_smoothing_mm",
    "spatial_weight",
    "contiguous",
    "features",
    "oversegment",
}
