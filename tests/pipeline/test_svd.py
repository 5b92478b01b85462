"""The SVD stage on a cluster: the splits' SVDs side by side give what one at a time gives."""

from __future__ import annotations

import numpy as np
from distributed import Client

from lsd_dask.pipeline import load_config, write_study
from lsd_dask.pipeline.blur import BlurStage
from lsd_dask.pipeline.ingest import IngestStage
from lsd_dask.pipeline.run import preflight
from lsd_dask.pipeline.stages import RunContext, run_stage
from lsd_dask.pipeline.svd import SvdStage, _splits_side_by_side


def test_the_splits_svds_side_by_side_give_the_results_of_one_at_a_time(
    tmp_path, study, scheduler_address
):
    """On two worker processes (no memory limit: side by side), both splits' SVDs start
    before the first ends, and each split's U and s are those of its SVD run alone
    afterwards on the same workers, bit for bit; so is the blur the halves choose when
    they too run side by side."""
    write_study(study, tmp_path, fmt="zarr")
    auto = {"name": "skm_auto", "method": "spherical_kmeans", "feature_smoothing_mm": "auto"}
    cfg = load_config(
        tmp_path / "pipeline.yaml", output=str(tmp_path / "out"), ks=[6],
        svd={"method": "randomized", "rank": 20}, methods=[auto],
    )  # fmt: skip
    lines: list[str] = []
    with Client(scheduler_address) as client:
        client.wait_for_workers(2)
        with RunContext.open(cfg, lines.append, preflight(cfg)[0]) as ctx:
            run_stage(IngestStage(), ctx)
            assert _splits_side_by_side(ctx, list(ctx.splits))  # the premise
            together = run_stage(SvdStage(), ctx)
            svd = [ln for ln in lines if ln.startswith("[svd]")]
            ends = [i for i, ln in enumerate(svd) if "pass 3 of 3" in ln]
            starts = [i for i, ln in enumerate(svd) if ": rank 20 of" in ln]
            assert len(starts) == len(ends) == 2 and max(starts) < min(ends), svd
            U = {s: ctx.wd.load_npy(ctx.wd.u(s)) for s in ctx.splits}
            S = {s: ctx.wd.load_npy(ctx.wd.s(s)) for s in ctx.splits}
            blur = run_stage(BlurStage(), ctx)["blur/split1"]
            half = [ln for ln in lines if ln.startswith("[blur] split1 half")]
            first_pass = min(i for i, ln in enumerate(half) if " pass " in ln)
            assert sum(": rank " in ln for ln in half[:first_pass]) == 2, half
            for split in ctx.splits:
                alone = SvdStage()._one(ctx, split)
                assert alone["rank"] == together[f"svd/{split}"]["rank"] == 20
                np.testing.assert_array_equal(ctx.wd.load_npy(ctx.wd.u(split)), U[split])
                np.testing.assert_array_equal(ctx.wd.load_npy(ctx.wd.s(split)), S[split])
    # the blur chosen with the halves one at a time, here without the cluster
    for stamp in (cfg.output / "work" / "stamps").glob("blur__*.json"):
        stamp.unlink()
    with RunContext.open(cfg, lines.append, preflight(cfg)[0]) as ctx:
        here = run_stage(BlurStage(), ctx)["blur/split1"]
    assert here["fwhm_mm"] == blur["fwhm_mm"]
    np.testing.assert_allclose(here["mean_error"], blur["mean_error"], rtol=1e-4)
