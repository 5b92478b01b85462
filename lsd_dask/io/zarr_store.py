"""Zarr v3 layout of one split: vertices × (subjects · timepoints), float32.

Layout: a Zarr group with one array ``data`` of shape ``(n_vertices, n_subjects * T)``,
chunked one subject per column chunk and ``vertex_chunk`` vertices per row chunk (sized for
64–256 MB chunks by default), plus group attributes: ``subjects`` (ids), ``timepoints``
(per subject), ``vertex_mask`` (kept vertices, as a list of bools or None), ``mesh`` (an
identity string) and ``complete``.

Writes are atomic (:mod:`lsd_dask.io.atomic`): the group is built under a temporary
sibling name holding ``.partial-``, marked ``complete``, then renamed into place. A killed
write leaves only that folder, which :func:`open_split` never opens and
:func:`~lsd_dask.io.atomic.remove_partials` sweeps; a folder without the completion mark is
refused. A store may also be an fsspec URL (``s3://bucket/run/split1.zarr``, with
``storage_options``): object storage has no rename, so the group is written in place and
the ``complete`` mark, written last, is what makes it readable.

Codec: none by default. On the development machine (``docs/benchmarks.md``) reading
float32 through dask ran at 1.74 GB/s uncompressed against 0.55–0.64 GB/s with zarr's
default zstd, which saves only ~8 % on noisy data (a 1 GB float32 array read once through
dask's threads);
``compressor="lz4"`` selects Blosc-LZ4 with byte shuffle.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import zarr

from .atomic import atomic_path
from .storage import Folder, is_local

__all__ = [
    "ColumnBlocks",
    "SplitStore",
    "write_split",
    "open_split",
    "verify_split",
    "vertex_chunk_for",
]

_ARRAY = "data"


@dataclass(frozen=True)
class SplitStore:
    """An opened split: the lazy data and its metadata."""

    data: da.Array
    subjects: list[str]
    timepoints: list[int]
    vertex_mask: np.ndarray | None
    mesh: str | None
    path: str
    storage_options: dict[str, Any] | None = None

    @property
    def array(self) -> Any:
        """The read-only ``zarr.Array`` behind ``data``."""
        return _open_group(self.path, self.storage_options)["data"]

    @property
    def column_blocks(self) -> ColumnBlocks:
        """The data as a column-block reader: the fastest input of
        :func:`lsd_dask.linalg.randomized_svd`, whose tasks then read it themselves."""
        return ColumnBlocks(self.array)


@dataclass(frozen=True)
class ColumnBlocks:
    """A Zarr array read by column blocks straight into a caller's buffer.

    The source that :func:`lsd_dask.linalg.randomized_svd` reads inside its tasks
    (``read_columns``), so linear algebra needs no storage library. It pickles with the
    array's store, so each worker opens the store itself.

    Attributes
    ----------
    z : zarr.Array of shape (n_rows, n_columns)
    """

    z: Any

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.z.shape)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.z.dtype)

    @property
    def ndim(self) -> int:
        return 2

    @property
    def chunks(self) -> tuple[int, int]:
        """Rows and columns of one stored chunk."""
        return tuple(self.z.chunks)

    def read_columns(self, start: int, stop: int, out: np.ndarray) -> np.ndarray:
        """Columns ``start:stop`` (all rows) into ``out`` (n_rows × (stop − start), the
        array's dtype), without an intermediate copy."""
        from zarr.core.buffer import default_buffer_prototype

        buf = default_buffer_prototype().nd_buffer.from_numpy_array(out)
        self.z.get_basic_selection((slice(None), slice(start, stop)), out=buf)
        return out

    def to_dask(self) -> da.Array:
        """The same data as a lazy dask array (one task per stored chunk)."""
        return da.from_zarr(self.z)


def vertex_chunk_for(n_vertices: int, n_timepoints: int, target_mb: float = 128.0) -> int:
    """Rows per chunk so that one (rows × T) float32 chunk is about ``target_mb``."""
    rows = int(target_mb * 2**20 / (4 * max(n_timepoints, 1)))
    return int(max(1, min(n_vertices, rows)))


def write_split(
    path: str | os.PathLike[str],
    subjects: Iterable[tuple[str, Any]],
    *,
    n_vertices: int,
    timepoints: int | list[int],
    vertex_mask: np.ndarray | None = None,
    mesh: str | None = None,
    vertex_chunk: int | None = None,
    compressor: str | None = None,
    overwrite: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> Path | str:
    """Write one split, subject by subject (one subject in memory at a time).

    Parameters
    ----------
    path : path of the Zarr group to create
    subjects : iterable of (subject_id, array of shape (n_vertices, T_s))
        Consumed once; arrays may be numpy or dask.
    n_vertices : int
    timepoints : int or list of int
        T of every subject (int), or one per subject. Column chunks follow the subjects.
    vertex_mask : bool ndarray of shape (n_vertices,), optional
    mesh : str, optional
        An identity of the surface (e.g. "fsLR32k" or a file hash).
    vertex_chunk : int, optional
        Rows per chunk; default from :func:`vertex_chunk_for` (about 128 MB chunks).
    compressor : {None, "lz4", "zstd"}
    overwrite : bool
        Replace a complete store already at ``path``.
    storage_options : dict, optional
        fsspec options when ``path`` is a URL.

    Returns
    -------
    The path of the completed store (a URL stays a string).
    """
    folder = _parent(path, storage_options)
    final = os.fspath(path) if not folder.local else os.path.abspath(os.fspath(path))
    if folder.exists(final) and not overwrite:
        raise FileExistsError(f"{final} exists; pass overwrite=True to replace it.")
    if isinstance(timepoints, int):
        raise_count = False
        tps: list[int] | None = None
        t_max = int(timepoints)
    else:
        tps = [int(t) for t in timepoints]
        raise_count = True
        t_max = max(tps)
    if vertex_mask is not None and int(np.count_nonzero(vertex_mask)) != n_vertices:
        raise ValueError(
            "vertex_mask marks the stored vertices of the full surface: its True count "
            f"({int(np.count_nonzero(vertex_mask))}) must equal n_vertices ({n_vertices})."
        )
    rows = vertex_chunk or vertex_chunk_for(n_vertices, t_max)
    with _writing(final, folder) as tmp:
        group = _open_group(tmp, storage_options, mode="w")
        # the column count grows subject by subject: subjects are consumed lazily, one in
        # memory at a time; chunks hold one subject (the longest T when lengths differ)
        arr = group.create_array(
            _ARRAY,
            shape=(n_vertices, 0),
            chunks=(rows, t_max),
            dtype="float32",
            compressors=_compressors(compressor),
            fill_value=0.0,
            # every chunk is stored, even all-zero ones, so that a missing chunk always
            # means a store the reader cannot see, never data (see verify_split)
            config={"write_empty_chunks": True},
        )
        col = 0
        ids: list[str] = []
        written: list[int] = []
        for j, (sid, x) in enumerate(subjects):
            t = tps[j] if tps is not None and j < len(tps) else None
            x = x.compute() if isinstance(x, da.Array) else np.asarray(x)
            if not np.isfinite(x).all():
                raise ValueError(
                    f"subject {sid!r}: {int((~np.isfinite(x)).any(axis=1).sum())} vertices hold "
                    f"NaN or inf values; nothing was written to {final}."
                )
            expected_t = t if t is not None else t_max
            if x.shape != (n_vertices, expected_t):
                raise ValueError(
                    f"subject {sid!r} has shape {x.shape}; expected ({n_vertices}, {expected_t})."
                )
            arr.resize((n_vertices, col + expected_t))
            arr[:, col : col + expected_t] = x.astype(np.float32, copy=False)
            col += expected_t
            ids.append(str(sid))
            written.append(expected_t)
        if raise_count and tps is not None and len(written) != len(tps):
            raise ValueError(f"{len(tps)} timepoint counts for {len(written)} subjects.")
        tps = written
        group.attrs.update(
            {
                "subjects": ids,
                "timepoints": tps,
                "vertex_mask": None
                if vertex_mask is None
                else np.asarray(vertex_mask, bool).tolist(),
                "mesh": mesh,
                "complete": True,
            }
        )
    return Path(final) if folder.local else final


def open_split(
    path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None
) -> SplitStore:
    """Open a completed split store lazily (``dask.array.from_zarr``, the store's chunks)."""
    p = os.fspath(path)
    folder = _parent(p, storage_options)
    if not folder.exists(p):
        raise FileNotFoundError(f"no split store at {p}.")
    group = _open_group(p, storage_options)
    attrs = dict(group.attrs)
    if not attrs.get("complete"):
        raise ValueError(f"{p} is not a complete split store (interrupted write?); rewrite it.")
    arr = group[_ARRAY]
    mask = attrs.get("vertex_mask")
    return SplitStore(
        data=da.from_zarr(arr),
        subjects=list(attrs["subjects"]),
        timepoints=[int(t) for t in attrs["timepoints"]],
        vertex_mask=None if mask is None else np.asarray(mask, bool),
        mesh=attrs.get("mesh"),
        path=p,
        storage_options=storage_options,
    )


def verify_split(
    path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None
) -> int:
    """Check that a split store is complete *as seen from here*; return its chunk count.

    Zarr reads a missing chunk as the fill value, so a reader that sees only part of the
    store (a worker on another node, without the shared folder) would get zeros without an
    error. Run this where the data will be read (for example as a task on the workers).
    """
    p = os.fspath(path)
    where = f"{p} (as seen from {platform.node()})"
    if not _parent(p, storage_options).exists(p):
        raise FileNotFoundError(
            f"split store {where} does not exist: the work folder must be shared with the "
            "Dask workers."
        )
    try:
        group = _open_group(p, storage_options)
        arr = group[_ARRAY]
        complete = bool(group.attrs.get("complete"))
    except (KeyError, FileNotFoundError, ValueError) as err:
        raise ValueError(f"split store {where} cannot be opened ({err}); rewrite it.") from None
    if not complete:
        raise ValueError(f"split store {where} lacks its completion mark; rewrite it.")
    found, expected = int(arr.nchunks_initialized), int(arr.nchunks)
    if found != expected:
        raise ValueError(
            f"split store {where} has {found} of its {expected} chunks: the work folder must "
            "be shared with the Dask workers, completely."
        )
    return expected


def _parent(path: str | os.PathLike[str], storage_options: dict[str, Any] | None) -> Folder:
    """The folder (local or a URL) that holds a store."""
    return Folder(os.path.dirname(os.fspath(path)) or ".", storage_options)


def _open_group(path: str, storage_options: dict[str, Any] | None, mode: str = "r") -> Any:
    if is_local(path):
        return zarr.open_group(path, mode=mode, zarr_format=3 if mode == "w" else None)
    return zarr.open_group(
        path,
        mode=mode,
        storage_options=storage_options or {},
        zarr_format=3 if mode == "w" else None,
    )


@contextmanager
def _writing(final: str, folder: Folder) -> Iterator[str]:
    """Where to build a store: a temporary renamed into place locally; on object storage the
    final URL itself, cleared first, and removed again if the write fails."""
    if folder.local:
        with atomic_path(final) as tmp:
            yield str(tmp)
        return
    folder.remove(final)
    try:
        yield final
    except BaseException:
        folder.remove(final)
        raise


def _compressors(name: str | None) -> Any:
    if name is None:
        return None
    from zarr.codecs import BloscCodec, ZstdCodec

    if name == "lz4":
        return BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")
    if name == "zstd":
        return ZstdCodec()
    raise ValueError(f"compressor must be None, 'lz4' or 'zstd', got {name!r}.")
