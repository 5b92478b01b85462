"""The cluster stage: fits as tasks on the workers, or as Dask graphs, or in process."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from distributed import Client, get_task_stream

import lsd_dask.pipeline.engine.placement as placement
from lsd_dask.pipeline import load_config, run_pipeline, write_study

# hierarchical LSD fans its splits out to an active client: inside a task it must not
# and a Ward-merged variant (its fine fit and merge in the task, or over dask features);
# a variant whose blur each split's halves choose (their SVDs read by the workers)
METHODS = [
    "directional",
    "spherical_kmeans",
    "hierarchical_lsd",
    {"name": "dir_merged", "method": "directional", "spatial_weight": 1, "oversegment": 2},
    {"name": "skm_auto", "method": "spherical_kmeans", "feature_smoothing_mm": "auto"},
]


def _labels(cfg):
    work = cfg.output / "work" / "labels"
    return {p.name: np.load(p) for p in sorted(work.glob("*.npy"))}


@pytest.fixture(scope="module")
def in_process(tmp_path_factory, study):
    """Every fit of the small study, run in this process without a cluster."""
    folder = tmp_path_factory.mktemp("alone")
    write_study(study, folder, fmt="gifti")
    cfg = load_config(folder / "pipeline.yaml", ks=[4, 8], methods=METHODS, null_repeats=0)
    run_pipeline(cfg, log=lambda line: None)
    return folder, _labels(cfg)


@pytest.mark.parametrize("as_tasks", [True, False])
def test_fits_on_the_workers_give_the_labels_of_a_fit_here(
    in_process, scheduler_address, monkeypatch, as_tasks
):
    """A task per split and K (workers of 2 GB hold the features) runs the same numpy
    fits as a run without a cluster: the same labels. Features too large for that (the factor
    raised) go through Dask graphs instead, with the same parcels found."""
    folder, reference = in_process
    monkeypatch.setattr(placement, "IN_MEMORY_FEATURES_BYTES", 0)  # as if at full size
    # as Dask graphs (the slow path on a small study): the two variants, a Ward merge over
    # dask features and a blur chosen from the halves, at the smallest K (the blur's K)
    # (both K for the Ward-merged variant: its K = 4 comes down from its K = 8)
    methods, ks = (METHODS, [4, 8]) if as_tasks else (METHODS[3:], [4, 8])
    if not as_tasks:
        monkeypatch.setattr(placement, "FIT_TASK_MEMORY_FACTOR", 10**9)
    cfg = load_config(
        folder / "pipeline.yaml",
        ks=ks,
        methods=methods,
        null_repeats=0,
        output=str(folder / f"tasks-{as_tasks}"),
    )
    lines: list[str] = []
    with Client(scheduler_address) as client:
        client.wait_for_workers(2)
        with get_task_stream(client) as stream:
            run_pipeline(cfg, log=lines.append)
        workers = set(client.nthreads())
    fitted = [ln for ln in lines if re.match(r"\[cluster\] \[.*K=\d+: [\d.]+ s", ln)]
    n_fits = 2 * len(methods) * len(ks)
    assert len(fitted) == n_fits
    got = _labels(cfg)
    assert len(got) == n_fits and got.keys() <= reference.keys()
    # the one memory rule of the fits places the blurs' features too
    as_tasks_line = "[blur] split1: each blur and direction scored as a task on 2 workers"
    scored_as_tasks = any(as_tasks_line in ln for ln in lines)
    assert scored_as_tasks == as_tasks
    for split in ("split1", "split2"):  # the halves' SVDs on the workers: the same choice
        chosen = [(folder / d / "work" / "blur" / f"{split}.json").read_text() for d in (
            "results", f"tasks-{as_tasks}")]  # fmt: skip
        assert json.loads(chosen[0])["fwhm_mm"] == json.loads(chosen[1])["fwhm_mm"]
    if as_tasks:
        # a task per split, K and kind of features (U·Σ: three methods; U: hierarchical
        # LSD): 8 such groups, at least the 2 worker threads, so each is one task and the
        # methods that seed alike seed once (their labels are compared below); and the
        # Ward-merged variant's one fine fit per split serves both K in one task
        assert any("20 fits as 10 tasks on 2 workers" in ln for ln in lines)
        assert {ln.rsplit("(", 1)[1].rstrip(")") for ln in fitted} <= workers
        # each fit of a task but its last is told as it ends, before its task's labels
        # come back: 16 such fits in 8 tasks, 8 lines, each before that fit's saved line
        told = [ln for ln in lines if ln.startswith("[cluster] fitted ")]
        assert len(told) == 8, told
        for ln in told:
            name = ln.removeprefix("[cluster] fitted ").split(":")[0]
            saved = [i for i, s in enumerate(lines) if s in fitted and f" {name}: " in s]
            assert len(saved) == 1 and lines.index(ln) < saved[0], name
            assert "saved with the rest of its task" in ln
        # every worker starts with a fit at the largest K (longest-first scheduling; a
        # worker that runs out may then steal any fit, so only the first is certain)
        started: dict[str, list[tuple[float, int]]] = {}
        for t in stream.data:
            key = str(t["key"])
            if key.startswith("fit_labels-"):
                start = min(s["start"] for s in t["startstops"] if s["action"] == "compute")
                k = int(re.search(r"-K(\d+)-", key).group(1))
                started.setdefault(t["worker"], []).append((start, k))
        assert sum(map(len, started.values())) == 10
        assert len(started) == 2
        for order in started.values():
            assert min(order)[1] == max(cfg.ks), sorted(order)
        from lsd_dask.metrics import ari

        for name, lab in got.items():
            np.testing.assert_array_equal(lab > 0, reference[name] > 0, err_msg=name)
            if "hierarchical" in name:
                # it ran (in a task it must not fan out to the workers the fits hold);
                # its partition is compared only by K: on this small study (K below the
                # 10 planted parcels) its greedy splits follow rounding in U. The cluster
                # SVD's U differs from the one here in the last float32 digits, and adding
                # 1e-5 noise to U alone already moves its partition to ARI 0.43 (K = 4)
                k = int(name.rsplit("_K", 1)[1].removesuffix(".npy"))
                assert np.unique(lab[lab > 0]).size == k, name
                continue
            assert ari(lab, reference[name]) == pytest.approx(1.0), name
    else:
        assert not any("fits as tasks" in ln for ln in lines)
        from lsd_dask.metrics import nmi

        for name, lab in got.items():
            keep = lab > 0
            if "hierarchical" not in name:  # see above
                assert nmi(lab[keep], reference[name][keep]) > 0.9, name


def test_fits_share_a_task_only_where_the_groups_fill_the_threads():
    """A split's fits at one K, on one kind of features, share a task where there are at
    least as many such groups as worker threads; with fewer, each fit is a task, so no
    thread waits while another runs two fits in turn."""
    from lsd_dask.pipeline.settings.methods import MethodSpec
    from lsd_dask.pipeline.stages.fits import FitJob, task_batches

    specs = [
        MethodSpec("a", "directional", "us", {}),
        MethodSpec("b", "spherical_kmeans", "us", {}),
    ]
    specs.append(MethodSpec("c", "lsd", "u", {}))
    jobs = [
        FitJob(split, spec, k, None, {}, "", "")  # type: ignore[arg-type]
        for split in ("split1", "split2")
        for spec in specs
        for k in (50, 100)
    ]
    grouped = task_batches(jobs, threads=8)
    assert len(grouped) == 8  # 2 splits × 2 K × 2 kinds of features
    for batch in grouped:
        assert len({(j.split, j.spec.features, j.k) for j in batch}) == 1
    assert sorted(len(b) for b in grouped) == [1, 1, 1, 1, 2, 2, 2, 2]
    assert sorted(id(j) for b in grouped for j in b) == sorted(map(id, jobs))
    assert task_batches(jobs, threads=9) == [[j] for j in jobs]


def test_fits_whose_starts_share_centres_share_a_task_where_the_threads_stay_busy():
    """K = 200, 300 and 400 draw 7 candidates a centre (50: 5), so their starts are the
    first K centres of one: a split's fits at those K, on one kind of features, share a
    task, largest K first, where no task then costs more than a thread's share (seeded K
    summed); else a task per K; else per fit."""
    from lsd_dask.pipeline.settings.methods import MethodSpec
    from lsd_dask.pipeline.stages.fits import FitJob, task_batches

    specs = [
        MethodSpec("a", "directional", "us", {}),
        MethodSpec("b", "spherical_kmeans", "us", {}),
        MethodSpec("c", "lsd", "u", {}),
    ]
    jobs = [
        FitJob(split, spec, k, None, {}, "", "")  # type: ignore[arg-type]
        for split in ("split1", "split2")
        for spec in specs
        for k in (50, 200, 300, 400)
    ]
    grouped = task_batches(jobs, threads=2)
    assert len(grouped) == 8  # 2 splits × 2 kinds of features × 2 candidate counts
    for batch in grouped:
        assert len({(j.split, j.spec.features, j.k == 50) for j in batch}) == 1
        assert [j.k for j in batch] == sorted((j.k for j in batch), reverse=True)
    assert sorted(len(b) for b in grouped) == [1, 1, 2, 2, 3, 3, 6, 6]
    assert sorted(id(j) for b in grouped for j in b) == sorted(map(id, jobs))
    # 4 threads: a thread's share is 1,425; the 6 fits at 200…400 cost 1,800
    by_k = task_batches(jobs, threads=4)
    assert len(by_k) == 16
    assert all(len({(j.split, j.spec.features, j.k) for j in b}) == 1 for b in by_k)
    assert task_batches(jobs, threads=17) == [[j] for j in jobs]

    class Oversegmented:
        oversegment = 3.0

    # an oversegmented fit seeds 3K: 150 and 300 clusters at K = 50 and 100 (7
    # candidates), 1,200 at K = 400 (9)
    fine = [
        FitJob(split, specs[0], k, Oversegmented(), {}, "", "")  # type: ignore[arg-type]
        for split in ("split1", "split2")
        for k in (50, 100, 400)
    ]
    assert sorted([j.k for j in b] for b in task_batches(fine, threads=2)) == [
        [100, 50],
        [100, 50],
        [400],
        [400],
    ]


def test_a_shared_fine_fit_refits_only_the_ks_it_changes(in_process, study):
    """A shared variant's K comes down from the run's larger K's: adding a smaller K
    fits only that K (the larger ones' stamps stay current, their labels unchanged);
    adding a larger K fits every K again. Each K's labels are
    :class:`~lsd_dask.cluster.MultiScaleParcellation`'s on the split's features."""
    from lsd_dask.cluster import DirectionalClustering, MeshParcellation, MultiScaleParcellation
    from lsd_dask.pipeline.stages.svd import svd_features
    from lsd_dask.surface import mesh_adjacency

    folder, _ = in_process
    variant = METHODS[3]
    out = str(folder / "shared")

    def run(ks):
        cfg = load_config(folder / "pipeline.yaml", ks=ks, methods=[variant], null_repeats=0,
                          output=out)  # fmt: skip
        lines: list[str] = []
        run_pipeline(cfg, log=lines.append)
        fitted = sorted(
            (m[1], int(m[2]))
            for ln in lines
            if (m := re.match(r"\[cluster\] \[[#.]*\] .*?(split\d) dir_merged K=(\d+): ", ln))
        )
        return cfg, fitted, _labels(cfg)

    cfg, fitted, first = run([4, 8])
    assert fitted == [("split1", 4), ("split1", 8), ("split2", 4), ("split2", 8)]
    _, fitted, second = run([3, 4, 8])
    assert fitted == [("split1", 3), ("split2", 3)]
    assert all(np.array_equal(first[n], second[n]) for n in first)
    _, fitted, third = run([3, 4, 8, 9])
    assert len(fitted) == 8
    # the methods paragraph says how the K's were made
    text = json.loads((cfg.output / "report.json").read_text())["methods_text"]
    assert "one fit per split at 2 times the largest K clusters, merged by Ward's" in text
    assert "refined there by the Potts term" in text
    # the labels are the estimator's, fitted here on split 1's features and kept mesh
    wd = cfg.output / "work"
    U, s = np.load(wd / "split1_U.npy"), np.load(wd / "split1_s.npy")
    kept = np.load(wd / "mask.npy").astype(bool)
    meshes = list(study.meshes.values())
    A = mesh_adjacency([m.faces for m in meshes], [m.n_vertices for m in meshes])
    one = MeshParcellation(
        DirectionalClustering(),
        connectivity=A[kept][:, kept].tocsr(),
        spatial_weight=1.0,
        oversegment=2.0,
        random_state=cfg.random_state,
    )
    est = MultiScaleParcellation(one, [3, 4, 8, 9]).fit(svd_features(U, s))
    for k in (3, 4, 8, 9):
        lab = third[f"split1_dir_merged_K{k}.npy"]
        np.testing.assert_array_equal(lab[kept], est.labels_[k] + 1, err_msg=f"K={k}")
