"""The split-half pipeline end to end on small synthetic studies written to disk."""

from __future__ import annotations

import json
import os
import re

import matplotlib.image as mpimg
import nibabel as nib
import numpy as np
import pytest
import yaml
from click.testing import CliRunner

import lsd_dask
from lsd_dask import cli, metrics
from lsd_dask.cluster import SPATIAL_OPTIONS
from lsd_dask.datasets import surface_study
from lsd_dask.io.bids import find_atlas_folder
from lsd_dask.linalg import randomized_svd
from lsd_dask.pipeline import load_config, run_pipeline, write_study
from lsd_dask.surface import two_hemisphere_mesh
from lsd_dask.testing.bids_validator import bids_validator_errors


def _adjacency(study, kept=None):
    """The study's two-hemisphere mesh adjacency (CSR), of the kept vertices if given."""
    from lsd_dask.surface import mesh_adjacency

    m = study.meshes
    A = mesh_adjacency(
        [m["left"].faces, m["right"].faces], [m["left"].n_vertices, m["right"].n_vertices]
    )
    return A if kept is None else A[kept][:, kept].tocsr()


def _config(folder, **over):
    over.setdefault("svd", {"method": "randomized", "rank": 20})
    over.setdefault("spins", 0)  # no test here is about the spin nulls
    return load_config(
        folder / "pipeline.yaml",
        output=str(folder / "results"),
        min_region_size=3,
        null_repeats=3,
        **over,
    )


@pytest.mark.parametrize("fmt", ["gifti", "cifti", "zarr"])
def test_pipeline_end_to_end_and_resume(tmp_path, study, fmt, monkeypatch):
    if fmt == "cifti":  # cluster dask features (the full-scale path) in one of the two runs
        import lsd_dask.pipeline.engine.placement as placement

        monkeypatch.setattr(placement, "IN_MEMORY_FEATURES_BYTES", 0)
    folder = tmp_path / fmt
    write_study(study, folder, fmt=fmt)
    cfg = _config(folder, ks=[5, 10], methods=["directional", "hierarchical_lsd"])
    logs: list[str] = []
    report = run_pipeline(cfg, log=logs.append)
    out = cfg.output
    # medial wall masked and reported
    assert report["mask"]["n_masked"] == int((study.labels == 0).sum())
    # scores for every method and K; the planted parcels reproduce far above the null
    assert {(r["method"], r["k"]) for r in report["scores"]} == {
        (m, k) for m in ("directional", "hierarchical_lsd") for k in (5, 10)
    }
    best = max(r["dice"] - r["null_dice_mean"] for r in report["scores"] if r["k"] == 10)
    assert best > 0.3
    # outputs exist and open
    saved = json.loads((out / "report.json").read_text())
    assert saved["versions"]["nibabel"] == nib.__version__
    figure = mpimg.imread(out / "dice_vs_k.png")
    assert figure.ndim == 3 and np.unique(figure.reshape(-1, figure.shape[2]), axis=0).shape[0] > 20
    assert [p.name for p in out.glob("parcellations_*.png")] == ["parcellations_K10.png"]
    stem = "atlas-directional10split1_scale-10_den-*_dseg"
    folder = find_atlas_folder(out)
    if fmt == "cifti":
        [path] = folder.glob(f"tpl-custom_{stem}.dlabel.nii")
        lab = np.asarray(nib.load(str(path)).dataobj)[0]
    else:
        [left] = folder.glob(f"tpl-custom_hemi-L_{stem}.label.gii")
        [right] = folder.glob(f"tpl-custom_hemi-R_{stem}.label.gii")
        lab = np.concatenate(
            [nib.load(str(p)).darrays[0].data for p in (left, right)]  # type: ignore[attr-defined]
        )
    assert lab.shape == study.labels.shape
    assert np.all(lab[study.labels == 0] == 0) and set(np.unique(lab[study.labels > 0])) <= set(
        range(1, 11)
    )
    # a re-run resumes: every stage is skipped, the labels and scores are unchanged
    # the BIDS validator finds no error in the derivative, whatever the input's format
    assert bids_validator_errors(out) == []
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    logs2: list[str] = []
    report2 = run_pipeline(cfg, log=logs2.append)
    assert any("[svd] split1 done earlier" in line for line in logs2)
    # the first run reported each pass over the data of the randomized SVD (rank 20,
    # 2 power iterations, no final pass by default: sketch, 2 x power)
    passes = [line for line in logs if line.startswith("[svd] split1 pass ")]
    assert [p.split(" (")[0] for p in passes] == [
        f"[svd] split1 pass {i} of 3" for i in range(1, 4)
    ]
    assert not any(line.startswith("[cluster] split1 directional K=10:") for line in logs2)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert report2["scores"] == report["scores"]
    # both runs' lines, time-stamped, in the output folder's log file
    lines = (out / "lsd-dask.log").read_text().splitlines()
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4} "
    assert all(re.match(stamp, line) for line in lines)
    assert [line.split(" ", 1)[1] for line in lines] == [*logs, *logs2]
    assert logs[0] == logs2[0] == f"[run] run_pipeline (lsd-dask {lsd_dask.__version__})"


