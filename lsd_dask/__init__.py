"""lsd-dask: out-of-core cortical parcellation on Dask.

Left-stochastic decomposition (LSD) clustering, directional clustering and baselines, with
split-half reproducibility scoring for surface fMRI.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("lsd-dask")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

from . import _logging, metrics, surface  # noqa: E402, F401 - _logging: the default handler

__all__ = ["__version__", "metrics", "surface"]
