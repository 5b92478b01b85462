"""Write a synthetic split-half study to disk as CIFTI, GIFTI or Zarr files with its meshes,
or as an fMRIPrep derivatives tree."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from .._validation import RandomState
from ..io.bids import bids_label
from ..io.surface_files import (
    write_dtseries,
    write_func_gifti,
    write_surface_gifti,
    write_zarr_subject,
)
from ..surface import two_hemisphere_mesh
from .synthetic import surface_study

__all__ = ["write_fmriprep_tree", "write_study", "synthesize", "synthesize_realistic"]


def write_study(
    study: Any,
    folder: str | os.PathLike[str],
    *,
    fmt: str = "gifti",
    rank: int = 1000,
    log: Callable[[str], None] | None = None,
    compare_atlases: list[Any] | None = None,
    methods: Sequence[str] | None = ("directional",),
) -> Path:
    """Write every subject and both meshes; return the path of a ready pipeline YAML.

    Files: ``lh.surf.gii``/``rh.surf.gii``; per subject ``<id>.dtseries.nii`` (``fmt="cifti"``)
    or ``<id>.L.func.gii`` and ``<id>.R.func.gii`` (``fmt="gifti"``) or ``<id>.zarr``
    (``fmt="zarr"``); ``truth.npy`` (planted
    parcels, 0 = medial wall); ``pipeline.yaml`` listing the subjects and their splits.

    ``compare_atlases``: the pipeline file's ``compare_atlases`` (none when None).

    ``rank`` is the SVD rank written, at most half of the smaller split's time points.
    ``methods``: the file's ``methods`` (None: none written, so that it runs the
    pipeline's default method).

    ``study`` is a :class:`~lsd_dask.datasets.SurfaceStudy` or a
    :class:`~lsd_dask.datasets.RealisticStudy`. When it has a ``cortex`` mask, CIFTI files
    leave the other vertices out of their brain models and carry a subcortical block, as
    HCP's files do.
    """
    if fmt not in ("gifti", "cifti", "zarr", "fmriprep"):
        raise ValueError(f"fmt must be 'gifti', 'cifti', 'zarr' or 'fmriprep', got {fmt!r}.")
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    if fmt == "fmriprep":
        return write_fmriprep_tree(study, root, rank=rank, log=log, methods=methods)
    lh, rh = study.meshes["left"], study.meshes["right"]
    write_surface_gifti(root / "lh.surf.gii", lh, hemisphere="left")
    write_surface_gifti(root / "rh.surf.gii", rh, hemisphere="right")
    sizes = [lh.n_vertices, rh.n_vertices]
    entries = []
    cortex = getattr(study, "cortex", None)
    tr = float(getattr(study, "tr", 1.0))
    for i, sid in enumerate(study.subjects, 1):
        x = study.subject_data(sid)
        if fmt == "cifti":
            sub = None
            if cortex is not None:  # an HCP-like subcortical block the pipeline must ignore
                rng = np.random.default_rng([i, 7])
                sub = 1000.0 + rng.standard_normal((500, x.shape[1]))
            write_dtseries(
                root / f"{sid}.dtseries.nii", x, sizes, tr=tr, cortex=cortex, subcortical=sub
            )
            entries.append({"id": sid, "cifti": f"{sid}.dtseries.nii"})
        elif fmt == "zarr":
            write_zarr_subject(root / f"{sid}.zarr", x, sizes, tr=tr)
            entries.append({"id": sid, "zarr": f"{sid}.zarr"})
        else:
            for h, part in (("left", x[: sizes[0]]), ("right", x[sizes[0] :])):
                write_func_gifti(root / f"{sid}.{h[0].upper()}.func.gii", part, hemisphere=h, tr=tr)
            entries.append({"id": sid, "left": f"{sid}.L.func.gii", "right": f"{sid}.R.func.gii"})
        if log:
            log(f"[synth] wrote {i}/{len(study.subjects)}: {sid}")
    np.save(root / "truth.npy", study.labels)
    cfg = {
        "subjects": entries,
        "splits": study.splits,
        "mesh": {"left": "lh.surf.gii", "right": "rh.surf.gii"},
        **_methods_entry(methods),
        "ks": [max(2, study.n_parcels // 2), study.n_parcels],
        "svd": {
            "method": "randomized",
            # at most half of a split's time points: more would approach whitened data
            # (the pipeline caps it there and says so)
            "rank": int(min(rank, max(1, _split_columns(study) // 2))),
            "n_power_iter": 2,
        },
        "output": "results",
    }
    if compare_atlases:
        cfg["compare_atlases"] = list(compare_atlases)
    path = root / "pipeline.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


#: the confound columns fMRIPrep writes that nilearn's load_confounds strategies read
_MOTION = ("trans_x", "trans_y", "trans_z", "rot_x", "rot_y", "rot_z")
_SIGNALS = ("white_matter", "csf", "global_signal")


def write_fmriprep_tree(
    study: Any,
    folder: str | os.PathLike[str],
    *,
    rank: int = 1000,
    task: str = "rest",
    log: Callable[[str], None] | None = None,
    methods: Sequence[str] | None = ("directional",),
) -> Path:
    """Write a study as fMRIPrep writes its surface outputs; return a pipeline YAML that
    reads it through its ``bids:`` section.

    Per subject ``sub-<label>/func/``: ``sub-<label>_task-rest_space-fsLR_den-91k_bold
    .dtseries.nii`` (on 32k_fs_LR meshes; ``hemi-L``/``hemi-R`` ``space-fsaverage5``
    ``.func.gii`` pairs on fsaverage5, ``space-custom`` ones otherwise) and
    ``sub-<label>_task-rest_desc-confounds_timeseries.tsv``: motion, white matter, CSF and
    global signals with their derivatives and squares, framewise displacement, DVARS and
    cosine drift regressors, with ``n/a`` in the first row of the derivative columns as
    fMRIPrep leaves it. Two volumes of every subject have a framewise displacement of
    0.9 mm, which scrubbing removes. Subject ids become the ``sub-`` labels
    (``sub-001`` -> ``sub-001``; others are prefixed with ``sub-``).
    """
    root = Path(folder)
    lh, rh = study.meshes["left"], study.meshes["right"]
    sizes = [lh.n_vertices, rh.n_vertices]
    cortex = getattr(study, "cortex", None)
    tr = float(getattr(study, "tr", 1.0))
    space = {32492: "fsLR", 10242: "fsaverage5"}.get(sizes[0], "custom")
    (root / "dataset_description.json").write_text(
        json.dumps(
            {
                "Name": "synthetic fMRIPrep outputs (lsd-dask synth)",
                "BIDSVersion": "1.10.0",
                "DatasetType": "derivative",
                "GeneratedBy": [{"Name": "lsd-dask synth"}],
            },
            indent=2,
        )
    )
    splits = {}
    for i, sid in enumerate(study.subjects, 1):
        label = bids_label(str(sid).removeprefix("sub-"))
        func = root / f"sub-{label}" / "func"
        func.mkdir(parents=True, exist_ok=True)
        stem = f"sub-{label}_task-{task}"
        x = study.subject_data(sid)
        if space == "fsLR":
            write_dtseries(
                func / f"{stem}_space-fsLR_den-91k_bold.dtseries.nii",
                x,
                sizes,
                tr=tr,
                cortex=cortex,
            )
        else:
            for h, part in (("left", x[: sizes[0]]), ("right", x[sizes[0] :])):
                name = f"{stem}_hemi-{h[0].upper()}_space-{space}_bold.func.gii"
                write_func_gifti(func / name, part, hemisphere=h, tr=tr)
        _write_confounds(func / f"{stem}_desc-confounds_timeseries.tsv", x.shape[1], tr, i)
        splits[f"sub-{label}"] = next(k for k, v in study.splits.items() if sid in v)
        if log:
            log(f"[synth] wrote {i}/{len(study.subjects)}: sub-{label}")
    np.save(root / "truth.npy", study.labels)
    cfg: dict[str, Any] = {
        "bids": {"root": ".", "space": space, "task": task},
        "splits": {k: sorted(s for s, v in splits.items() if v == k) for k in study.splits},
        **_methods_entry(methods),
        "ks": [max(2, study.n_parcels // 2), study.n_parcels],
        "svd": {"method": "randomized", "rank": int(min(rank, max(1, _split_columns(study) // 2)))},
        "preprocess": {"denoise": "simple"},
        "output": "results",
    }
    if space != "fsLR" or cortex is None:  # not conte69: the meshes go with the data
        write_surface_gifti(root / "lh.surf.gii", lh, hemisphere="left")
        write_surface_gifti(root / "rh.surf.gii", rh, hemisphere="right")
        cfg["mesh"] = {"left": "lh.surf.gii", "right": "rh.surf.gii"}
    path = root / "pipeline.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _write_confounds(path: Path, n: int, tr: float, seed: int) -> None:
    """An fMRIPrep-like confounds TSV of ``n`` volumes (seeded by ``seed``)."""
    import pandas as pd

    rng = np.random.default_rng([seed, 11])
    cols: dict[str, np.ndarray] = {}
    for name in (*_MOTION, *_SIGNALS):
        base = np.cumsum(rng.standard_normal(n)) * 0.01
        deriv = np.r_[np.nan, np.diff(base)]
        cols[name] = base
        cols[f"{name}_derivative1"] = deriv
        cols[f"{name}_power2"] = base**2
        cols[f"{name}_derivative1_power2"] = deriv**2
    fd = np.abs(rng.normal(0.1, 0.03, n))
    fd[[n // 3, 2 * n // 3]] = 0.9  # two volumes for scrubbing to remove
    fd[0] = np.nan
    cols["framewise_displacement"] = fd
    cols["std_dvars"] = np.r_[np.nan, np.abs(rng.normal(1.0, 0.1, n - 1))]
    cols["dvars"] = cols["std_dvars"] * 20
    t = (np.arange(n) + 0.5) / n
    for j in range(max(1, int(n * tr / 128))):  # fMRIPrep's 128 s discrete cosine basis
        cols[f"cosine{j:02d}"] = np.sqrt(2 / n) * np.cos(np.pi * (j + 1) * t)
    pd.DataFrame(cols).to_csv(path, sep="\t", index=False, na_rep="n/a", float_format="%.6g")
    path.with_suffix(".json").write_text("{}")


def synthesize(
    folder: str | os.PathLike[str],
    *,
    frequency: int = 57,
    n_parcels: int = 200,
    n_subjects: tuple[int, int] = (33, 33),
    n_timepoints: int = 1000,
    fmt: str = "gifti",
    random_state: RandomState = 0,
    log: Callable[[str], None] | None = None,
    **study_kwargs: Any,
) -> Path:
    """Build a study on two icospheres (``frequency=57``: 2 × 32,492 vertices) and write it,
    with a pipeline file that runs the pipeline's default method (``lsd-dask synth``)."""
    meshes = two_hemisphere_mesh(frequency)
    study = surface_study(
        meshes,
        n_parcels=n_parcels,
        n_subjects=n_subjects,
        n_timepoints=n_timepoints,
        random_state=random_state,
        **study_kwargs,
    )
    return write_study(study, folder, fmt=fmt, log=log, methods=None)