def _bad(tmp_path, study, mutate):
    folder = tmp_path / "bad"
    write_study(study, folder, fmt="gifti")
    raw = yaml.safe_load((folder / "pipeline.yaml").read_text())
    mutate(folder, raw)
    (folder / "pipeline.yaml").write_text(yaml.safe_dump(raw))
    return folder


def test_bad_inputs_fail_early_and_leave_nothing(tmp_path, study):
    # a subject in both splits
    f = _bad(tmp_path, study, lambda d, r: r["splits"]["split2"].append(r["splits"]["split1"][0]))
    with pytest.raises(ValueError, match="in both splits"):
        _config(f)
    # a missing file
    f = _bad(tmp_path / "m", study, lambda d, r: os.remove(d / r["subjects"][0]["left"]))
    with pytest.raises(FileNotFoundError, match="missing"):
        run_pipeline(_config(f), log=lambda s: None)

    # files with different vertex counts (a subject on another mesh)
    def other_mesh(d, r):
        other = surface_study(
            two_hemisphere_mesh(5, 7),
            n_parcels=4,
            n_subjects=(1, 1),
            n_timepoints=60,
            random_state=1,
        )
        write_study(other, d / "other")
        r["subjects"][0]["left"] = "other/" + other.subjects[0] + ".L.func.gii"

    f = _bad(tmp_path / "v", study, other_mesh)
    with pytest.raises(ValueError, match="vertices per hemisphere"):
        run_pipeline(_config(f), log=lambda s: None)
    assert not (f / "results" / "work" / "split1.zarr").exists()
    # K larger than the number of vertices
    f = _bad(tmp_path / "k", study, lambda d, r: None)
    with pytest.raises(ValueError, match="larger than the number of vertices"):
        run_pipeline(_config(f, ks=[10**6]), log=lambda s: None)

    # non-finite values
    def nan_subject(d, r):
        img = nib.load(str(d / r["subjects"][1]["left"]))
        img.darrays[3].data[7] = np.nan
        nib.save(img, str(d / r["subjects"][1]["left"]))

    f = _bad(tmp_path / "n", study, nan_subject)
    with pytest.raises(ValueError, match="NaN or inf"):
        run_pipeline(_config(f), log=lambda s: None)
    assert not (f / "results" / "work" / "mask.npy").exists()
    # unwritable output folder
    f = _bad(tmp_path / "w", study, lambda d, r: None)
    blocker = f / "blocked"
    blocker.write_text("a file where the output folder should go")
    with pytest.raises(PermissionError, match="not writable"):
        run_pipeline(
            load_config(f / "pipeline.yaml", output=str(blocker / "out")), log=lambda s: None
        )


