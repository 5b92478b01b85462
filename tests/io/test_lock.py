"""One writer per work folder: the lock against a second holder in this process and in
another, and after its holder is killed. (Two real CLI runs into one output folder:
``tests/pipeline/test_stages.py``.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lsd_dask.io.lock import FolderBusyError, WorkLock
from lsd_dask.io.storage import Folder


def test_a_second_holder_fails_naming_the_first_and_a_released_lock_is_free(tmp_path):
    first = WorkLock(Folder(tmp_path), command="lsd-dask run a.yaml")
    with first:
        first.acquire()  # held already: nothing to do
        assert first.held
        with pytest.raises(FolderBusyError, match=rf"pid {os.getpid()} on .*lsd-dask run a\.yaml"):
            WorkLock(Folder(tmp_path)).acquire()
    assert not first.held
    with WorkLock(Folder(tmp_path)):  # released: free again
        pass


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    code = (
        "import sys, time; from lsd_dask.io.lock import WorkLock; "
        "from lsd_dask.io.storage import Folder; "
        f"WorkLock(Folder({str(tmp_path)!r})).acquire(); print('held', flush=True); "
        "time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with pytest.raises(FolderBusyError, match=f"pid {proc.pid}"):
            WorkLock(Folder(tmp_path)).acquire()
    finally:
        proc.kill()
        proc.wait()
    with WorkLock(Folder(tmp_path)):
        pass
