"""Pipeline configuration: defaults < YAML file < command-line overrides.

A pipeline YAML looks like::

    subjects:                      # explicit list, or globs below
      - {id: sub-01, left: data/sub-01.L.func.gii, right: data/sub-01.R.func.gii}
      - {id: sub-02, cifti: data/sub-02.dtseries.nii}
      - {id: sub-03, zarr: data/sub-03.zarr}     # (n_vertices, T) array, hemisphere_sizes attr
      - {id: run-a, left: a.lh.mgz, right: a.rh.mgz, time_slice: [0, 300]}  # part of a run
    # globs: {left: "data/*.L.func.gii", right: "data/*.R.func.gii"}  # or cifti:, zarr:; id = stem
    splits: null                   # null: sorted subjects halved; or {split1: [...], split2: [...]}
    mesh: {left: lh.surf.gii, right: rh.surf.gii}
    display_mesh: null             # {left: lh.inflated.surf.gii, right: ...} for the figures
    sphere: null                   # {left: lh.sphere.surf.gii, right: ...} for the spin null;
                                   # null: fsaverage5 and 32k_fs_LR spheres are found
    methods: [directional]         # names, or variants with their own spatial settings:
                                   # {name: dir_spatial, method: directional,
                                   #  feature_smoothing_mm: 20, spatial_weight: 2}
    ks: [50, 100]
    svd: {method: randomized, rank: 1000, n_power_iter: 2}   # fuse_passes: true (q+2 reads)
    min_region_size: 20
    features: null                 # each method's own (see pipeline/methods.py), or
                                   # us: rows of U·Σ, u: rows of U (the paper's), for all
    feature_smoothing_mm: 0        # blur the SVD features along the mesh (FWHM, mm) first;
                                   # auto: each split's two halves choose it (pipeline/blur.py)
    contiguous: false              # true: connected parcels, fragments merged (see run.py)
    spatial_weight: 0              # directional, spherical_kmeans: Potts penalty per cut edge
    oversegment: 1                 # > 1: fit oversegment × K clusters, then merge neighbours
                                   # on the mesh with Ward's linkage down to K
                                   # (these four: every method's default)
    nonfinite: error               # or "mask": drop vertices with NaN/inf in any subject
    preprocess:                    # per subject at ingest, before the SVD (default: none)
      smoothing_mm: 0              # FWHM along the mesh
      detrend: false
      high_pass: null              # Hz, e.g. 0.01 (nilearn's signal.clean, Butterworth)
      low_pass: null               # Hz, e.g. 0.1
      t_r: null                    # seconds; null: from each file
      confounds: null              # e.g. confounds/{subject}_desc-confounds_timeseries.tsv
      confound_columns: []         # e.g. [trans_x, trans_y, trans_z, csf, white_matter]
    output: results/
    work: null                     # default <output>/work; or a URL, e.g. s3://bucket/run/work
    storage_options: {}            # fsspec options for a work URL (key, secret, endpoint...)
    cluster: null                  # a cluster_configs/*.yaml, or a scheduler address
    random_state: 0

Relative paths are resolved against the YAML file's folder; ``pkg://NAME/path`` points into
an installed package.
"""

from __future__ import annotations

import copy
import difflib
import glob
import os
import re
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from ..cluster import SPATIAL_OPTIONS
from ..io.surface_files import READERS, SubjectFiles, file_keys
from .methods import MethodSpec, check_options, numbers, parse_methods
from .preprocess import PreprocessSettings

__all__ = ["PipelineConfig", "SvdSettings", "load_config"]


@dataclass(frozen=True)
class SvdSettings:
    """The ``svd:`` section, typed; its defaults are stated here only.

    Attributes
    ----------
    method : {"randomized", "streaming"}
        Halko's range finder over the Zarr store, or a MIGP-style streaming group SVD.
    rank : int
        Features kept per vertex (the paper keeps 1,000).
    n_power_iter : int
        Power iterations of the randomized SVD.
    fuse_passes : bool
        One read of the data per power iteration (see :func:`~lsd_dask.linalg.randomized_svd`).
    n_keep : int or None
        Streaming SVD: rows kept between blocks (None: its default).
    """

    method: str = "randomized"
    rank: int = 1000
    n_power_iter: int = 2
    fuse_passes: bool = True
    n_keep: int | None = None

    @classmethod
    def from_mapping(cls, raw: dict[str, Any], where: str) -> SvdSettings:
        """Checked settings from a YAML mapping; an error names the key."""
        _check_keys(raw, {f.name for f in fields(cls)}, f"{where}: svd")
        method = raw.get("method", cls.method)
        if method not in ("randomized", "streaming"):
            raise ValueError(f"svd.method must be 'randomized' or 'streaming', got {method!r}.")
        fuse = raw.get("fuse_passes", cls.fuse_passes)
        if not isinstance(fuse, bool):
            raise ValueError(f"svd.fuse_passes: true or false, got {fuse!r}.")
        n_keep = raw.get("n_keep")
        return cls(
            method=method,
            rank=_int(raw.get("rank", cls.rank), "svd.rank", 1),
            n_power_iter=_int(raw.get("n_power_iter", cls.n_power_iter), "svd.n_power_iter", 0),
            fuse_passes=fuse,
            n_keep=None if n_keep is None else _int(n_keep, "svd.n_keep", 1),
        )


