"""lsd-dask: out-of-core cortical parcellation on Dask.

Left-stochastic decomposition (LSD) clustering, directional clustering and baselines, with
split-half reproducibility scoring for surface fMRI.
"""

from . import _logging, metrics, surface  # noqa: F401 - _logging: the default handler
from ._version import __version__

__all__ = ["__version__", "metrics", "surface"]
