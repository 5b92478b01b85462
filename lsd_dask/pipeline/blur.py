"""The blur stage: ``feature_smoothing_mm: auto`` lets each split's data choose its blur.

Once per split, after the SVD and before the cluster stage: the first and the second half
of every subject's time points each get a randomized SVD of their own (the run's rank and
power iterations, capped at the half's width), and :func:`lsd_dask.selection.choose_feature_blur`
picks the blur from :data:`lsd_dask.selection.GRID_MM` by held-out parcel homogeneity at the
run's smallest K. The choice and its table go into ``<work>/blur/<split>.json`` (stamped,
so a run that changes nothing it depends on reuses it) and into ``report.json``. On a
distributed cluster, features too large to cluster in memory here
(:data:`~lsd_dask.pipeline.fits.IN_MEMORY_FEATURES_BYTES`) stay on the workers and each
blur is scored there as one task.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Any

import dask.array as da
import numpy as np
import scipy.sparse as sp

from .. import __version__
from ..distributed import active_client
from ..io.zarr_store import open_split
from ..linalg import randomized_svd
from ..selection import GRID_MM, choose_feature_blur
from ..similarity import unit_rows
from . import fits
from ._log import Log
from .config import PipelineConfig
from .workdir import WorkDir

__all__ = ["stage_blur"]


def stage_blur(
    cfg: PipelineConfig,
    splits: list[str],
    wd: WorkDir,
    log: Log,
    mesh: tuple[np.ndarray, sp.csr_matrix] | None,
) -> dict[str, dict[str, Any]]:
    """The blur each split chooses, when a method asks for ``feature_smoothing_mm: auto``.

    Returns
    -------
    dict
        Split -> the choice (:meth:`lsd_dask.selection.BlurChoice.to_dict`: ``fwhm_mm``,
        the grid, each blur's mean held-out error and standard error); empty when no method
        asks for it.
    """
    if not any(m.auto_blur for m in cfg.methods):
        return {}
    if mesh is None:  # a method with auto blur needs the mesh: the caller loads it
        raise ValueError("feature_smoothing_mm: auto needs the mesh.")
    return {split: _choose(cfg, split, wd, log, mesh) for split in splits}


def _choose(
    cfg: PipelineConfig,
    split: str,
    wd: WorkDir,
    log: Log,
    mesh: tuple[np.ndarray, sp.csr_matrix],
) -> dict[str, Any]:
    V, A = mesh
    k = min(cfg.ks)
    path = wd.folder.join("blur", f"{split}.json")
    key = {
        "ingest": wd.fingerprint_of(f"ingest/{split}"),
        "svd": asdict(cfg.svd),
        "random_state": cfg.random_state,
        "k": k,
        "grid_mm": list(GRID_MM),
        "mesh": _digest(V, A),
        "lsd_dask": __version__,
    }
    if wd.is_current(f"blur/{split}", key, [path]):
        choice = json.loads(wd.read_text(path))
        log(f"[blur] {split} done earlier, skipped: {choice['fwhm_mm']:g} mm")
        return choice
    st = open_split(wd.store(split), storage_options=wd.folder.storage_options)
    client = active_client()
    features = []
    for i, half in enumerate(st.column_blocks.halves(), 1):
        n, m = half.shape
        rank = int(min(cfg.svd.rank, n, m))
        # large features stay on the workers, where the blurs are scored as tasks, as the
        # cluster stage's fits are: the client holds none of them
        remote = client is not None and n * rank * 4 > fits.IN_MEMORY_FEATURES_BYTES
        log(f"[blur] {split} half {i} of 2: rank {rank} of {n} x {m}")
        U, s, _ = randomized_svd(
            half,
            rank,
            n_power_iter=cfg.svd.n_power_iter,
            fuse_passes=cfg.svd.fuse_passes,
            random_state=cfg.random_state,
            progress=lambda line, i=i: log(f"[blur] {split} half {i} {line}"),
        )
        F = unit_rows(U * np.asarray(s, U.dtype))
        if remote and isinstance(F, da.Array):
            features.append(client.compute(F))
        else:
            features.append(np.asarray(F.compute() if isinstance(F, da.Array) else F))
    if remote:
        log(f"[blur] {split}: each blur scored as a task on {len(client.nthreads())} workers")
    choice = choose_feature_blur(
        *features, V, A, k,
        random_state=cfg.random_state,
        progress=lambda line: log(f"[blur] {split} K={k} {line}"),
        client=client if remote else None,
    )  # fmt: skip
    out = choice.to_dict()
    wd.write_text(path, json.dumps(out, indent=1))
    wd.record(f"blur/{split}", key)
    log(f"[blur] {split}: feature_smoothing_mm auto chose {choice.fwhm_mm:g} mm")
    return out


def _digest(V: np.ndarray, A: sp.csr_matrix) -> str:
    """The mesh the blur was chosen on (coordinates and edges)."""
    h = hashlib.sha1(np.ascontiguousarray(V, np.float64).tobytes())
    A = sp.csr_matrix(A)
    h.update(A.indptr.tobytes())
    h.update(A.indices.tobytes())
    return h.hexdigest()