#: the SVD defaults as a mapping (from :class:`SvdSettings`)
SVD_DEFAULTS: dict[str, Any] = asdict(SvdSettings())
#: a subject entry's keys besides its files' (io's readers name those: ``file_keys()``)
_SUBJECT_KEYS = {"id", "time_slice"}
#: split names become file names under the work folder: letters, digits, "_" and "-" only
_SPLIT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


@dataclass
class PipelineConfig:
    """The resolved settings of one run (written to ``report.json``)."""

    subjects: list[SubjectFiles]
    mesh: dict[str, str]
    output: Path
    splits: dict[str, list[str]] | None = None
    #: the methods to run, each with its spatial settings (``methods:`` in the file; the
    #: top-level spatial settings below are every method's defaults)
    methods: list[MethodSpec] = field(
        default_factory=lambda: [MethodSpec("directional", "directional")]
    )
    ks: list[int] = field(default_factory=lambda: [50, 100])
    svd: SvdSettings = field(default_factory=SvdSettings)
    min_region_size: int = 20
    nonfinite: str = "error"
    cluster: str | dict[str, Any] | None = None
    random_state: int = 0
    null_repeats: int = 5
    #: the features clustered, unit-normalised, for every method: rows of U·Σ ("us") or of
    #: U ("u"); None: each method's own default (:data:`~lsd_dask.pipeline.methods.METHODS`)
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

    @property
    def work_url(self) -> str:
        return self.work or str(self.output / "work")

    def resolved_splits(self) -> dict[str, list[str]]:
        """Explicit splits, or the sorted subject ids halved."""
        ids = [s.subject for s in self.subjects]
        if self.splits:
            return {k: list(v) for k, v in self.splits.items()}
        ordered = sorted(ids)
        half = len(ordered) // 2
        return {"split1": ordered[:half], "split2": ordered[half:]}

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
        # credentials stay out of the report
        d["storage_options"] = sorted(self.storage_options)
        return d

    def validate(self) -> None:
        """Checks that need no data: names, numbers, duplicates, split membership."""
        if not self.ks or any(int(k) < 2 for k in self.ks):
            raise ValueError(f"ks must be integers >= 2, got {self.ks}.")
        if self.nonfinite not in ("error", "mask"):
            raise ValueError("nonfinite must be 'error' or 'mask'.")
        _check_features(self.features)
        ids = [s.subject for s in self.subjects]
        if len(ids) < 2:
            raise ValueError(f"a split-half run needs at least 2 subjects, got {len(ids)}.")
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"subject id(s) listed twice: {dup}.")
        splits = self.resolved_splits()
        if len(splits) != 2:
            raise ValueError(f"exactly two splits are needed, got {list(splits)}.")
        a, b = (set(v) for v in splits.values())
        both = sorted(a & b)
        if both:
            raise ValueError(f"subject(s) in both splits: {both}.")
        unknown = sorted((a | b) - set(ids))
        if unknown:
            raise ValueError(f"split(s) name unknown subject(s): {unknown}.")
        empty = [name for name, v in splits.items() if len(v) == 0]
        if empty:
            raise ValueError(f"split {empty[0]!r} has no subjects; each split needs at least one.")
        for name in splits:
            if not _SPLIT_NAME.match(str(name)):
                raise ValueError(
                    f"split name {name!r}: use letters, digits, '_' and '-' only (it names "
                    "files in the work folder)."
                )
        # one file under two ids leaks data between the splits, unless the ids take
        # disjoint time slices of it (two halves of one run)
        owners: dict[str, list[Any]] = {}
        for s in self.subjects:
            for p in s.paths:
                real = os.path.realpath(p)
                for other in owners.get(real, []):
                    if other.subject != s.subject and _overlap(other.time_slice, s.time_slice):
                        raise ValueError(
                            f"{p} is listed for subjects {other.subject!r} and {s.subject!r} "
                            "with overlapping time points; one file under two ids would leak "
                            "data between the splits."
                        )
                owners.setdefault(real, []).append(s)


