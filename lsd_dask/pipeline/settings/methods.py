"""The pipeline's clustering methods: one table that the configuration, the run and the CLI
all read, and the configured variants a pipeline file may ask for.

A configured method is one estimator: :class:`~lsd_dask.cluster.MeshParcellation` around
the method's own, with the variant's spatial options as its parameters. The spatial
options, their defaults and their bounds are the estimator's
(:data:`~lsd_dask.cluster.SPATIAL_OPTIONS`); this module only names them, so a new option
of the estimator is a pipeline-file key with no change here.

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

import re
from dataclasses import dataclass, field
from typing import Any

from ...cluster import (
    SPATIAL_OPTIONS,
    MeshParcellation,
    check_spatial_options,
)
from ...cluster.multiscale import refines

__all__ = [
    "AUTO",
    "FINE_FITS",
    "DEFAULT_METHOD",
    "METHODS",
    "VARIANT_KEYS",
    "Method",
    "MethodSpec",
    "check_options",
    "default_methods",
    "numbers",
    "parse_methods",
]

#: how a variant with ``oversegment`` > 1 makes its fine clusters: ``shared``, one fine fit
#: per split at ``oversegment`` × the largest K, merged and refined at every K, largest
#: first (:class:`~lsd_dask.cluster.MultiScaleParcellation`); ``per_k``, a fine fit at
#: ``oversegment`` × K for each K, merged to K
FINE_FITS = ("shared", "per_k")

#: the value of ``feature_smoothing_mm`` that lets each split's data choose the blur (the
#: blur stage resolves it to a number per split before any fit)
AUTO = "auto"


@dataclass(frozen=True)
class Method:
    """One clustering method of the pipeline.

    Attributes
    ----------
    estimator : str
        The class name in :mod:`lsd_dask.cluster`, built with ``random_state`` only (the
        wrapper sets K, the mesh and the Potts weight).
    features : {"us", "u"}
        The features it clusters by default: unit rows of U·Σ or of U (see
        :class:`MethodSpec`).
    summary : str
        One line for the CLI's help.
    """

    estimator: str
    features: str = "us"
    summary: str = ""

    def build(self, random_state: int) -> Any:
        """The method's unfitted estimator."""
        from ... import cluster

        return getattr(cluster, self.estimator)(random_state=random_state)


#: method name -> how the pipeline builds it. LSD and hierarchical LSD cluster rows of U
#: (the paper's protocol): with U·Σ the few leading components dominate the cosine
#: similarity whose top-K eigenvectors LSD rotates, and LSD's NMI on the realistic study
#: (K = 100, rank 300) was 0.792 against 0.842 with U. The other methods cluster rows of
#: U·Σ: with U every component weighs the same, noise included, and directional
#: clustering's NMI there fell from 0.826 to 0.754 (spherical k-means' split-half Dice on
#: brainspace's real run from 0.391 to 0.278). On that real run LSD too reproduced better
#: with U·Σ (Dice 0.375 against 0.258): set ``features: us`` to try it on real data.
METHODS: dict[str, Method] = {
    "directional": Method("DirectionalClustering", summary="Blumensath"),
    "lsd": Method("LSD", features="u", summary="Arora et al., rotation solver"),
    "hierarchical_lsd": Method("HierarchicalLSD", features="u", summary="divisive LSD"),
    "spherical_kmeans": Method("SphericalKMeans", summary="cosine"),
    "kmeans": Method("KMeans", summary="Euclidean"),
    "spectral": Method("SpectralClustering", summary="Ng-Jordan-Weiss"),
    "ward": Method("MeshWard", summary="mesh-constrained Ward"),
}


#: what a pipeline file without ``methods:`` runs: directional clustering with a Potts
#: weight of 1 per cut mesh edge, one fine fit per split at 2 × the largest K, merged by
#: Ward's linkage on the mesh and refined at every K (``fine_fit: shared``). Chosen on the
#: held-out measures (each split's parcels scored on the other split's data;
#: ``benchmarks/evaluation.py``). Merged from 3K clusters at each K, it was above
#: mesh-constrained Ward on brainspace's real fsaverage5 run on homogeneity and DCBC at
#: K = 50, 100 and 200 (0.314/0.083, 0.378/0.106, 0.455/0.139 against 0.314/0.077,
#: 0.376/0.098, 0.448/0.122) with split-half Dice 0.031 to 0.040 higher; plain directional
#: clustering scores higher on both but with 4-5 times as many regions as K
#: (salt-and-pepper) and Dice 0.10 lower. One fine fit at 2 × 400 for K = 100, 200, 400
#: then scored higher than that at every K on the same run (K = 100: 0.386/0.117 against
#: 0.377/0.097, Dice 0.484 against 0.464), and at full scale its fits take 0.87× plain
#: directional clustering's (``docs/benchmarks.md``).
DEFAULT_METHOD: dict[str, Any] = {
    "name": "directional_merged",
    "method": "directional",
    "spatial_weight": 1.0,
    "oversegment": 2.0,
}


