"""Reading one full-scale subject from a split store: the sharded layout against plain chunks.

One subject of 64,984 vertices × ``--timepoints`` float32 (random values), stored twice in a
temporary folder:
- as the split stores write it now (:class:`lsd_dask.io.zarr_store.SplitWriter`: Zarr v3
  shards of about 256 MB, inner chunks of at most 32 MB, CRC-32C per inner chunk);
- as plain chunks of about 128 MB, one file each (the layout before sharding), read the way
  it was then: zarr's orthogonal selection of the kept rows.

The sharded store is written and read two ways: by the pipeline's writer and reader (on a
local disk, straight into and from the shard files) and through zarr (the whole array
assigned at once; read inner chunk by inner chunk), as before them. The files are the
same bytes either way. For each: the files, the seconds to write (best of ``--repeats``,
into the page cache), to read every row, to read the kept rows (92 %
of them, the full study's mask: 59,784 of 64,984), and to read the kept rows of the first
half of the run (what each pass of the feature blur's half SVDs reads), best of
``--repeats`` from the page cache (the SVD's passes after the first read it from there when
it fits).

Run: ``python -m benchmarks.store_read --timepoints 1000``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import Crc32cCodec
from zarr.core.buffer import default_buffer_prototype

from lsd_dask.io import zarr_store
from lsd_dask.io.zarr_store import _read_by_chunk, build_split, open_split

N = 64984


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timepoints", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    t = args.timepoints
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, t), dtype=np.float32)
    mask = np.ones(N, bool)
    mask[rng.choice(N, N - 59784, replace=False)] = False
    kept = np.flatnonzero(mask)
    nd = default_buffer_prototype().nd_buffer
    with tempfile.TemporaryDirectory() as tmp:
        # the split store as written now, and through zarr's own write
        write_zarr = _best(lambda: _write(Path(tmp) / "z.zarr", x, mask, False), args.repeats)
        write_new = _best(lambda: _write(Path(tmp) / "sharded.zarr", x, mask, True), args.repeats)
        blocks = open_split(Path(tmp) / "sharded.zarr").column_blocks
        every = type(blocks)(blocks.arrays)  # the same store, every row
        out_all = np.empty((N, t), np.float32)
        out_kept = np.empty((kept.size, t), np.float32)
        new_all = _best(lambda: every.read_columns(0, t, out_all), args.repeats)
        new_kept = _best(lambda: blocks.read_columns(0, t, out_kept), args.repeats)
        assert np.array_equal(out_kept, x[kept])
        # the kept rows of the first half of the run (the feature blur's halves)
        first = blocks.halves()[0]
        out_half = np.empty(first.shape, np.float32)
        new_half = _best(lambda: first.read_columns(0, first.shape[1], out_half), args.repeats)
        assert np.array_equal(out_half, x[kept][:, : first.shape[1]])
        files_new = _files(Path(tmp) / "sharded.zarr" / "subject" / "0")
        # the same store through zarr, inner chunk by inner chunk
        arr = blocks.arrays[0]
        half = slice(0, first.shape[1])
        zarr_all = _best(
            lambda: _read_by_chunk(arr, None, slice(0, t), out_all, True), args.repeats
        )
        zarr_kept = _best(
            lambda: _read_by_chunk(arr, kept, slice(0, t), out_kept, True), args.repeats
        )
        assert np.array_equal(out_kept, x[kept])
        zarr_half = _best(lambda: _read_by_chunk(arr, kept, half, out_half, True), args.repeats)
        # plain ~128 MB chunks, one file each
        t0 = time.perf_counter()
        a = zarr.create_array(
            str(Path(tmp) / "plain.zarr"), shape=x.shape, chunks=(min(N, 2**25 // t), t),
            dtype="float32", compressors=[Crc32cCodec()], fill_value=0.0,
        )  # fmt: skip
        a[:] = x
        write_old = time.perf_counter() - t0
        old_all = _best(
            lambda: a.get_basic_selection(
                (slice(None), slice(None)), out=nd.from_numpy_array(out_all)
            ),
            args.repeats,
        )
        old_kept = _best(
            lambda: a.get_orthogonal_selection(
                (kept, slice(None)), out=nd.from_numpy_array(out_kept)
            ),
            args.repeats,
        )
        assert np.array_equal(out_kept, x[kept])
        out_half_old = np.empty((kept.size, t // 2), np.float32)
        old_half = _best(
            lambda: a.get_orthogonal_selection(
                (kept, slice(0, t // 2)), out=nd.from_numpy_array(out_half_old)
            ),
            args.repeats,
        )
        files_old = _files(Path(tmp) / "plain.zarr")
    gb = x.nbytes / 1e9
    print(f"one subject: {N:,} vertices x {t:,} time points, {gb:.2f} GB float32")
    print(
        "| layout | files | write (s) | read all rows (s) | read kept rows (s) "
        "| kept rows, first half of the run (s) |"
    )
    print("|---|---|---|---|---|---|")
    print(
        f"| sharded (now) | {files_new} | {write_new:.2f} | {new_all:.2f} "
        f"({gb / new_all:.2f} GB/s) | {new_kept:.2f} | {new_half:.2f} |"
    )
    print(
        f"| sharded, through zarr | {files_new} | {write_zarr:.2f} | {zarr_all:.2f} "
        f"({gb / zarr_all:.2f} GB/s) | {zarr_kept:.2f} | {zarr_half:.2f} |"
    )
    print(
        f"| plain 128 MB chunks | {files_old} | {write_old:.2f} | {old_all:.2f} "
        f"({gb / old_all:.2f} GB/s) | {old_kept:.2f} | {old_half:.2f} |"
    )


def _write(path: Path, x: np.ndarray, mask: np.ndarray, direct: bool) -> None:
    """The subject as the split writer stores it: into its shard files, or (``direct``
    False) through zarr's own write of the array."""
    import shutil

    shutil.rmtree(path, ignore_errors=True)
    layout = zarr_store.local_layout
    if not direct:
        zarr_store.local_layout = lambda a: None  # type: ignore[assignment]
    try:
        with build_split(path, n_rows=N) as w:
            w.write(0, "s", x)
            w.finish(["s"], [x.shape[1]], vertex_mask=mask, rows="surface")
    finally:
        zarr_store.local_layout = layout


def _best(f: object, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return min(times)


def _files(folder: Path) -> int:
    return sum(1 for f in folder.rglob("*") if f.is_file())


if __name__ == "__main__":
    main()
