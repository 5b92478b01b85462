"""The installed package's version (``0.0.0`` when run from a source tree)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("lsd-dask")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = ["__version__"]