def load_config(path: str | os.PathLike[str] | None = None, **overrides: Any) -> PipelineConfig:
    """Read a pipeline YAML (optional) and apply overrides (None values are ignored).

    Every key is checked: an unknown one fails with the closest known key, a bad value with
    the key's name. A mapping override of ``svd`` updates the file's ``svd`` section key by
    key (``svd={"rank": 50}`` keeps the file's other SVD settings).
    """
    raw: dict[str, Any] = {}
    base = Path.cwd()
    where = "the settings"
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(f"pipeline file {p} does not exist.")
        try:
            raw = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as err:
            raise ValueError(f"{p} is not valid YAML: {err}") from None
        if not isinstance(raw, dict):
            raise ValueError(f"{p}: a pipeline file is a mapping of settings, got {type(raw)}.")
        base = p.resolve().parent
        where = str(p)
    raw = copy.deepcopy(raw)
    _check_keys(raw, _TOP_KEYS, where)
    for key, value in overrides.items():
        if value is None:
            continue
        if key == "svd" and isinstance(value, dict):
            raw["svd"] = {**_mapping(raw.get("svd"), "svd"), **value}
        else:
            raw[key] = value
    _check_keys(raw, _TOP_KEYS, where)
    svd = SvdSettings.from_mapping(_mapping(raw.get("svd"), "svd"), where)
    spatial = {k: raw[k] for k in SPATIAL_OPTIONS if k in raw}
    check_options(spatial)
    features = _check_features(raw.get("features", _default("features")))
    methods = parse_methods(
        raw.get("methods", [m.name for m in _default("methods")]),
        {**spatial, "features": features},
    )
    ks = raw.get("ks", _default("ks"))
    ks = [ks] if isinstance(ks, int) and not isinstance(ks, bool) else ks
    if not isinstance(ks, list | tuple) or not ks:
        raise ValueError(f"ks: a list of cluster counts, got {ks!r}.")
    splits = raw.get("splits")
    if splits is not None and not (
        isinstance(splits, dict) and all(isinstance(v, list) for v in splits.values())
    ):
        raise ValueError("splits: a mapping of split name to a list of subject ids, or null.")
    cfg = PipelineConfig(
        subjects=_subjects(raw, base),
        mesh={h: str(_resolve(v, base)) for h, v in _mapping(raw.get("mesh"), "mesh").items()},
        sphere=_pair_of_surfaces(raw.get("sphere"), base, "sphere"),
        display_mesh=_pair_of_surfaces(raw.get("display_mesh"), base, "display_mesh"),
        output=_resolve(raw.get("output", "lsd_dask_output"), base),
        splits={str(k): [str(i) for i in v] for k, v in splits.items()} if splits else None,
        methods=methods,
        ks=[_int(k, "ks", 2) for k in ks],
        svd=svd,
        min_region_size=_int(
            raw.get("min_region_size", _default("min_region_size")), "min_region_size", 1
        ),
        nonfinite=str(raw.get("nonfinite", _default("nonfinite"))),
        cluster=_cluster(raw.get("cluster"), base),
        random_state=_int(raw.get("random_state", _default("random_state")), "random_state", 0),
        null_repeats=_int(raw.get("null_repeats", _default("null_repeats")), "null_repeats", 0),
        features=features,
        spatial=spatial,
        work=_work(raw.get("work"), base),
        storage_options=_mapping(raw.get("storage_options"), "storage_options"),
        preprocess=PreprocessSettings.from_mapping(
            _mapping(raw.get("preprocess"), "preprocess"), where, base
        ),
    )
    cfg.validate()
    return cfg


_TOP_KEYS = ({f.name for f in fields(PipelineConfig)} - {"spatial"}) | {"globs", *SPATIAL_OPTIONS}


def _default(name: str) -> Any:
    """A setting's default, as :class:`PipelineConfig` states it (the one place)."""
    f = next(f for f in fields(PipelineConfig) if f.name == name)
    return f.default_factory() if f.default_factory is not MISSING else f.default


def _pair_of_surfaces(v: Any, base: Path, key: str) -> dict[str, str] | None:
    if v is None:
        return None
    pair = _mapping(v, key)
    if set(pair) != {"left", "right"}:
        raise ValueError(f"{key}: a 'left' and a 'right' GIFTI surface, got keys {sorted(pair)}.")
    return {h: str(_resolve(p, base)) for h, p in pair.items()}


def _check_features(v: Any) -> str | None:
    if v not in (None, "us", "u"):
        raise ValueError(
            f"features must be 'us' (U·Σ), 'u' (U) or null (each method's own), got {v!r}."
        )
    return v  # type: ignore[no-any-return]


