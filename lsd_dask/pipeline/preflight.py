"""Checks before any heavy work: the output folder writable, every input file there, the
meshes and every subject's vertex counts in agreement, K and the LSD rank possible, the
preprocessing's confounds and band-pass readable (headers only), the comparison atlases
readable and on the mesh."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..distributed import active_client
from ..io.bids_index import confounds_file
from ..io.surface_files import HEMISPHERES, READERS, load_mesh, vertex_counts
from ..spin import is_sphere, radii
from ..surface import Mesh
from .engine.context import check_folders
from .engine.placement import check_worker_memory
from .settings.atlases import load_atlases
from .settings.config import PipelineConfig
from .settings.preprocess import subject_t_r_of
from .stages import reading
from .stages.preprocess import denoise_confounds, read_confounds
from .stages.svd import split_rank

__all__ = ["preflight"]


def preflight(cfg: PipelineConfig) -> tuple[dict[str, Mesh], list[int]]:
    """Checks before any heavy work: output writable, files present, meshes match the data.
    Writes nothing (``lsd-dask validate`` is this, and makes no folder)."""
    check_folders(cfg)
    missing = [str(p) for s in cfg.subjects for p in s.paths if not Path(p).exists()]
    if missing:
        raise FileNotFoundError(f"{len(missing)} input file(s) missing, first: {missing[0]}")
    if set(cfg.mesh) != set(HEMISPHERES):
        raise ValueError("mesh needs a 'left' and a 'right' GIFTI surface.")
    meshes = {h: load_mesh(cfg.mesh[h], h) for h in HEMISPHERES}
    sizes = [meshes[h].n_vertices for h in HEMISPHERES]
    # headers only: vertex counts of every subject against the meshes
    for s in cfg.subjects:
        try:
            counts = vertex_counts(s)
        except Exception as err:  # nibabel and zarr raise many kinds on a damaged file
            raise ValueError(
                f"subject {s.subject}: cannot read the header of "
                f"{', '.join(str(p) for p in s.paths)} ({type(err).__name__}: {err})."
            ) from err
        if counts != sizes:
            raise ValueError(
                f"subject {s.subject} has {counts} vertices per hemisphere but the meshes have "
                f"{sizes}; all files must be on the same surface."
            )
    n = sum(sizes)
    too_big = [k for k in cfg.ks if k > n]
    if too_big:
        raise ValueError(f"K={too_big[0]} is larger than the number of vertices ({n}).")
    _check_lsd_rank(cfg)
    _check_preprocess(cfg)
    load_atlases(cfg.compare_atlases, sizes)
    for key in ("sphere", "display_mesh"):
        for h, n in zip(HEMISPHERES, sizes, strict=True):
            path = (getattr(cfg, key) or {}).get(h)
            if path is None:
                continue
            surface = load_mesh(path, h, key)
            if surface.n_vertices != n:
                raise ValueError(
                    f"{key}.{h} ({path}) has {surface.n_vertices} vertices; the {h} mesh has "
                    f"{n}. It must match the mesh vertex for vertex."
                )
            if key == "sphere":
                _check_sphere(surface.vertices, f"sphere.{h} ({path})")
    if cfg.min_region_size > max(sizes):
        raise ValueError(
            f"min_region_size: {cfg.min_region_size} is above the vertex count of either "
            f"hemisphere ({max(sizes)}): every region would be dropped."
        )
    client = active_client()
    if client is not None:
        _check_worker_memory(cfg, client, n)
    return meshes, sizes


def _check_worker_memory(cfg: PipelineConfig, client: Any, n: int) -> None:
    """Workers too small for one task fail here, not by pausing mid-run: the time points
    estimated from the largest subject's bytes (float32 over every vertex; CIFTI's
    subcortical values count too, as they are read)."""
    largest = max(sum(_bytes(p) for p in s.paths) for s in cfg.subjects)
    timepoints = max(1, largest // (4 * n))
    n_split = min(len(v) for v in cfg.resolved_splits().values())
    rank = split_rank(cfg.svd, n, timepoints * n_split)  # as the SVD stage caps it
    check_worker_memory(
        client, n, int(timepoints), rank, cfg.preprocess.active, task_module=reading.__name__
    )


def _bytes(path: str | os.PathLike[str]) -> int:
    """A file's size, or a folder's (a Zarr subject) in all."""
    p = Path(path)
    if p.is_dir():
        return sum(q.stat().st_size for q in p.rglob("*") if q.is_file())
    return p.stat().st_size


def _check_sphere(vertices: np.ndarray, where: str) -> None:
    """The spin null rotates the sphere: a surface that is not one would spin a distorted
    cortex."""
    if not is_sphere(vertices):
        r = radii(vertices)
        raise ValueError(
            f"{where} is not a sphere: its vertices lie {r.min():.1f} to {r.max():.1f} from "
            "their centre."
        )


def _check_preprocess(cfg: PipelineConfig) -> None:
    """Confound files and columns, and a TR for a band-pass, per subject (headers only)."""
    pp = cfg.preprocess
    for s in cfg.subjects:
        if s.time_slice is not None:
            volumes = READERS[s.kind].timepoints(s)
            if s.time_slice[1] > volumes:
                raise ValueError(
                    f"subject {s.subject}: time_slice {list(s.time_slice)} reaches past the "
                    f"{volumes} time points of {s.paths[0]}."
                )
        if pp.denoise is not None:
            tsv = confounds_file(s.paths[0])
            if tsv is None:
                raise FileNotFoundError(
                    f"subject {s.subject}: preprocess.denoise needs fMRIPrep's confounds file "
                    f"beside {s.paths[0]} (..._desc-confounds_timeseries.tsv); none is there."
                )
            # the strategy's columns, their rows and what scrubbing keeps, read as ingest
            # will: a small TSV per subject (0.01-0.05 s each)
            denoise_confounds(s, pp.denoise)
        if pp.confounds is not None:
            path = pp.confound_path(s.subject)
            read_confounds(path, pp.confound_columns, s.subject, time_slice=s.time_slice)
        if pp.band_pass:
            tr = subject_t_r_of(pp, s)
            nyquist = 0.5 / tr
            for edge in ("high_pass", "low_pass"):
                hz = getattr(pp, edge)
                if hz is not None and hz >= nyquist:
                    raise ValueError(
                        f"subject {s.subject}: preprocess.{edge} = {hz} Hz is at or above the "
                        f"Nyquist frequency {nyquist:.4g} Hz of its TR ({tr:g} s)."
                    )


def _check_lsd_rank(cfg: PipelineConfig) -> None:
    """LSD on cosine similarity of rank-r features forms at most r clusters: say so before
    the SVD, not after it (the rank can only be lower than svd.rank, never higher)."""
    from ..cluster.lsd import max_clusters

    if not any(m.method == "lsd" for m in cfg.methods):
        return
    rank = cfg.svd.rank
    limit = max_clusters("cosine", rank)
    over = [k for k in cfg.ks if k > limit]
    if over:
        raise ValueError(
            f"method lsd with K={over[0]}: LSD's cosine similarity of the rank-{rank} SVD "
            f"features forms at most {limit} clusters. Raise svd.rank (--rank) to at least "
            f"{max(over)}, or drop K values above {limit} (--k)."
        )