def test_cli_run_and_synth(tmp_path):
    runner = CliRunner()
    res = runner.invoke(
        cli.main,
        [
            "synth",
            str(tmp_path / "s"),
            "--frequency",
            "5",
            "--parcels",
            "6",
            "--subjects",
            "2",
            "--timepoints",
            "40",
        ],
    )
    assert res.exit_code == 0, res.output
    assert (tmp_path / "s" / "pipeline.yaml").exists()
    assert len(list((tmp_path / "s").glob("*.func.gii"))) == 8
    res = runner.invoke(
        cli.main,
        [
            "run",
            str(tmp_path / "s" / "pipeline.yaml"),
            "--k",
            "4",
            "--out",
            str(tmp_path / "o"),
            "--rank",
            "30",
        ],
    )
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["config"]["ks"] == [4] and report["config"]["svd"]["rank"] == 30
    assert "Dask dashboard" in res.output
    # the study's own rank: half of a split's 2 x 40 time points, so no rank warning
    written = yaml.safe_load((tmp_path / "s" / "pipeline.yaml").read_text())
    assert written["svd"]["rank"] == 40
    res = runner.invoke(cli.main, ["run", str(tmp_path / "s" / "pipeline.yaml"), "--k", "4",
                                   "--out", str(tmp_path / "o2")])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "warning" not in res.output


def test_lsd_above_the_svd_rank_fails_before_any_stage(tmp_path, study):
    import time

    write_study(study, tmp_path, fmt="gifti")
    cfg = _config(tmp_path, ks=[5, 30], methods=["lsd"])  # rank 20
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=r"svd\.rank \(--rank\) to at least 30"):
        run_pipeline(cfg, log=lambda s: None)
    assert time.perf_counter() - t0 < 60
    assert not (cfg.output / "work").exists()  # nothing ran


def test_a_variants_options_reach_its_fit_and_a_change_refits_it_alone(tmp_path, study):
    """Spatial options are the estimator's (``tests/cluster/test_parcellation.py`` tests
    what each does); the pipeline's part is that a variant's options reach its fit: its
    labels are those of ``MeshParcellation`` with the same options on the run's
    features, side by side with the plain method and mesh-constrained Ward, its sidecar
    names the options, and a changed option refits that variant only, not the SVD."""
    from lsd_dask.cluster import MeshParcellation, SphericalKMeans
    from lsd_dask.similarity import unit_rows

    write_study(study, tmp_path, fmt="gifti")
    variant = {
        "name": "skm_spatial", "method": "spherical_kmeans", "feature_smoothing_mm": 12.0,
        "spatial_weight": 0.5, "oversegment": 2, "contiguous": True,
    }  # fmt: skip
    cfg = _config(tmp_path, ks=[8], methods=["spherical_kmeans", variant, "ward"])
    report = run_pipeline(cfg, log=lambda line: None)
    assert {r["method"] for r in report["scores"]} == {"spherical_kmeans", "skm_spatial", "ward"}
    assert report["config"]["methods"][1] == {
        **SPATIAL_OPTIONS,
        **variant,
        "features": "us",
        "fine_fit": "per_k",
    }  # (spherical k-means has no Potts refinement: a fine fit per K)
    work = cfg.output / "work"
    kept = np.load(work / "mask.npy")
    A = _adjacency(study, kept)
    V = np.concatenate([m.vertices for m in study.meshes.values()])[kept]
    F = unit_rows(np.load(work / "split1_U.npy") * np.load(work / "split1_s.npy"))
    options = {k: v for k, v in variant.items() if k in SPATIAL_OPTIONS}
    ref = MeshParcellation(
        SphericalKMeans(random_state=0), 8, connectivity=A, vertices=V,
        min_region_size=cfg.min_region_size, random_state=0, **options,
    ).fit(F)  # fmt: skip
    got = np.load(work / "labels" / "split1_skm_spatial_K8.npy")[kept]
    assert metrics.ari(ref.labels_, got) == pytest.approx(1.0)
    plain = np.load(work / "labels" / "split1_spherical_kmeans_K8.npy")[kept]
    assert metrics.ari(plain, got) < 0.99  # the options took effect
    sidecar = next(find_atlas_folder(cfg.output).glob("*atlas-skmspatial8split1_*.json"))
    meta = json.loads(sidecar.read_text())
    assert meta["Oversegment"] == 2.0 and meta["FeatureSmoothingFWHM"] == 12.0
    # one option changed: that variant alone is refitted
    logs: list[str] = []
    changed = {**variant, "spatial_weight": 1.0}
    run_pipeline(_config(tmp_path, ks=[8], methods=["spherical_kmeans", changed, "ward"]),
                 log=logs.append)  # fmt: skip
    assert any("[svd] split1 done earlier" in line for line in logs), logs
    assert any("spherical_kmeans K=8 done earlier" in line for line in logs), logs
    assert any("ward K=8 done earlier" in line for line in logs), logs
    assert any(
        "skm_spatial/K8: recomputing (changed: params.spatial_weight 0.5 -> 1.0" in line
        for line in logs
    ), logs


