"""The direct reader and writer of local shard files against zarr-python's own read and
write of the same arrays."""

import os

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

from lsd_dask.io import build_split, zarr_store
from lsd_dask.io.local_shards import RowBlocks, local_layout, read_rows, write_rows


def _subject(folder, x, shard, inner, compressor=None):
    """``x`` stored as the split writer stores a subject; the zarr array read back."""
    n = x.shape[0]
    with build_split(folder, n_rows=n, vertex_chunk=shard, inner_chunk=inner,
                     compressor=compressor) as w:  # fmt: skip
        w.write(0, "sub-0", x)
        w.finish(["sub-0"], [x.shape[1]])
    return zarr.open_group(str(folder), mode="r")["subject/0"]


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 40),
    t=st.integers(1, 9),
    shard=st.integers(1, 40),
    inner=st.integers(1, 12),
    keep=st.floats(0.0, 1.0),
    every_row=st.booleans(),
    data=st.data(),
)
def test_reads_what_zarr_reads(tmp_path_factory, n, t, shard, inner, keep, every_row, data):
    """Any shard and inner-chunk rows (partial last shards and chunks included), every row
    or a sorted subset, any column range: the values zarr reads, bit for bit."""
    rng = np.random.default_rng(n * 1000 + t * 10 + inner)
    x = rng.standard_normal((n, t)).astype(np.float32)
    a = _subject(tmp_path_factory.mktemp("s") / "s.zarr", x, shard, inner)
    layout = local_layout(a)
    assert layout is not None and layout.inner_rows == a.chunks[0] and layout.shape == (n, t)
    rows = None if every_row else np.flatnonzero(rng.random(n) < keep)
    c0 = data.draw(st.integers(0, t - 1))
    c1 = data.draw(st.integers(c0 + 1, t))
    want = a[:, c0:c1] if rows is None else a[:, c0:c1][rows]
    out = np.full(want.shape, np.nan, np.float32)
    assert read_rows(layout, rows, slice(c0, c1), out) is out
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(want, x[:, c0:c1] if rows is None else x[rows, c0:c1])


def _files(root):
    return {
        os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), "rb").read()
        for d, _, names in os.walk(root)
        for f in names
    }


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 40),
    ts=st.lists(st.integers(1, 9), min_size=1, max_size=3),
    shard=st.integers(1, 40),
    inner=st.integers(1, 12),
)
def test_the_split_writer_writes_the_files_zarr_writes(tmp_path_factory, n, ts, shard, inner):
    """A local, uncompressed store's subjects go straight into their shard files: every
    file of the store is byte for byte the one zarr's own write makes (partial last
    shards and chunks, inner chunks past the last row left out), and zarr reads the
    values back. The same from rows made as they are written (``RowBlocks``), each row
    asked for once, in order."""
    rng = np.random.default_rng(n * 100 + shard * 10 + inner)
    xs = [rng.standard_normal((n, t)).astype(np.float32) for t in ts]
    stores = {}
    for how in ("direct", "made", "zarr"):
        folder = tmp_path_factory.mktemp("w") / "s.zarr"
        asked: dict[int, list[tuple[int, int]]] = {i: [] for i in range(len(xs))}
        with pytest.MonkeyPatch.context() as mp:
            if how == "zarr":  # every subject through zarr's own write
                mp.setattr(zarr_store, "local_layout", lambda a: None)
            with build_split(folder, n_rows=n, vertex_chunk=shard, inner_chunk=inner) as w:
                for i, x in enumerate(xs):
                    w.write(i, f"sub-{i}", _made(x, asked[i]) if how == "made" else x, finite=True)
                w.finish([f"sub-{i}" for i in range(len(xs))], ts)
        stores[how] = _files(folder)
        group = zarr.open_group(str(folder), mode="r")
        for i, x in enumerate(xs):
            np.testing.assert_array_equal(group[f"subject/{i}"][:], x)
        if how == "made":  # the rows asked for tile 0…n in order
            for pieces in asked.values():
                starts = [a for a, _ in pieces]
                assert starts == [0, *(b for _, b in pieces[:-1])] and pieces[-1][1] == n
    assert stores["direct"] == stores["made"] == stores["zarr"]


def _made(x, asked):
    """``x`` as rows made on demand, each request recorded in ``asked``."""

    def fill(a, b, out):
        asked.append((a, b))
        out[...] = x[a:b]

    return RowBlocks(x.shape, fill)


