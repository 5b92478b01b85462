"""Execute every notebook in place, keeping its outputs (how the stored outputs are made).

    python notebooks/execute.py

Each notebook runs from a clean kernel against a real scheduler and two workers started as
separate processes (as the test suite does), in a temporary folder.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

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
                nbformat.write(nb, path)
                print(f"executed {path.name}")
        finally:
            cluster.close()


if __name__ == "__main__":
    main()
