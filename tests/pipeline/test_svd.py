"""The SVD stage on a distributed cluster: the splits' SVDs at once, each as it would be
alone, and a failed split stopping the other."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from distributed import Client

from lsd_dask.pipeline import load_config, write_study
from lsd_dask.pipeline.ingest import IngestStage
from lsd_dask.pipeline.run import preflight
from lsd_dask.pipeline.stages import RunContext, run_stage
from lsd_dask.pipeline.svd import SvdStage, _progress, _Stopped

#: how long the test's log waits for the other split (a run one split at a time never
#: gives it, and the test then fails)
_WAIT_S = 60.0


def _ingested(tmp_path: Path, study, name: str):
    write_study(study, tmp_path, fmt="zarr")
    cfg = load_config(tmp_path / "pipeline.yaml", output=str(tmp_path / name))
    ctx = RunContext.open(cfg, lambda line: None, preflight(cfg)[0])
    run_stage(IngestStage(), ctx)
    return ctx


def test_the_splits_svds_run_at_once_each_as_it_would_alone(tmp_path, study, scheduler_address):
    """split1's first pass waits (in its log line) until split2 has made its own first
    pass, which only a concurrent run can give; each split's U and s are then bit for bit
    what the split's SVD alone gives on the same workers."""
    with Client(scheduler_address) as client:
        client.wait_for_workers(2)
        ctx = _ingested(tmp_path, study, "out")
        second_began = threading.Event()
        waited: list[bool] = []

        def log(line: str) -> None:
            if line.startswith("[svd] split2 pass 1 "):
                second_began.set()
            elif line.startswith("[svd] split1 pass 1 "):
                waited.append(second_began.wait(_WAIT_S))

        ctx.log = log
        try:
            results = run_stage(SvdStage(), ctx)
            assert waited == [True]
            assert list(results) == ["svd/split1", "svd/split2"]  # the plan's order
            together = {
                s: (ctx.wd.load_npy(ctx.wd.u(s)), ctx.wd.load_npy(ctx.wd.s(s))) for s in ctx.splits
            }
            for split, (U, s) in together.items():
                SvdStage()._one(ctx, split)  # this split alone
                np.testing.assert_array_equal(ctx.wd.load_npy(ctx.wd.u(split)), U)
                np.testing.assert_array_equal(ctx.wd.load_npy(ctx.wd.s(split)), s)
        finally:
            ctx.close()


def test_a_split_whose_store_is_damaged_fails_the_stage_with_its_own_error(
    tmp_path, study, scheduler_address
):
    """split2's store loses a byte after ingest: the stage raises split2's checksum error
    naming its store (not the other split's stop), and records no SVD of split2."""
    with Client(scheduler_address) as client:
        client.wait_for_workers(2)
        ctx = _ingested(tmp_path, study, "out")
        try:
            store = Path(ctx.wd.store("split2"))
            shard = sorted((store / "subject" / "1").rglob("c/*/*"))[0]
            bad = bytearray(shard.read_bytes())
            bad[5] ^= 0x10
            shard.write_bytes(bytes(bad))
            with pytest.raises(ValueError, match=r"split2\.zarr.*fails its checksum"):
                run_stage(SvdStage(), ctx)
            assert not Path(ctx.wd.u("split2")).exists()
        finally:
            ctx.close()


def test_a_split_stops_at_its_next_pass_once_another_has_failed():
    lines: list[str] = []
    stop = threading.Event()
    _progress(lines.append, "[svd] split1 pass 1 of 3", stop)
    stop.set()
    with pytest.raises(_Stopped):
        _progress(lines.append, "[svd] split1 pass 2 of 3", stop)
    assert lines == ["[svd] split1 pass 1 of 3"]
