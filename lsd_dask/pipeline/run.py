"""The split-half parcellation pipeline, stage by stage, with resume.

Stages (each writes under ``<output>/work`` with an atomic rename, and is skipped on a
re-run only when its stamp records the same inputs and settings; see ``workdir``):

1–2. ``mask`` and ``ingest`` (one pass, :mod:`.ingest`): a task per subject on the
   workers reads it once; checks its vertex counts against the meshes; marks vertices
   constant (the medial wall) or non-finite; demeans and variance-normalises every vertex
   and writes its array of the split's Zarr store. The mask (a vertex bad in any subject
   is dropped) is combined at the end, and readers of the store take the kept rows.
3. ``svd``: per split, the leading left singular vectors (randomized or streaming SVD).
4. ``cluster``: rows of U·Σ or of U (each method's default, or ``features:``),
   unit-normalised, clustered for every method and K.
5. ``scores``: clusters split into connected regions, regions under ``min_region_size``
   dropped, then Dice (greedy matching), NMI and ARI between the splits, beside a null of
   random parcellations with the same K grown on the same mesh.

Then the outputs: label files per split, method and K; ``report.json``; ``dice_vs_k.png``;
surface pictures of one parcellation per split.
"""

from __future__ import annotations

import json
import os
import platform
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from distributed import KilledWorker

from .. import __version__
from ..cluster import SPATIAL_OPTIONS
from ..distributed import active_client
from ..io.atomic import atomic_write_text
from ..io.bids import bids_label, bids_name, dataset_description, lookup_table, surface_space
from ..io.storage import Folder, is_local
from ..io.surface_files import (
    HEMISPHERES,
    cifti_vertices,
    load_mesh,
    vertex_counts,
    write_dlabel,
    write_label_gifti,
)
from ..io.zarr_store import open_split, verify_split
from ..linalg import randomized_svd, streaming_svd
from ..linalg.randomized import svd_task_bytes
from ..spin import find_spheres, spin_indices
from ..surface import (
    Mesh,
    mesh_adjacency,
    smoothing_steps,
)
from ._log import Log
from .blur import stage_blur
from .config import PipelineConfig
from .fits import stage_cluster
from .ingest import stage_mask_and_ingest, subject_t_r_of
from .methods import MethodSpec
from .preprocess import read_confounds
from .report_html import write_report_html
from .scores import explain_scores, score_pair
from .workdir import WorkDir

__all__ = ["run_pipeline", "preflight"]


