"""An fMRIPrep derivatives tree as input: ``lsd-dask run --bids`` with no pipeline file,
participant filters and a denoising strategy of nilearn's ``load_confounds``, against the
equivalent explicit pipeline file."""

from __future__ import annotations

import importlib.util
import json
import os
import re

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner
from nilearn.interfaces.fmriprep import load_confounds_strategy

from lsd_dask import cli
from lsd_dask.datasets.studies import write_study
from lsd_dask.distributed import connect
from lsd_dask.io.bids import find_atlas_folder
from lsd_dask.io.zarr_store import open_split
from lsd_dask.pipeline import load_config, preflight
from lsd_dask.pipeline.engine.context import RunContext
from lsd_dask.pipeline.engine.contract import run_stage
from lsd_dask.pipeline.stages import STAGES
from lsd_dask.testing.bids_validator import bids_validator_errors


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """6 subjects as fMRIPrep writes them: fsLR 91k CIFTI and confounds TSVs whose first
    row is n/a, each with two high-motion volumes."""
    if importlib.util.find_spec("brainspace") is None:
        if os.environ.get("CI"):
            pytest.fail("brainspace (a test dependency) is not installed in CI.")
        pytest.skip("brainspace is not installed (pip install brainspace).")
    import nibabel as nib

    from lsd_dask.datasets import realistic_study

    root = tmp_path_factory.mktemp("fmriprep")
    study = realistic_study(scale=100, n_subjects=(3, 3), n_timepoints=40, random_state=0)
    write_study(study, root, fmt="fmriprep")
    # signal on the first 3,000 grayordinates only, the rest constant (a run masks them;
    # a constant of each subject's own, so that no two files look alike): the held-out
    # measures' vertex pairs then number thousands, not conte69's 58.6 million
    for i, path in enumerate(sorted(root.glob("sub-*/func/*_bold.dtseries.nii")), 1):
        img = nib.load(str(path))
        data = np.asarray(img.dataobj).copy()
        data[:, 3000:] = float(i)
        nib.save(nib.Cifti2Image(data, header=img.header, nifti_header=img.nifti_header), str(path))
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
    # an empty shell variable is no label, not every participant
    res = runner.invoke(cli.main, ["run", "--bids", str(tree), "--participant-label", ""])
    assert res.exit_code != 0 and "--participant-label was given no label" in res.output
    res = runner.invoke(cli.main, ["run", "--bids", str(tree), "--space", "MNI152NLin6Asym"])
    assert res.exit_code != 0 and "spaces are ['fsLR']" in res.output
    res = runner.invoke(cli.main, ["run", "--bids", str(tree), "--denoise", "motion,scrubbing"])
    assert res.exit_code != 0 and "unknown ['scrubbing']" in res.output
    res = runner.invoke(cli.main, ["run"])
    assert res.exit_code != 0 and "--bids" in res.output
    res = runner.invoke(cli.main, ["run", "--participant-label", "01", str(tmp_path / "x.yaml")])
    assert res.exit_code != 0


