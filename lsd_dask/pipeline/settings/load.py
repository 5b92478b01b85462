"""Reading a pipeline file: defaults < YAML file < command-line overrides, every key
checked (an unknown one fails with the closest known key, a bad value with the key's name),
into a :class:`~lsd_dask.pipeline.settings.config.PipelineConfig`."""

from __future__ import annotations

import copy
import os
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from ...cluster import SPATIAL_OPTIONS
from ...io.settings_yaml import read_settings
from ...io.surface_files import timepoint_count
from . import files
from .atlases import BUILTIN_ATLASES, AtlasSpec, parse_atlases
from .bids import BidsSettings, bids_subjects
from .config import INTEGER_SETTINGS, PipelineConfig, check_features, integer_settings
from .files import minimum_of
from .individual import IndividualSettings
from .methods import check_options, default_methods, parse_methods
from .preprocess import PreprocessSettings
from .splits import halve
from .svd import SvdSettings

__all__ = ["PIPELINE_KEYS", "load_config"]


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
    features = check_features(raw.get("features", _default("features")))
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
    # every integer setting at its field's default and checked against its field's bound
    integers = integer_settings({name: raw.get(name, _default(name)) for name in INTEGER_SETTINGS})
    random_state = integers["random_state"]
    splits = raw.get("splits")
    if splits == "random":
        splits = halve([s.subject for s in subjects], participants, random_state=random_state)
    elif splits is None and bids is not None:
        # participants differ in their runs and lengths: halves balanced by time points
        timepoints = {s.subject: timepoint_count(s) for s in subjects}
        splits = halve([s.subject for s in subjects], participants, timepoints=timepoints)
    elif splits is not None and not (
        isinstance(splits, dict) and all(isinstance(v, list) for v in splits.values())
    ):
        raise ValueError(
            "splits: a mapping of split name to a list of subject ids, random, or null."
        )
    mesh, mesh_source = files.mesh(raw.get("mesh"), base, subjects[0])
    ks = [files.int_setting(k, "ks", minimum_of(PipelineConfig, "ks")) for k in ks]
    atlases = parse_atlases(raw.get("compare_atlases"), base)
    individual = IndividualSettings.from_raw(
        raw.get("individual"), methods=[m.name for m in methods],
        atlases=[a.name for a in atlases], ks=ks,
    )  # fmt: skip
    if individual is not None and individual.prior in BUILTIN_ATLASES:
        if all(a.name != individual.prior for a in atlases):  # scored beside, as the prior
            atlases.append(AtlasSpec(individual.prior))
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
        ks=ks,
        svd=svd,
        nonfinite=str(raw.get("nonfinite", _default("nonfinite"))),
        cluster=files.cluster(raw.get("cluster"), base),
        **integers,
        held_out=_held_out(raw.get("held_out", _default("held_out"))),
        input_identity=str(raw.get("input_identity", _default("input_identity"))),
        features=features,
        spatial=spatial,
        work=files.work(raw.get("work"), base),
        storage_options=files.mapping(raw.get("storage_options"), "storage_options"),
        preprocess=PreprocessSettings.from_mapping(
            files.mapping(raw.get("preprocess"), "preprocess"), where, base
        ),
        compare_atlases=atlases,
        individual=individual,
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


def _default(name: str) -> Any:
    """A setting's default, as :class:`PipelineConfig` states it (the one place)."""
    f = next(f for f in fields(PipelineConfig) if f.name == name)
    return f.default_factory() if f.default_factory is not MISSING else f.default