def _work(v: Any, base: Path) -> str | None:
    """The work location: a URL as given, a local path resolved like the other paths."""
    if v is None:
        return None
    if not isinstance(v, str | os.PathLike) or not str(v):
        raise ValueError(f"work: a folder or a URL such as s3://bucket/run, got {v!r}.")
    text = str(v)
    return text if "://" in text and not text.startswith("file://") else str(_resolve(text, base))


def _overlap(a: tuple[int, int] | None, b: tuple[int, int] | None) -> bool:
    """Whether two time slices share a time point (None: the whole run)."""
    if a is None or b is None:
        return True
    return max(a[0], b[0]) < min(a[1], b[1])


def _check_keys(d: dict[str, Any], allowed: set[str], where: str) -> None:
    """Reject unknown keys, suggesting the closest known one."""
    for key in d:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), sorted(allowed), n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"{where}: unknown key {key!r}{hint} (known keys: {', '.join(sorted(allowed))})"
            )


def _mapping(v: Any, key: str) -> dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ValueError(f"{key}: expected a mapping, got {v!r}.")
    return dict(v)


def _int(v: Any, key: str, minimum: int) -> int:
    """An integer setting (not a bool, a float with a fraction or a word), at least minimum."""
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise ValueError(f"{key}: {v!r} is not an integer.")
    try:
        f = float(v)
    except ValueError:
        raise ValueError(f"{key}: {v!r} is not an integer.") from None
    if not f.is_integer():
        raise ValueError(f"{key}: {v!r} is not an integer.")
    if f < minimum:
        raise ValueError(f"{key}: {v!r} must be at least {minimum}.")
    return int(f)


def _cluster(v: Any, base: Path) -> str | dict[str, Any] | None:
    """A scheduler address, a cluster config file (relative to the pipeline file's folder),
    or an inline cluster config limited to the documented settings."""
    if v is None:
        return None
    if isinstance(v, dict):
        from ..distributed import check_cluster_config

        return check_cluster_config(v, "cluster")
    text = str(v)
    if text.endswith((".yaml", ".yml")):
        return str(_resolve(text, base))
    return text


def _resolve(p: Any, base: Path) -> Path:
    """A path relative to the YAML's folder; ``pkg://NAME/rest`` is a file inside an installed
    package (found without importing it), e.g. data that a package ships."""
    text = os.path.expandvars(str(p))
    if text.startswith("pkg://"):
        import importlib.util

        name, _, rest = text[len("pkg://") :].partition("/")
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(f"package {name!r} is not installed (needed for {text}).")
        return Path(list(spec.submodule_search_locations)[0]) / rest
    q = Path(text).expanduser()
    return q if q.is_absolute() else (base / q)


def _subjects(raw: dict[str, Any], base: Path) -> list[SubjectFiles]:
    out: list[SubjectFiles] = []
    entries = raw.get("subjects") or []
    if not isinstance(entries, list):
        raise ValueError("subjects: a list of {id: ..., cifti|left+right|zarr: ...} entries.")
    for j, entry in enumerate(entries):
        if not isinstance(entry, dict) or "id" not in entry:
            raise ValueError(f"subjects[{j}]: a mapping with an 'id' key, got {entry!r}.")
        _check_keys(entry, _SUBJECT_KEYS | file_keys(), f"subjects[{j}] ({entry['id']})")
        sid = str(entry["id"])
        ts = entry.get("time_slice")
        files = {k: _resolve(entry[k], base) for k in file_keys() if entry.get(k)}
        out.append(
            SubjectFiles.from_keys(
                sid, time_slice=(int(ts[0]), int(ts[1])) if ts else None, **files
            )
        )
    globs = _mapping(raw.get("globs"), "globs")
    _check_keys(globs, file_keys(), "globs")
    if globs:
        # one format's keys: its first file drives, the others are matched by their stem
        keys = next(r.keys for r in READERS.values() if r.keys[0] in globs)
        missing = [k for k in keys if k not in globs]
        if missing:
            raise ValueError(f"globs: {keys[0]} needs {', '.join(missing)} as well.")
        for m in sorted(glob.glob(str(_resolve(globs[keys[0]], base)))):
            stem = Path(m).name.split(".")[0]
            others = {k: _match_stem(stem, str(_resolve(globs[k], base)), k) for k in keys[1:]}
            out.append(SubjectFiles.from_keys(stem, **{keys[0]: Path(m)}, **others))
    if not out:
        raise ValueError("no subjects: give 'subjects' or 'globs' in the pipeline file.")
    return out


def _match_stem(stem: str, pattern: str, key: str) -> Path:
    for cand in sorted(glob.glob(pattern)):
        if Path(cand).name.split(".")[0] == stem:
            return Path(cand)
    raise FileNotFoundError(f"no {key} file matching {pattern} for {stem}.")
