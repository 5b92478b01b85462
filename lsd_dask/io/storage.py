"""A folder on any fsspec file system: a local path, or a URL such as ``s3://bucket/run``.

The pipeline's work folder lives in one of these, so that a cluster with no shared disk
(a cloud cluster whose workers see only object storage) reads the same stores as the
client wrote. Writes are whole or absent: locally by a rename (:mod:`lsd_dask.io.atomic`),
on object storage by a single PUT of the object, which never shows a partial object.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import fsspec
import numpy as np

from .atomic import atomic_path, atomic_save_npy, remove_path

__all__ = ["Folder", "is_local"]


def is_local(url: str | os.PathLike[str]) -> bool:
    """True for a plain path or a ``file://`` URL."""
    text = os.fspath(url)
    return "://" not in text or text.startswith("file://")


class Folder:
    """A folder and the file operations the pipeline needs, on any fsspec file system.

    Parameters
    ----------
    url : str or path
        A local folder or a URL (``s3://bucket/prefix``, ``gs://...``, ``memory://...``).
    storage_options : dict, optional
        Passed to fsspec (for S3: ``key``, ``secret``, ``client_kwargs.endpoint_url``...).
        They travel with every task that opens a store, so the workers need no other setup.
    """

    def __init__(
        self, url: str | os.PathLike[str], storage_options: dict[str, Any] | None = None
    ) -> None:
        self.local = is_local(url)
        text = os.fspath(url)
        if self.local:
            text = os.path.abspath(text.removeprefix("file://"))
        self.url = text.rstrip("/")
        self.storage_options = dict(storage_options or {})
        self.fs, _ = fsspec.core.url_to_fs(self.url, **self.storage_options)

    def __repr__(self) -> str:
        return f"Folder({self.url!r})"

    def join(self, *parts: str) -> str:
        """The URL (or local path) of a child."""
        return "/".join([self.url, *parts])

    def exists(self, url: str) -> bool:
        return bool(self.fs.exists(url))

    def makedirs(self, url: str | None = None) -> None:
        if self.local:  # object stores have no folders
            os.makedirs(url or self.url, exist_ok=True)

    def read_bytes(self, url: str) -> bytes:
        return bytes(self.fs.cat_file(url))

    def write_bytes(self, url: str, data: bytes) -> str:
        """Write a whole file: a rename into place locally, one PUT on object storage."""
        if self.local:
            with atomic_path(url) as tmp:
                tmp.write_bytes(data)
        else:
            self.fs.pipe_file(url, data)
        return url

    def read_text(self, url: str) -> str:
        return self.read_bytes(url).decode()

    def write_text(self, url: str, text: str) -> str:
        return self.write_bytes(url, text.encode())

    def load_npy(self, url: str, *, mmap: bool = False) -> np.ndarray:
        """``np.load``; memory-mapped where asked and the folder is local."""
        if self.local:
            out: np.ndarray = np.load(url, mmap_mode="r" if mmap else None)
        else:
            out = np.load(io.BytesIO(self.read_bytes(url)))
        return out

    def save_npy(self, url: str, arr: Any) -> str:
        """``np.save``, whole or absent: locally straight into a file renamed into place
        (no copy of the array in memory: a split's U is 240 MB at full scale), on object
        storage one PUT of the file's bytes."""
        if self.local:
            atomic_save_npy(url, arr)
            return url
        buf = io.BytesIO()
        np.save(buf, np.asarray(arr))
        return self.write_bytes(url, buf.getvalue())

    def remove(self, url: str) -> None:
        """Remove a file or a tree; nothing when absent."""
        if self.local:
            remove_path(Path(url))
        elif self.fs.exists(url):
            self.fs.rm(url, recursive=True)
        self.fs.invalidate_cache()

    def glob(self, pattern: str) -> list[str]:
        """Children matching ``pattern`` (relative to this folder), sorted, as URLs."""
        found = self.fs.glob(self.join(pattern))
        if self.local:
            return sorted(str(p) for p in found)
        protocol = self.url.split("://", 1)[0]
        return sorted(f"{protocol}://{p}" for p in found)
