"""Write a synthetic split-half study to disk as CIFTI or GIFTI files, with its meshes."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from .._validation import RandomState
from ..datasets.synthetic import surface_study
from ..io.surface_files import (
    write_dtseries,
    write_func_gifti,
    write_surface_gifti,
    write_zarr_subject,
)
from ..surface import two_hemisphere_mesh

__all__ = ["write_study", "synthesize", "synthesize_realistic"]


def write_study(
    study: Any,
    folder: str | os.PathLike[str],
    *,
    fmt: str = "gifti",
    rank: int = 1000,
    log: Callable[[str], None] | None = None,
    compare_atlases: list[Any] | None = None,
) -> Path:
    """Write every subject and both meshes; return the path of a ready pipeline YAML.

    Files: ``lh.surf.gii``/``rh.surf.gii``; per subject ``<id>.dtseries.nii`` (``fmt="cifti"``)
    or ``<id>.L.func.gii`` and ``<id>.R.func.gii`` (``fmt="gifti"``) or ``<id>.zarr``
    (``fmt="zarr"``); ``truth.npy`` (planted
    parcels, 0 = medial wall); ``pipeline.yaml`` listing the subjects and their splits.

    ``compare_atlases``: the pipeline file's ``compare_atlases`` (none when None).

    ``rank`` is the SVD rank written, at most half of the smaller split's time points.

    ``study`` is a :class:`~lsd_dask.datasets.SurfaceStudy` or a
    :class:`~lsd_dask.datasets.RealisticStudy`. When it has a ``cortex`` mask, CIFTI files
    leave the other vertices out of their brain models and carry a subcortical block, as
    HCP's files do.
    """
    if fmt not in ("gifti", "cifti", "zarr"):
        raise ValueError(f"fmt must be 'gifti', 'cifti' or 'zarr', got {fmt!r}.")
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
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
        "methods": ["directional"],
        "ks": [max(2, study.n_parcels // 2), study.n_parcels],
        "svd": {
            "method": "randomized",
            # at most half of a split's time points: more would approach whitened data
            # (the pipeline warns), which a small study would otherwise always hit
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
    """Build a study on two icospheres (``frequency=57``: 2 × 32,492 vertices) and write it."""
    meshes = two_hemisphere_mesh(frequency)
    study = surface_study(
        meshes,
        n_parcels=n_parcels,
        n_subjects=n_subjects,
        n_timepoints=n_timepoints,
        random_state=random_state,
        **study_kwargs,
    )
    return write_study(study, folder, fmt=fmt, log=log)


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
    from ..datasets import realistic_study

    study = realistic_study(**study_kwargs)
    # the truth and the other published atlas at its scale, scored beside the methods
    name, scale = study.atlas.rsplit("_", 1)
    atlases = [study.atlas, f"{_OTHER[name]}_{scale}"]
    # rank 100 of 3 x 300 time points per split: the realistic benchmark's setting
    return write_study(study, folder, fmt=fmt, rank=rank, log=log, compare_atlases=atlases)


_OTHER = {"vosdewael": "schaefer", "schaefer": "vosdewael"}


def _split_columns(study: Any) -> int:
    """The time points of the study's smaller split (its SVD's width)."""
    return int(study.n_timepoints) * min(len(ids) for ids in study.splits.values())
