"""Execute the notebooks against a real scheduler process (the env var the notebooks read)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from lsd_dask.distributed import SCHEDULER_ENV
from lsd_dask.testing.processes import ProcessCluster

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory):
    c = ProcessCluster(tmp_path_factory.mktemp("nbdask"), n_workers=2)
    yield c.address
    c.close()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, scheduler, tmp_path, monkeypatch):
    monkeypatch.setenv(SCHEDULER_ENV, scheduler)
    monkeypatch.setenv("LSD_DASK_NOTEBOOK_DIR", str(tmp_path))
    before = _tasks_run(scheduler)
    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    if path.name == "02_remote_scheduler.ipynb":
        # a distributed.progress widget for the ingest tasks (its small fits run in process)
        view = "application/vnd.jupyter.widget-view+json"
        assert len([o for o in outputs if view in o.get("data", {})]) >= 1
    # the notebook's work ran on the scheduler's workers, not on a cluster of its own
    assert _tasks_run(scheduler) > before


def _tasks_run(address: str) -> int:
    """Task state transitions on the scheduler's workers so far: a counter that only
    grows (the workers' transition logs are bounded, so the keys still in them can fall)."""
    from distributed import Client

    with Client(address, timeout=30) as client:
        counts = client.run(lambda dask_worker: dask_worker.state.transition_counter)
    return sum(counts.values())


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_stored_outputs_carry_no_machine_paths(path):
    """The outputs stored with a notebook (``python notebooks/execute.py``) name its
    folder ``<notebook folder>``, not the temporary folder of the machine that ran it."""
    nb = nbformat.read(path, as_version=4)
    text = "".join(str(o) for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert text, f"{path.name} has no stored outputs"
    for root in ("/tmp/", "/home/", "/Users/", "/private/var/", "/work/"):
        assert root not in text, f"{path.name}'s stored outputs name a path under {root}"