def default_methods(spatial: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``methods:`` entry of a file that gives none: :data:`DEFAULT_METHOD`, where a
    spatial option the file sets at the top level wins over the default's own."""
    return [{k: v for k, v in DEFAULT_METHOD.items() if k not in spatial}]


@dataclass(frozen=True)
class MethodSpec:
    """A method as a pipeline runs it: its name in outputs, the method, its spatial options.

    Attributes
    ----------
    name : str
        Names the label files and the report's rows (the method's name by default).
    method : str
        A key of :data:`METHODS`.
    features : {"us", "u"}
        Unit rows of U·Σ (the cosine of two vertices is the correlation of their rank-r
        reconstructions) or of U (every component weighs the same). Default: the method's.
    options : dict
        :class:`~lsd_dask.cluster.MeshParcellation`'s spatial options, every one present;
        ``feature_smoothing_mm`` may be :data:`AUTO` (the blur stage resolves it).
    fine_fit : {"shared", "per_k"}
        One of :data:`FINE_FITS`: ``shared`` only with ``oversegment`` > 1,
        ``spatial_weight`` > 0 and a method with a Potts refinement.
    """

    name: str
    method: str
    features: str = "us"
    options: dict[str, Any] = field(default_factory=lambda: dict(SPATIAL_OPTIONS))
    fine_fit: str = "per_k"

    @property
    def shared(self) -> bool:
        """Whether one fine fit per split serves every K."""
        return self.fine_fit == "shared"

    @property
    def auto_blur(self) -> bool:
        """Whether each split's data choose the blur (``feature_smoothing_mm: auto``)."""
        return bool(self.options.get("feature_smoothing_mm") == AUTO)

    @property
    def needs_mesh(self) -> bool:
        return self.auto_blur or self.estimator(2, 0).needs_mesh()

    def estimator(
        self,
        k: int,
        random_state: int,
        *,
        connectivity: Any = None,
        vertices: Any = None,
        min_region_size: int = 20,
        blur_mm: float | None = None,
    ) -> MeshParcellation:
        """The unfitted estimator at K clusters; ``blur_mm`` is the blur the split's data
        chose, for ``feature_smoothing_mm: auto``."""
        options = dict(self.options)
        if self.auto_blur:
            options["feature_smoothing_mm"] = 0.0 if blur_mm is None else float(blur_mm)
        return MeshParcellation(
            METHODS[self.method].build(random_state),
            k,
            connectivity=connectivity,
            vertices=vertices,
            min_region_size=min_region_size,
            random_state=random_state,
            **options,
        )

    def to_dict(self) -> dict[str, Any]:
        """As a pipeline file writes a variant (the report's ``config.methods``)."""
        return {
            "name": self.name, "method": self.method, **self.options,
            "features": self.features, "fine_fit": self.fine_fit,
        }  # fmt: skip


def parse_methods(raw: Any, defaults: dict[str, Any]) -> list[MethodSpec]:
    """Method specs from the ``methods:`` entry; errors name the entry and the key.

    ``defaults`` holds the top-level spatial options and ``features`` (None: each method's
    own), which a variant may override.
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
        unknown = sorted(set(entry) - VARIANT_KEYS)
        if unknown:
            raise ValueError(
                f"methods[{i}]: unknown key(s) {unknown}; known: {sorted(VARIANT_KEYS)}."
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
        base = METHODS[method].build(0)
        options = {**SPATIAL_OPTIONS, **{k: defaults[k] for k in SPATIAL_OPTIONS if k in defaults}}
        if "spatial_weight" not in base.get_params() and "spatial_weight" not in entry:
            options["spatial_weight"] = 0.0  # a top-level Potts weight: only where there is one
        options.update({k: v for k, v in entry.items() if k in SPATIAL_OPTIONS})
        check_options(options, f"methods[{i}].", base)
        features = entry.get("features") or defaults.get("features") or METHODS[method].features
        if features not in ("us", "u"):
            raise ValueError(f"methods[{i}].features: 'us' (U·Σ) or 'u' (U), got {features!r}.")
        fine_fit = _fine_fit(entry, options, base, f"methods[{i}].")
        specs.append(MethodSpec(name, method, features, numbers(options), fine_fit))
    names = [s.name for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"methods: name(s) {dup} used twice; give each variant its own name.")
    return specs


def check_options(options: dict[str, Any], where: str = "", estimator: Any = None) -> None:
    """Spatial options checked by the estimator's own bounds (``feature_smoothing_mm`` may
    be :data:`AUTO`); the error names ``where`` and the key."""
    probe = {**options}
    if probe.get("feature_smoothing_mm") == AUTO:
        probe["feature_smoothing_mm"] = 0.0
    try:
        check_spatial_options(estimator, probe)
    except ValueError as err:
        text = str(err)
        if text.startswith("feature_smoothing_mm"):
            text = text.removesuffix(".") + f" or {AUTO!r}."
        raise ValueError(f"{where}{text}") from None


#: the keys of a variant: its name, method, features and fine fit, and every spatial option
VARIANT_KEYS = {"name", "method", "features", "fine_fit", *SPATIAL_OPTIONS}


def _fine_fit(entry: dict[str, Any], options: dict[str, Any], base: Any, where: str) -> str:
    """A variant's ``fine_fit``: as given (checked), else ``shared`` wherever it can be
    (``oversegment`` > 1, ``spatial_weight`` > 0, a method with a Potts refinement)."""
    why = (
        "oversegment > 1" if float(options["oversegment"]) <= 1
        else "a method with a Potts refinement (directional)" if not refines(base)
        else "spatial_weight > 0" if float(options["spatial_weight"]) <= 0
        else None
    )  # fmt: skip
    given = entry.get("fine_fit")
    if given is None:
        return "per_k" if why else "shared"
    if given not in FINE_FITS:
        raise ValueError(f"{where}fine_fit: one of {list(FINE_FITS)}, got {given!r}.")
    if given == "shared" and why:
        raise ValueError(f"{where}fine_fit: 'shared' needs {why}.")
    return str(given)


def numbers(options: dict[str, Any]) -> dict[str, Any]:
    """Numeric options as floats (``2`` and ``2.0`` are one setting in keys and reports)."""
    return {
        k: float(v)
        if isinstance(SPATIAL_OPTIONS[k], float) and not isinstance(v, bool | str)
        else v
        for k, v in options.items()
    }


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_]{0,63}$")
