"""A work folder's ``save_npy``: the array read back as written, locally and on an fsspec
file system, and nothing half-written or replaced after a failed save."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from lsd_dask.io.atomic import PARTIAL
from lsd_dask.io.storage import Folder


class _Unreadable:
    """An array-like whose values cannot be had: ``np.save`` fails on it."""

    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("no values")


@pytest.mark.parametrize("order", ["C", "F"])
def test_save_npy_reads_back_the_array_locally_and_in_memory(tmp_path, order):
    a = np.asarray(np.random.default_rng(0).standard_normal((50, 7)), np.float32, order=order)
    for folder in (Folder(tmp_path), Folder(f"memory://lsd-{uuid.uuid4().hex}")):
        url = folder.join("split1_U.npy")
        assert folder.save_npy(url, a) == url
        back = folder.load_npy(url)
        np.testing.assert_array_equal(back, a)
        assert back.dtype == a.dtype


def test_a_failed_local_save_leaves_the_old_file_and_no_partial(tmp_path):
    folder = Folder(tmp_path)
    url = folder.join("split1_U.npy")
    folder.save_npy(url, np.arange(4.0))
    with pytest.raises(RuntimeError, match="no values"):
        folder.save_npy(url, _Unreadable())
    np.testing.assert_array_equal(folder.load_npy(url), np.arange(4.0))
    assert not [p for p in tmp_path.iterdir() if PARTIAL in p.name]
