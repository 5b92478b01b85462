"""Zarr v3 layout of one split: vertices × (subjects · timepoints), float32.

Layout (``layout`` 2): a Zarr group with one array per subject, ``subject/<j>`` of shape
``(n_rows, T_j)``, plus group attributes: ``subjects`` (ids), ``timepoints`` (per
subject), ``vertex_mask`` (kept vertices of the full surface, as a list of bools or None),
``rows`` (``"kept"``: the arrays hold the kept vertices only; ``"surface"``: every surface
vertex, and readers take the kept rows), ``mesh`` (an identity string), ``layout`` and
``complete``. One array per subject lets independent tasks write their own subject
(:func:`build_split`) without knowing the other subjects' lengths, and the
``"surface"`` rows let them write before the mask, which needs every subject, is known.

Files: each subject array is Zarr v3 *sharded*. A shard (one file) is ``vertex_chunk`` rows
by the subject's whole run, about 256 MB by default, so a full-scale subject (64,984
vertices × 1,000 time points, 260 MB) is two shard files and its ``zarr.json``, and an
HCP-length run (4,800 time points, 1.25 GB) is six files: few, large files, as a parallel
file system wants. Inside a shard, inner chunks of at most 32 MB are what a reader decodes
and checksums, one at a time (:meth:`ColumnBlocks.read_columns`; on a local disk straight
from the files, :mod:`lsd_dask.io.local_shards`): the kept rows of a full-scale subject
read in under a quarter of the time they took from plain 128 MB chunks with zarr's row
selection (``benchmarks/store_read.py``).

Concurrent writes into one shard lose data silently (in zarr-python 3.1, each writer
reads, patches and rewrites the whole shard). Here a shard is only ever written whole: a
subject's array is written by one call (:meth:`SplitWriter.write`) of one task, and the
array belongs to that subject alone, so concurrent tasks never share a shard.

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
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import dask.array as da
import numpy as np
import zarr

from .atomic import atomic_path
from .local_shards import RowBlocks, local_layout, read_rows, write_rows
from .storage import Folder, is_local

__all__ = [
    "ColumnBlocks",
    "DamagedStoreError",
    "SplitStore",
    "SplitWriter",
    "build_split",
    "write_split",
    "open_split",
    "store_problem",
    "verify_split",
    "shard_rows",
    "vertex_chunk_for",
]

#: the store layout this version writes and reads (1: one ``data`` array, before 0.2)
LAYOUT = 2
_SUBJECT = "subject"


class DamagedStoreError(ValueError):
    """A stored chunk failed its checksum: the store is marked incomplete
    (:func:`store_problem` names it), and a pipeline run ingests its split again."""


@dataclass(frozen=True)
class SplitStore:
    """An opened split: its subjects' arrays and metadata, read as a lazy dask array
    (``data``: kept vertices × all time points) or by column blocks (``column_blocks``)."""

    subjects: list[str]
    timepoints: list[int]
    vertex_mask: np.ndarray | None
    mesh: str | None
    path: str
    storage_options: dict[str, Any] | None = None
    #: the read-only ``zarr.Array`` of every subject, in order
    arrays: tuple[Any, ...] = field(default=(), repr=False)
    #: the stored rows that hold kept vertices (None: every row)
    rows: np.ndarray | None = field(default=None, repr=False)

    @cached_property
    def data(self) -> da.Array:
        """The lazy data, one dask chunk per stored chunk. Made on first use: dask
        tokenizes each subject's array (4 ms a subject, 1 s a split of 264), which a
        reader of column blocks does without."""
        return _lazy(self.arrays, self.rows)

    @property
    def column_blocks(self) -> ColumnBlocks:
        """The data as a column-block reader: the fastest input of
        :func:`lsd_dask.linalg.randomized_svd`, whose tasks then read it themselves."""
        return ColumnBlocks(
            self.arrays, self.rows, path=self.path, storage_options=self.storage_options
        )


@dataclass(frozen=True)
class ColumnBlocks:
    """A split's subject arrays read by column blocks straight into a caller's buffer.

    The source that :func:`lsd_dask.linalg.randomized_svd` reads inside its tasks
    (``read_columns``), so linear algebra needs no storage library. It pickles with the
    arrays' store, so each worker opens the store itself.

    Attributes
    ----------
    arrays : tuple of zarr.Array, each of shape (n_stored_rows, T_j)
        The subjects, side by side in columns.
    rows : ndarray of int, optional
        The stored rows to read (the kept vertices); None reads every row.
    """

    arrays: tuple[Any, ...]
    rows: np.ndarray | None = None
    #: the columns read of each array, ``(start, stop)``; None reads all of each
    spans: tuple[tuple[int, int], ...] | None = None
    #: the store, marked damaged when a chunk fails its checksum (so the next run rebuilds)
    path: str | None = None
    storage_options: dict[str, Any] | None = None

    @property
    def shape(self) -> tuple[int, int]:
        n = self.arrays[0].shape[0] if self.rows is None else self.rows.size
        return (int(n), int(sum(b - a for a, b in self._spans)))

    @property
    def dtype(self) -> np.dtype[Any]:
        dtype: np.dtype[Any] = np.dtype(self.arrays[0].dtype)
        return dtype

    @property
    def ndim(self) -> int:
        return 2

    @property
    def chunks(self) -> tuple[int, int]:
        """Rows of one stored chunk, and the longest subject (one column chunk each)."""
        return (int(self.arrays[0].chunks[0]), int(max(b - a for a, b in self._spans)))

    @property
    def block_bounds(self) -> list[tuple[int, int]]:
        """Each subject's columns, ``(start, stop)`` in this source's numbering (a half's
        own, for a half)."""
        cuts = np.cumsum([0, *(b - a for a, b in self._spans)]).tolist()
        return list(zip(cuts[:-1], cuts[1:], strict=True))

    def halves(self) -> tuple[ColumnBlocks, ColumnBlocks]:
        """The first and the second half of every subject's time points (the columns of
        :func:`lsd_dask.selection.half_columns`), each a source of its own."""
        mid = [(a, a + (b - a) // 2, b) for a, b in self._spans]
        return (
            replace(self, spans=tuple((a, m) for a, m, _ in mid)),
            replace(self, spans=tuple((m, b) for _, m, b in mid)),
        )

    def read_columns(self, start: int, stop: int, out: np.ndarray) -> np.ndarray:
        """Columns ``start:stop`` (all read rows) into ``out`` (n_rows × (stop − start), the
        arrays' dtype), one stored (inner) chunk of rows at a time."""
        c0 = 0
        for a, (s0, s1) in zip(self.arrays, self._spans, strict=True):
            c1 = c0 + s1 - s0
            lo, hi = max(start, c0), min(stop, c1)
            if lo < hi:
                cols = slice(s0 + lo - c0, s0 + hi - c0)
                try:
                    _read_by_chunk(a, self.rows, cols, out[:, lo - start : hi - start])
                except ValueError as err:
                    if "checksum" not in str(err) or self.path is None:
                        raise
                    where = f"split store {self.path}, array {a.path}"
                    _mark_damaged(self.path, self.storage_options, f"{a.path}: {err}")
                    raise DamagedStoreError(
                        f"{where}: a chunk fails its checksum (damaged since it was written); "
                        "the store is marked for rebuilding."
                    ) from None
            c0 = c1
        return out

    @property
    def _spans(self) -> tuple[tuple[int, int], ...]:
        return self.spans or tuple((0, int(a.shape[1])) for a in self.arrays)

    def to_dask(self) -> da.Array:
        """The same data as a lazy dask array (one task per stored chunk)."""
        return _lazy(self.arrays, self.rows, self.spans)


@dataclass(frozen=True)
class SplitWriter:
    """Writes the subjects of a split store being built (see :func:`build_split`).

    Picklable: tasks on the workers each write their own subject with :meth:`write`.
    """

    path: str
    n_rows: int
    vertex_chunk: int | None = None
    compressor: str | None = None
    storage_options: dict[str, Any] | None = None
    #: rows per inner chunk of a shard; default: about 32 MB of the subject's run
    inner_chunk: int | None = None

    @property
    def streams(self) -> bool:
        """Whether :meth:`write` makes :class:`~lsd_dask.io.local_shards.RowBlocks` an inner
        chunk at a time as it writes them (a local, uncompressed store, whose shard files
        it writes itself), rather than whole first (through zarr)."""
        return self.compressor is None and is_local(self.path) and hasattr(os, "preadv")

    def write(
        self, index: int, subject: str, x: np.ndarray | RowBlocks, *, finite: bool = False
    ) -> int:
        """Store subject number ``index`` (n_rows × T, finite); return its T. ``finite``:
        the caller has checked that x holds no NaN or inf (a pass over x fewer). ``x`` as
        :class:`~lsd_dask.io.local_shards.RowBlocks` is made block by block as it is
        written into a local, uncompressed store (whole first into any other)."""
        if not isinstance(x, RowBlocks):
            x = np.asarray(x)
        elif not finite:  # to be checked: made whole first
            x = x.array()
        if len(x.shape) != 2 or x.shape[0] != self.n_rows:
            raise ValueError(
                f"subject {subject!r} has shape {x.shape}; expected ({self.n_rows}, T)."
            )
        if not finite and isinstance(x, np.ndarray) and not np.isfinite(x).all():
            bad = int((~np.isfinite(x)).any(axis=1).sum())
            raise ValueError(
                f"subject {subject!r}: {bad} vertices hold NaN or inf values; nothing was "
                f"written to {self.path}."
            )
        t = int(x.shape[1])
        inner, shard = shard_rows(self.n_rows, t, self.vertex_chunk, self.inner_chunk)
        try:
            group = _open_group(self.path, self.storage_options, mode="a")
            arr = group.create_array(
                f"{_SUBJECT}/{index}",
                shape=x.shape,
                chunks=(inner, max(t, 1)),
                shards=(shard, max(t, 1)),
                dtype="float32",
                compressors=_compressors(self.compressor),
                fill_value=0.0,
                overwrite=True,
                # every chunk is stored, even all-zero ones, so that a missing chunk always
                # means a store the reader cannot see, never data (see verify_split)
                config={"write_empty_chunks": True},
            )
            # one write of the whole array: every shard is written whole, by this task only
            layout = local_layout(arr)
            if layout is not None:  # a local, uncompressed store: straight into its files
                write_rows(layout, x)
            else:
                whole = x.array() if isinstance(x, RowBlocks) else x
                arr[:] = whole.astype(np.float32, copy=False)
        except OSError as err:  # a full disk says nothing of where: say it
            need = x.shape[0] * t * 4
            raise OSError(
                err.errno,
                f"{err.strerror or err} writing subject {subject!r} ({need / 2**20:.0f} MiB "
                "uncompressed)",
                f"{self.path}/{_SUBJECT}/{index}",
            ) from err
        return t

    def finish(
        self,
        subjects: list[str],
        timepoints: list[int],
        *,
        vertex_mask: np.ndarray | None = None,
        rows: str = "kept",
        mesh: str | None = None,
    ) -> None:
        """Record the metadata and mark the store complete (after every :meth:`write`).

        ``rows="kept"``: the arrays hold the ``vertex_mask`` vertices; ``"surface"``: every
        vertex of the surface, of which readers take the ``vertex_mask`` ones.
        """
        if vertex_mask is not None:
            vertex_mask = np.asarray(vertex_mask, bool)
            if rows == "kept" and int(vertex_mask.sum()) != self.n_rows:
                raise ValueError(
                    "vertex_mask marks the stored vertices of the full surface: its True "
                    f"count ({int(vertex_mask.sum())}) must equal n_vertices ({self.n_rows})."
                )
            if rows == "surface" and vertex_mask.size != self.n_rows:
                raise ValueError(
                    f"vertex_mask has {vertex_mask.size} entries for {self.n_rows} stored "
                    "surface vertices."
                )
        if rows not in ("kept", "surface"):
            raise ValueError(f"rows must be 'kept' or 'surface', got {rows!r}.")
        group = _open_group(self.path, self.storage_options, mode="a")
        # one write of the group's metadata (attrs.update writes it once per key: 0.3 s
        # a split for the 65k-entry vertex mask), so the completion mark lands with the rest
        group.update_attributes(
            {
                "subjects": [str(s) for s in subjects],
                "timepoints": [int(t) for t in timepoints],
                "vertex_mask": None if vertex_mask is None else vertex_mask.tolist(),
                "rows": rows,
                "mesh": mesh,
                "layout": LAYOUT,
                "complete": True,
            }
        )


def vertex_chunk_for(n_vertices: int, n_timepoints: int, target_mb: float = 256.0) -> int:
    """Rows per shard so that one (rows × T) float32 shard is about ``target_mb``."""
    rows = int(target_mb * 2**20 / (4 * max(n_timepoints, 1)))
    return int(max(1, min(n_vertices, rows)))


def shard_rows(
    n_rows: int,
    n_timepoints: int,
    vertex_chunk: int | None = None,
    inner_chunk: int | None = None,
    inner_mb: float = 32.0,
) -> tuple[int, int]:
    """Rows of an inner chunk and of a shard for a subject of ``n_rows`` × ``n_timepoints``.

    The shard is ``vertex_chunk`` rows (default :func:`vertex_chunk_for`), rounded up to a
    whole number of inner chunks, as Zarr requires; the inner chunk is ``inner_chunk`` rows,
    or the shard split evenly into pieces of at most about ``inner_mb``.
    """
    shard = max(1, min(n_rows, vertex_chunk or vertex_chunk_for(n_rows, n_timepoints)))
    if inner_chunk is None:
        most = max(1, int(inner_mb * 2**20) // (4 * max(n_timepoints, 1)))  # rows in inner_mb
        inner_chunk = min(-(-shard // -(-shard // most)), most)  # even pieces of ≤ most rows
    inner = max(1, min(int(inner_chunk), shard))
    return inner, -(-shard // inner) * inner


@contextmanager
def build_split(
    path: str | os.PathLike[str],
    *,
    n_rows: int,
    vertex_chunk: int | None = None,
    compressor: str | None = None,
    overwrite: bool = False,
    storage_options: dict[str, Any] | None = None,
    inner_chunk: int | None = None,
) -> Iterator[SplitWriter]:
    """Build a split store whose subjects are written independently (for example by tasks
    on the workers), atomically: nothing opens at ``path`` until the block ends without an
    error after :meth:`SplitWriter.finish`.

    Examples
    --------
    >>> with build_split(path, n_rows=n) as w:  # doctest: +SKIP
    ...     ts = client.gather(client.map(w.write, range(s), ids, arrays))
    ...     w.finish(ids, ts)
    """
    folder = _parent(path, storage_options)
    final = os.fspath(path) if not folder.local else os.path.abspath(os.fspath(path))
    if folder.exists(final) and not overwrite:
        raise FileExistsError(f"{final} exists; pass overwrite=True to replace it.")
    with _writing(final, folder) as tmp:
        _open_group(tmp, storage_options, mode="w")
        yield SplitWriter(
            str(tmp), int(n_rows), vertex_chunk, compressor, storage_options, inner_chunk
        )
        if not dict(_open_group(tmp, storage_options).attrs).get("complete"):
            raise RuntimeError(f"{final}: SplitWriter.finish() was not called; nothing kept.")


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
    inner_chunk: int | None = None,
) -> Path | str:
    """Write one split, subject by subject (one subject in memory at a time).

    Parameters
    ----------
    path : path of the Zarr group to create
    subjects : iterable of (subject_id, array of shape (n_vertices, T_s))
        Consumed once; arrays may be numpy or dask.
    n_vertices : int
    timepoints : int or list of int
        T of every subject (int), or one per subject.
    vertex_mask : bool ndarray of shape (n_surface_vertices,), optional
        The surface vertices the rows are (its True count is ``n_vertices``).
    mesh : str, optional
        An identity of the surface (e.g. "fsLR32k" or a file hash).
    vertex_chunk : int, optional
        Rows per shard (one file); default from :func:`vertex_chunk_for` (about 256 MB).
    compressor : {None, "lz4", "zstd"}
    overwrite : bool
        Replace a complete store already at ``path``.
    storage_options : dict, optional
        fsspec options when ``path`` is a URL.
    inner_chunk : int, optional
        Rows per inner chunk of a shard (see :func:`shard_rows`).

    Returns
    -------
    The path of the completed store (a URL stays a string).
    """
    tps = [int(timepoints)] if isinstance(timepoints, int) else [int(t) for t in timepoints]
    if vertex_mask is not None and int(np.count_nonzero(vertex_mask)) != n_vertices:
        raise ValueError(
            "vertex_mask marks the stored vertices of the full surface: its True count "
            f"({int(np.count_nonzero(vertex_mask))}) must equal n_vertices ({n_vertices})."
        )
    with build_split(
        path,
        n_rows=n_vertices,
        vertex_chunk=vertex_chunk,
        compressor=compressor,
        overwrite=overwrite,
        storage_options=storage_options,
        inner_chunk=inner_chunk,
    ) as w:
        ids: list[str] = []
        written: list[int] = []
        for j, (sid, x) in enumerate(subjects):
            expected_t = tps[0] if isinstance(timepoints, int) else tps[min(j, len(tps) - 1)]
            x = x.compute() if isinstance(x, da.Array) else np.asarray(x)
            if x.shape != (n_vertices, expected_t):
                raise ValueError(
                    f"subject {sid!r} has shape {x.shape}; expected ({n_vertices}, {expected_t})."
                )
            written.append(w.write(j, str(sid), x))
            ids.append(str(sid))
        if not isinstance(timepoints, int) and len(written) != len(tps):
            raise ValueError(f"{len(tps)} timepoint counts for {len(written)} subjects.")
        w.finish(ids, written, vertex_mask=vertex_mask, rows="kept", mesh=mesh)
    folder = _parent(path, storage_options)
    return Path(os.path.abspath(os.fspath(path))) if folder.local else os.fspath(path)


def open_split(
    path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None
) -> SplitStore:
    """Open a completed split store lazily (one dask chunk per stored chunk)."""
    p = os.fspath(path)
    folder = _parent(p, storage_options)
    if not folder.exists(p):
        raise FileNotFoundError(f"no split store at {p}.")
    group = _open_group(p, storage_options)
    attrs = dict(group.attrs)
    if not attrs.get("complete"):
        raise ValueError(f"{p} is not a complete split store (interrupted write?); rewrite it.")
    if attrs.get("layout") != LAYOUT:
        raise ValueError(
            f"{p} has store layout {attrs.get('layout', 1)}, this lsd-dask reads {LAYOUT}; "
            "rewrite it (a pipeline run re-ingests by itself)."
        )
    subjects = list(attrs["subjects"])
    arrays = [group[f"{_SUBJECT}/{j}"] for j in range(len(subjects))]
    mask = attrs.get("vertex_mask")
    return SplitStore(
        subjects=subjects,
        timepoints=[int(t) for t in attrs["timepoints"]],
        vertex_mask=None if mask is None else np.asarray(mask, bool),
        mesh=attrs.get("mesh"),
        path=p,
        storage_options=storage_options,
        arrays=tuple(arrays),
        rows=_read_rows(attrs),
    )


def verify_split(
    path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None
) -> int:
    """Check that a split store is complete *as seen from here*; return its shard-file count.

    Zarr reads a missing chunk as the fill value, so a reader that sees only part of the
    store (a worker on another node, without the shared folder) would get zeros without an
    error. Run this where the data will be read (for example as a task on the workers),
    after :func:`store_problem` found the store whole where it was written.
    """
    p = os.fspath(path)
    where = f"{p} (as seen from {platform.node()})"
    if not _parent(p, storage_options).exists(p):
        raise FileNotFoundError(
            f"split store {where} does not exist: the work folder must be shared with the "
            "Dask workers."
        )
    problem, chunks = _inspect(p, storage_options)
    if problem is not None:
        raise ValueError(
            f"split store {where} {problem}: the work folder must be shared with the Dask "
            "workers, completely."
        )
    return chunks


def store_problem(
    path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None
) -> str | None:
    """What is wrong with a split store as this process sees it ("lacks its completion
    mark", "has 3 of its 4 shard files", "cannot be opened (...)"), or None when it is whole."""
    return _inspect(os.fspath(path), storage_options)[0]


def _inspect(p: str, storage_options: dict[str, Any] | None) -> tuple[str | None, int]:
    try:
        group = _open_group(p, storage_options)
        complete = bool(group.attrs.get("complete"))
        n_subjects = len(group.attrs.get("subjects") or [])
        arrays = [group[f"{_SUBJECT}/{j}"] for j in range(n_subjects)]
    except (KeyError, FileNotFoundError, ValueError) as err:
        return f"cannot be opened ({type(err).__name__}: {err})", 0
    if group.attrs.get("damaged"):
        return f"failed a checksum ({group.attrs['damaged']})", 0
    if not complete:
        return "lacks its completion mark", 0
    # stored objects (shards, or chunks of an unsharded store): zarr's chunk count of a
    # sharded array multiplies shards by their inner chunks, past the array's edge too
    found = sum(int(a._nshards_initialized) for a in arrays)
    expected = sum(int(a._nshards) for a in arrays)
    if found != expected:
        return f"has {found} of its {expected} shard files", expected
    return None, expected


def _read_by_chunk(
    a: Any, rows: np.ndarray | None, cols: slice, out: np.ndarray, through_zarr: bool = False
) -> None:
    """``a[rows, cols]`` (every row when ``rows`` is None) into ``out``, one stored (inner)
    chunk of rows at a time.

    A local store's uncompressed shards are read from their files directly
    (:mod:`lsd_dask.io.local_shards`: 0.065 s for a full-scale subject's kept rows from the
    page cache against 0.149 s through zarr), unless ``through_zarr``. Through zarr, every
    row: each chunk decodes straight into its rows of ``out``; the kept rows: each chunk
    decodes into a small buffer and its kept rows are copied out. Both are faster than
    zarr's reads of a whole sharded array (which hold the shard's bytes and its decoded
    values at once) and than its orthogonal selection (5× slower on plain chunks, 40× on
    shards): see ``docs/benchmarks.md``.
    """
    from zarr.core.buffer import default_buffer_prototype

    layout = None if through_zarr else local_layout(a)
    if layout is not None:
        read_rows(layout, rows, cols, out)
        return
    nd = default_buffer_prototype().nd_buffer
    step = int(a.chunks[0])
    n = int(a.shape[0])
    if rows is None:
        for r0 in range(0, n, step):
            r1 = min(r0 + step, n)
            a.get_basic_selection((slice(r0, r1), cols), out=nd.from_numpy_array(out[r0:r1]))
        return
    buf = np.empty((min(step, n), out.shape[1]), a.dtype)
    bounds = np.searchsorted(rows, np.arange(0, n + step, step))
    for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:], strict=False)):
        if lo == hi:
            continue
        r0 = i * step
        r1 = min(r0 + step, n)
        a.get_basic_selection((slice(r0, r1), cols), out=nd.from_numpy_array(buf[: r1 - r0]))
        np.take(buf, rows[lo:hi] - r0, axis=0, out=out[lo:hi], mode="clip")  # no buffering


def _read_rows(attrs: dict[str, Any]) -> np.ndarray | None:
    """The stored rows a reader takes: the kept ones of a store that holds the surface."""
    mask = attrs.get("vertex_mask")
    if attrs.get("rows") != "surface" or mask is None:
        return None
    mask = np.asarray(mask, bool)
    return None if mask.all() else np.flatnonzero(mask)


def _lazy(
    arrays: list[Any] | tuple[Any, ...],
    rows: np.ndarray | None,
    spans: tuple[tuple[int, int], ...] | None = None,
) -> da.Array:
    blocks = [da.from_zarr(a) for a in arrays]
    if spans is not None:
        blocks = [b[:, s0:s1] for b, (s0, s1) in zip(blocks, spans, strict=True)]
    data: da.Array = da.concatenate(blocks, axis=1)
    return data if rows is None else data[rows]


def _parent(path: str | os.PathLike[str], storage_options: dict[str, Any] | None) -> Folder:
    """The folder (local or a URL) that holds a store."""
    return Folder(os.path.dirname(os.fspath(path)) or ".", storage_options)


def _open_group(
    path: str,
    storage_options: dict[str, Any] | None,
    mode: Literal["r", "r+", "a", "w", "w-"] = "r",
) -> Any:
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
    """The chunk codecs: the compressor, then a CRC-32C of every stored chunk (a flipped
    bit on disk is found where it is read, not used)."""
    from zarr.codecs import BloscCodec, Crc32cCodec, ZstdCodec

    if name is None:
        return [Crc32cCodec()]
    if name == "lz4":
        return [BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"), Crc32cCodec()]
    if name == "zstd":
        return [ZstdCodec(), Crc32cCodec()]
    raise ValueError(f"compressor must be None, 'lz4' or 'zstd', got {name!r}.")


def _mark_damaged(path: str, storage_options: dict[str, Any] | None, why: str) -> None:
    """Record in the store that a chunk failed its checksum: it is then incomplete to
    :func:`store_problem`, and the next run rebuilds it."""
    try:
        group = _open_group(path, storage_options, mode="a")
        group.attrs.update({"complete": False, "damaged": why})
    except OSError:  # a read-only view of the store: the error still ends the run
        pass
