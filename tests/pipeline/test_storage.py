"""Data the workers read are the data ingest wrote; edge-case vertices and subjects."""

from __future__ import annotations

import re

import numpy as np
import pytest
import yaml

from lsd_dask.distributed import connect
from lsd_dask.io.surface_files import read_hemisphere, write_func_gifti
from lsd_dask.pipeline import load_config, run_pipeline


@pytest.fixture
def folder(tmp_path, write_tiny_study):
    return tmp_path, write_tiny_study(tmp_path, random_state=4)


def _cfg(folder, out):
    return load_config(
        folder / "pipeline.yaml",
        output=str(out),
        ks=[4],
        methods=["spherical_kmeans"],
        svd={"rank": 10},
        min_region_size=2,
        null_repeats=1,
        spins=0,
    )


def _first_left(folder):
    raw = yaml.safe_load((folder / "pipeline.yaml").read_text())
    return raw["subjects"][0]["id"], folder / raw["subjects"][0]["left"]


def test_a_store_the_workers_see_in_part_fails_naming_the_folder(folder, tmp_path):
    """The store whole where ingest wrote it, in part where the workers read it (chunks
    gone after the ingest stage found it whole, as on a node without the shared folder):
    the workers' own check before the SVD reads names the folder. (A store damaged before
    a run starts is rebuilt instead: tests/pipeline/engine/test_workdir.py.)"""
    from lsd_dask.pipeline.engine.context import RunContext
    from lsd_dask.pipeline.engine.contract import run_stage
    from lsd_dask.pipeline.preflight import preflight
    from lsd_dask.pipeline.stages.svd import SvdStage

    data, _ = folder
    cfg = _cfg(data, tmp_path / "out")
    run_pipeline(cfg, log=lambda s: None)
    store = cfg.output / "work" / "split1.zarr"
    for f in sorted((store / "subject" / "0" / "c").rglob("*"))[:2]:
        if f.is_file():
            f.unlink()
    (cfg.output / "work" / "stamps" / "svd__split1.json").unlink()  # the SVD must rerun
    # two worker processes of a real cluster check the store before the SVD reads it
    with connect({"type": "local", "local": {"n_workers": 2, "threads_per_worker": 1}}, log=None):
        with RunContext.open(cfg, lambda s: None, preflight(cfg)[0]) as ctx:
            with pytest.raises(ValueError, match=f"split store {store} .*shard files: the work"):
                run_stage(SvdStage(), ctx)


def test_constant_vertex_inexact_in_float32_is_masked(folder, tmp_path):
    data, study = folder
    sid, left = _first_left(data)
    x = read_hemisphere(left)
    x[3] = np.float32(100.3)  # float32 std of this row is 2e-5, not 0
    write_func_gifti(left, x, hemisphere="left")
    report = run_pipeline(_cfg(data, tmp_path / "out"), log=lambda s: None)
    expected = int((study.labels == 0).sum()) + int(study.labels[3] != 0)
    assert report["mask"]["per_subject"][sid]["constant"] == expected
    assert all(np.isfinite(r["dice"]) for r in report["scores"])


def test_all_zero_subject_is_named(folder, tmp_path):
    data, _ = folder
    sid, left = _first_left(data)
    raw = yaml.safe_load((data / "pipeline.yaml").read_text())
    right = data / raw["subjects"][0]["right"]
    for path, hemi in ((left, "left"), (right, "right")):
        write_func_gifti(path, np.zeros_like(read_hemisphere(path)), hemisphere=hemi)
    with pytest.raises(ValueError, match=f"subject {sid}: every vertex is constant"):
        run_pipeline(_cfg(data, tmp_path / "out"), log=lambda s: None)


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_damaged_file_is_named_before_any_work(folder, tmp_path, damage):
    data, _ = folder
    sid, left = _first_left(data)
    raw = left.read_bytes()
    left.write_bytes(raw[: len(raw) // 2] if damage == "truncated" else b"\x00\x01not xml")
    cfg = _cfg(data, tmp_path / "out")
    with pytest.raises(ValueError, match=f"subject {sid}: cannot read the header of {left}"):
        run_pipeline(cfg, log=lambda s: None)
    assert not (cfg.output / "work").exists()


def test_a_killed_svd_worker_says_what_memory_the_rank_needs(tmp_path):
    """Workers of 400 MB and an SVD whose tasks hold ~330 MB: the run fails with the memory
    per task and per worker thread, and which settings to change. (A worker that has
    imported the library holds about 200 MB before any task: a smaller limit could stop
    it before the SVD starts.)"""
    from lsd_dask.io.surface_files import write_surface_gifti, write_zarr_subject
    from lsd_dask.linalg.randomized import svd_task_bytes
    from lsd_dask.surface import two_hemisphere_mesh

    meshes = two_hemisphere_mesh(32)
    sizes = [meshes["left"].n_vertices, meshes["right"].n_vertices]
    n, t, rank = sum(sizes), 1000, 1000  # half a split's 2 x 1,000 time points
    rng = np.random.default_rng(0)
    subjects = []
    for i in range(4):
        x = rng.standard_normal((n, t)).astype(np.float32)
        write_zarr_subject(tmp_path / f"s{i}.zarr", x, sizes)
        subjects.append({"id": f"s{i}", "zarr": f"s{i}.zarr"})
    for h, name in (("left", "lh"), ("right", "rh")):
        write_surface_gifti(tmp_path / f"{name}.surf.gii", meshes[h], hemisphere=h)
    raw = {
        "subjects": subjects,
        "mesh": {"left": "lh.surf.gii", "right": "rh.surf.gii"},
        "ks": [5],
        "svd": {"rank": rank},
        "output": "out",
        "cluster": {
            "type": "local",
            "local": {"n_workers": 1, "threads_per_worker": 1, "memory_limit": "400MB"},
        },
    }
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(raw))
    cfg = load_config(tmp_path / "pipeline.yaml")
    need = svd_task_bytes(n, t, rank)
    assert need > 300e6  # the premise: one task and a worker's own ~200 MB do not fit
    import dask

    from lsd_dask.pipeline.engine.context import RunContext
    from lsd_dask.pipeline.engine.contract import run_stage
    from lsd_dask.pipeline.run import preflight
    from lsd_dask.pipeline.stages.ingest import IngestStage
    from lsd_dask.pipeline.stages.svd import SvdStage

    # the stores are written first, here: the test is about the SVD's memory
    meshes = preflight(cfg)[0]
    with RunContext.open(cfg, lambda s: None, meshes) as ctx:
        run_stage(IngestStage(), ctx)
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        with connect(cfg.cluster, log=None):
            # a run stops before any work: its preflight sees the task above the workers
            with pytest.raises(MemoryError, match=r"Give each worker at least \d+ MB") as pre:
                run_pipeline(cfg, log=lambda s: None)
            assert "an SVD task at rank 1000" in str(pre.value)
            # the SVD stage itself, past that check, says the same when its worker dies
            with RunContext.open(cfg, lambda s: None, meshes) as ctx:
                with pytest.raises(MemoryError) as info:
                    run_stage(SvdStage(), ctx)
    text = str(info.value)
    # the two splits' SVDs run at once: the error names whichever lost its worker first
    assert f"about {need / 2**20:.0f} MB" in text and "svd.rank" in text
    assert re.match(r"the SVD of split[12] lost its workers", text), text
    assert "per thread" in text
    for split in ("split1", "split2"):
        assert not (tmp_path / "out" / "work" / f"{split}_U.npy").exists()