def test_auto_feature_smoothing_is_chosen_per_split_from_its_halves(tmp_path, study):
    """feature_smoothing_mm: auto: each split's two halves of time points choose a blur
    from the grid, each half's SVD started from the split's U with one power iteration
    (``svd.blur_halves_start: split``), or from its own sketch (``sketch``, which redoes
    the choice and nothing before it); the variant's labels are those of the same variant
    with that blur given as a number, and the choice is in report.json and the
    sidecars."""
    from lsd_dask.selection import GRID_MM

    write_study(study, tmp_path, fmt="gifti")
    auto = {"name": "skm_auto", "method": "spherical_kmeans", "feature_smoothing_mm": "auto"}
    cfg = _config(tmp_path, ks=[8, 6], methods=[auto])
    logs: list[str] = []
    report = run_pipeline(cfg, log=logs.append)
    work = cfg.output / "work"
    kept = np.load(work / "mask.npy")
    A = _adjacency(study, kept)
    for split in ("split1", "split2"):
        got = report["feature_blur"][split]
        assert got["fwhm_mm"] in GRID_MM and got["k"] == 6  # the run's smallest K
        # the same choice from each half's SVD, computed here from the stored data
        U_split = np.load(work / f"{split}_U.npy")
        ref = _blur_choice_from_halves(work, split, study, kept, A, U_split)
        assert ref.fwhm_mm == got["fwhm_mm"]
        # the blurs not tried (past the stop) are None there and NaN here
        np.testing.assert_allclose(ref.mean, np.array(got["mean_error"], float), atol=2e-3)
        sidecar = next(find_atlas_folder(cfg.output).glob(f"*atlas-skmauto8{split}_*.json"))
        meta = json.loads(sidecar.read_text())
        assert meta["FeatureSmoothingFWHM"] == got["fwhm_mm"]
        assert meta["FeatureSmoothingChosenByData"] is True
    page = (cfg.output / "report.html").read_text()
    assert "Feature blur chosen by the data" in page and "split2" in page
    # a variant given split1's chosen blur as a number gives split1's labels
    fixed = {
        **auto,
        "name": "skm_fixed",
        "feature_smoothing_mm": report["feature_blur"]["split1"]["fwhm_mm"],
    }
    logs.clear()
    run_pipeline(_config(tmp_path, ks=[8, 6], methods=[auto, fixed]), log=logs.append)
    assert any("[blur] split1 done earlier, skipped" in line for line in logs), logs
    assert any("skm_auto K=8 done earlier" in line for line in logs), logs
    np.testing.assert_array_equal(
        np.load(work / "labels" / "split1_skm_auto_K8.npy"),
        np.load(work / "labels" / "split1_skm_fixed_K8.npy"),
    )
    # the halves from their own sketches: the choice again, the split's SVD reused
    logs.clear()
    svd = {"method": "randomized", "rank": 20, "blur_halves_start": "sketch"}
    cfg3 = _config(tmp_path, ks=[8, 6], methods=[auto], svd=svd)
    report = run_pipeline(cfg3, log=logs.append)
    assert any("[svd] split1 done earlier" in line for line in logs), logs
    changed = next(ln for ln in logs if "blur/split1: recomputing" in ln)
    assert 'svd.blur_halves_start "split" -> "sketch"' in changed, changed
    ref = _blur_choice_from_halves(work, "split1", study, kept, A, None)
    got = report["feature_blur"]["split1"]
    assert ref.fwhm_mm == got["fwhm_mm"]
    np.testing.assert_allclose(ref.mean, np.array(got["mean_error"], float), atol=2e-3)


