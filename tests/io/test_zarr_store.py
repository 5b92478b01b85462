import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsd_dask.io import open_split, write_split


def _subjects(n=50, t=8, s=3, seed=0):
    rng = np.random.default_rng(seed)
    return [(f"sub-{i}", rng.standard_normal((n, t)).astype(np.float32)) for i in range(s)]


def test_roundtrip_layout_and_attrs(tmp_path):
    subs = _subjects(n=45)
    mask = np.ones(50, bool)  # the surface has 50 vertices; the store holds the 45 kept
    mask[:5] = False
    p = write_split(
        tmp_path / "split1.zarr",
        iter(subs),
        n_vertices=45,
        timepoints=8,
        vertex_mask=mask,
        mesh="ico3",
        vertex_chunk=16,
    )
    st = open_split(p)
    assert st.data.dtype == np.float32 and st.data.shape == (45, 24)
    assert st.data.chunks == ((16, 16, 13), (8, 8, 8))  # one subject per column chunk
    np.testing.assert_array_equal(st.data.compute(), np.concatenate([x for _, x in subs], 1))
    assert st.subjects == ["sub-0", "sub-1", "sub-2"] and st.timepoints == [8, 8, 8]
    np.testing.assert_array_equal(st.vertex_mask, mask)
    assert st.mesh == "ico3"
    # the store is real zarr v3 on disk
    import zarr

    assert zarr.open_group(str(p), mode="r").metadata.zarr_format == 3


def test_column_blocks_read_into_the_callers_buffer(tmp_path):
    subs = _subjects(n=40, t=8, s=3)
    p = write_split(tmp_path / "s.zarr", iter(subs), n_vertices=40, timepoints=8, vertex_chunk=16)
    blocks = open_split(p).column_blocks
    X = np.concatenate([x for _, x in subs], 1)
    assert blocks.shape == X.shape and blocks.dtype == np.float32 and blocks.chunks == (16, 8)
    out = np.full((40, 11), np.nan, np.float32)
    assert blocks.read_columns(5, 16, out) is out  # across a chunk border, in place
    np.testing.assert_array_equal(out, X[:, 5:16])
    np.testing.assert_array_equal(blocks.to_dask().compute(), X)
    import pickle

    again = pickle.loads(pickle.dumps(blocks))  # what a worker receives: it reopens the store
    np.testing.assert_array_equal(again.read_columns(0, 3, np.empty((40, 3), np.float32)), X[:, :3])


def test_interrupted_write_leaves_nothing_that_opens(tmp_path):
    subs = _subjects()

    def broken():
        yield subs[0]
        yield ("sub-bad", np.zeros((49, 8), np.float32))  # wrong shape mid-write

    with pytest.raises(ValueError, match="expected \\(50, 8\\)"):
        write_split(tmp_path / "s.zarr", broken(), n_vertices=50, timepoints=8)
    assert not (tmp_path / "s.zarr").exists()
    assert list(tmp_path.iterdir()) == []  # the partial folder was removed
    with pytest.raises(FileNotFoundError):
        open_split(tmp_path / "s.zarr")


def test_incomplete_store_refused(tmp_path):
    import zarr

    g = zarr.open_group(str(tmp_path / "x.zarr"), mode="w")
    g.create_array("data", shape=(2, 2), dtype="float32")
    with pytest.raises(ValueError, match="not a complete split store"):
        open_split(tmp_path / "x.zarr")
    g.attrs.update({"complete": True, "subjects": ["a"], "timepoints": [2]})
    with pytest.raises(ValueError, match="store layout 1, this lsd-dask reads 2; rewrite it"):
        open_split(tmp_path / "x.zarr")


def test_mask_must_match_rows(tmp_path):
    with pytest.raises(ValueError, match="True count"):
        write_split(
            tmp_path / "s.zarr",
            _subjects(),
            n_vertices=50,
            timepoints=8,
            vertex_mask=np.ones(60, bool),
        )


def test_subjects_consumed_one_at_a_time(tmp_path):
    seen = []

    def gen():
        for sid, x in _subjects():
            seen.append(sid)
            # the store already holds every earlier subject when the next one is produced
            yield sid, x

    p = write_split(tmp_path / "g.zarr", gen(), n_vertices=50, timepoints=[8, 8, 8])
    assert seen == ["sub-0", "sub-1", "sub-2"]
    assert open_split(p).data.shape == (50, 24)


def test_no_silent_overwrite(tmp_path):
    p = write_split(tmp_path / "s.zarr", _subjects(), n_vertices=50, timepoints=8)
    with pytest.raises(FileExistsError):
        write_split(p, _subjects(seed=1), n_vertices=50, timepoints=8)
    write_split(p, _subjects(seed=1), n_vertices=50, timepoints=8, overwrite=True)
    np.testing.assert_array_equal(open_split(p).data[:, :8].compute(), _subjects(seed=1)[0][1])


def test_lz4_codec(tmp_path):
    subs = _subjects()
    p = write_split(tmp_path / "c.zarr", subs, n_vertices=50, timepoints=8, compressor="lz4")
    np.testing.assert_array_equal(open_split(p).data[:, 8:16].compute(), subs[1][1])


