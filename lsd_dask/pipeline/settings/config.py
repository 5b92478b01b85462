"""The resolved settings of a run (:class:`PipelineConfig`), one field per setting with its
default, note and bound, and the checks they take (:meth:`PipelineConfig.validate`);
:mod:`.load` reads a pipeline file into them.

Every key of a pipeline file, its default and what it does are listed in
``docs/pipeline_file.md``, generated from the fields here by :mod:`.reference`;
``lsd-dask config`` prints them as a commented file. A minimal file::

    subjects:
      - {id: sub-01, left: data/sub-01.L.func.gii, right: data/sub-01.R.func.gii}
      - {id: sub-02, cifti: data/sub-02.dtseries.nii}
    mesh: {left: lh.surf.gii, right: rh.surf.gii}
    ks: [100, 200]

Relative paths are resolved against the YAML file's folder; ``pkg://NAME/path`` points into
an installed package.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ...cluster import SPATIAL_OPTIONS
from ...io.bids import atlas_label, bids_label
from ...io.surface_files import READERS, SubjectFiles
from . import files
from .atlases import AtlasSpec
from .bids import BidsSettings
from .files import minimum_of, setting
from .individual import IndividualSettings
from .methods import MethodSpec, default_methods, numbers, parse_methods
from .preprocess import PreprocessSettings
from .splits import check_splits, halve
from .svd import SvdSettings

__all__ = ["INTEGER_SETTINGS", "PipelineConfig", "check_features", "integer_settings"]


#: the SVD defaults as a mapping (from :class:`SvdSettings`)
SVD_DEFAULTS: dict[str, Any] = asdict(SvdSettings())


@dataclass
class PipelineConfig:
    """The resolved settings of one run (written to ``report.json``)."""

    subjects: list[SubjectFiles] = setting(
        note=(
            "each subject: {id: sub-01, cifti: f.dtseries.nii}, or {id, left: L.func.gii, right: "
            "R.func.gii}, or {id, zarr: x.zarr}; time_slice: [start, stop] keeps part of a run"
        )
    )
    mesh: dict[str, str] = setting(
        note=(
            "{left: lh.surf.gii, right: rh.surf.gii}, or conte69 / fsaverage5; null: the standard"
            " mesh with the data's vertex count"
        )
    )
    output: Path = setting(note="the output folder (relative to this file)")
    splits: dict[str, list[str]] | None = setting(
        None,
        note=(
            "null: the sorted participants halved; random: halved at random (random_state); or "
            "{split1: [ids], split2: [ids]}"
        ),
    )
    #: the fMRIPrep tree the subjects were found in (``bids:``), if any
    bids: BidsSettings | None = setting(
        None,
        note=(
            "an fMRIPrep derivatives tree as input (ids from sub-; a participant's runs stay in "
            "one split)"
        ),
    )
    #: subject id -> participant, where a participant has several runs (each run a subject
    #: id; a participant's runs go into one split)
    participants: dict[str, str] = field(default_factory=dict)
    #: what the mesh is: the file pair given, or the standard mesh chosen for the data
    mesh_source: str = "given"
    #: the methods to run, each with its spatial settings (``methods:`` in the file; the
    #: top-level spatial settings below are every method's defaults)
    methods: list[MethodSpec] = setting(
        factory=lambda: parse_methods(default_methods({}), {}),
        note=(
            "method names (directional, lsd, hierarchical_lsd, spherical_kmeans, kmeans, "
            "spectral, ward: no spatial option), or variants {name, method, <spatial option>...,"
            " fine_fit: shared (oversegment > 1: one fine fit per split at oversegment × the "
            "largest K, merged and refined at every K; the default) or per_k}"
        ),
    )
    ks: list[int] = setting(factory=lambda: [50, 100], note="the cluster counts K", minimum=2)
    svd: SvdSettings = setting(factory=SvdSettings, note="the group SVD of each split")
    min_region_size: int = setting(
        20,
        minimum=1,
        note=(
            "vertices; smaller connected pieces do not count as regions in the split-half scores"
        ),
    )
    nonfinite: str = setting(
        "error", note=("error, or mask: drop vertices with NaN/inf in any subject")
    )
    cluster: str | dict[str, Any] | None = setting(
        None, note=("a cluster_configs/*.yaml, or a scheduler address (null: a local cluster)")
    )
    random_state: int = setting(0, note="the seed of every random draw", minimum=0)
    #: repeats of the split-half scores' nulls (each regrows or spins every region)
    null_repeats: int = setting(
        5, note=("repeats of the split-half scores' region-size and spin nulls"), minimum=0
    )
    #: spins of each parcellation for the held-out measures' null (scored on a sample of
    #: the vertices: :class:`lsd_dask.evaluation.SpinNull`); 0: no z-scores
    spins: int = setting(
        1000, note="spins per parcellation for the held-out measures' z (0: none)", minimum=0
    )
    #: how a run knows an input file is unchanged: ``stat`` (path, size, mtime and a SHA-1
    #: of three 64 KiB blocks: its start, middle and end) or ``content`` (a SHA-1 of its
    #: bytes; :mod:`..stages.ingest`)
    input_identity: str = setting(
        "stat",
        note=(
            "stat: an input is unchanged when its size, mtime and start, middle and end "
            "blocks are (an edit between them, the mtime put back, is not seen); content: a "
            "SHA-1 of every byte (one more read of the inputs)"
        ),
    )
    #: the held-out scores to compute: ``splits`` (each split's parcels on the other
    #: split's data, :mod:`..stages.evaluation`) and ``time_halves`` (fitted on one half of
    #: a split's time points, scored on the other, :mod:`..stages.time_halves`)
    held_out: list[str] = setting(
        factory=lambda: ["splits"],
        note=(
            "splits: each split's parcels scored on the other split's data; add time_halves to "
            "fit on one half of a split's time points and score on the other"
        ),
    )
    #: the features clustered, unit-normalised, for every method: rows of U·Σ ("us") or of
    #: U ("u"); None: each method's own default
    #: (:data:`~lsd_dask.pipeline.settings.methods.METHODS`)
    features: str | None = setting(
        None, note=("null: each method's own; us: unit rows of U·Σ; u: unit rows of U")
    )
    #: every method's spatial options, as given at the top level of the file (a variant's
    #: own win); their names, defaults and bounds are
    #: :class:`lsd_dask.cluster.MeshParcellation`'s, ``feature_smoothing_mm`` may be "auto"
    spatial: dict[str, Any] = field(default_factory=dict)
    #: where the stores, SVD results and labels go: ``<output>/work`` (None), another
    #: folder, or an fsspec URL that every worker can read (``s3://bucket/run/work``)
    work: str | None = setting(
        None,
        note=(
            "null: <output>/work; or a folder or URL every worker reads, e.g. s3://bucket/run/work"
        ),
    )
    storage_options: dict[str, Any] = setting(
        factory=dict, note=("fsspec options for a work URL (key, secret, endpoint...)")
    )
    #: spherical registrations of the meshes (GIFTI, vertex for vertex) for the spin null;
    #: None: found for fsaverage5 and 32k_fs_LR (see :func:`lsd_dask.spin.find_spheres`)
    sphere: dict[str, str] | None = setting(
        None,
        note=(
            "{left: lh.sphere.surf.gii, right: ...} for the spin nulls (null: found for "
            "fsaverage5 and 32k_fs_LR)"
        ),
    )
    #: inflated (or very inflated) surfaces to draw the figures on, vertex for vertex with
    #: ``mesh``; None: nilearn's inflated fsaverage5 for fsaverage5, else ``mesh`` itself
    display_mesh: dict[str, str] | None = setting(
        None,
        note=(
            "{left: lh.inflated.surf.gii, right: ...} to draw the figures on (null: nilearn's "
            "inflated fsaverage5 for fsaverage5, else the mesh)"
        ),
    )
    #: per-subject smoothing, detrending, band-pass and confound regression at ingest
    preprocess: PreprocessSettings = setting(
        factory=PreprocessSettings,
        note=("per subject at ingest, before the SVD (default: nothing)"),
    )
    #: published parcellations scored beside the run's (:mod:`.atlases`)
    compare_atlases: list[AtlasSpec] = setting(
        factory=list,
        note=(
            "published parcellations scored beside the run's: schaefer_100..400, "
            "vosdewael_100..400, or {name, dlabel: f.dlabel.nii} / {name, left, right}"
        ),
    )
    #: each subject's own parcels from a group prior (:mod:`.individual`); None: none
    individual: IndividualSettings | None = setting(
        None,
        note=(
            "each subject's own parcels from a group prior: true, or {method: prior_potts | "
            "iterative, prior: <method | atlas>, ks: [...]} (null: none)"
        ),
    )

    @property
    def work_url(self) -> str:
        return self.work or str(self.output / "work")

    def resolved_splits(self) -> dict[str, list[str]]:
        """Explicit splits, or the sorted participants halved (a participant's runs
        together)."""
        if self.splits:
            return {k: list(v) for k, v in self.splits.items()}
        return halve([s.subject for s in self.subjects], self.participants)

    def to_dict(self, relative_to: str | os.PathLike[str] | None = None) -> dict[str, Any]:
        """The settings as plain data; with ``relative_to``, local paths are written
        relative to that folder (a report moved with its outputs still points at them)."""

        def path(v: Any) -> str | None:
            if v is None:
                return None
            text = str(v)
            if relative_to is None or "://" in text:
                return text
            return os.path.relpath(text, relative_to)

        d = asdict(self)
        d["subjects"] = [
            {
                "subject": s.subject,
                "kind": s.kind,
                **{k: path(p) for k, p in zip(READERS[s.kind].keys, s.paths, strict=True)},
                "time_slice": list(s.time_slice) if s.time_slice else None,
            }
            for s in self.subjects
        ]
        d["mesh"] = {h: path(v) for h, v in self.mesh.items()}
        if self.bids is not None:
            d["bids"]["root"] = path(self.bids.root)
        for key in ("sphere", "display_mesh"):
            if getattr(self, key) is not None:
                d[key] = {h: path(v) for h, v in getattr(self, key).items()}
        d["output"] = path(self.output)
        if self.work is not None:
            d["work"] = path(self.work)
        if self.preprocess.confounds is not None:
            d["preprocess"]["confounds"] = path(self.preprocess.confounds)
        d["splits"] = self.resolved_splits()
        # the spatial options flat, as the file writes them, every one with its value
        del d["spatial"]
        d.update(numbers({**SPATIAL_OPTIONS, **self.spatial}))
        d["methods"] = [m.to_dict() for m in self.methods]
        d["compare_atlases"] = [
            a.to_dict() if a.files is None else
            {"name": a.name, **{k: path(v) for k, v in a.files.items()}}
            for a in self.compare_atlases
        ]  # fmt: skip
        # credentials stay out of the report
        d["storage_options"] = sorted(self.storage_options)
        return d

    def validate(self) -> None:
        """Checks that need no data: names, numbers, duplicates, split membership."""
        if not self.ks:
            raise ValueError("ks: a list of cluster counts, got none.")
        # the API's config is held to the bounds the pipeline file is (one place: the field)
        least = minimum_of(PipelineConfig, "ks")
        _distinct_ks([files.int_setting(k, "ks", least) for k in self.ks])
        for name, value in integer_settings(vars(self)).items():
            files.int_setting(value, name, minimum_of(PipelineConfig, name))
        if self.nonfinite not in ("error", "mask"):
            raise ValueError("nonfinite must be 'error' or 'mask'.")
        if self.input_identity not in ("stat", "content"):
            raise ValueError(
                f"input_identity must be 'stat' or 'content', got {self.input_identity!r}."
            )
        check_features(self.features)
        check_splits(self.subjects, self.resolved_splits(), self.participants)
        check_file_labels([m.name for m in self.methods], self.ks, list(self.resolved_splits()))


def check_file_labels(methods: list[str], ks: list[int], splits: list[str]) -> None:
    """Method and split names must stay apart once written as BIDS labels (letters and
    digits only): ``dir_a`` and ``dira``, ``s-1`` and ``s_1``, or ``dir1`` at K = 20 and
    ``dir`` at K = 120 would write one file for two parcellations. An error names both."""
    for what, names in (("methods", methods), ("splits", splits)):
        seen: dict[str, str] = {}
        for name in names:
            label = bids_label(name)
            if label in seen:
                raise ValueError(
                    f"{what}: {seen[label]!r} and {name!r} are both {label!r} as a file label "
                    "(letters and digits only); rename one."
                )
            seen[label] = name
    atlases: dict[str, tuple[str, int, str]] = {}
    for m in methods:
        for k in ks:
            for split in splits:
                label = atlas_label(m, k, split)
                if label in atlases:
                    a = atlases[label]
                    raise ValueError(
                        f"methods: {a[0]!r} at K = {a[1]} in {a[2]} and {m!r} at K = {k} in "
                        f"{split} are both atlas-{label} in file names; rename one (a name "
                        "that ends in a digit runs into K, or K into a split's name)."
                    )
                atlases[label] = (m, k, split)


def _distinct_ks(ks: list[int]) -> list[int]:
    """The cluster counts, each once (a repeated K would be fitted twice under one name)."""
    twice = sorted({k for k in ks if ks.count(k) > 1})
    if twice:
        raise ValueError(f"ks: {', '.join(map(str, twice))} given more than once.")
    return ks


def check_features(v: Any) -> str | None:
    if v not in (None, "us", "u"):
        raise ValueError(
            f"features must be 'us' (U·Σ), 'u' (U) or null (each method's own), got {v!r}."
        )
    return v  # type: ignore[no-any-return]


#: the integer settings besides ``ks`` (a field with a ``minimum``)
INTEGER_SETTINGS = tuple(
    f.name for f in fields(PipelineConfig) if "minimum" in f.metadata and f.name != "ks"
)


def integer_settings(values: dict[str, Any]) -> dict[str, int]:
    """The integer settings among ``values``, each checked against its field's bound."""
    return {
        name: files.int_setting(values[name], name, minimum_of(PipelineConfig, name))
        for name in INTEGER_SETTINGS
        if name in values
    }
