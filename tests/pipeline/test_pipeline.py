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
    stem = "atlas-directional_scale-10_den-*_desc-split1_dseg"
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


@pytest.mark.parametrize("dask_features", [False, True])
def test_feature_smoothing_recomputes_clusters_only_and_follows_the_parcels(
    tmp_path, dask_features, monkeypatch
):
    """Blurring the features along the mesh (FWHM in mm) brings the noisy split closer to
    the planted parcels; changing it recomputes the cluster stage, not the SVD."""

    if dask_features:
        import lsd_dask.pipeline.engine.placement as placement

        monkeypatch.setattr(placement, "IN_MEMORY_FEATURES_BYTES", 0)
    # parcels of ~400 vertices on a finer mesh, buried in noise: a blur of 15 mm (a few
    # mesh edges) averages the noise within parcels more than it mixes their borders
    noisy = surface_study(
        two_hemisphere_mesh(14, 15, radius=50.0),
        n_parcels=10,
        n_subjects=(2, 2),
        n_timepoints=60,
        medial_wall_fraction=0.1,
        noise_std=5.0,
        random_state=0,
    )
    write_study(noisy, tmp_path, fmt="gifti")
    truth = np.load(tmp_path / "truth.npy")
    nmi = {}
    for mm in (0.0, 15.0):
        cfg = _config(tmp_path, ks=[10], methods=["spherical_kmeans"], feature_smoothing_mm=mm)
        logs: list[str] = []
        report = run_pipeline(cfg, log=logs.append)
        assert report["config"]["feature_smoothing_mm"] == mm
        labels = np.load(cfg.output / "work" / "labels" / "split1_spherical_kmeans_K10.npy")
        keep = truth > 0
        nmi[mm] = metrics.nmi(truth[keep], labels[keep])
        if mm:
            assert any("[svd] split1 done earlier" in line for line in logs)
            assert any("params.feature_smoothing_mm 0.0 -> 15.0" in line for line in logs)
            assert any("features blurred by 15 mm" in line for line in logs)
    assert nmi[15.0] > nmi[0.0] + 0.1


def test_mesh_constrained_ward_method_gives_connected_parcels(tmp_path, study):
    from scipy.sparse.csgraph import connected_components

    write_study(study, tmp_path, fmt="gifti")
    cfg = _config(tmp_path, ks=[10], methods=["ward", "spherical_kmeans"])
    report = run_pipeline(cfg, log=lambda s: None)
    rows = {r["method"]: r for r in report["scores"]}
    assert rows["ward"]["dice"] > rows["ward"]["null_dice_mean"]
    A = _adjacency(study)
    for split in ("split1", "split2"):
        lab = np.load(cfg.output / "work" / "labels" / f"{split}_ward_K10.npy")
        assert sorted(set(np.unique(lab)) - {0}) == list(range(1, 11))
        for c in range(1, 11):
            sub = A[lab == c][:, lab == c]
            assert connected_components(sub, directed=False)[0] == 1


def test_contiguous_option_writes_connected_parcels_and_says_how_many(tmp_path, study):
    from scipy.sparse.csgraph import connected_components

    write_study(study, tmp_path, fmt="gifti")
    plain = run_pipeline(_config(tmp_path, ks=[10], methods=["directional"]), log=lambda s: None)
    assert plain["scores"][0]["n_parcels"] == [10, 10]
    logs: list[str] = []
    cfg = _config(tmp_path, ks=[10], methods=["directional"], contiguous=True)
    report = run_pipeline(cfg, log=logs.append)
    assert any("params.contiguous false -> true" in line for line in logs), logs
    A = _adjacency(study)
    row = report["scores"][0]
    for i, split in enumerate(("split1", "split2")):
        lab = np.load(cfg.output / "work" / "labels" / f"{split}_directional_K10.npy")
        assert row["n_parcels"][i] == lab.max() == len(np.unique(lab[lab > 0]))
        for p in range(1, lab.max() + 1):
            sub = A[lab == p][:, lab == p]
            assert connected_components(sub, directed=False)[0] == 1
            assert (lab == p).sum() >= cfg.min_region_size


@pytest.mark.parametrize("method", ["spherical_kmeans", "directional"])
def test_spatial_weight_reaches_the_potts_methods(tmp_path, study, method):
    import scipy.sparse as sp

    write_study(study, tmp_path, fmt="gifti")
    A = _adjacency(study)
    E = sp.triu(sp.coo_matrix(A), k=1)
    cuts = {}
    for w in (0.0, 0.5):
        cfg = _config(tmp_path, ks=[10], methods=[method], spatial_weight=w)
        logs: list[str] = []
        report = run_pipeline(cfg, log=logs.append)
        if w:  # the estimator's parameters changed: the clusters are recomputed, not the SVD
            assert any("changed: params.connectivity" in line for line in logs), logs
            assert any("[svd] split1 done earlier" in line for line in logs)
        assert report["config"]["spatial_weight"] == w
        lab = np.load(cfg.output / "work" / "labels" / f"split1_{method}_K10.npy")
        both = (lab[E.row] > 0) & (lab[E.col] > 0)
        cuts[w] = int(np.count_nonzero((lab[E.row] != lab[E.col]) & both))
    assert cuts[0.5] < cuts[0.0]