def test_write_rows_refuses_another_shape(tmp_path):
    a = _subject(tmp_path / "s.zarr", np.zeros((6, 2), np.float32), 4, 2)
    layout = local_layout(a)
    assert layout is not None
    with pytest.raises(ValueError, match=r"\(5, 2\) values for an array of \(6, 2\)"):
        write_rows(layout, np.zeros((5, 2), np.float32))


def _sixty_rows(tmp_path):
    """60 × 4 values in shards of 30 rows and inner chunks of 10: (values, array, layout)."""
    x = np.arange(60 * 4, dtype=np.float32).reshape(60, 4)
    a = _subject(tmp_path / "s.zarr", x, 30, 10)
    layout = local_layout(a)
    assert layout is not None
    return x, a, layout


def test_a_damaged_chunk_or_index_fails_its_checksum_naming_the_file(tmp_path):
    x, a, layout = _sixty_rows(tmp_path)
    shard = tmp_path / "s.zarr" / "subject" / "0" / "c" / "1" / "0"
    good = shard.read_bytes()
    for where in (5, len(good) - 10):  # a value of the first inner chunk; the index
        bad = bytearray(good)
        bad[where] ^= 0x10
        shard.write_bytes(bytes(bad))
        with pytest.raises(ValueError, match=rf"^{shard}: .*fails its checksum$"):
            read_rows(layout, None, slice(0, 4), np.empty((60, 4), np.float32))
        with pytest.raises(ValueError, match="checksum"):  # zarr finds the same damage
            a[:]
    shard.write_bytes(good)
    # rows of the undamaged shard alone never open the damaged one's chunks
    shard.write_bytes(bytes(bytearray(good[:5]) + bytes([good[5] ^ 0x10]) + good[6:]))
    out = np.empty((3, 4), np.float32)
    np.testing.assert_array_equal(read_rows(layout, np.array([0, 7, 29]), slice(0, 4), out),
                                  x[[0, 7, 29]])  # fmt: skip


def test_damage_in_rows_read_into_the_scratch_buffer_fails_its_checksum_too(tmp_path):
    """Whole rows are read straight into the caller's array and the rows it does not want
    into a scratch buffer: a flipped bit in an unwanted row still fails the chunk."""
    x, _, layout = _sixty_rows(tmp_path)
    shard = tmp_path / "s.zarr" / "subject" / "0" / "c" / "0" / "0"
    good = shard.read_bytes()
    bad = bytearray(good)
    bad[3 * 16 + 1] ^= 0x10  # row 3 of the first inner chunk (4 float32 values a row)
    shard.write_bytes(bytes(bad))
    out = np.empty((2, 4), np.float32)
    with pytest.raises(ValueError, match=rf"^{shard}: inner chunk 0 fails its checksum$"):
        read_rows(layout, np.array([1, 8]), slice(0, 4), out)
    np.testing.assert_array_equal(  # the chunks without the damage read as written
        read_rows(layout, np.array([10, 29]), slice(0, 4), out), x[[10, 29]]
    )


@settings(max_examples=15, deadline=None)
@given(step=st.integers(1, 3), offset=st.integers(0, 2), inner=st.sampled_from([7, 600, 1500]))
def test_rows_in_many_runs_read_as_zarr_reads(tmp_path_factory, step, offset, inner):
    """A chunk whose wanted rows fall in more runs than one read takes (every other row
    of 1,500) is read whole and its rows copied out; in fewer, straight into the rows:
    the same values either way."""
    from lsd_dask.io.local_shards import _MAX_PIECES, _pieces

    x = np.random.default_rng(step).standard_normal((3000, 3)).astype(np.float32)
    a = _subject(tmp_path_factory.mktemp("s") / "s.zarr", x, 3000, inner)
    layout = local_layout(a)
    assert layout is not None
    rows = np.arange(offset, 3000, step)
    out = np.full((rows.size, 3), np.nan, np.float32)
    np.testing.assert_array_equal(read_rows(layout, rows, slice(0, 3), out), x[rows])
    scratch = np.zeros(inner * 12 + 4, np.uint8)
    wanted = rows[rows < inner]
    pieces = _pieces(out[: wanted.size], wanted, inner, scratch)
    runs = 1 if step == 1 else wanted.size
    assert (pieces is None) == (2 * runs + 2 > _MAX_PIECES)
    if pieces is not None:  # every byte of the chunk and its checksum, in order
        assert sum(p.nbytes for p in pieces) == scratch.size


