"""Reading and writing a subject's sharded Zarr v3 array straight from and to its files on
a local disk.

The split stores' arrays are sharded, uncompressed and checksummed: each inner chunk is
its raw little-endian values followed by a CRC32C, and each shard file ends with its index
of ``(offset, nbytes)`` pairs and the index's own CRC32C (the Zarr v3 sharding codec with
``bytes`` and ``crc32c`` codecs, index at the end). For such an array on a local file
system, :func:`read_rows` reads each inner chunk with one ``preadv``: whole rows of the
stored type straight into the caller's rows (the rows it does not want into a scratch
buffer), other columns into a reused buffer they are copied out of; and checks its
checksum. That is what zarr-python's
read does too, less the copies its buffers make and its event-loop round trips: a
full-scale subject's kept rows (59,784 of 64,984 × 1,000 float32, 260 MB in the page
cache) read in 0.065 s against 0.149 s through ``get_basic_selection`` on the development
machine (one thread), and the SVD's passes read every subject once each.

:func:`write_rows` writes such an array's shard files as zarr-python writes them, byte for
byte (tested), from the subject's own rows, or from rows made an inner chunk at a time as
they are written (:class:`RowBlocks`: ingest's standardised series, never held whole).
Any other array (compressed, another codec chain, a store that is not a local folder)
gets ``None`` from :func:`local_layout`, and its reader and writer go through zarr.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import crc32c
import numpy as np

__all__ = ["RowBlocks", "ShardLayout", "local_layout", "read_rows", "write_rows"]

#: an inner chunk the shard does not hold (never written: it reads as the fill value)
_EMPTY = np.uint64(2**64 - 1)


@dataclass(frozen=True)
class ShardLayout:
    """Where a 2-d array's values lie in its shard files.

    Shards span every column and ``shard_rows`` rows, shard ``i`` in file
    ``shard_files[i]``; inner chunks span every column and ``inner_rows`` rows; values are
    ``dtype`` (little-endian) in C order.
    """

    shard_files: tuple[str, ...]
    shape: tuple[int, int]
    shard_rows: int
    inner_rows: int
    dtype: np.dtype
    fill_value: float


@dataclass(frozen=True)
class RowBlocks:
    """An array made a block of rows at a time, for a writer to store as it is made.

    ``fill(start, stop, out)`` writes rows ``start:stop`` into ``out`` (C-ordered,
    ``stop - start`` rows); a writer asks for each row once, in order. A task that
    standardises a subject then holds a block of it, not a second copy of all of it.
    """

    shape: tuple[int, int]
    fill: Callable[[int, int, np.ndarray], None]

    def array(self, dtype: Any = np.float32) -> np.ndarray:
        """All the rows, made at once."""
        out = np.empty(self.shape, dtype)
        self.fill(0, self.shape[0], out)
        return out


def local_layout(a: Any) -> ShardLayout | None:
    """The layout of zarr array ``a`` where :func:`read_rows` can read it, else None.

    It can where ``a`` is a 2-d Zarr v3 array in a local folder, sharded by rows only, its
    inner chunks of whole rows with the ``bytes`` (little-endian) and ``crc32c`` codecs and
    nothing else, its index the same at the shard's end, on a platform with ``preadv``.
    """
    from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec
    from zarr.storage import LocalStore

    meta: Any = getattr(a, "metadata", None)
    if getattr(meta, "zarr_format", None) != 3 or not isinstance(a.store, LocalStore):
        return None
    if not hasattr(os, "preadv"):  # not on every platform (Windows): zarr reads there
        return None
    codecs = tuple(meta.codecs)
    if len(codecs) != 1 or not isinstance(codecs[0], ShardingCodec) or len(a.shape) != 2:
        return None
    sharding = codecs[0]

    def plain(chain: Any) -> bool:
        chain = tuple(chain)
        return (
            len(chain) == 2
            and isinstance(chain[0], BytesCodec)
            and getattr(chain[0].endian, "value", chain[0].endian) in ("little", None)
            and isinstance(chain[1], Crc32cCodec)
        )

    dtype = np.dtype(a.dtype)
    n, t = (int(s) for s in a.shape)
    shard, inner = tuple(meta.chunk_grid.chunk_shape), tuple(sharding.chunk_shape)
    if not (
        plain(sharding.codecs)
        and plain(sharding.index_codecs)
        and getattr(sharding.index_location, "value", sharding.index_location) == "end"
        and dtype.kind == "f"
        and shard[1] == t
        and inner[1] == t
        and shard[0] % inner[0] == 0
    ):
        return None
    folder = os.path.join(str(a.store.root), *[p for p in a.path.split("/") if p])
    # the shards' files by zarr's own chunk key encoding (``c/<i>/0`` by default)
    files = tuple(
        os.path.join(folder, *meta.encode_chunk_key((i, 0)).split("/"))
        for i in range(-(-n // int(shard[0])))
    )
    return ShardLayout(
        files, (n, t), int(shard[0]), int(inner[0]), dtype.newbyteorder("<"),
        float(meta.fill_value),
    )  # fmt: skip


def read_rows(
    layout: ShardLayout, rows: np.ndarray | None, cols: slice, out: np.ndarray
) -> np.ndarray:
    """``a[rows, cols]`` (every row when ``rows`` is None; ``rows`` sorted) into ``out``.

    Raises
    ------
    ValueError
        Where an inner chunk or a shard's index fails its checksum, naming the file.
    """
    n, t = layout.shape
    inner, itemsize = layout.inner_rows, layout.dtype.itemsize
    per_shard = layout.shard_rows // inner
    raw = bytearray(inner * t * itemsize + 4)  # an inner chunk's values and checksum
    buf = np.frombuffer(raw, np.uint8)
    values = buf[:-4].view(layout.dtype).reshape(inner, t)
    # whole rows into a C-ordered ``out`` of the stored type: read straight into its rows
    direct = (
        cols.indices(t) == (0, t, 1)
        and out.shape[1] == t
        and out.dtype == layout.dtype
        and out.flags.c_contiguous
    )
    # the positions in ``out`` of each inner chunk's wanted rows
    edges = np.arange(0, n + inner, inner)
    bounds = edges.clip(max=n) if rows is None else np.searchsorted(rows, edges)
    for s, path in enumerate(layout.shard_files):
        first = s * per_shard
        chunks = range(first, min(first + per_shard, len(edges) - 1))
        if all(bounds[c] == bounds[c + 1] for c in chunks):
            continue
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:  # a shard never written reads as its fill value
            for c in chunks:
                out[bounds[c] : bounds[c + 1]] = layout.fill_value
            continue
        try:
            index = _index(fd, per_shard, path)
            for c in chunks:
                lo, hi = int(bounds[c]), int(bounds[c + 1])
                if lo == hi:
                    continue
                offset, nbytes = index[c - first]
                if offset == _EMPTY:
                    out[lo:hi] = layout.fill_value
                    continue
                r0 = c * inner
                wanted = np.arange(lo - r0, hi - r0) if rows is None else rows[lo:hi] - r0
                if direct and int(nbytes) == buf.size:
                    pieces = _pieces(out[lo:hi], wanted, inner, buf)
                    if pieces is not None:
                        got = os.preadv(fd, cast(Any, pieces), int(offset))  # arrays
                        if got != buf.size or not _pieces_checked(pieces):
                            raise ValueError(f"{path}: inner chunk {c} fails its checksum")
                        continue
                got = os.preadv(fd, [raw], int(offset)) if int(nbytes) == buf.size else -1
                if got != buf.size or not _checked(buf):
                    raise ValueError(f"{path}: inner chunk {c} fails its checksum")
                block = values[:, cols]
                if rows is None:
                    out[lo:hi] = block[: hi - lo]
                else:  # ``take`` writes into out's rows without a temporary
                    np.take(block, wanted, axis=0, out=out[lo:hi], mode="clip")
        finally:
            os.close(fd)
    return out


def write_rows(layout: ShardLayout, x: np.ndarray | RowBlocks) -> None:
    """Write the whole array ``x`` (``layout.shape``) into its shard files, as zarr-python
    writes it: each inner chunk's values (the array's last chunk padded with the fill
    value) and their CRC32C, then the shard's index of (offset, nbytes) and its CRC32C.

    Each inner chunk is written from ``x``'s own rows, where zarr's write copies each
    chunk into its buffers and the shard into another: the split writer stores a
    full-scale subject (64,984 × 1,000 float32, 260 MB) in 0.30 s against 0.56 s through
    zarr, into the page cache (``benchmarks/store_read.py``). With :class:`RowBlocks`,
    each inner chunk is made into one reused buffer just before it is written, so the
    whole array is never held.
    Every shard is written whole by this call only, so concurrent tasks writing other
    subjects never share a shard. Inner chunks wholly past the array's last row are not
    stored (their index entries say so), as zarr leaves them.
    """
    n, t = layout.shape
    if x.shape != (n, t):
        raise ValueError(f"{x.shape} values for an array of {(n, t)}")
    inner = layout.inner_rows
    per_shard = layout.shard_rows // inner
    nbytes = inner * t * layout.dtype.itemsize + 4
    rows_of = _chunk_source(x, layout.dtype, min(inner, n))
    for s, path in enumerate(layout.shard_files):
        index = np.full((per_shard, 2), _EMPTY, "<u8")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            offset = 0
            for j in range(per_shard):
                r0 = (s * per_shard + j) * inner
                if r0 >= n:
                    break
                r1 = min(r0 + inner, n)
                block = rows_of(r0, r1)
                if r1 - r0 < inner:  # the array's edge: the chunk is stored whole, padded
                    padded = np.full((inner, t), layout.fill_value, layout.dtype)
                    padded[: r1 - r0] = block
                    block = padded
                values = block.reshape(-1).view(np.uint8)
                _write_all(fd, [values, _crc(values)])
                index[j] = offset, nbytes
                offset += nbytes
            raw = index.reshape(-1).view(np.uint8)
            _write_all(fd, [raw, _crc(raw)])
        finally:
            os.close(fd)


def _chunk_source(
    x: np.ndarray | RowBlocks, dtype: np.dtype, rows: int
) -> Callable[[int, int], np.ndarray]:
    """``rows_of(r0, r1)``: rows ``r0:r1`` of ``x`` as C-ordered ``dtype`` values, a view of
    the array's own rows, or made into one buffer of ``rows`` rows reused from call to call
    (its rows are valid until the next call)."""
    if not isinstance(x, RowBlocks):
        a = np.ascontiguousarray(x, dtype)
        return lambda r0, r1: a[r0:r1]
    made, buf = x, np.empty((rows, x.shape[1]), dtype)

    def rows_of(r0: int, r1: int) -> np.ndarray:
        made.fill(r0, r1, buf[: r1 - r0])
        return buf[: r1 - r0]

    return rows_of


def _write_all(fd: int, pieces: list[Any]) -> None:
    """``pieces`` one after the other, by ``writev`` (which may write less than asked)."""
    views = [memoryview(p).cast("B") for p in pieces]
    step = min(getattr(os, "IOV_MAX", 1024), 1024)
    while views:
        done = os.writev(fd, views[:step])
        while views and done >= len(views[0]):
            done -= len(views[0])
            views.pop(0)
        if done:
            views[0] = views[0][done:]


#: the most buffers one ``preadv`` of a chunk is given (Linux takes up to 1,024)
_MAX_PIECES = 512


def _pieces(
    dst: np.ndarray, wanted: np.ndarray, inner: int, scratch: np.ndarray
) -> list[np.ndarray] | None:
    """The buffers an inner chunk of ``inner`` rows is read into, in the file's order:
    each run of consecutive ``wanted`` rows (sorted positions in the chunk) straight into
    its rows of ``dst``, the rows between them into successive parts of ``scratch`` (the
    chunk's size and its checksum's: every piece is read, and checked, apart), the 4-byte
    checksum last. None where the runs are too many for one read."""
    breaks = np.flatnonzero(np.diff(wanted) != 1) + 1
    starts = np.concatenate([[0], breaks]).astype(np.int64)
    ends = np.concatenate([breaks, [wanted.size]]).astype(np.int64)
    if 2 * starts.size + 2 > _MAX_PIECES:
        return None
    row_bytes = dst.shape[1] * dst.dtype.itemsize
    flat = dst.reshape(-1).view(np.uint8)
    pieces: list[np.ndarray] = []
    pos, used = 0, 0  # the next row of the chunk; the scratch bytes taken so far

    def skip(rows: int) -> None:
        nonlocal used
        if rows > 0:
            pieces.append(scratch[used : used + rows * row_bytes])
            used += rows * row_bytes

    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        at = int(wanted[a])
        skip(at - pos)
        pieces.append(flat[a * row_bytes : b * row_bytes])
        pos = at + b - a
    skip(inner - pos)
    pieces.append(scratch[-4:])
    return pieces


def _index(fd: int, chunks: int, path: str) -> np.ndarray:
    """The shard's ``chunks`` × 2 index of (offset, nbytes), its checksum checked."""
    size = chunks * 16 + 4
    end = os.fstat(fd).st_size
    raw = np.frombuffer(os.pread(fd, size, max(end - size, 0)), np.uint8)
    if raw.size != size or not _checked(raw):
        raise ValueError(f"{path}: the shard's index fails its checksum")
    return raw[:-4].view("<u8").reshape(chunks, 2)


def _crc(*pieces: np.ndarray) -> bytes:
    """The CRC32C of the pieces' bytes, in order, as the ``crc32c`` codec stores it (4
    bytes, little-endian).

    By the ``crc32c`` package (SSE4.2 or ARMv8 instructions over interleaved streams):
    a 260 MB subject in 0.018 s against 0.039–0.053 s for ``google_crc32c``, which zarr
    uses, on the AVX-512 development machine. Every read of a subject checks it, so
    that is 0.02–0.03 s a subject off every pass of the SVD and off ingest's write.
    """
    crc = 0
    for piece in pieces:
        crc = crc32c.crc32c(piece.data, value=crc)
    return bytes(np.uint32(crc).astype("<u4").tobytes())


def _checked(data: np.ndarray) -> bool:
    """Whether ``data``'s last 4 bytes are the CRC32C (little-endian) of the rest."""
    return _crc(data[:-4]) == data[-4:].tobytes()


def _pieces_checked(pieces: list[np.ndarray]) -> bool:
    """Whether the last piece is the CRC32C of the others, in order."""
    return _crc(*pieces[:-1]) == pieces[-1].tobytes()
