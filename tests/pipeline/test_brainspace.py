"""The pipeline on real resting-state data: brainspace's fsaverage5 sample run, its two
halves as the two splits (pipelines/brainspace_sample.yaml)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

from lsd_dask.cluster import SPATIAL_OPTIONS, MeshParcellation
from lsd_dask.io.bids import find_atlas_folder
from lsd_dask.pipeline import load_config, run_pipeline
from lsd_dask.testing.bids_validator import bids_validator_errors

PIPELINE = Path(__file__).resolve().parents[2] / "pipelines" / "brainspace_sample.yaml"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    if importlib.util.find_spec("brainspace") is None:
        if os.environ.get("CI"):
            pytest.fail("brainspace (a test dependency) is not installed in CI.")
        pytest.skip("brainspace is not installed (pip install brainspace).")
    out = tmp_path_factory.mktemp("brainspace")
    cfg = load_config(PIPELINE, output=str(out))
    return run_pipeline(cfg, log=lambda s: None), out


def test_completes_and_masks_medial_wall(report):
    rep, out = report
    assert (out / "report.json").exists() and (out / "dice_vs_k.png").exists()
    mask = rep["mask"]
    assert mask["n_vertices"] == 2 * 10242  # fsaverage5
    # the medial wall is constant in this run: 888 vertices per hemisphere
    assert 1500 <= mask["n_masked"] <= 2200
    kept = np.load(out / "work" / "mask.npy")
    assert (~kept[:10242]).sum() > 0 and (~kept[10242:]).sum() > 0


def test_outputs_are_a_valid_fsaverage5_atlas_derivative(report):
    """On a standard mesh the label files name their template (tpl-fsaverage, den-10k),
    and the official BIDS validator finds no error."""
    _, out = report
    assert find_atlas_folder(out) == out / "tpl-fsaverage" / "anat"
    names = [p.name for p in find_atlas_folder(out).glob("*_dseg.label.gii")]
    assert names and all(n.startswith("tpl-fsaverage_hemi-") and "_den-10k_" in n for n in names)
    assert bids_validator_errors(out) == []


@pytest.mark.parametrize("k", [50, 100])
def test_dice_above_null(report, k):
    rep, _ = report
    row = next(r for r in rep["scores"] if r["k"] == k)
    # above the null of the same region sizes placed at random, by 3 null sds at least
    assert row["dice"] > row["null_dice_mean"] + 3 * row["null_dice_sd"]


def test_the_spatial_comparison_pipeline_is_ready_to_run(tmp_path):
    """pipelines/brainspace_spatial.yaml: ward and directional without and with its spatial
    options (smoothing, Potts term, Ward merge, the blur the data choose), at K = 50, 100
    and 200 (its run is recorded in docs/benchmarks.md)."""
    if importlib.util.find_spec("brainspace") is None:
        pytest.skip("brainspace is not installed (pip install brainspace).")
    from lsd_dask.pipeline import preflight

    path = PIPELINE.with_name("brainspace_spatial.yaml")
    cfg = load_config(path, output=str(tmp_path))
    raw = yaml.safe_load(path.read_text())
    # every variant as the file gives it, each option it sets on the estimator the run
    # fits (``auto`` resolved to a split's chosen blur), the others at their defaults
    defaults = MeshParcellation(None).get_params(deep=False)
    assert [m.name for m in cfg.methods] == [
        e if isinstance(e, str) else e["name"] for e in raw["methods"]
    ]
    for spec, entry in zip(cfg.methods, raw["methods"], strict=True):
        given = {} if isinstance(entry, str) else entry
        assert spec.method == given.get("method", spec.name)
        est = spec.estimator(50, 0, blur_mm=20.0).get_params(deep=False)
        for option in SPATIAL_OPTIONS:
            want = given.get(option, defaults[option])
            assert est[option] == (20.0 if want == "auto" else want), (spec.name, option)
    assert cfg.ks == [50, 100, 200] and cfg.svd.rank >= 200
    meshes, sizes = preflight(cfg)
    assert sizes == [10242, 10242]


def test_the_real_runs_blur_from_the_splits_u_is_the_exact_halves_choice():
    """brainspace's real run, its first 326 time points as the split: the blur chosen from
    its halves' SVDs started from the split's U (the pipeline's default) is the one their
    exact SVDs choose, 20 mm, with every blur's held-out error within 1e-3 of theirs. The
    halves (163 time points of rank about 55, at rank 100) leave the row basis
    rank-deficient where the split's U reaches past them: the SVD must not divide by its
    rounding (it chose 10 mm, errors 0.94–0.98, when it did)."""
    if importlib.util.find_spec("brainspace") is None:
        if os.environ.get("CI"):
            pytest.fail("brainspace (a test dependency) is not installed in CI.")
        pytest.skip("brainspace is not installed (pip install brainspace).")
    import nibabel as nib

    from lsd_dask.datasets.templates import brainspace_data, load_template
    from lsd_dask.pipeline.settings.svd import SvdSettings
    from lsd_dask.pipeline.stages.svd import group_svd, half_svd, svd_features
    from lsd_dask.selection import choose_feature_blur, half_columns
    from lsd_dask.surface import combine_meshes

    run = "preprocessing/sub-010188_ses-02_task-rest_acq-AP_run-01.fsa5.{}.mgz"
    hemis = [nib.load(brainspace_data(run.format(h))).dataobj for h in ("lh", "rh")]
    x = np.concatenate([np.asarray(d).squeeze() for d in hemis])[:, :326].astype(np.float64)
    keep = x.std(axis=1) > 0
    x = x[keep]
    x = ((x - x.mean(axis=1, keepdims=True)) / x.std(axis=1, keepdims=True)).astype(np.float32)
    mesh, _ = combine_meshes(load_template("fsaverage5").meshes)
    V, A = mesh.vertices[keep], mesh.adjacency()[keep][:, keep].tocsr()
    settings = SvdSettings(rank=100)
    U_split, _ = group_svd(x, settings, 0)
    from_split, exact = [], []
    for cols in half_columns([326]):
        half = np.ascontiguousarray(x[:, cols])
        U, s = half_svd(half, settings, 0, start=np.asarray(U_split))
        from_split.append(svd_features(np.asarray(U), s))
        Ue, se = np.linalg.svd(half.astype(np.float64), full_matrices=False)[:2]
        exact.append(svd_features(Ue[:, :100].astype(np.float32), se[:100]))
    # two seeds per blur and direction (the pipeline's three cost half as much again)
    got = choose_feature_blur(*from_split, V, A, 50, n_seeds=2, random_state=0)
    ref = choose_feature_blur(*exact, V, A, 50, n_seeds=2, random_state=0)
    assert got.fwhm_mm == ref.fwhm_mm == 20.0
    np.testing.assert_allclose(got.mean, ref.mean, atol=1e-3)
