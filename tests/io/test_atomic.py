"""Atomic writes: complete under the final name, or nothing and no temporary."""

from __future__ import annotations

import os

import numpy as np
import pytest

from lsd_dask.io.atomic import PARTIAL, atomic_path, atomic_save_npy, remove_partials


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "a.npy"
    atomic_save_npy(target, np.arange(3))
    with pytest.raises(RuntimeError, match="boom"), atomic_path(target) as tmp:
        np.save(tmp, np.arange(5))
        raise RuntimeError("boom")
    np.testing.assert_array_equal(np.load(target), np.arange(3))
    assert [p.name for p in tmp_path.iterdir()] == ["a.npy"]


def test_folder_replaced_whole(tmp_path):
    target = tmp_path / "store.zarr"
    for n in (3, 1):
        with atomic_path(target) as tmp:
            tmp.mkdir()
            for i in range(n):
                (tmp / f"chunk{i}").write_text("x")
    assert sorted(p.name for p in target.iterdir()) == ["chunk0"]


def test_remove_partials_sweeps_what_a_killed_writer_left(tmp_path):
    (tmp_path / "work" / "labels").mkdir(parents=True)
    left = [
        tmp_path / "work" / f".split1{PARTIAL}1a2b3c4d.zarr",
        tmp_path / "work" / "labels" / f".x{PARTIAL}00000000.npy",
    ]
    left[0].mkdir()
    (left[0] / "c").write_text("x")
    left[1].write_text("x")
    keep = tmp_path / "work" / "split1.zarr"
    keep.mkdir()
    assert sorted(remove_partials(tmp_path)) == sorted(left)
    assert not any(p.exists() for p in left) and keep.exists()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_a_full_disk_names_the_file_being_written(tmp_path):
    """A write that runs out of space (Linux's /dev/full answers every write so) fails
    naming the output, not the temporary or nothing; no temporary is left."""
    target = tmp_path / "report.json"
    with pytest.raises(OSError, match=rf"No space left on device: '{target}'"):
        with atomic_path(target) as tmp:
            tmp.write_text("partial")
            with open("/dev/full", "wb") as full:
                full.write(b"x" * 65536)
    assert list(tmp_path.iterdir()) == []
