"""What a split's store and each subject's stored series depend on: the stamps' keys of
the mask and ingest stages (:mod:`.ingest`), and a subject's own inputs for the stages that
stamp one subject at a time (:mod:`.individual`)."""

from __future__ import annotations

from typing import Any

from ..._version import __version__
from ...distributed import active_client
from ...io.bids_index import confounds_files
from ..engine.log import Log
from ..engine.workdir import content_digest, file_content_identity, file_identity
from ..settings.config import PipelineConfig
from ..settings.preprocess import subject_t_r_of

__all__ = ["ingest_key", "input_identities", "mask_key", "subject_inputs"]


def mask_key(cfg: PipelineConfig, sizes: list[int], log: Log, wall: str | None) -> dict[str, Any]:
    identity = input_identities(cfg, log)
    return {
        "subjects": [
            {
                "id": s.subject,
                "files": [identity[str(p)] for p in s.paths],
                "time_slice": s.time_slice,
            }
            for s in cfg.subjects
        ],
        "hemisphere_sizes": sizes,
        "nonfinite": cfg.nonfinite,
        "medial_wall": wall,
        "lsd_dask": __version__,
    }


def input_identities(cfg: PipelineConfig, log: Log) -> dict[str, dict[str, Any]]:
    """Each input file's identity, by path: its size and modification time
    (``input_identity: stat``), or a hash of its content (``content``: every byte read
    again on each run, one task per file on the workers when a cluster is active)."""
    paths = [str(p) for s in cfg.subjects for p in s.paths]
    if cfg.input_identity == "stat":
        return {p: file_identity(p) for p in paths}
    log(f"[ingest] hashing the content of {len(paths)} input file(s)")
    client = active_client()
    if client is None:
        return {p: file_content_identity(p) for p in paths}
    futures = client.map(file_content_identity, paths, pure=False)
    return dict(zip(paths, client.gather(futures), strict=True))


def ingest_key(
    cfg: PipelineConfig, mask_fingerprint: str, subjects: list[Any], meshes: dict[str, Any]
) -> dict[str, Any]:
    pp = cfg.preprocess
    key: dict[str, Any] = {"mask": mask_fingerprint, "subjects": [s.subject for s in subjects],
                           "layout": 2}  # fmt: skip
    if pp.active:  # absent when off, so stores written before this option stay current
        key["preprocess"] = pp.to_dict()
        if pp.smoothing_mm > 0:  # the blur follows the mesh: another mesh, other data
            key["mesh"] = [
                content_digest(m.vertices) + content_digest(m.faces) for m in meshes.values()
            ]
        inputs = [subject_inputs(cfg, s) for s in subjects]
        for name in ("confound_files", "denoise_files", "t_r"):
            if inputs and name in inputs[0]:
                key[name] = [i[name] for i in inputs]
    return key


def subject_inputs(cfg: PipelineConfig, subject: Any) -> dict[str, Any]:
    """What one subject's stored series depend on besides its data files and the mask:
    its confounds' files and sidecars, its repetition time (none when preprocessing is
    off)."""
    pp, out = cfg.preprocess, dict[str, Any]()
    if pp.active:
        identity = file_identity if cfg.input_identity == "stat" else file_content_identity
        if pp.confounds is not None:
            out["confound_files"] = identity(pp.confound_path(subject.subject))
        if pp.denoise is not None:  # fMRIPrep's TSV and its sidecar (compcor's components)
            out["denoise_files"] = [identity(f) for f in confounds_files(subject.paths[0])]
        if pp.band_pass:
            out["t_r"] = subject_t_r_of(cfg.preprocess, subject)
    return out
