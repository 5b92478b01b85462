"""The pipeline on real resting-state data: brainspace's fsaverage5 sample run, its two
halves as the two splits (pipelines/brainspace_sample.yaml)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

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

    cfg = load_config(PIPELINE.with_name("brainspace_spatial.yaml"), output=str(tmp_path))
    names = [
        (
            m.name,
            m.method,
            *(m.options[o] for o in ("feature_smoothing_mm", "spatial_weight", "oversegment")),
        )
        for m in cfg.methods
    ]
    assert names == [
        ("ward", "ward", 0.0, 0.0, 1.0),
        ("directional", "directional", 0.0, 0.0, 1.0),
        ("directional_spatial", "directional", 20.0, 2.0, 1.0),
        ("directional_merged", "directional", 0.0, 2.0, 2.0),
        ("directional_merged_auto", "directional", "auto", 2.0, 2.0),
    ]
    assert cfg.ks == [50, 100, 200] and cfg.svd.rank >= 200
    meshes, sizes = preflight(cfg)
    assert sizes == [10242, 10242]