def test_method_variants_run_side_by_side(tmp_path, study):
    from lsd_dask.cluster import DirectionalClustering
    from lsd_dask.similarity import unit_rows
    from lsd_dask.surface import smooth_on_mesh, smoothing_steps

    write_study(study, tmp_path, fmt="gifti")
    spatial = {
        "name": "dir_spatial",
        "method": "directional",
        "feature_smoothing_mm": 12.0,
        "spatial_weight": 0.5,
    }
    cfg = _config(tmp_path, ks=[10], methods=["directional", spatial, "ward"])
    logs: list[str] = []
    report = run_pipeline(cfg, log=logs.append)
    assert {r["method"] for r in report["scores"]} == {"directional", "dir_spatial", "ward"}
    from lsd_dask.cluster import SPATIAL_OPTIONS

    # every spatial option, at its default unless the variant sets it
    assert report["config"]["methods"][1] == {**SPATIAL_OPTIONS, **spatial, "features": "us"}
    # the variant is directional clustering with its Potts term on the blurred features
    work = cfg.output / "work"
    kept = np.load(work / "mask.npy")
    m = study.meshes
    A = _adjacency(study, kept)
    V = np.concatenate([m["left"].vertices, m["right"].vertices])[kept]
    # the default features: unit rows of U·Σ
    F = unit_rows(np.load(work / "split1_U.npy") * np.load(work / "split1_s.npy"))
    F = unit_rows(smooth_on_mesh(F, A, n_iter=smoothing_steps(V, A, 12.0)))
    ref = DirectionalClustering(10, spatial_weight=0.5, connectivity=A, random_state=0).fit(F)
    got = np.load(work / "labels" / "split1_dir_spatial_K10.npy")[kept] - 1
    assert metrics.ari(ref.labels_, got) > 0.99
    plain = np.load(work / "labels" / "split1_directional_K10.npy")[kept] - 1
    assert metrics.ari(plain, got) < 0.99  # the variant's settings took effect
    pattern = "*_hemi-L_atlas-dirspatial_scale-10_*split1*.gii"
    assert len(list(find_atlas_folder(cfg.output).glob(pattern))) == 1


def test_oversegment_merges_a_finer_fit_with_ward_on_the_mesh(tmp_path, study):
    from lsd_dask.cluster import SphericalKMeans, WardMerge
    from lsd_dask.similarity import unit_rows

    write_study(study, tmp_path, fmt="gifti")
    merged = {"name": "skm_merged", "method": "spherical_kmeans", "oversegment": 3}
    cfg = _config(tmp_path, ks=[8], methods=["spherical_kmeans", merged])
    logs: list[str] = []
    report = run_pipeline(cfg, log=logs.append)
    assert report["config"]["methods"][1]["oversegment"] == 3.0
    work = cfg.output / "work"
    kept = np.load(work / "mask.npy")
    A = _adjacency(study, kept)
    F = unit_rows(np.load(work / "split1_U.npy") * np.load(work / "split1_s.npy"))
    ref = WardMerge(SphericalKMeans(), 8, oversegment=3, connectivity=A, random_state=0).fit(F)
    assert ref.estimator_.n_clusters == 24
    got = np.load(work / "labels" / "split1_skm_merged_K8.npy")[kept] - 1
    assert np.unique(got).size == 8
    assert metrics.ari(ref.labels_, got) > 0.99
    plain = np.load(work / "labels" / "split1_spherical_kmeans_K8.npy")[kept] - 1
    assert metrics.ari(plain, got) < 0.99  # not the plain fit at K = 8
    sidecar = next(find_atlas_folder(cfg.output).glob("*atlas-skmmerged_scale-8_*split1*.json"))
    assert json.loads(sidecar.read_text())["Oversegment"] == 3.0
    # a changed oversegment refits only that variant
    cfg2 = _config(tmp_path, ks=[8], methods=["spherical_kmeans", {**merged, "oversegment": 2}])
    logs.clear()
    run_pipeline(cfg2, log=logs.append)
    assert any("spherical_kmeans K=8 done earlier" in line for line in logs), logs
    assert any("skm_merged/K8: recomputing (changed: params.oversegment" in ln for ln in logs)


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
        sidecar = next(find_atlas_folder(cfg.output).glob(f"*atlas-skmauto_scale-8_*{split}*.json"))
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