def test_verify_split_counts_every_chunk(tmp_path):
    from lsd_dask.io.zarr_store import verify_split

    subs = _subjects(n=45)
    subs[1] = ("sub-1", np.zeros((45, 8), np.float32))  # all-zero chunks are stored too
    p = write_split(tmp_path / "s.zarr", iter(subs), n_vertices=45, timepoints=8, vertex_chunk=16)
    assert verify_split(p) == 9
    chunk = next(f for f in sorted((p / "subject" / "1" / "c").rglob("*")) if f.is_file())
    chunk.unlink()  # what a reader without the whole folder sees
    with pytest.raises(ValueError, match="has 8 of its 9 shard files: the work folder must be"):
        verify_split(p)
    with pytest.raises(FileNotFoundError, match="must be shared with the Dask workers"):
        verify_split(tmp_path / "elsewhere.zarr")


def test_non_finite_subject_refused_and_nothing_written(tmp_path):
    subs = _subjects()
    subs[2][1][4, 3] = np.nan
    with pytest.raises(ValueError, match="subject 'sub-2': 1 vertices hold NaN or inf"):
        write_split(tmp_path / "s.zarr", iter(subs), n_vertices=50, timepoints=8)
    assert list(tmp_path.iterdir()) == []


def test_subjects_written_by_tasks_then_masked_at_read(tmp_path):
    """build_split: subjects written out of order by worker processes, each with every
    surface vertex; the mask, known only at the end, is applied by every reader."""
    from concurrent.futures import ProcessPoolExecutor

    from lsd_dask.io import build_split

    rng = np.random.default_rng(1)
    ts = [7, 5, 9]  # unequal lengths: column blocks cross subjects unevenly
    xs = [rng.standard_normal((30, t)).astype(np.float32) for t in ts]
    mask = rng.random(30) > 0.3
    with build_split(tmp_path / "s.zarr", n_rows=30, vertex_chunk=8) as w:
        with ProcessPoolExecutor(2) as pool:
            got = list(pool.map(w.write, [2, 0, 1], ["c", "a", "b"], [xs[2], xs[0], xs[1]]))
        assert got == [9, 7, 5]
        w.finish(["a", "b", "c"], ts, vertex_mask=mask, rows="surface")
    st = open_split(tmp_path / "s.zarr")
    X = np.concatenate(xs, axis=1)[mask]
    assert st.data.shape == X.shape and st.timepoints == ts
    np.testing.assert_array_equal(st.data.compute(), X)
    blocks = st.column_blocks
    assert blocks.shape == X.shape and blocks.chunks == (8, 9)
    for a, b in [(0, 21), (3, 15), (6, 8), (12, 13), (19, 21)]:
        out = np.full((X.shape[0], b - a), np.nan, np.float32)
        np.testing.assert_array_equal(blocks.read_columns(a, b, out), X[:, a:b])
    np.testing.assert_array_equal(blocks.to_dask().compute(), X)


def test_halves_read_each_subjects_first_and_second_half(tmp_path):
    """The two halves of every subject's time points, as lsd_dask.selection.half_columns
    indexes them, read with rows masked and subjects of unequal length."""
    from lsd_dask.io import build_split
    from lsd_dask.selection import half_columns

    rng = np.random.default_rng(2)
    ts = [7, 4, 9]
    xs = [rng.standard_normal((30, t)).astype(np.float32) for t in ts]
    mask = rng.random(30) > 0.3
    with build_split(tmp_path / "s.zarr", n_rows=30, vertex_chunk=8) as w:
        for j, x in enumerate(xs):
            w.write(j, f"s{j}", x)
        w.finish(["s0", "s1", "s2"], ts, vertex_mask=mask, rows="surface")
    X = np.concatenate(xs, axis=1)[mask]
    widths = ([t // 2 for t in ts], [t - t // 2 for t in ts])
    whole = open_split(tmp_path / "s.zarr").column_blocks
    assert whole.block_bounds == [(0, 7), (7, 11), (11, 20)]  # the subjects' columns
    halves = whole.halves()
    for half, cols, w in zip(halves, half_columns(ts), widths, strict=True):
        want = X[:, cols]
        assert half.shape == want.shape and half.chunks == (8, max(w))
        cuts = np.cumsum([0, *w]).tolist()
        assert half.block_bounds == list(zip(cuts[:-1], cuts[1:], strict=True))
        for a, b in [(0, want.shape[1]), (2, 6), (3, 4)]:
            out = np.full((X.shape[0], b - a), np.nan, np.float32)
            np.testing.assert_array_equal(half.read_columns(a, b, out), want[:, a:b])
        np.testing.assert_array_equal(half.to_dask().compute(), want)


def test_build_split_without_finish_keeps_nothing(tmp_path):
    from lsd_dask.io import build_split

    with pytest.raises(RuntimeError, match="finish\\(\\) was not called"):
        with build_split(tmp_path / "s.zarr", n_rows=4) as w:
            w.write(0, "a", np.ones((4, 2), np.float32))
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="subject 'a' has shape \\(3, 2\\); expected \\(4, T\\)"):
        with build_split(tmp_path / "s.zarr", n_rows=4) as w:
            w.write(0, "a", np.ones((3, 2), np.float32))
    assert list(tmp_path.iterdir()) == []


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 200_000),
    t=st.integers(1, 5000),
    chunk=st.one_of(st.none(), st.integers(1, 300_000)),
    inner=st.one_of(st.none(), st.integers(1, 300_000)),
)
def test_shard_rows_are_whole_inner_chunks(n, t, chunk, inner):
    from lsd_dask.io.zarr_store import shard_rows, vertex_chunk_for

    i, s = shard_rows(n, t, chunk, inner)
    want = min(n, chunk or vertex_chunk_for(n, t))
    assert 1 <= i <= s and s % i == 0  # zarr's rule: a shard is whole inner chunks
    assert want <= s < want + i  # the asked-for shard, rounded up by less than a chunk
    if inner is None and i > 1:
        assert i * t * 4 <= 32 * 2**20  # inner chunks of at most 32 MB
    if inner is not None:
        assert i == min(inner, s)