def test_chunks_and_shards_never_written_read_as_the_fill_value(tmp_path):
    """zarr leaves out inner chunks (and whole shards) equal to the fill value unless told
    to write them: they read as it, as zarr reads them."""
    from zarr.codecs import Crc32cCodec

    x = np.zeros((40, 3), np.float32)
    x[:10] = 1.0  # shard 0: one written inner chunk, one left out; shard 1: no file
    a = zarr.create_array(
        str(tmp_path / "a.zarr"), shape=x.shape, chunks=(10, 3), shards=(20, 3),
        dtype="float32", compressors=[Crc32cCodec()], fill_value=0.0,
    )  # fmt: skip
    a[:] = x
    assert not (tmp_path / "a.zarr" / "c" / "1" / "0").exists()
    layout = local_layout(a)
    assert layout is not None
    out = np.full((40, 3), np.nan, np.float32)
    np.testing.assert_array_equal(read_rows(layout, None, slice(0, 3), out), a[:])
    rows = np.array([3, 15, 25, 39])
    out = np.full((4, 2), np.nan, np.float32)
    np.testing.assert_array_equal(read_rows(layout, rows, slice(1, 3), out), a[:][rows, 1:])


def test_shard_files_follow_the_arrays_chunk_key_encoding(tmp_path):
    """The shards' files are where zarr's key encoding puts them (``1.0``, not ``c/1/0``)."""
    from zarr.codecs import Crc32cCodec

    x = np.arange(40 * 3, dtype=np.float32).reshape(40, 3)
    a = zarr.create_array(
        str(tmp_path / "v2keys.zarr"), shape=x.shape, chunks=(5, 3), shards=(20, 3),
        dtype="float32", compressors=[Crc32cCodec()],
        chunk_key_encoding={"name": "v2", "separator": "."},
    )  # fmt: skip
    a[:] = x
    layout = local_layout(a)
    assert layout is not None
    assert [f.rsplit("/", 1)[-1] for f in layout.shard_files] == ["0.0", "1.0"]
    rows = np.array([1, 19, 20, 39])
    out = np.empty((4, 3), np.float32)
    np.testing.assert_array_equal(read_rows(layout, rows, slice(0, 3), out), a[:][rows])


def test_arrays_it_cannot_read_go_through_zarr(tmp_path):
    x = np.ones((20, 3), np.float32)
    assert local_layout(_subject(tmp_path / "lz4.zarr", x, 10, 5, compressor="lz4")) is None
    assert local_layout(_subject(tmp_path / "plain.zarr", x, 10, 5)) is not None
    unsharded = zarr.create_array(str(tmp_path / "u.zarr"), shape=(20, 3), chunks=(5, 3),
                                  dtype="float32")  # fmt: skip
    assert local_layout(unsharded) is None
    in_memory = zarr.create_array(
        zarr.storage.MemoryStore(), shape=(20, 3), chunks=(5, 3), shards=(10, 3),
        dtype="float32", compressors=[zarr.codecs.Crc32cCodec()],
    )  # fmt: skip
    assert local_layout(in_memory) is None
    by_columns = zarr.create_array(
        str(tmp_path / "c.zarr"), shape=(20, 4), chunks=(5, 2), shards=(10, 4),
        dtype="float32", compressors=[zarr.codecs.Crc32cCodec()],
    )  # fmt: skip
    assert local_layout(by_columns) is None


@settings(max_examples=40, deadline=None)
@given(
    pieces=st.lists(st.binary(min_size=0, max_size=300), min_size=1, max_size=5),
    dtype=st.sampled_from(["u1", "<f4", "<f8"]),
)
def test_checksum_is_zarrs_crc32c_over_the_pieces_in_order(pieces, dtype):
    """``_crc`` (the ``crc32c`` package) gives what zarr's own codec library,
    ``google_crc32c``, gives over the same bytes laid end to end, stored little-endian."""
    import google_crc32c

    from lsd_dask.io.local_shards import _crc

    size = np.dtype(dtype).itemsize
    arrays = [np.frombuffer(p[: len(p) // size * size], dtype) for p in pieces]
    whole = b"".join(a.tobytes() for a in arrays)
    expected = int(google_crc32c.value(whole)).to_bytes(4, "little")
    assert _crc(*arrays) == expected
