"""Execute every notebook in place, keeping its outputs (how the stored outputs are made).

    python notebooks/execute.py [NOTEBOOK ...]

Each notebook runs from a clean kernel against a real scheduler and two workers started as
separate processes (as the test suite does), in a temporary folder. The stored outputs name
that folder ``<notebook folder>``, so they carry no path of the machine that ran them.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

from lsd_dask.distributed import SCHEDULER_ENV
from lsd_dask.testing.processes import ProcessCluster


def main() -> None:
    here = Path(__file__).resolve().parent
    paths = [Path(p) for p in sys.argv[1:]] or sorted(here.glob("*.ipynb"))
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "dask").mkdir()
        cluster = ProcessCluster(Path(tmp) / "dask", n_workers=2)
        try:
            for path in paths:
                work = Path(tmp) / path.stem
                work.mkdir()
                os.environ[SCHEDULER_ENV] = cluster.address
                os.environ["LSD_DASK_NOTEBOOK_DIR"] = str(work)
                nb = nbformat.read(path, as_version=4)
                NotebookClient(
                    nb,
                    timeout=600,
                    kernel_name="python3",
                    resources={"metadata": {"path": str(work)}},
                ).execute()
                for cell in nb.cells:
                    if cell.cell_type == "code":
                        cell.outputs = _without(cell.outputs, str(work), "<notebook folder>")
                        cell.outputs = _without(cell.outputs, tmp, "<temporary folder>")
                nbformat.write(nb, path)
                print(f"executed {path.name}")
        finally:
            cluster.close()


def _without(value: Any, path: str, name: str) -> Any:
    """``value`` (a cell's outputs) with every ``path`` in its text replaced by ``name``."""
    if isinstance(value, str):
        return value.replace(path, name)
    if isinstance(value, list):
        return [_without(v, path, name) for v in value]
    if isinstance(value, dict):
        return type(value)((k, _without(v, path, name)) for k, v in value.items())
    return value


if __name__ == "__main__":
    main()