def _blur_choice_from_halves(work, split, study, kept, A, start):
    """The blur choice from each half's SVD computed here from the stored data: from
    ``start`` (the split's U) with one power iteration, or from its own sketch (None)."""
    from lsd_dask.io import open_split
    from lsd_dask.selection import choose_feature_blur, half_columns
    from lsd_dask.similarity import unit_rows

    st = open_split(work / f"{split}.zarr")
    X = st.data.compute()
    feats = []
    for cols in half_columns(st.timepoints):
        rank = min(20, cols.size)
        U, s, _ = randomized_svd(
            X[:, cols], rank, random_state=0, final_pass=False,
            n_power_iter=2 if start is None else 1,
            start=None if start is None else start[:, :rank],
        )  # fmt: skip
        feats.append(unit_rows(U * s))
    V = np.concatenate([m.vertices for m in study.meshes.values()])[kept]
    return choose_feature_blur(*feats, V, A, 6, random_state=0)


def test_features_u_clusters_the_rows_of_u(tmp_path, study):
    from lsd_dask.cluster import SphericalKMeans
    from lsd_dask.similarity import unit_rows

    write_study(study, tmp_path, fmt="gifti")
    logs: list[str] = []
    run_pipeline(_config(tmp_path, ks=[10], methods=["spherical_kmeans"]), log=logs.append)
    cfg = _config(tmp_path, ks=[10], methods=["spherical_kmeans"], features="u")
    logs.clear()
    run_pipeline(cfg, log=logs.append)
    assert any("[svd] split1 done earlier" in line for line in logs)
    assert any("recomputing (changed: features" in line for line in logs), logs
    work = cfg.output / "work"
    kept = np.load(work / "mask.npy")
    ref = SphericalKMeans(10, random_state=0).fit(unit_rows(np.load(work / "split1_U.npy")))
    got = np.load(work / "labels" / "split1_spherical_kmeans_K10.npy")[kept] - 1
    np.testing.assert_array_equal(got, ref.labels_)


def test_the_same_results_whatever_runs_them(tmp_path, write_tiny_study):
    """One study run by the CLI on its default cluster (worker processes), on a cluster of
    threads (``processes: false``) and through the Python API without a cluster:
    ``benchmarks/compare_runs.py`` finds every label file byte for byte and every score
    the same."""
    import subprocess
    import sys
    from pathlib import Path

    write_tiny_study(tmp_path / "study", random_state=5)
    pipeline = tmp_path / "study" / "pipeline.yaml"
    settings = ["--k", "3", "--k", "5", "--spins", "20", "--rank", "12"]
    runner = CliRunner()
    res = runner.invoke(cli.main, ["run", str(pipeline), "--out", str(tmp_path / "procs"),
                                   *settings])  # fmt: skip
    assert res.exit_code == 0, res.output
    threads = tmp_path / "threads.yaml"
    threads.write_text("type: local\nlocal:\n  processes: false\n")
    res = runner.invoke(cli.main, ["run", str(pipeline), "--out", str(tmp_path / "threads"),
                                   "--cluster", str(threads), *settings])  # fmt: skip
    assert res.exit_code == 0, res.output
    cfg = load_config(pipeline, output=str(tmp_path / "api"), ks=[3, 5], spins=20,
                      svd={"rank": 12})  # fmt: skip
    run_pipeline(cfg, log=lambda line: None)
    script = Path(__file__).parents[2] / "benchmarks" / "compare_runs.py"
    for other in ("threads", "api"):
        out = subprocess.run([sys.executable, str(script), str(tmp_path / "procs"),
                              str(tmp_path / other)], capture_output=True, text=True)  # fmt: skip
        assert out.returncode == 0, out.stdout
        assert re.match(r"\d+ label files and \d+ scores compared; 0 differ", out.stdout)