def synthesize_realistic(
    folder: str | os.PathLike[str],
    *,
    fmt: str = "cifti",
    rank: int = 100,
    log: Callable[[str], None] | None = None,
    **study_kwargs: Any,
) -> Path:
    """Write a :func:`lsd_dask.datasets.realistic_study` (real conte69 mesh, atlas truth,
    HCP-like connectivity; needs ``lsd-dask[templates]``) and its pipeline YAML."""
    from . import realistic_study

    study = realistic_study(**study_kwargs)
    # the truth and the other published atlas at its scale, scored beside the methods
    name, scale = study.atlas.rsplit("_", 1)
    atlases = [study.atlas, f"{_OTHER[name]}_{scale}"]
    # rank 100 of 3 x 300 time points per split: the realistic benchmark's setting
    return write_study(study, folder, fmt=fmt, rank=rank, log=log, compare_atlases=atlases)


_OTHER = {"vosdewael": "schaefer", "schaefer": "vosdewael"}


def _methods_entry(methods: Sequence[str] | None) -> dict[str, list[str]]:
    """A pipeline file's ``methods`` key, or none (the pipeline's default method)."""
    return {} if methods is None else {"methods": list(methods)}


def _split_columns(study: Any) -> int:
    """The time points of the study's smaller split (its SVD's width)."""
    return int(study.n_timepoints) * min(len(ids) for ids in study.splits.values())
