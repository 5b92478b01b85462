"""The SVD stage: each split's leading singular vectors, two splits side by side on a
cluster."""

from __future__ import annotations

import numpy as np
from distributed import Client

from lsd_dask.io import open_split
from lsd_dask.linalg import randomized_svd
from lsd_dask.pipeline import load_config, write_study
from lsd_dask.pipeline.ingest import IngestStage
from lsd_dask.pipeline.run import preflight
from lsd_dask.pipeline.stages import RunContext, run_stage
from lsd_dask.pipeline.svd import SvdStage


def test_two_splits_side_by_side_equal_each_splits_own_svd(tmp_path, study, scheduler_address):
    """On two worker processes the two splits' SVDs run side by side (the log says so),
    and each split's U and singular values are those of ``randomized_svd`` called on its
    store alone, one after the other, on the same workers: nothing of one split reaches
    the other's passes."""
    write_study(study, tmp_path, fmt="zarr")
    cfg = load_config(tmp_path / "pipeline.yaml", output=str(tmp_path / "out"))
    lines: list[str] = []
    with Client(scheduler_address) as client:
        client.wait_for_workers(2)
        with RunContext.open(cfg, lines.append, preflight(cfg)[0]) as ctx:
            run_stage(IngestStage(), ctx)
            results = run_stage(SvdStage(), ctx)
            wd = ctx.wd
        assert any("2 side by side" in ln for ln in lines if ln.startswith("[svd]"))
        for split in study.splits:
            st = open_split(wd.store(split))
            rank = results[f"svd/{split}"]["rank"]
            U, s, _ = randomized_svd(
                st.column_blocks, rank,
                n_power_iter=cfg.svd.n_power_iter, final_pass=cfg.svd.final_pass,
                test_matrix=cfg.svd.test_matrix, random_state=cfg.random_state,
            )  # fmt: skip
            np.testing.assert_array_equal(wd.load_npy(wd.u(split)), np.asarray(U))
            np.testing.assert_array_equal(wd.load_npy(wd.s(split)), np.asarray(s, np.float64))
    # and without a cluster, one after the other: the same subspace (dask's threads sum
    # the float32 products in another order)
    alone = load_config(tmp_path / "pipeline.yaml", output=str(tmp_path / "alone"))
    with RunContext.open(alone, print, preflight(alone)[0]) as ctx:
        run_stage(IngestStage(), ctx)
        run_stage(SvdStage(), ctx)
        for split in study.splits:
            a, b = wd.load_npy(wd.u(split)), ctx.wd.load_npy(ctx.wd.u(split))
            np.testing.assert_allclose(np.abs(a.T @ b).diagonal()[:5], 1, atol=1e-3)
