"""Finding fMRIPrep's surface BOLD files by their entities."""

from __future__ import annotations

from pathlib import Path

import pytest

from lsd_dask.io.bids_index import confounds_file, find_bold, index_func_files
from lsd_dask.pipeline.settings.bids import BidsSettings, bids_subjects
from lsd_dask.pipeline.settings.splits import halve


def _touch(root: Path, *names: str) -> None:
    for name in names:
        sub = name.split("_")[0]
        ses = [p for p in name.split("_") if p.startswith("ses-")]
        folder = root / sub / (ses[0] if ses else "") / "func"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).touch()


def test_runs_of_one_participant_get_their_own_ids_and_one_split(tmp_path):
    _touch(
        tmp_path,
        "sub-01_ses-1_task-rest_run-1_space-fsLR_den-91k_bold.dtseries.nii",
        "sub-01_ses-2_task-rest_run-1_space-fsLR_den-91k_bold.dtseries.nii",
        "sub-02_task-rest_space-fsLR_den-91k_bold.dtseries.nii",
        "sub-03_task-rest_space-fsLR_den-91k_bold.dtseries.nii",
        "sub-04_task-rest_space-fsLR_den-91k_bold.dtseries.nii",
        "sub-04_task-rest_space-fsLR_den-91k_desc-confounds_timeseries.tsv",
        "sub-05_task-rest_space-MNI152NLin6Asym_desc-preproc_bold.nii.gz",
        "sub-02_task-rest_bold_space-fsLR.dtseries.nii",  # not BIDS: skipped
    )
    subjects, participants = bids_subjects(BidsSettings(root=str(tmp_path)))
    ids = [s.subject for s in subjects]
    assert ids == ["sub-01_ses-1", "sub-01_ses-2", "sub-02", "sub-03", "sub-04"]
    assert participants["sub-01_ses-2"] == "sub-01"
    splits = halve(ids, participants)
    assert splits == {"split1": ["sub-01_ses-1", "sub-01_ses-2", "sub-02"],
                      "split2": ["sub-03", "sub-04"]}  # fmt: skip
    # drawn at random, a participant's runs still go together
    for seed in range(5):
        drawn = halve(ids, participants, random_state=seed)
        together = [name for name, v in drawn.items() if "sub-01_ses-1" in v]
        assert "sub-01_ses-2" in drawn[together[0]]
        assert sorted(drawn["split1"] + drawn["split2"]) == sorted(ids)


def test_gifti_pairs_filters_and_their_errors(tmp_path):
    _touch(
        tmp_path,
        "sub-01_task-rest_hemi-L_space-fsaverage5_bold.func.gii",
        "sub-01_task-rest_hemi-R_space-fsaverage5_bold.func.gii",
        "sub-02_task-rest_hemi-L_space-fsaverage5_bold.func.gii",
        "sub-02_task-rest_hemi-R_space-fsaverage5_bold.func.gii",
        "sub-02_task-nback_hemi-L_space-fsaverage5_bold.func.gii",
        "sub-02_task-nback_hemi-R_space-fsaverage5_bold.func.gii",
        "sub-03_task-rest_hemi-L_space-fsaverage5_bold.func.gii",
    )
    assert len(index_func_files(tmp_path)) == 7
    runs = find_bold(tmp_path, participant_label=["sub-01", "02"], space="fsaverage5", task="rest")
    assert [(r.participant, r.kind) for r in runs] == [("sub-01", "gifti"), ("sub-02", "gifti")]
    assert [p.name.split("_")[2] for p in runs[0].paths] == ["hemi-L", "hemi-R"]
    with pytest.raises(ValueError, match="hemi-L and hemi-R pair"):
        find_bold(tmp_path, space="fsaverage5", task="rest")
    with pytest.raises(ValueError, match=r"participant label\(s\) \['9'\]"):
        find_bold(tmp_path, participant_label=["9"])
    with pytest.raises(ValueError, match=r"spaces are \['fsaverage5'\]"):
        find_bold(tmp_path, space="fsLR")
    with pytest.raises(ValueError, match="unknown filter"):
        find_bold(tmp_path, hemi="L")
    with pytest.raises(NotADirectoryError, match="does not exist"):
        find_bold(tmp_path / "nowhere")


@pytest.mark.parametrize(
    ("bold", "confounds"),
    [
        ("sub-01_task-rest_space-fsLR_den-91k_bold.dtseries.nii",
         "sub-01_task-rest_desc-confounds_timeseries.tsv"),
        ("sub-01_ses-2_task-rest_dir-PA_run-02_hemi-L_space-fsaverage5_bold.func.gii",
         "sub-01_ses-2_task-rest_dir-PA_run-02_desc-confounds_timeseries.tsv"),
        ("sub-01_task-rest_acq-mb_rec-norm_run-1_space-fsLR_den-91k_bold.dtseries.nii",
         "sub-01_task-rest_acq-mb_rec-norm_run-1_desc-confounds_timeseries.tsv"),
        ("sub-01_task-rest_run-1_space-fsLR_den-91k_bold.dtseries.nii",  # before 20.2
         "sub-01_task-rest_run-1_desc-confounds_regressors.tsv"),
    ],
)  # fmt: skip
def test_a_runs_confounds_file_is_the_one_nilearn_finds(tmp_path, bold, confounds):
    """fMRIPrep's confounds TSV of a BOLD file, as nilearn's ``load_confounds`` finds it
    (its own rule, run on the same files); none when the run has none."""
    from nilearn.interfaces.fmriprep.load_confounds_utils import _get_file_name

    _touch(tmp_path, bold)
    bold_path = next(tmp_path.rglob(bold))
    assert confounds_file(bold_path) is None
    # a decoy of another run beside it
    _touch(tmp_path, confounds.replace("task-rest", "task-nback"))
    assert confounds_file(bold_path) is None
    _touch(tmp_path, confounds)
    found = confounds_file(bold_path)
    assert found == bold_path.parent / confounds
    assert Path(_get_file_name(str(bold_path))) == found