def run_pipeline(
    cfg: PipelineConfig, *, log: Log = print, command: str | None = None
) -> dict[str, Any]:
    """Run every stage (skipping completed ones) and write the outputs; return the report.

    The Dask scheduler is whatever is active: call inside ``with connect(...)`` to use a
    cluster (the CLI does). ``command`` (the command line, when there is one) goes into
    ``report.json`` and ``dataset_description.json``.
    """
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    meshes, sizes = preflight(cfg)
    out = cfg.output
    wd = WorkDir(cfg.work_url, log, cfg.storage_options)
    wd.remove_partials()
    splits = cfg.resolved_splits()

    # mask and ingest: one pass, every subject read once (see .ingest)
    t0 = time.perf_counter()
    smoothing = None
    if cfg.preprocess.smoothing_mm > 0:
        smoothing = _ingest_smoothing(cfg, meshes, sizes, log)
    mask_info = stage_mask_and_ingest(
        cfg, splits, wd, log, sizes, smoothing, check=lambda kept: _check_kept(cfg, kept, log)
    )
    kept = wd.load_npy(wd.mask)
    timings["mask_ingest"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    svd_info = {split: _stage_svd(cfg, split, wd, log) for split in splits}
    timings["svd"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    mesh = _kept_mesh(meshes, sizes, kept) if any(m.needs_mesh for m in cfg.methods) else None
    blur = stage_blur(cfg, list(splits), wd, log, mesh)
    if blur:
        timings["blur"] = time.perf_counter() - t0
    chosen = {split: float(c["fwhm_mm"]) for split, c in blur.items()}
    stage_cluster(cfg, list(splits), kept, wd, log, mesh, chosen)
    timings["cluster"] = time.perf_counter() - t0 - timings.get("blur", 0.0)

    t0 = time.perf_counter()
    A = mesh_adjacency([m.faces for m in meshes.values()], sizes)
    sphere = find_spheres(meshes, cfg.sphere)
    spins = None
    if sphere["spheres"] is not None and cfg.null_repeats > 0:
        spins = spin_indices(
            sphere["spheres"], cfg.null_repeats, random_state=[cfg.random_state, 1]
        )
    scores = _stage_scores(cfg, list(splits), kept, A, wd, log, spins)
    timings["scores"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    log(f"[outputs] label files, figures and the report into {out}")
    files = _write_outputs(cfg, list(splits), meshes, sizes, scores, wd, out, A, command, chosen)
    timings["outputs"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - t_start
    report = {
        "run_id": f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}",
        "command_line": command,
        # paths relative to the output folder: the report travels with the outputs
        "config": cfg.to_dict(relative_to=out),
        "work": cfg.work_url if "://" in cfg.work_url else os.path.relpath(cfg.work_url, out),
        "versions": _versions(),
        "mask": mask_info,
        "svd": svd_info,
        **({"feature_blur": blur} if blur else {}),
        "fingerprints": wd.fingerprints(),
        "scores": scores,
        "scores_explained": explain_scores(
            min_region_size=cfg.min_region_size,
            null_repeats=cfg.null_repeats,
            spin_source=sphere["source"] if spins else None,
            n_spins=len(spins or []),
        ),
        "timings_s": timings,
        "outputs": [str(p.relative_to(out)) for p in files],
    }
    atomic_write_text(out / "report.json", json.dumps(report, indent=2))
    figures = [p for p in files if p.suffix == ".png"]
    write_report_html(report, out / "report.html", figures)
    log(f"[done] outputs in {out} ({timings['total']:.1f} s); report: {out / 'report.json'}")
    return report


def preflight(cfg: PipelineConfig) -> tuple[dict[str, Mesh], list[int]]:
    """Checks before any heavy work: output writable, files present, meshes match the data."""
    out = cfg.output
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise PermissionError(f"output folder {out} is not writable: {err}") from err
    _check_work_folder(cfg)
    missing = [str(p) for s in cfg.subjects for p in s.paths if not Path(p).exists()]
    if missing:
        raise FileNotFoundError(f"{len(missing)} input file(s) missing, first: {missing[0]}")
    if set(cfg.mesh) != set(HEMISPHERES):
        raise ValueError("mesh needs a 'left' and a 'right' GIFTI surface.")
    meshes = {h: load_mesh(cfg.mesh[h]) for h in HEMISPHERES}
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
    for key in ("sphere", "display_mesh"):
        for h, n in zip(HEMISPHERES, sizes, strict=True):
            path = (getattr(cfg, key) or {}).get(h)
            found = None if path is None else load_mesh(path).n_vertices
            if found is not None and found != n:
                raise ValueError(
                    f"{key}.{h} ({path}) has {found} vertices; the {h} mesh has {n}. It "
                    "must match the mesh vertex for vertex."
                )
    return meshes, sizes


def _check_preprocess(cfg: PipelineConfig) -> None:
    """Confound files and columns, and a TR for a band-pass, per subject (headers only)."""
    pp = cfg.preprocess
    for s in cfg.subjects:
        if pp.confounds is not None:
            path = pp.confound_path(s.subject)
            read_confounds(path, pp.confound_columns, s.subject, time_slice=s.time_slice)
        if pp.band_pass:
            tr = subject_t_r_of(cfg, s)
            nyquist = 0.5 / tr
            for edge in ("high_pass", "low_pass"):
                hz = getattr(pp, edge)
                if hz is not None and hz >= nyquist:
                    raise ValueError(
                        f"subject {s.subject}: preprocess.{edge} = {hz} Hz is at or above the "
                        f"Nyquist frequency {nyquist:.4g} Hz of its TR ({tr:g} s)."
                    )


def _check_kept(cfg: PipelineConfig, kept: np.ndarray, log: Log) -> None:
    """Report the mask; every K must fit in the kept vertices."""
    log(
        f"[mask] {int((~kept).sum())} of {kept.size} vertices masked "
        f"(constant or non-finite in some subject)"
    )
    n_kept = int(kept.sum())
    for k in cfg.ks:
        if k > n_kept:
            raise ValueError(
                f"K={k} is larger than the {n_kept} unmasked vertices (of {kept.size}); "
                "lower ks (--k)."
            )


def _check_work_folder(cfg: PipelineConfig) -> None:
    """A work URL must take a write from here before anything runs (credentials, bucket)."""
    if is_local(cfg.work_url):
        return
    folder = Folder(cfg.work_url, cfg.storage_options)
    probe = folder.join(f".write-test-{os.getpid()}")
    try:
        folder.write_text(probe, "ok")
        folder.remove(probe)
    except Exception as err:  # fsspec back ends raise their own kinds (botocore, gcsfs...)
        raise PermissionError(
            f"work folder {cfg.work_url} is not writable: {type(err).__name__}: {err}"
        ) from err


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


# --------------------------------------------------------------------------- stages


def _stage_svd(cfg: PipelineConfig, split: str, wd: WorkDir, log: Log) -> dict[str, Any]:
    u_path, s_path = wd.u(split), wd.s(split)
    key = {
        "ingest": wd.fingerprint_of(f"ingest/{split}"),
        "svd": asdict(cfg.svd),
        "random_state": cfg.random_state,
    }
    if wd.is_current(f"svd/{split}", key, [u_path, s_path]):
        log(f"[svd] {split} done earlier, skipped")
        return {"rank": int(wd.load_npy(s_path).size), "method": cfg.svd.method}
    options = wd.folder.storage_options
    _verify_on_workers(wd.store(split), options)
    st = open_split(wd.store(split), storage_options=options)
    n, m = st.data.shape
    rank = int(min(cfg.svd.rank, n, m))
    t0 = time.perf_counter()
    log(f"[svd] {split}: rank {rank} of {n} x {m} ({cfg.svd.method})")
    if rank > m // 2:
        log(
            f"[svd] warning: rank {rank} keeps more than half of the {m} time points; the "
            "features approach whitened data (the paper keeps 1,000 of 33,000). Lower svd.rank."
        )
    if cfg.svd.method == "streaming":
        cols = np.cumsum([0, *st.timepoints])
        blocks = (st.data[:, a:b] for a, b in zip(cols[:-1], cols[1:], strict=True))
        U, s, _ = streaming_svd(blocks, rank, n_keep=cfg.svd.n_keep)
    else:
        try:
            U, s, _ = randomized_svd(
                st.column_blocks,  # tasks read their own column blocks
                rank,
                n_power_iter=cfg.svd.n_power_iter,
                fuse_passes=cfg.svd.fuse_passes,
                random_state=cfg.random_state,
                progress=lambda line: log(f"[svd] {split} {line}"),
            )
            U = U.compute()
        except KilledWorker as err:
            raise MemoryError(_svd_memory_message(split, n, max(st.timepoints), rank)) from err
    U, s = np.asarray(U), np.asarray(s)
    if not (np.isfinite(U).all() and np.isfinite(s).all()) or not np.any(s > 0):
        raise ValueError(
            f"the SVD of {split} is all-zero or non-finite: the data read from "
            f"{wd.store(split)} are not what ingest wrote (is the work folder shared with "
            "every worker?)."
        )
    wd.save_npy(u_path, np.asarray(U, np.float32))
    wd.save_npy(s_path, np.asarray(s, np.float64))
    wd.record(f"svd/{split}", key)
    return {
        "rank": rank,
        "method": cfg.svd.method,
        "seconds": time.perf_counter() - t0,
        "top_singular_values": [float(v) for v in np.asarray(s)[:10]],
    }


def _svd_memory_message(split: str, n: int, block: int, rank: int) -> str:
    """What a lost SVD worker needed, against what each worker thread has."""
    need = svd_task_bytes(n, block, rank)
    client = active_client()
    have = ""
    if client is not None:
        per_thread = [
            w["memory_limit"] / max(w["nthreads"], 1)
            for w in client.scheduler_info()["workers"].values()
            if w.get("memory_limit")
        ]
        if per_thread:
            have = f"; the workers have {min(per_thread) / 2**20:.0f} MB per thread"
    return (
        f"the SVD of {split} lost its workers (KilledWorker): at svd.rank {rank} each SVD task "
        f"holds about {need / 2**20:.0f} MB ({n} vertices x (2 x (rank + 10) + {block}) "
        f"float32){have}. Give the workers more memory per thread (memory_limit, or fewer "
        "threads per worker) or lower svd.rank (--rank)."
    )


def _verify_on_workers(store: str, storage_options: dict[str, Any]) -> None:
    """The split store complete as every worker sees it (a missing chunk would read as 0)."""
    client = active_client()
    if client is None:
        verify_split(store, storage_options=storage_options)
    else:
        client.run(verify_split, store, storage_options=storage_options)


def _ingest_smoothing(
    cfg: PipelineConfig, meshes: dict[str, Mesh], sizes: list[int], log: Log
) -> Callable[[np.ndarray], tuple[int, sp.csr_matrix]]:
    """kept mask -> (averaging steps, adjacency of the kept vertices) for ingest's blur."""

    def build(kept: np.ndarray) -> tuple[int, sp.csr_matrix]:
        V, A_kept = _kept_mesh(meshes, sizes, kept)
        steps = smoothing_steps(V, A_kept, cfg.preprocess.smoothing_mm)
        log(
            f"[ingest] each subject blurred along the mesh: FWHM "
            f"{cfg.preprocess.smoothing_mm:g} mm ({steps} averaging steps)"
        )
        return steps, A_kept

    return build


def _kept_mesh(
    meshes: dict[str, Mesh], sizes: list[int], kept: np.ndarray
) -> tuple[np.ndarray, sp.csr_matrix]:
    """Vertex coordinates and mesh adjacency of the unmasked vertices (both hemispheres)."""
    A = mesh_adjacency([meshes[h].faces for h in HEMISPHERES], sizes)[kept][:, kept].tocsr()
    V = np.concatenate([meshes[h].vertices for h in HEMISPHERES])[kept]
    return V, A


def _stage_scores(
    cfg: PipelineConfig,
    splits: list[str],
    kept: np.ndarray,
    A: Any,
    wd: WorkDir,
    log: Log,
    spins: list[np.ndarray] | None,
) -> list[dict[str, Any]]:
    rows = []
    for method in (m.name for m in cfg.methods):
        for k in cfg.ks:
            a, b = (wd.load_npy(wd.labels(s, method, k)) for s in splits)
            row = {"method": method, "k": k}
            row |= score_pair(
                a,
                b,
                kept=kept,
                adjacency=A,
                min_region_size=cfg.min_region_size,
                null_repeats=cfg.null_repeats,
                seed=[cfg.random_state, k],
                spins=spins,
            )
            rows.append(row)
            spin = f", spin null {row['spin_null_dice_mean']:.3f}" if spins else ""
            log(
                f"[scores] {method} K={k}: Dice {row['dice']:.3f} (null "
                f"{row['null_dice_mean']:.3f} ± {row['null_dice_sd']:.3f}{spin}), NMI "
                f"{row['nmi']:.3f} (null {row['null_nmi_mean']:.3f}), AMI {row['ami']:.3f}, "
                f"ARI {row['ari']:.3f}"
            )
    return rows


def _write_outputs(
    cfg: PipelineConfig,
    splits: list[str],
    meshes: dict[str, Mesh],
    sizes: list[int],
    scores: list[dict[str, Any]],
    wd: WorkDir,
    out: Path,
    A: Any,
    command: str | None = None,
    chosen: dict[str, float] | None = None,
) -> list[Path]:
    """The derivatives folder: BIDS-named ``_dseg`` files per split, method and K (see
    :mod:`lsd_dask.io.bids`), their look-up tables and sidecars, and the figures
    (``chosen``: each split's blur, for ``feature_smoothing_mm: auto``)."""
    from ..plotting import match_labels, parcel_colours, plot_dice_vs_k, plot_parcellations

    chosen = chosen or {}

    files = [
        dataset_description(out / "dataset_description.json", version=__version__, command=command)
    ]
    # the input's own brain models, when every subject is CIFTI
    cifti = cfg.subjects[0].paths[0] if all(s.kind == "cifti" for s in cfg.subjects) else None
    vertices = cifti_vertices(cifti) if cifti is not None else None
    space = surface_space(sizes)
    rows = {(r["method"], r["k"]): r for r in scores}
    label_dir = out / "labels"
    for spec in cfg.methods:
        for k in cfg.ks:
            labs = {split: wd.load_npy(wd.labels(split, spec.name, k)) for split in splits}
            # later splits take the ids of the first split's parcels they overlap most, so
            # parcel 7 names the same region in every split (and gets the same colour)
            for split in splits[1:]:
                labs[split] = match_labels(labs[splits[0]], labs[split])
            n = max(int(v.max(initial=0)) for v in labs.values())
            colours = parcel_colours(list(labs.values()), A, n)
            for split, lab in labs.items():
                ent = {**space, "seg": bids_label(spec.name), "desc": f"K{k}{bids_label(split)}"}
                title = f"{spec.name} K={k} {split}"
                for hemi, part in (("left", lab[: sizes[0]]), ("right", lab[sizes[0] :])):
                    name = bids_name({"hemi": hemi[0].upper(), **ent}, "dseg", ".label.gii")
                    files.append(
                        write_label_gifti(
                            label_dir / name, part, hemisphere=hemi, colours=colours, name=title
                        )
                    )
                if vertices is not None:
                    files.append(
                        write_dlabel(
                            label_dir / bids_name(ent, "dseg", ".dlabel.nii"),
                            lab,
                            sizes,
                            name=title,
                            colours=colours,
                            vertices=vertices,
                        )
                    )
                present = np.unique(lab)
                files.append(
                    atomic_write_text(
                        label_dir / bids_name(ent, "dseg", ".tsv"),
                        lookup_table(colours, ids=present),
                    )
                )
                sidecar = _sidecar(
                    cfg, spec, k, split, splits, lab, rows.get((spec.name, k)), chosen.get(split)
                )
                files.append(
                    atomic_write_text(
                        label_dir / bids_name(ent, "dseg", ".json"), json.dumps(sidecar, indent=2)
                    )
                )
    files.append(plot_dice_vs_k(scores, out / "dice_vs_k.png"))
    # every method and split at the middle K, in colours matched to the first row
    k = sorted(cfg.ks)[len(cfg.ks) // 2]
    panels = {
        f"{m.name}, {split}": wd.load_npy(wd.labels(split, m.name, k))
        for m in cfg.methods
        for split in splits
    }
    display = (
        None
        if cfg.display_mesh is None
        else {h: load_mesh(cfg.display_mesh[h]) for h in HEMISPHERES}
    )
    files.append(
        plot_parcellations(
            meshes, panels, out / f"parcellations_K{k}.png", title=f"K = {k}", display=display
        )
    )
    return files


def _sidecar(
    cfg: PipelineConfig,
    spec: MethodSpec,
    k: int,
    split: str,
    splits: list[str],
    labels: np.ndarray,
    score: dict[str, Any] | None,
    chosen_blur: float | None = None,
) -> dict[str, Any]:
    """What a ``_dseg.json`` says of one parcellation: how it was made and how it scored
    (``chosen_blur``: the split's blur, for ``feature_smoothing_mm: auto``)."""
    parcels = np.unique(labels[labels > 0])
    out: dict[str, Any] = {
        "Description": (
            f"Split-half parcellation of the cortex: {spec.method} clustering of split {split} "
            f"into K = {k} clusters; 0 is background (masked vertices)."
        ),
        "Method": spec.method,
        "MethodName": spec.name,
        "NumberOfClusters": k,
        "NumberOfParcels": int(parcels.size),
        "Split": split,
        "Subjects": cfg.resolved_splits()[split],
        "Features": "unit rows of U·Σ" if spec.features == "us" else "unit rows of U",
        "SVD": asdict(cfg.svd),
        **_spatial_settings(spec, k, cfg.random_state, chosen_blur),
        "Preprocessing": cfg.preprocess.to_dict(),
        "RandomState": cfg.random_state,
    }
    if split != splits[0]:
        out["LabelsMatchedTo"] = (
            f"split {splits[0]}: each parcel takes the id of the {splits[0]} parcel it "
            "overlaps most (Hungarian method); unmatched parcels take ids above those."
        )
    if score is not None:
        out["SplitHalfScores"] = {
            key: score[key]
            for key in ("dice", "nmi", "ari", "null_dice_mean", "null_dice_sd", "n_regions")
            if key in score
        }
    return out


def _spatial_settings(
    spec: MethodSpec, k: int, random_state: int, chosen_blur: float | None
) -> dict[str, Any]:
    """The sidecar's spatial settings: the fitted estimator's parameters, by name."""
    params = spec.estimator(k, random_state, blur_mm=chosen_blur).get_params()
    out: dict[str, Any] = {}
    for name in SPATIAL_OPTIONS:
        out[_SIDECAR_NAMES.get(name, name.title().replace("_", ""))] = params[name]
        if name == "feature_smoothing_mm":
            out["FeatureSmoothingChosenByData"] = spec.auto_blur
    return out


#: sidecar keys that are not the option's name in CamelCase
_SIDECAR_NAMES = {"feature_smoothing_mm": "FeatureSmoothingFWHM"}


# --------------------------------------------------------------------------- helpers


def _versions() -> dict[str, str]:
    import dask
    import distributed
    import nibabel
    import scipy
    import sklearn
    import zarr

    return {
        "lsd_dask": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "dask": dask.__version__,
        "distributed": distributed.__version__,
        "zarr": zarr.__version__,
        "nibabel": nibabel.__version__,
        "scikit-learn": sklearn.__version__,
    }