def test_subject_is_a_few_shard_files_read_back_with_kept_rows(tmp_path):
    """Several shards per subject, several inner chunks per shard, the kept rows read
    across inner-chunk and shard borders."""
    import zarr

    from lsd_dask.io import build_split

    rng = np.random.default_rng(3)
    ts = [11, 6]
    xs = [rng.standard_normal((50, t)).astype(np.float32) for t in ts]
    mask = rng.random(50) > 0.4
    mask[20:30] = False  # a whole inner chunk with no kept row
    with build_split(tmp_path / "s.zarr", n_rows=50, vertex_chunk=20, inner_chunk=5) as w:
        for j, x in enumerate(xs):
            w.write(j, f"s{j}", x)
        w.finish(["s0", "s1"], ts, vertex_mask=mask, rows="surface")
    arr = zarr.open_group(str(tmp_path / "s.zarr"), mode="r")["subject/0"]
    assert arr.shards == (20, 11) and arr.chunks == (5, 11)
    folder = tmp_path / "s.zarr" / "subject" / "0"
    files = sorted(f.name for f in folder.rglob("*") if f.is_file())
    assert files == ["0", "0", "0", "zarr.json"]  # c/0/0, c/1/0, c/2/0: three shards
    X = np.concatenate(xs, axis=1)[mask]
    blocks = open_split(tmp_path / "s.zarr").column_blocks
    for a, b in [(0, 17), (3, 14), (10, 12), (16, 17)]:
        out = np.full((X.shape[0], b - a), np.nan, np.float32)
        np.testing.assert_array_equal(blocks.read_columns(a, b, out), X[:, a:b])
    np.testing.assert_array_equal(open_split(tmp_path / "s.zarr").data.compute(), X)


def _write_subject(writer, j, seed, n, t):
    x = np.random.default_rng(seed).standard_normal((n, t)).astype(np.float32)
    return writer.write(j, f"sub-{j}", x), os.getpid()


def test_four_concurrent_writers_lose_nothing(tmp_path):
    """Four worker processes write 16 subjects into one store at once, each subject of
    four shards of four inner chunks: every value comes back (concurrent writes into one
    shard would lose data silently; here a shard has one writer)."""
    from distributed import Client, LocalCluster

    from lsd_dask.io import build_split
    from lsd_dask.io.zarr_store import verify_split

    n, t, s = 4096, 60, 16
    with (
        LocalCluster(
            n_workers=4, threads_per_worker=2, processes=True, host="127.0.0.1",
            dashboard_address=":0",
        ) as cluster,
        Client(cluster) as client,
        build_split(tmp_path / "s.zarr", n_rows=n, vertex_chunk=1024, inner_chunk=256) as w,
    ):  # fmt: skip
        seeds = range(100, 100 + s)
        futures = client.map(_write_subject, [w] * s, range(s), seeds, [n] * s, [t] * s)
        got = client.gather(futures)
        assert [tj for tj, _ in got] == [t] * s
        assert len({pid for _, pid in got} - {os.getpid()}) >= 2  # written by worker processes
        w.finish([f"sub-{j}" for j in range(s)], [t] * s)
    rngs = [np.random.default_rng(100 + j) for j in range(s)]
    want = np.concatenate([r.standard_normal((n, t)).astype(np.float32) for r in rngs], axis=1)
    np.testing.assert_array_equal(open_split(tmp_path / "s.zarr").data.compute(), want)
    assert verify_split(tmp_path / "s.zarr") == 4 * s


@pytest.mark.parametrize("t, files", [(250, 2), (1000, 2), (1200, 3), (4800, 6)])
def test_a_full_scale_subject_is_at_most_eight_files(t, files):
    """64,984 vertices: shards of about 256 MB, plus the array's zarr.json."""
    from lsd_dask.io.zarr_store import shard_rows

    _, shard = shard_rows(64984, t)
    assert -(-64984 // shard) + 1 == files <= 8
