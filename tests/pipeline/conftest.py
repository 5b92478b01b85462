"""Shared helpers for the pipeline tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lsd_dask.datasets import SurfaceStudy, surface_study
from lsd_dask.pipeline import write_study
from lsd_dask.surface import two_hemisphere_mesh
from lsd_dask.testing.processes import ProcessCluster


@pytest.fixture(scope="module")
def scheduler_address(tmp_path_factory):
    """A real scheduler and two workers, separate processes on 127.0.0.1 (one per module)."""
    c = ProcessCluster(tmp_path_factory.mktemp("dask"))
    yield c.address
    c.close()


@pytest.fixture(scope="session")
def study() -> SurfaceStudy:
    """A small two-hemisphere study: 10 planted parcels, 2 + 2 subjects x 60 TRs, a tenth
    of the vertices a constant medial wall."""
    meshes = two_hemisphere_mesh(6, 7, radius=50.0)
    return surface_study(
        meshes,
        n_parcels=10,
        n_subjects=(2, 2),
        n_timepoints=60,
        medial_wall_fraction=0.1,
        noise_std=0.7,
        random_state=0,
    )


@pytest.fixture(scope="session")
def write_tiny_study() -> Callable[[Path, int], SurfaceStudy]:
    """Writes a tiny study to a folder; see :func:`_write_tiny_study`."""
    return _write_tiny_study


def _write_tiny_study(folder: Path, random_state: int) -> SurfaceStudy:
    """A 2 + 2-subject GIFTI study on a small two-hemisphere mesh, written to ``folder``."""
    study = surface_study(
        two_hemisphere_mesh(5, 6, radius=50.0),
        n_parcels=6,
        n_subjects=(2, 2),
        n_timepoints=40,
        medial_wall_fraction=0.1,
        noise_std=0.7,
        random_state=random_state,
    )
    write_study(study, folder, fmt="gifti")
    return study
