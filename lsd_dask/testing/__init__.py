"""Test helpers: tiny meshes, a real scheduler and workers as separate processes, and
hypothesis strategies (:mod:`lsd_dask.testing.strategies`, imported on demand, so
hypothesis is needed only by the tests).

The seeded generators with ground truth are a feature, not test code: they live in
:mod:`lsd_dask.datasets`.
"""

from .meshes import tiny_two_hemisphere_mesh

__all__ = ["tiny_two_hemisphere_mesh"]
