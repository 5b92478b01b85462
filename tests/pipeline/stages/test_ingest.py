"""Mask and ingest as tasks on the workers: one read per subject, the mask applied late."""

from __future__ import annotations

import numpy as np
from distributed import Client

from lsd_dask.io import open_split
from lsd_dask.io.surface_files import SubjectFiles, load_subject, write_zarr_subject
from lsd_dask.pipeline import load_config, write_study
from lsd_dask.pipeline.engine.context import RunContext
from lsd_dask.pipeline.engine.contract import run_stage
from lsd_dask.pipeline.run import preflight
from lsd_dask.pipeline.stages.ingest import IngestStage


def _ingest(cfg, log):
    with RunContext.open(cfg, log, preflight(cfg)[0]) as ctx:
        run_stage(IngestStage(), ctx)
        return ctx.wd


def test_workers_ingest_and_a_vertex_masked_by_the_last_subject_is_dropped(
    tmp_path, study, scheduler_address
):
    """Tasks on two worker processes write every subject; a vertex constant only in the
    last subject, read after the others were written, is dropped from what the store
    gives; the stores equal a no-cluster ingest, which standardises in numpy here."""
    write_study(study, tmp_path, fmt="zarr")
    last = study.splits["split2"][-1]
    files = SubjectFiles.from_keys(last, zarr=tmp_path / f"{last}.zarr")
    x, sizes = load_subject(files)
    v = int(np.flatnonzero(study.labels > 0)[7])  # a cortical vertex, not the medial wall
    x[v] = 3.0
    write_zarr_subject(tmp_path / f"{last}.zarr", x, sizes)

    cfg = load_config(tmp_path / "pipeline.yaml", output=str(tmp_path / "a"))
    lines: list[str] = []
    with Client(scheduler_address) as client:
        client.wait_for_workers(2)
        wd = _ingest(cfg, lines.append)
        workers = set(client.nthreads())
    # every subject, as a task on one of the workers
    done = [ln for ln in lines if ln.startswith("[ingest]") and "/4 " in ln]
    assert len(done) == 4 and {ln.rsplit("(", 1)[1].rstrip(")") for ln in done} <= workers
    kept = wd.load_npy(wd.mask)
    assert not kept[v] and kept.sum() == (study.labels > 0).sum() - 1

    # the same study ingested here, without a cluster
    alone = _ingest(load_config(tmp_path / "pipeline.yaml", output=str(tmp_path / "b")), print)
    for split, ids in study.splits.items():
        st = open_split(wd.store(split))
        assert st.subjects == ids and st.data.shape[0] == kept.sum()
        np.testing.assert_array_equal(st.vertex_mask, kept)
        X = st.data.compute()
        np.testing.assert_array_equal(X, open_split(alone.store(split)).data.compute())
        # standardised per subject and vertex, against numpy on the files read back
        for j, sid in enumerate(ids):
            f = SubjectFiles.from_keys(sid, zarr=tmp_path / f"{sid}.zarr")
            raw = load_subject(f)[0][kept].astype(np.float64)
            ref = (raw - raw.mean(1, keepdims=True)) / raw.std(1, keepdims=True)
            t = st.timepoints[j]
            np.testing.assert_allclose(X[:, j * t : (j + 1) * t], ref, atol=1e-5)


def test_an_edited_fmriprep_confounds_file_recomputes_ingest_and_what_follows(tmp_path):
    """A participant's fMRIPrep confounds TSV edited after a run (``denoise: simple``),
    its size and mtime put back: the re-run ingests again, and the labels equal a fresh
    run's on the edited files."""
    import os

    import pandas as pd

    from lsd_dask.datasets import surface_study
    from lsd_dask.pipeline import run_pipeline
    from lsd_dask.surface import two_hemisphere_mesh

    study = surface_study(two_hemisphere_mesh(5, 6, radius=50.0), n_parcels=6,
                          n_subjects=(2, 2), n_timepoints=40, medial_wall_fraction=0.1,
                          noise_std=0.7, random_state=6)  # fmt: skip
    write_study(study, tmp_path / "tree", fmt="fmriprep")
    settings = {"ks": [3], "methods": ["directional"], "spins": 0, "null_repeats": 1,
                "min_region_size": 2, "svd": {"method": "randomized", "rank": 10}}  # fmt: skip

    def run(out):
        cfg = load_config(tmp_path / "tree" / "pipeline.yaml", output=str(out), **settings)
        assert cfg.preprocess.denoise == {"preset": "simple"}
        logs: list[str] = []
        run_pipeline(cfg, log=logs.append)
        labels = np.load(out / "work" / "labels" / "split1_directional_K3.npy")
        return labels, logs

    run(tmp_path / "out")
    tsv = next((tmp_path / "tree").rglob("sub-001_*desc-confounds_timeseries.tsv"))
    stat = tsv.stat()
    table = pd.read_csv(tsv, sep="\t")
    table["csf"] = table["csf"].to_numpy()[::-1]  # the same numbers: the same size
    table.to_csv(tsv, sep="\t", index=False, na_rep="n/a")
    os.utime(tsv, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert tsv.stat().st_size == stat.st_size
    labels, logs = run(tmp_path / "out")
    assert any(ln.startswith("[ingest] ingest/split1: recomputing") and "denoise_files" in ln
               for ln in logs), logs  # fmt: skip
    assert "[ingest] split2 done earlier, skipped" in logs  # its participants' files alone
    fresh, _ = run(tmp_path / "fresh")
    np.testing.assert_array_equal(labels, fresh)
