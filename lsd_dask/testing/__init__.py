"""Seeded generators of synthetic data with known ground truth, and tiny test meshes.

The hypothesis strategies live in :mod:`lsd_dask.testing.strategies` (imported on demand,
so hypothesis is needed only by the tests).
"""

from .generators import (
    LSDableData,
    SurfaceStudy,
    blumensath_dataset,
    blumensath_table_data,
    brain_grid,
    lsdable_similarity,
    surface_study,
)
from .meshes import tiny_two_hemisphere_mesh

__all__ = [
    "LSDableData",
    "SurfaceStudy",
    "blumensath_dataset",
    "blumensath_table_data",
    "brain_grid",
    "lsdable_similarity",
    "surface_study",
    "tiny_two_hemisphere_mesh",
]