@pytest.fixture(scope="module")
def messy_tree(tmp_path_factory):
    """An fMRIPrep tree as real studies have them, on fsaverage5 with data on the medial
    wall (fMRIPrep's default): sub-02 has a task run beside rest, sub-03 a dir-AP and dir-PA
    pair, sub-04 two sessions, and sub-05 moved in every volume (framewise displacement
    0.9 mm) and has NaN on its medial wall (``--medial-surface-nan``)."""
    import nibabel as nib
    import pandas as pd

    from lsd_dask.datasets import surface_study
    from lsd_dask.datasets.templates import load_template, medial_wall

    root = tmp_path_factory.mktemp("messy")
    study = surface_study(
        load_template("fsaverage5").meshes,
        n_parcels=6,
        n_subjects=(4, 4),
        n_timepoints=40,
        noise_std=0.7,
        random_state=5,
    )
    write_study(study, root / "src", fmt="fmriprep")
    runs = {  # the written subject -> its place in the messy tree
        "001": "sub-01/func/sub-01_task-rest",
        "002": "sub-02/func/sub-02_task-rest",
        "003": "sub-02/func/sub-02_task-nback",
        "004": "sub-03/func/sub-03_task-rest_dir-AP",
        "005": "sub-03/func/sub-03_task-rest_dir-PA",
        "006": "sub-04/ses-1/func/sub-04_ses-1_task-rest",
        "007": "sub-04/ses-2/func/sub-04_ses-2_task-rest",
        "008": "sub-05/func/sub-05_task-rest",
    }
    for label, stem in runs.items():
        (root / stem).parent.mkdir(parents=True, exist_ok=True)
        for f in (root / "src" / f"sub-{label}" / "func").iterdir():
            f.rename(root / (stem + f.name.removeprefix(f"sub-{label}_task-rest")))
    wall = medial_wall("fsaverage5")
    for hemi, part in (("L", wall[:10242]), ("R", wall[10242:])):
        path = root / f"sub-05/func/sub-05_task-rest_hemi-{hemi}_space-fsaverage5_bold.func.gii"
        img = nib.load(str(path))
        for array in img.darrays:
            array.data[part] = np.nan
        nib.save(img, str(path))
    fmriprep = {
        "Name": "fMRIPrep - fMRI PREProcessing workflow",
        "BIDSVersion": "1.4.0",
        "DatasetType": "derivative",
        "GeneratedBy": [{"Name": "fMRIPrep", "Version": "23.2.1"}],
    }
    (root / "dataset_description.json").write_text(json.dumps(fmriprep))
    confounds = root / "sub-05/func/sub-05_task-rest_desc-confounds_timeseries.tsv"
    table = pd.read_csv(confounds, sep="\t")
    table["framewise_displacement"] = np.r_[np.nan, np.full(len(table) - 1, 0.9)]
    table.to_csv(confounds, sep="\t", index=False, na_rep="n/a")
    return root


