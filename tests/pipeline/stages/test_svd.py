"""The SVD stage on a distributed cluster: the splits' SVDs at once, each on workers of its
own and as it would be alone there, and a failed split stopping the other."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from distributed import Client

from lsd_dask.pipeline import load_config, write_study
from lsd_dask.pipeline.engine.context import RunContext
from lsd_dask.pipeline.engine.contract import run_stage
from lsd_dask.pipeline.run import preflight
from lsd_dask.pipeline.stages.ingest import IngestStage
from lsd_dask.pipeline.stages.svd import SvdStage, _progress, _Stopped, _thread_shares

#: how long the test's log waits for the other split (a run one split at a time never
#: gives it, and the test then fails)
_WAIT_S = 60.0


def _ingested(tmp_path: Path, study, name: str):
    write_study(study, tmp_path, fmt="zarr")
    cfg = load_config(tmp_path / "pipeline.yaml", output=str(tmp_path / name))
    ctx = RunContext.open(cfg, lambda line: None, preflight(cfg)[0])
    run_stage(IngestStage(), ctx)
    return ctx


def test_the_splits_svds_run_at_once_each_on_a_worker_of_its_own(
    tmp_path, study, scheduler_address
):
    """split1's first pass waits (in its log line) until split2 has made its own first
    pass, which only a concurrent run can give. On 2 one-thread workers each split's
    passes run on one worker of its own: two group tasks a pass, one per thread of the
    cluster (3 passes a split: the sketch and 2 power iterations), 6 on each worker. Each
    split's U and s are bit for bit what the stage gives when that split alone is left to
    do (a run whose other split is done), what its SVD alone gives on one worker (either
    one), and what it gives on both workers: the groups are cut alike in every case."""
    from distributed import get_task_stream

    with Client(scheduler_address) as client:
        client.wait_for_workers(2)
        ctx = _ingested(tmp_path, study, "out")
        assert ctx.cfg.svd.n_power_iter == 2 and not ctx.cfg.svd.final_pass
        second_began = threading.Event()
        waited: list[bool] = []

        def log(line: str) -> None:
            if line.startswith("[svd] split2 pass 1 "):
                second_began.set()
            elif line.startswith("[svd] split1 pass 1 "):
                waited.append(second_began.wait(_WAIT_S))

        ctx.log = log
        try:
            with get_task_stream(client) as ts:
                results = run_stage(SvdStage(), ctx)
            assert waited == [True]
            assert list(results) == ["svd/split1", "svd/split2"]  # the plan's order
            groups = [t["worker"] for t in ts.data if str(t["key"]).startswith("_group_pass-")]
            workers = sorted(client.nthreads())
            # pinned, not bound (other workers may take a task): 6 on each, but a worker
            # busy with a test beside this one may see one or two stolen
            counts = Counter(groups)
            assert len(groups) == 12 and set(counts) == set(workers), groups
            assert min(counts.values()) >= 4, groups
            together = {
                s: (ctx.wd.load_npy(ctx.wd.u(s)), ctx.wd.load_npy(ctx.wd.s(s))) for s in ctx.splits
            }
            with ctx.reading(SvdStage.reads):
                units = SvdStage().plan(ctx)
            for unit in units:  # made again alone, the other split done
                assert [u.item for u, _ in SvdStage().compute(ctx, [unit])] == [unit.item]
                U, s = together[unit.item]
                np.testing.assert_array_equal(ctx.wd.load_npy(ctx.wd.u(unit.item)), U)
                np.testing.assert_array_equal(ctx.wd.load_npy(ctx.wd.s(unit.item)), s)
            for (split, (U, s)), worker in zip(together.items(), workers[::-1], strict=True):
                SvdStage()._one(ctx, split, workers=[worker])  # alone, on the other worker
                np.testing.assert_array_equal(ctx.wd.load_npy(ctx.wd.u(split)), U)
                np.testing.assert_array_equal(ctx.wd.load_npy(ctx.wd.s(split)), s)
                SvdStage()._one(ctx, split)  # alone, on both workers: the same sums
                np.testing.assert_array_equal(ctx.wd.load_npy(ctx.wd.s(split)), s)
                np.testing.assert_array_equal(ctx.wd.load_npy(ctx.wd.u(split)), U)
        finally:
            ctx.close()


@pytest.mark.parametrize(
    ("threads", "splits", "shares"),
    [
        (["a", "b"], 2, [["a"], ["b"]]),
        (["a", "a", "b", "b"], 2, [["a", "a"], ["b", "b"]]),
        (["a", "b", "c", "d"], 2, [["a", "b"], ["c", "d"]]),
        (["a", "b", "c"], 2, [None, None]),  # 2 and 1: the lone thread's split ends last
        (["a", "b"], 1, [None]),
        ([], 2, [None, None]),
    ],
)
def test_thread_shares_are_equal_runs_of_whole_workers_or_all(threads, splits, shares):
    assert _thread_shares(threads, splits) == shares


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


def test_the_rank_follows_a_small_studys_time_points(tmp_path, study):
    """svd.rank at its default (1,000) on a study of 2 × 60 time points a split keeps half
    of them, 60, and the log says why, with no warning; the singular values lead as the
    split's exact SVD's do."""
    from lsd_dask.io.zarr_store import open_split
    from lsd_dask.pipeline.settings.svd import SvdSettings

    lines: list[str] = []
    write_study(study, tmp_path, fmt="zarr")
    cfg = load_config(tmp_path / "pipeline.yaml", output=str(tmp_path / "o"), svd={"rank": 1000})
    assert cfg.svd.rank == SvdSettings().rank == 1000
    ctx = RunContext.open(cfg, lines.append, preflight(cfg)[0])
    run_stage(IngestStage(), ctx)
    run_stage(SvdStage(), ctx)
    said = [ln for ln in lines if ln.startswith("[svd] split1: rank")]
    assert said == [
        "[svd] split1: rank 60 of 765 x 120 (randomized; half the split's 120 time points, "
        "below svd.rank 1000)"
    ]
    s = np.load(ctx.wd.s("split1"))
    store = open_split(ctx.wd.store("split1"))
    exact = np.linalg.svd(np.asarray(store.data, np.float64), compute_uv=False)
    assert s.shape == (60,)
    # the leading ones as the exact SVD's (the randomized SVD's tail is approximate)
    np.testing.assert_allclose(s[:10], exact[:10], rtol=1e-3)
    assert not any("warning" in ln for ln in lines)
