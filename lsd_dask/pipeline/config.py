"""Pipeline configuration: defaults < YAML file < command-line overrides.

A pipeline YAML looks like::

    subjects:                      # explicit list, or globs below
      - {id: sub-01, left: data/sub-01.L.func.gii, right: data/sub-01.R.func.gii}
      - {id: sub-02, cifti: data/sub-02.dtseries.nii}
      - {id: sub-03, zarr: data/sub-03.zarr}     # (n_vertices, T) array, hemisphere_sizes attr
      - {id: run-a, left: a.lh.mgz, right: a.rh.mgz, time_slice: [0, 300]}  # part of a run
    # globs: {left: "data/*.L.func.gii", right: "data/*.R.func.gii"}  # id = common stem
    splits: null                   # null: sorted subjects halved; or {split1: [...], split2: [...]}
    mesh: {left: lh.surf.gii, right: rh.surf.gii}
    methods: [directional]
    ks: [50, 100]
    svd: {method: randomized, rank: 1000, n_power_iter: 2}   # fuse_passes: true (q+2 reads)
    min_region_size: 20
    nonfinite: error               # or "mask": drop vertices with NaN/inf in any subject
    output: results/
    cluster: null                  # a cluster_configs/*.yaml, or a scheduler address
    random_state: 0

Relative paths are resolved against the YAML file's folder; ``pkg://NAME/path`` points into
an installed package.
"""

from __future__ import annotations

import copy
import glob
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..io.surface_files import SubjectFiles

__all__ = ["PipelineConfig", "load_config", "METHODS"]

#: method name -> estimator factory key (see pipeline.run._estimator)
METHODS = (
    "directional",
    "lsd",
    "hierarchical_lsd",
    "spherical_kmeans",
    "kmeans",
    "spectral",
)


@dataclass
class PipelineConfig:
    """The resolved settings of one run (written to ``report.json``)."""

    subjects: list[SubjectFiles]
    mesh: dict[str, str]
    output: Path
    splits: dict[str, list[str]] | None = None
    methods: list[str] = field(default_factory=lambda: ["directional"])
    ks: list[int] = field(default_factory=lambda: [50, 100])
    svd: dict[str, Any] = field(
        default_factory=lambda: {"method": "randomized", "rank": 1000, "n_power_iter": 2}
    )
    min_region_size: int = 20
    nonfinite: str = "error"
    cluster: str | None = None
    random_state: int = 0
    null_repeats: int = 5

    def resolved_splits(self) -> dict[str, list[str]]:
        """Explicit splits, or the sorted subject ids halved."""
        ids = [s.subject for s in self.subjects]
        if self.splits:
            return {k: list(v) for k, v in self.splits.items()}
        ordered = sorted(ids)
        half = len(ordered) // 2
        return {"split1": ordered[:half], "split2": ordered[half:]}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["subjects"] = [
            {
                k: (list(v) if isinstance(v, tuple) else str(v) if v is not None else None)
                for k, v in asdict(s).items()
            }
            for s in self.subjects
        ]
        d["output"] = str(self.output)
        d["splits"] = self.resolved_splits()
        return d

    def validate(self) -> None:
        """Checks that need no data: names, numbers, duplicates, split membership."""
        bad = [m for m in self.methods if m not in METHODS]
        if bad:
            raise ValueError(f"unknown method(s) {bad}; choose from {list(METHODS)}.")
        if not self.ks or any(int(k) < 2 for k in self.ks):
            raise ValueError(f"ks must be integers >= 2, got {self.ks}.")
        if self.nonfinite not in ("error", "mask"):
            raise ValueError("nonfinite must be 'error' or 'mask'.")
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
        if any(len(v) == 0 for v in splits.values()):
            raise ValueError("each split needs at least one subject.")
        if self.svd.get("method", "randomized") not in ("randomized", "streaming"):
            raise ValueError("svd.method must be 'randomized' or 'streaming'.")


def load_config(path: str | os.PathLike[str] | None = None, **overrides: Any) -> PipelineConfig:
    """Read a pipeline YAML (optional) and apply overrides (None values are ignored)."""
    raw: dict[str, Any] = {}
    base = Path.cwd()
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(f"pipeline file {p} does not exist.")
        raw = yaml.safe_load(p.read_text()) or {}
        base = p.resolve().parent
    raw = copy.deepcopy(raw)
    for key, value in overrides.items():
        if value is not None:
            raw[key] = value
    subjects = _subjects(raw, base)
    mesh = {h: str(_resolve(v, base)) for h, v in (raw.get("mesh") or {}).items()}
    cfg = PipelineConfig(
        subjects=subjects,
        mesh=mesh,
        output=_resolve(raw.get("output", "lsd_dask_output"), base),
        splits=raw.get("splits"),
        methods=list(raw.get("methods", ["directional"])),
        ks=[int(k) for k in raw.get("ks", [50, 100])],
        svd={"method": "randomized", "rank": 1000, "n_power_iter": 2, **(raw.get("svd") or {})},
        min_region_size=int(raw.get("min_region_size", 20)),
        nonfinite=str(raw.get("nonfinite", "error")),
        cluster=raw.get("cluster"),
        random_state=int(raw.get("random_state", 0)),
        null_repeats=int(raw.get("null_repeats", 5)),
    )
    cfg.validate()
    return cfg


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
    for entry in raw.get("subjects") or []:
        sid = str(entry["id"])
        ts = entry.get("time_slice")
        out.append(
            SubjectFiles(
                sid,
                cifti=_resolve(entry["cifti"], base) if entry.get("cifti") else None,
                left=_resolve(entry["left"], base) if entry.get("left") else None,
                right=_resolve(entry["right"], base) if entry.get("right") else None,
                zarr=_resolve(entry["zarr"], base) if entry.get("zarr") else None,
                time_slice=(int(ts[0]), int(ts[1])) if ts else None,
            )
        )
    globs = raw.get("globs")
    if globs:
        for key in ("cifti", "left"):
            if key in globs:
                matches = sorted(glob.glob(str(_resolve(globs[key], base))))
                for m in matches:
                    stem = Path(m).name.split(".")[0]
                    if key == "cifti":
                        out.append(SubjectFiles(stem, cifti=Path(m)))
                    else:
                        right_pattern = str(_resolve(globs["right"], base))
                        right = _match_right(m, right_pattern)
                        out.append(SubjectFiles(stem, left=Path(m), right=right))
                break
    if not out:
        raise ValueError("no subjects: give 'subjects' or 'globs' in the pipeline file.")
    return out


def _match_right(left: str, right_pattern: str) -> Path:
    stem = Path(left).name.split(".")[0]
    for cand in sorted(glob.glob(right_pattern)):
        if Path(cand).name.split(".")[0] == stem:
            return Path(cand)
    raise FileNotFoundError(f"no right-hemisphere file matching {right_pattern} for {stem}.")
