"""The record of what lsd-dask wrote into a folder, and the checks that keep a run to it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lsd_dask.io.ownership import (
    RECORD,
    WORK_MARK,
    FolderNotOwnedError,
    OutputRecord,
    check_work_folder,
    mark_work_folder,
)
from lsd_dask.io.storage import Folder


def _write(root: Path, rel: str, text: str = "x") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_complete_run_removes_only_the_recorded_files_it_did_not_write_again(tmp_path):
    """Files an earlier run recorded and this one did not write go, with the folders they
    leave empty; the user's files beside them, and a recorded file the user edited since,
    stay; the record then holds exactly what this run wrote, and the log."""
    record = OutputRecord.read(tmp_path)
    assert record.files == {}
    record.claim("run.log")
    first = [_write(tmp_path, n) for n in ("a.json", "tpl-x/anat/k3.tsv", "tpl-x/anat/k4.tsv",
                                           "edited.md", "gone/k3.png")]  # fmt: skip
    assert record.commit(first, complete=True) == []
    user = _write(tmp_path, "tpl-x/anat/mine.tsv", "the user's")
    (tmp_path / "edited.md").write_text("edited by the user")
    again = OutputRecord.read(tmp_path)
    assert again.files.keys() == {"run.log", "a.json", "tpl-x/anat/k3.tsv",
                                  "tpl-x/anat/k4.tsv", "edited.md", "gone/k3.png"}  # fmt: skip
    assert {p.name for p in again.foreign()} == {"mine.tsv", "edited.md"}
    second = [_write(tmp_path, "a.json", "new"), tmp_path / "tpl-x/anat/k4.tsv"]
    removed = again.commit(second, complete=True)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in removed) == [
        "gone/k3.png", "tpl-x/anat/k3.tsv"]  # fmt: skip
    assert not (tmp_path / "gone").exists() and user.read_text() == "the user's"
    assert (tmp_path / "edited.md").read_text() == "edited by the user"
    assert set(OutputRecord.read(tmp_path).files) == {"run.log", "a.json", "tpl-x/anat/k4.tsv"}


def test_an_incomplete_run_adds_what_it_wrote_and_removes_nothing(tmp_path):
    record = OutputRecord.read(tmp_path)
    record.commit([_write(tmp_path, "old.tsv")], complete=True)
    record.commit([_write(tmp_path, "half.tsv")], complete=False)
    assert (tmp_path / "old.tsv").exists()
    assert set(OutputRecord.read(tmp_path).files) == {"old.tsv", "half.tsv"}
    assert OutputRecord.read(tmp_path).foreign() == []


def test_an_input_the_run_reads_is_never_removed(tmp_path):
    """An earlier run's atlas that this run reads (a comparison atlas) stays, and stays
    recorded."""
    record = OutputRecord.read(tmp_path)
    atlas = _write(tmp_path, "tpl-x/anat/k200.dlabel.nii")
    record.commit([atlas], complete=True)
    assert record.commit([], complete=True, keep=[atlas]) == [] and atlas.exists()
    assert "tpl-x/anat/k200.dlabel.nii" in OutputRecord.read(tmp_path).files


@pytest.mark.parametrize("damage", [b"\xff\xfe", b'{"files": null}', b"[1, 2]", b""])
def test_a_damaged_record_vouches_for_nothing(tmp_path, damage):
    _write(tmp_path, "notes.txt")
    (tmp_path / RECORD).write_bytes(damage)
    with pytest.raises(FolderNotOwnedError, match=r"holds 1 file\(s\) no lsd-dask run wrote \("
                       r"notes.txt\); give the run an empty or new folder"):  # fmt: skip
        OutputRecord.read(tmp_path).refuse_foreign()
    assert OutputRecord.read(tmp_path).refuse_foreign(adopt=True) == [tmp_path / "notes.txt"]
    # adopted or not, a file where outputs lie is refused: a run may write over it
    _write(tmp_path, "tpl-x/anat/mine.tsv")
    with pytest.raises(FolderNotOwnedError, match=r"1 file\(s\) no lsd-dask run wrote under "
                       r"names its outputs take \(tpl-x/anat/mine.tsv\)"):  # fmt: skip
        OutputRecord.read(tmp_path).refuse_foreign(adopt=True)


def test_links_are_refused_even_when_the_folder_is_adopted(tmp_path):
    outside = _write(tmp_path / "elsewhere", "target.txt", "keep me")
    out = tmp_path / "out"
    out.mkdir()
    (out / "run.log").symlink_to(outside)
    with pytest.raises(FolderNotOwnedError, match="1 symbolic link.*run.log -> .*target.txt"):
        OutputRecord.read(out).refuse_foreign(adopt=True)
    assert outside.read_text() == "keep me"


def test_the_work_folder_inside_the_output_folder_is_left_to_its_own_check(tmp_path):
    _write(tmp_path, "work/split1.zarr/zarr.json")
    assert OutputRecord.read(tmp_path).foreign([tmp_path / "work"]) == []


def test_a_users_work_folder_is_refused_and_a_marked_one_taken(tmp_path):
    work = tmp_path / "work"
    check_work_folder(Folder(work))  # absent: nothing to check, nothing made
    assert not work.exists()
    _write(work, "mask.npy")
    with pytest.raises(FolderNotOwnedError, match=r"work folder .* holds files no lsd-dask run "
                       r"made \(mask.npy\)"):  # fmt: skip
        check_work_folder(Folder(work))
    assert sorted(os.listdir(work)) == ["mask.npy"]  # nothing written into it
    check_work_folder(Folder(work), adopt=True)
    assert not (work / WORK_MARK).exists()  # marked once every check has passed
    mark_work_folder(Folder(work))
    check_work_folder(Folder(work))  # marked: lsd-dask's from now on
    old = tmp_path / "older"  # an older lsd-dask's: its stamps say so
    _write(old, "stamps/mask.json")
    check_work_folder(Folder(old))
    (old / "elsewhere").symlink_to(tmp_path)
    with pytest.raises(FolderNotOwnedError, match="work folder .* symbolic link"):
        check_work_folder(Folder(old), adopt=True)