def test_the_readme_command_on_a_messy_fmriprep_tree(messy_tree, tmp_path, scheduler_address):
    """The README's command as BIDS Apps users type it (labels separated by spaces): the
    task is asked for, dir-AP and dir-PA runs are subjects of their own in one split, the
    halves balanced by time points, the medial wall masked, and a participant scrubbing
    would empty fails in one line naming it."""
    root = messy_tree
    base = ["run", "--bids", str(root), "--space", "fsaverage5", "--spins", "0"]
    base += ["--k", "4", "--method", "directional", "--rank", "10", "--denoise", "scrubbing"]
    base += ["--scheduler", scheduler_address]
    runner = CliRunner()
    res = runner.invoke(cli.main, [*base, "--participant-label", "01", "02", "03", "04"])
    assert res.exit_code != 0
    errors = [ln for ln in res.output.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and "2 tasks (nback, rest)" in errors[0], res.output
    assert "--task" in errors[0]
    out = tmp_path / "out"
    args = [*base, "--participant-label", "01", "02", "03", "04", "--task", "rest"]
    res = runner.invoke(cli.main, [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    report = json.loads((out / "report.json").read_text())
    # sorted halves would be 01, 02 (80 time points) against 03, 04 (160): a swap of 01
    # and 03 (the first of the two equal swaps) makes them 120 and 120, each
    # participant's runs in one split
    assert report["config"]["splits"] == {
        "split1": ["sub-02", "sub-03_dir-AP", "sub-03_dir-PA"],
        "split2": ["sub-01", "sub-04_ses-1", "sub-04_ses-2"],
    }
    for split in ("split1", "split2"):
        assert sum(open_split(out / "work" / f"{split}.zarr").timepoints) == 3 * 38
    # fsaverage5 known by its triangles: its medial wall masked, though the data fill it,
    # the count in the log and the record
    assert report["mask"]["n_medial_wall"] == 888 + 881, report["mask"]
    assert "1769 more on fsaverage5's medial wall" in res.output
    assert find_atlas_folder(out) == out / "tpl-fsaverage" / "anat"
    # the source dataset named, the command without this machine's folders or a None
    description = json.loads((out / "dataset_description.json").read_text())
    assert description["SourceDatasets"] == [{"URL": "../../messy0", "Version": "23.2.1"}]
    command = description["GeneratedBy"][0]["Description"]
    assert command.startswith("Run as: lsd-dask run --bids messy0 --participant-label")
    assert str(tmp_path) not in command and "None" not in command
    assert bids_validator_errors(out) == []
    # each subject's volumes kept by scrubbing, as nilearn's own strategy keeps them, and
    # its framewise displacement as the TSV holds it
    qc = {r["subject"]: r for r in report["subjects"]}
    assert sorted(qc) == sorted(s for split in report["config"]["splits"].values() for s in split)
    for sid, bold in (("sub-03_dir-PA", "sub-03/func/sub-03_task-rest_dir-PA"),
                      ("sub-04_ses-2", "sub-04/ses-2/func/sub-04_ses-2_task-rest")):  # fmt: skip
        gifti = [str(root / f"{bold}_hemi-{h}_space-fsaverage5_bold.func.gii") for h in "LR"]
        _, sample_mask = load_confounds_strategy(gifti, denoise_strategy="scrubbing")
        fd = pd.read_csv(root / f"{bold}_desc-confounds_timeseries.tsv", sep="\t")
        fd = fd["framewise_displacement"]
        assert qc[sid]["volumes"] == 40
        assert qc[sid]["kept"] == (40 if sample_mask is None else len(sample_mask))
        assert qc[sid]["mean_fd"] == pytest.approx(fd.mean()) and qc[sid]["max_fd"] == fd.max()
    assert "denoise" not in report["preprocessing"] and "'scrubbing'" in report["preprocessing"]
    page = (out / "report.html").read_text()
    assert "<p id='subjects'>6 subjects;" in page and "<blockquote id='methods'>" in page
    # the methods paragraph: its numbers cited in order, each reference listed once
    text, _, refs = report["methods_text"].partition("\n\nReferences\n")
    cited = [int(n) for n in re.findall(r"\[(\d+)\]", text)]
    assert sorted(set(cited)) == list(range(1, len(refs.splitlines()) + 1))
    assert [n for i, n in enumerate(cited) if n not in cited[:i]] == sorted(set(cited))
    assert "6 subjects" in text and "K = 4" in text and "rank 10" in text
    # the task from fMRIPrep's filter file this time
    (tmp_path / "filter.json").write_text(json.dumps({"bold": {"task": "rest"}}))
    chosen = ["--bids-filter-file", str(tmp_path / "filter.json")]
    res = runner.invoke(
        cli.main, [*base, "--participant-label", "01", "05", *chosen, "--out", str(tmp_path / "b")]
    )
    assert res.exit_code != 0
    errors = [ln for ln in res.output.splitlines() if ln.startswith("Error:")]
    # (sub-05's NaN on its medial wall is no error: the wall is masked whatever it holds)
    assert len(errors) == 1 and "subject sub-05: scrubbing keeps 0 of its 40" in errors[0]
    assert "Traceback" not in res.output, res.output


def test_a_bids_filter_file_chooses_runs_as_fmriprep_s_does(messy_tree, tmp_path):
    """fMRIPrep's filter file (pybids' entity names) and the bids: keys choose the same
    runs; a bad filter fails in one line naming the file and the key."""
    from lsd_dask.pipeline.settings.bids import BidsSettings, bids_subjects, read_filter_file

    root = messy_tree
    path = tmp_path / "filter.json"
    path.write_text(
        json.dumps({"bold": {"task": "rest", "direction": "PA", "space": "fsaverage5"}})
    )
    chosen = read_filter_file(path)
    assert chosen == {"task": "rest", "dir": "PA", "space": "fsaverage5"}
    subjects, _ = bids_subjects(BidsSettings(root=str(root), **chosen))
    assert [s.subject for s in subjects] == ["sub-03"]
    path.write_text(json.dumps({"bold": {"session": 1, "space": "fsaverage5", "task": "rest"}}))
    subjects, _ = bids_subjects(BidsSettings(root=str(root), **read_filter_file(path)))
    assert [s.subject for s in subjects] == ["sub-04"]  # ses-1 only: one run, its own id
    path.write_text(json.dumps({"bold": {"hemi": "L"}}))
    with pytest.raises(ValueError, match=r"filter\.json: bold\.hemi is not an entity"):
        read_filter_file(path)
    path.write_text(json.dumps({"t1w": {"session": "1"}}))
    with pytest.raises(ValueError, match=r'only the "bold" query applies'):
        read_filter_file(path)
