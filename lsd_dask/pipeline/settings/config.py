"""Pipeline configuration: defaults < YAML file < command-line overrides.

Every key of a pipeline file, its default and what it does are listed in
``docs/pipeline_file.md``, generated from the definitions here by :mod:`.reference`;
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

import copy
import os
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ...cluster import SPATIAL_OPTIONS
from ...io.settings_yaml import read_settings
from ...io.surface_files import READERS, SubjectFiles
from . import files
from .atlases import AtlasSpec, parse_atlases
from .bids import BidsSettings, bids_subjects
from .methods import MethodSpec, check_options, default_methods, numbers, parse_methods
from .preprocess import PreprocessSettings
from .splits import check_splits, halve
from .svd import SvdSettings

__all__ = ["PIPELINE_KEYS", "PipelineConfig", "load_config"]


#: the SVD defaults as a mapping (from :class:`SvdSettings`)
SVD_DEFAULTS: dict[str, Any] = asdict(SvdSettings())


@dataclass
class PipelineConfig:
    """The resolved settings of one run (written to ``report.json``)."""

    subjects: list[SubjectFiles]
    mesh: dict[str, str]
    output: Path
    splits: dict[str, list[str]] | None = None
    #: the fMRIPrep tree the subjects were found in (``bids:``), if any
    bids: BidsSettings | None = None
    #: subject id -> participant, where a participant has several runs (each run a subject
    #: id; a participant's runs go into one split)
    participants: dict[str, str] = field(default_factory=dict)
    #: what the mesh is: the file pair given, or the standard mesh chosen for the data
    mesh_source: str = "given"
    #: the methods to run, each with its spatial settings (``methods:`` in the file; the
    #: top-level spatial settings below are every method's defaults)
    methods: list[MethodSpec] = field(
        default_factory=lambda: parse_methods(default_methods({}), {})
    )
    ks: list[int] = field(default_factory=lambda: [50, 100])
    svd: SvdSettings = field(default_factory=SvdSettings)
    min_region_size: int = 20
    nonfinite: str = "error"
    cluster: str | dict[str, Any] | None = None
    random_state: int = 0
    #: repeats of the split-half scores' nulls (each regrows or spins every region)
    null_repeats: int = 5
    #: spins of each parcellation for the held-out measures' null (scored on a sample of
    #: the vertices: :class:`lsd_dask.evaluation.SpinNull`); 0: no z-scores
    spins: int = 1000
    #: how a run knows an input file is unchanged: ``stat`` (path, size, mtime) or
    #: ``content`` (a SHA-1 of its bytes; :func:`.ingest.input_identities`)
    input_identity: str = "stat"
    #: the held-out scores to compute: ``splits`` (each split's parcels on the other
    #: split's data, :mod:`.evaluate`) and ``time_halves`` (fitted on one half of a split's
    #: time points, scored on the other, :mod:`.evaluate_halves`)
    held_out: list[str] = field(default_factory=lambda: ["splits"])
    #: the features clustered, unit-normalised, for every method: rows of U·Σ ("us") or of
    #: U ("u"); None: each method's own default
    #: (:data:`~lsd_dask.pipeline.settings.methods.METHODS`)
    features: str | None = None
    #: every method's spatial options, as given at the top level of the file (a variant's
    #: own win); their names, defaults and bounds are
    #: :class:`lsd_dask.cluster.MeshParcellation`'s, ``feature_smoothing_mm`` may be "auto"
    spatial: dict[str, Any] = field(default_factory=dict)
    #: where the stores, SVD results and labels go: ``<output>/work`` (None), another
    #: folder, or an fsspec URL that every worker can read (``s3://bucket/run/work``)
    work: str | None = None
    storage_options: dict[str, Any] = field(default_factory=dict)
    #: spherical registrations of the meshes (GIFTI, vertex for vertex) for the spin null;
    #: None: found for fsaverage5 and 32k_fs_LR (see :func:`lsd_dask.spin.find_spheres`)
    sphere: dict[str, str] | None = None
    #: inflated (or very inflated) surfaces to draw the figures on, vertex for vertex with
    #: ``mesh``; None: nilearn's inflated fsaverage5 for fsaverage5, else ``mesh`` itself
    display_mesh: dict[str, str] | None = None
    #: per-subject smoothing, detrending, band-pass and confound regression at ingest
    preprocess: PreprocessSettings = field(default_factory=PreprocessSettings)
    #: published parcellations scored beside the run's (:mod:`.atlases`)
    compare_atlases: list[AtlasSpec] = field(default_factory=list)

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
        if not self.ks or any(int(k) < 2 for k in self.ks):
            raise ValueError(f"ks must be integers >= 2, got {self.ks}.")
        if self.nonfinite not in ("error", "mask"):
            raise ValueError("nonfinite must be 'error' or 'mask'.")
        if self.input_identity not in ("stat", "content"):
            raise ValueError(
                f"input_identity must be 'stat' or 'content', got {self.input_identity!r}."
            )
        _check_features(self.features)
        check_splits(self.subjects, self.resolved_splits(), self.participants)


def load_config(path: str | os.PathLike[str] | None = None, **overrides: Any) -> PipelineConfig:
    """Read a pipeline YAML (optional) and apply overrides (None values are ignored).

    Every key is checked: an unknown one fails with the closest known key, a bad value with
    the key's name. A mapping override of ``svd`` updates the file's ``svd`` section key by
    key (``svd={"rank": 50}`` keeps the file's other SVD settings);
    ``preprocess_denoise`` sets ``preprocess.denoise`` alone.
    """
    raw: dict[str, Any] = {}
    base = Path.cwd()
    where = "the settings"
    if path is not None:
        p = Path(path)
        raw = read_settings(p, "pipeline file") or {}
        if not isinstance(raw, dict):
            raise ValueError(f"{p}: a pipeline file is a mapping of settings, got {type(raw)}.")
        base = p.resolve().parent
        where = str(p)
    raw = copy.deepcopy(raw)
    files.check_keys(raw, PIPELINE_KEYS, where)
    for key, value in overrides.items():
        if value is None:
            continue
        if key == "svd" and isinstance(value, dict):
            raw["svd"] = {**files.mapping(raw.get("svd"), "svd"), **value}
        elif key == "preprocess_denoise":
            raw["preprocess"] = {**files.mapping(raw.get("preprocess"), "preprocess")}
            raw["preprocess"]["denoise"] = value
        else:
            raw[key] = value
    files.check_keys(raw, PIPELINE_KEYS, where)
    svd = SvdSettings.from_mapping(files.mapping(raw.get("svd"), "svd"), where)
    spatial = {k: raw[k] for k in SPATIAL_OPTIONS if k in raw}
    check_options(spatial)
    features = _check_features(raw.get("features", _default("features")))
    methods = parse_methods(
        raw.get("methods", default_methods(spatial)),
        {**spatial, "features": features},
    )
    ks = raw.get("ks", _default("ks"))
    ks = [ks] if isinstance(ks, int) and not isinstance(ks, bool) else ks
    if not isinstance(ks, list | tuple) or not ks:
        raise ValueError(f"ks: a list of cluster counts, got {ks!r}.")
    bids = BidsSettings.from_mapping(raw["bids"], base) if raw.get("bids") else None
    subjects = files.subjects(raw, base)
    participants: dict[str, str] = {}
    if bids is not None:
        found, participants = bids_subjects(bids)
        subjects += found
    if not subjects:
        raise ValueError("no subjects: give 'subjects', 'globs' or 'bids' in the pipeline file.")
    random_state = files.int_setting(
        raw.get("random_state", _default("random_state")), "random_state", 0
    )
    splits = raw.get("splits")
    if splits == "random":
        splits = halve([s.subject for s in subjects], participants, random_state=random_state)
    elif splits is not None and not (
        isinstance(splits, dict) and all(isinstance(v, list) for v in splits.values())
    ):
        raise ValueError(
            "splits: a mapping of split name to a list of subject ids, random, or null."
        )
    mesh, mesh_source = files.mesh(raw.get("mesh"), base, subjects[0])
    cfg = PipelineConfig(
        subjects=subjects,
        mesh=mesh,
        mesh_source=mesh_source,
        bids=bids,
        participants=participants,
        sphere=files.pair_of_surfaces(raw.get("sphere"), base, "sphere"),
        display_mesh=files.pair_of_surfaces(raw.get("display_mesh"), base, "display_mesh"),
        output=files.resolve(raw.get("output", "lsd_dask_output"), base),
        splits={str(k): [str(i) for i in v] for k, v in splits.items()} if splits else None,
        methods=methods,
        ks=_distinct_ks([files.int_setting(k, "ks", 2) for k in ks]),
        svd=svd,
        min_region_size=files.int_setting(
            raw.get("min_region_size", _default("min_region_size")), "min_region_size", 1
        ),
        nonfinite=str(raw.get("nonfinite", _default("nonfinite"))),
        cluster=files.cluster(raw.get("cluster"), base),
        random_state=random_state,
        null_repeats=files.int_setting(
            raw.get("null_repeats", _default("null_repeats")), "null_repeats", 0
        ),
        spins=files.int_setting(raw.get("spins", _default("spins")), "spins", 0),
        held_out=_held_out(raw.get("held_out", ["splits"])),
        input_identity=str(raw.get("input_identity", "stat")),
        features=features,
        spatial=spatial,
        work=files.work(raw.get("work"), base),
        storage_options=files.mapping(raw.get("storage_options"), "storage_options"),
        preprocess=PreprocessSettings.from_mapping(
            files.mapping(raw.get("preprocess"), "preprocess"), where, base
        ),
        compare_atlases=parse_atlases(raw.get("compare_atlases"), base),
    )
    cfg.validate()
    return cfg


#: the keys of a pipeline file (the fields that are derived from others are not among them)
PIPELINE_KEYS = {f.name for f in fields(PipelineConfig)} - {"spatial", "participants"}
PIPELINE_KEYS = (PIPELINE_KEYS - {"mesh_source"}) | {"globs", *SPATIAL_OPTIONS}


#: what ``held_out`` may name
HELD_OUT = ("splits", "time_halves")


def _held_out(raw: Any) -> list[str]:
    """The ``held_out`` list, checked: one line naming the key and what it may hold."""
    items = [raw] if isinstance(raw, str) else raw
    if (
        not isinstance(items, list)
        or not items
        or any(i not in HELD_OUT for i in items)
        or len(set(items)) != len(items)
    ):
        raise ValueError(
            f"held_out: a list of {' and '.join(HELD_OUT)} (each at most once), got {raw!r}."
        )
    return [str(i) for i in items]


def _distinct_ks(ks: list[int]) -> list[int]:
    """The cluster counts, each once (a repeated K would be fitted twice under one name)."""
    twice = sorted({k for k in ks if ks.count(k) > 1})
    if twice:
        raise ValueError(f"ks: {', '.join(map(str, twice))} given more than once.")
    return ks


def _default(name: str) -> Any:
    """A setting's default, as :class:`PipelineConfig` states it (the one place)."""
    f = next(f for f in fields(PipelineConfig) if f.name == name)
    return f.default_factory() if f.default_factory is not MISSING else f.default


def _check_features(v: Any) -> str | None:
    if v not in (None, "us", "u"):
        raise ValueError(
            f"features must be 'us' (U·Σ), 'u' (U) or null (each method's own), got {v!r}."
        )
    return v  # type: ignore[no-any-return]


