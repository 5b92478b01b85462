"""An fMRIPrep derivatives tree as input: ``lsd-dask run --bids`` with no pipeline file,
participant filters and a denoising strategy of nilearn's ``load_confounds``, against the
equivalent explicit pipeline file."""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from lsd_dask import cli
from lsd_dask.datasets.studies import write_study
from lsd_dask.distributed import connect
from lsd_dask.io.zarr_store import open_split
from lsd_dask.pipeline import load_config, preflight
from lsd_dask.pipeline.engine.context import RunContext
from lsd_dask.pipeline.engine.contract import run_stage
from lsd_dask.pipeline.stages import STAGES


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """6 subjects as fMRIPrep writes them: fsLR 91k CIFTI and confounds TSVs whose first
    row is n/a, each with two high-motion volumes."""
    if importlib.util.find_spec("brainspace") is None:
        if os.environ.get("CI"):
            pytest.fail("brainspace (a test dependency) is not installed in CI.")
        pytest.skip("brainspace is not installed (pip install brainspace).")
    from lsd_dask.datasets import realistic_study

    root = tmp_path_factory.mktemp("fmriprep")
    study = realistic_study(scale=100, n_subjects=(3, 3), n_timepoints=40, random_state=0)
    write_study(study, root, fmt="fmriprep")
    return root


@pytest.mark.slow
def test_one_command_equals_the_explicit_pipeline_file(tree, tmp_path):
    from nilearn.interfaces.fmriprep import load_confounds_strategy

    out = tmp_path / "cli"
    args = ["run", "--bids", str(tree), "--participant-label", "001,002"]
    args += ["--participant-label", "sub-004 005", "--denoise", "scrubbing"]
    args += ["--k", "5", "--method", "directional", "--rank", "10", "--out", str(out)]
    args += ["--spins", "0"]  # the held-out measures without their spin nulls
    res = CliRunner().invoke(cli.main, args)
    assert res.exit_code == 0, res.output
    report = json.loads((out / "report.json").read_text())
    assert report["config"]["spins"] == 0
    # ids from the sub- entity, the filtered participants only, sorted halves
    assert report["config"]["splits"] == {
        "split1": ["sub-001", "sub-002"],
        "split2": ["sub-004", "sub-005"],
    }
    # no mesh given: the standard 32k_fs_LR mesh, named in the report
    assert report["config"]["mesh_source"].startswith("conte69")
    assert "Surface: conte69: 32k_fs_LR midthickness" in (out / "report.html").read_text()
    # scrubbing left the two high-motion volumes out, as nilearn's own call says
    cifti = next((tree / "sub-001" / "func").glob("*_bold.dtseries.nii"))
    _, mask = load_confounds_strategy(str(cifti), denoise_strategy="scrubbing")
    assert mask is not None and len(mask) == 38
    store = open_split(out / "work" / "split1.zarr")
    assert list(store.timepoints) == [38, 38]
    # the same run from an explicit pipeline file, through the stages that make the labels
    subjects = [
        {"id": f"sub-{s}", "cifti": str(next((tree / f"sub-{s}" / "func").glob("*.dtseries.nii")))}
        for s in ("001", "002", "004", "005")
    ]
    explicit = {
        "subjects": subjects,
        "splits": report["config"]["splits"],
        "mesh": "conte69",
        "methods": ["directional"],
        "ks": [5],
        "svd": {"rank": 10},
        "preprocess": {"denoise": "scrubbing"},
        "output": str(tmp_path / "file"),
    }
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(explicit))
    cfg = load_config(tmp_path / "pipeline.yaml")
    # on workers of one thread each, as the command's own local cluster: the SVD run in
    # this process's threads instead differs in its last bits, and at rank 10 of 76
    # columns two near-equal singular values then turn U enough to move a few labels
    with (
        connect({"type": "local", "local": {"n_workers": 2, "threads_per_worker": 1}}, log=None),
        RunContext.open(cfg, lambda s: None, preflight(cfg)[0]) as ctx,
    ):
        for stage in STAGES[: [s.name for s in STAGES].index("cluster") + 1]:
            run_stage(stage, ctx)
    for split in ("split1", "split2"):
        # the same denoised data: the BIDS discovery finds the same files and confounds
        a, b = (open_split(f / "work" / f"{split}.zarr") for f in (out, tmp_path / "file"))
        np.testing.assert_array_equal(np.asarray(a.data), np.asarray(b.data))
        name = f"{split}_directional_K5.npy"
        a = np.load(out / "work" / "labels" / name)
        b = np.load(tmp_path / "file" / "work" / "labels" / name)
        np.testing.assert_array_equal(a, b)


def test_bad_bids_input_fails_in_one_line(tree, tmp_path):
    runner = CliRunner()
    res = runner.invoke(cli.main, ["run", "--bids", str(tree), "--participant-label", "099"])
    assert res.exit_code != 0 and "participant label(s) ['099']" in res.output
    res = runner.invoke(cli.main, ["run", "--bids", str(tree), "--space", "MNI152NLin6Asym"])
    assert res.exit_code != 0 and "spaces are ['fsLR']" in res.output
    res = runner.invoke(cli.main, ["run", "--bids", str(tree), "--denoise", "motion,scrubbing"])
    assert res.exit_code != 0 and "unknown ['scrubbing']" in res.output
    res = runner.invoke(cli.main, ["run"])
    assert res.exit_code != 0 and "--bids" in res.output
    res = runner.invoke(cli.main, ["run", "--participant-label", "01", str(tmp_path / "x.yaml")])
    assert res.exit_code != 0
