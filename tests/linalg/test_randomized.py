import threading
from contextlib import contextmanager

import dask
import dask.array as da
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsd_dask.distributed import ClientPlacement, placement
from lsd_dask.io import open_split, write_split
from lsd_dask.linalg.placement import SchedulerChoice
from lsd_dask.linalg.randomized import randomized_svd
from lsd_dask.linalg.streaming import streaming_svd


def _low_rank(n=600, t=50, s=4, r=15, noise=0.3, seed=0):
    rng = np.random.default_rng(seed)
    L = rng.standard_normal((n, r)) * np.linspace(10, 2, r)
    return [
        (
            f"s{i}",
            (L @ rng.standard_normal((r, t)) + noise * rng.standard_normal((n, t))).astype(
                np.float32
            ),
        )
        for i in range(s)
    ]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    subs = _low_rank()
    p = write_split(
        tmp_path_factory.mktemp("z") / "split.zarr",
        subs,
        n_vertices=600,
        timepoints=50,
        vertex_chunk=128,
    )
    X = np.concatenate([x for _, x in subs], axis=1).astype(np.float64)
    U, s, Vt = np.linalg.svd(X, full_matrices=False)
    return p, subs, (U, s, Vt)


@contextmanager
def _two_workers(n: int = 2):
    """A LocalCluster of ``n`` (2) single-threaded worker processes on 127.0.0.1, as the
    client."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
            dashboard_address=":0",
        ) as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        yield client


def _min_cos(U, V):
    return np.linalg.svd(np.asarray(U, np.float64).T @ V)[1].min()


@pytest.mark.parametrize("test_matrix", ["sparse", "gaussian"])
def test_randomized_matches_exact(store, test_matrix):
    p, _, (U0, s0, _) = store
    X = open_split(p).data
    U, s, Vt = randomized_svd(X, 10, random_state=0, test_matrix=test_matrix)
    assert isinstance(U, da.Array)
    U = U.compute()
    assert U.dtype == np.float32 and s.dtype == np.float32 and Vt.dtype == np.float32
    np.testing.assert_allclose(s, s0[:10], rtol=1e-3)
    assert _min_cos(U, U0[:, :10]) > 0.999  # principal angles all below ~2.6 degrees
    # U s Vt reconstructs the rank-10 truncation
    approx = (U * s) @ Vt
    assert np.linalg.norm(approx - X.compute() @ Vt.T @ Vt) < 1e-2 * np.linalg.norm(approx)


def test_same_seed_same_result_and_signs(store):
    p, _, _ = store
    X = open_split(p).data
    a = randomized_svd(X, 8, random_state=3)
    b = randomized_svd(X, 8, random_state=3)
    np.testing.assert_array_equal(a[0].compute(), b[0].compute())
    np.testing.assert_array_equal(a[1], b[1])
    U = a[0].compute()
    big = np.abs(U).argmax(axis=0)
    assert np.all(U[big, np.arange(8)] > 0)


def test_number_of_passes_is_bounded(store):
    p, _, _ = store
    X = open_split(p).data
    count = {"n": 0}
    lock = threading.Lock()

    def counted(block):
        with lock:
            count["n"] += 1
        return block

    Xc = X.map_blocks(counted, dtype=X.dtype)
    for q in (0, 1, 3):
        for fuse, reads in ((True, q + 2), (False, 2 * q + 2)):
            count["n"] = 0
            U, s, Vt = randomized_svd(Xc, 5, n_power_iter=q, random_state=0, fuse_passes=fuse)
            U.compute()
            assert count["n"] == reads * X.npartitions, (q, fuse)


@pytest.mark.parametrize("fuse", [True, False])
def test_numpy_and_dask_inputs_agree(store, fuse):
    """Ω does not depend on chunks: numpy, and dask chunked two ways, give one answer."""
    p, subs, (U0, s0, _) = store
    X = open_split(p).data
    Xn = X.compute()
    ref = randomized_svd(Xn, 6, random_state=1, fuse_passes=fuse)
    assert isinstance(ref[0], np.ndarray)
    np.testing.assert_allclose(ref[1], s0[:6], rtol=1e-3)
    for chunks in (X.chunks, (300, 70)):
        U, s, Vt = randomized_svd(
            da.from_array(Xn, chunks=chunks), 6, random_state=1, fuse_passes=fuse
        )
        np.testing.assert_allclose(s, ref[1], rtol=1e-5)
        np.testing.assert_allclose(U.compute(), ref[0], atol=2e-4)
        np.testing.assert_allclose(Vt, ref[2], atol=2e-4)


def test_fused_and_unfused_passes_agree_with_exact(store):
    """Both pass schedules find the same leading subspace as numpy's SVD (float64 data)."""
    p, _, (U0, s0, _) = store
    X = open_split(p).data.astype(np.float64)
    for fuse in (True, False):
        U, s, _ = randomized_svd(X, 10, n_power_iter=3, random_state=0, fuse_passes=fuse)
        assert s.dtype == np.float64
        np.testing.assert_allclose(s, s0[:10], rtol=1e-6)
        assert _min_cos(U.compute(), U0[:, :10]) > 1 - 1e-6


def test_streaming_matches_exact_with_bounded_keep(store):
    _, subs, (U0, s0, _) = store
    U, s, Vt = streaming_svd((x for _, x in subs), 10, n_keep=30)
    assert Vt is None and U.dtype == np.float32
    np.testing.assert_allclose(s, s0[:10], rtol=1e-3)
    assert _min_cos(U, U0[:, :10]) > 0.999
    # dask blocks are accepted and give the same answer
    U2, s2, _ = streaming_svd((da.from_array(x, chunks=(100, 50)) for _, x in subs), 10, n_keep=30)
    np.testing.assert_allclose(s2, s, rtol=1e-5)


def test_randomized_under_distributed_client(store):
    p, _, (U0, s0, _) = store
    with _two_workers():
        U, s, _ = randomized_svd(open_split(p).data, 6, random_state=0)
        U = U.compute()
    np.testing.assert_allclose(s, s0[:6], rtol=1e-3)
    with dask.config.set(scheduler="threads"):
        U_t, s_t, _ = randomized_svd(open_split(p).data, 6, random_state=0)
    np.testing.assert_allclose(s_t, s, rtol=1e-5)
    np.testing.assert_allclose(np.abs(U_t.compute()), np.abs(U), atol=1e-4)


@pytest.mark.parametrize("start", [True, False])
def test_without_the_final_pass_a_rank_deficient_x_gives_its_singular_values(start):
    """``final_pass=False`` on an X of lower rank than l, in float32: its rank's singular
    values as LAPACK's, the rest zero, none above ‖X‖. From a start that spans more
    than X (the whole's U for a half of rank 12 where the whole has 40), the row basis
    Xᵀ Q has directions down at float32's rounding; divided by them, the product's
    rounding gave singular values up to 2.4 times ‖X‖ on brainspace's real run."""
    rng = np.random.default_rng(1)
    n, m, rank, k = 500, 120, 12, 30
    half = (rng.standard_normal((n, rank)) * np.geomspace(100, 1, rank)) @ rng.standard_normal(
        (rank, m)
    )
    other = rng.standard_normal((n, 40)) @ rng.standard_normal((40, m))
    whole = np.hstack([half, other])
    X = half.astype(np.float32)
    s0 = np.linalg.svd(half, compute_uv=False)
    kw = {"start": np.linalg.svd(whole, full_matrices=False)[0][:, :k]} if start else {}
    U, s, Vt = randomized_svd(
        X, k, n_power_iter=1 if start else 2, final_pass=False, random_state=0, **kw
    )
    np.testing.assert_allclose(s[:rank], s0[:rank], rtol=1e-4)
    assert np.all(s[rank:] <= 1e-4 * s0[0])
    np.testing.assert_allclose(U.T @ U, np.eye(k), atol=1e-5)
    Ur, sr, _ = randomized_svd(X, k, n_power_iter=1 if start else 2, final_pass=False,
                               random_state=0, return_vt=False, **kw)  # fmt: skip
    np.testing.assert_allclose(sr[:rank], s0[:rank], rtol=1e-4)
    assert np.all(sr[rank:] <= 1e-4 * s0[0])


def test_a_half_from_the_splits_u_on_distributed_workers(store):
    """A split store's time half, started from the split's U, on 2 worker processes: the
    same U and s as the numpy half from the same start."""
    p, subs, (U0, _, _) = store
    half = open_split(p).column_blocks.halves()[0]
    X = np.concatenate([x[:, : x.shape[1] // 2] for _, x in subs], axis=1)
    start = np.asarray(U0[:, :8], np.float32)
    ref, s_ref, _ = randomized_svd(X, 6, n_power_iter=1, final_pass=False, start=start)
    with _two_workers():
        U, s, _ = randomized_svd(
            half, 6, n_power_iter=1, final_pass=False, start=start, return_vt=False,
            placement=placement(),
        )  # fmt: skip
        U = U.compute()
    np.testing.assert_allclose(s, s_ref, rtol=1e-5)
    np.testing.assert_allclose(U, ref, atol=1e-4)


def test_each_pass_puts_its_group_tasks_on_every_worker(store):
    """A column-block source on 2 worker processes: every pass, the sketch's too, runs one
    group task on each worker. The tasks once shared the store's key, held by one worker,
    and the scheduler ran the sketch's (which need nothing else) there one after the
    other, the other worker idle: 2 s a split at full scale."""
    from distributed import get_task_stream

    p, _, (_, s0, _) = store
    blocks = open_split(p).column_blocks
    with _two_workers() as client:
        client.wait_for_workers(2)
        with get_task_stream(client) as ts:
            _, s, _ = randomized_svd(blocks, 6, n_power_iter=2, random_state=0,
                                     sketch_columns=100, return_vt=False,
                                     placement=placement())  # fmt: skip
        ran = sorted(
            (t["startstops"][-1]["start"], t["worker"])
            for t in ts.data
            if str(t["key"]).startswith("_group_pass-")
        )
    np.testing.assert_allclose(s, s0[:6], rtol=1e-3)
    # sketch, 2 power passes and the last transpose, one after the other: 2 group tasks each
    assert len(ran) == 8
    for i in range(0, 8, 2):
        assert ran[i][1] != ran[i + 1][1], ran


def test_group_task_i_asks_for_worker_thread_i_and_lets_others_take_it(store):
    """Every pass's group task i reaches the scheduler with a loose restriction to the
    worker of thread i (read from the scheduler's own task states, not the graph: the
    sketch's and the power passes' restrictions were once dropped on the way, when the
    basis's QR optimised the graph of the sums). The scheduler once queued both of a
    pass's group tasks on the worker holding most of their inputs while the other sat
    idle until one was stolen. Without a placement there is no restriction."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    from lsd_dask.linalg.block_passes import BlockPasses
    from lsd_dask.linalg.sketch import TestMatrix

    p, _, (_, s0, _) = store
    blocks = open_split(p).column_blocks
    passes = BlockPasses(blocks, 8, TestMatrix(0), np.float32, True, SchedulerChoice())
    for task in passes._tasks("sketch"):
        assert not task.dask.layers[task.key].annotations

    class Restrictions(SchedulerPlugin):
        def __init__(self, scheduler):
            self.scheduler, self.seen = scheduler, []

        def transition(self, key, start, finish, *args, **kwargs):
            if finish == "processing" and str(key).startswith("_group_pass-"):
                ts = self.scheduler.tasks[key]
                self.seen.append((sorted(ts.worker_restrictions or ()), ts.loose_restrictions))

    with _two_workers() as client:
        client.wait_for_workers(2)
        plugin = Restrictions(client.cluster.scheduler)
        client.cluster.scheduler.add_plugin(plugin, name="restrictions")
        _, s, _ = randomized_svd(blocks, 6, n_power_iter=2, random_state=0,
                                 sketch_columns=100, return_vt=False,
                                 placement=placement())  # fmt: skip
        workers = sorted(client.nthreads())
    np.testing.assert_allclose(s, s0[:6], rtol=1e-3)
    # the sketch, 2 power passes and the last transpose: group tasks 0 and 1 each, the
    # two in either order
    passes = [sorted(plugin.seen[i : i + 2]) for i in range(0, len(plugin.seen), 2)]
    assert passes == [[([w], True) for w in workers]] * 4, plugin.seen


def test_an_svd_given_one_worker_keeps_its_passes_and_qrs_there(store):
    """``placement([w])`` on 2 worker processes: every pass's group tasks (two, one per
    thread of the cluster) and every QR of the basis run on w (the other worker idle, free
    for another SVD); without the final pass, the last power iteration's group tasks still
    run once each, though their sums and Xᵀ Q blocks are two results of them (fused into a
    task of its own, the sum once ran a group again). Cut as on both workers, the answer
    is the SVD's on both workers bit for bit, and the exact one's to the randomized SVD's
    accuracy."""
    from distributed import get_task_stream

    p, _, (U0, s0, _) = store
    blocks = open_split(p).column_blocks
    with _two_workers() as client:
        client.wait_for_workers(2)
        one = sorted(client.nthreads())[1]
        with get_task_stream(client) as ts:
            U, s, _ = randomized_svd(blocks, 6, n_power_iter=2, final_pass=False,
                                     random_state=0, return_vt=False,
                                     placement=placement([one]))  # fmt: skip
            U = U.compute()
        Ub, sb, _ = randomized_svd(blocks, 6, n_power_iter=2, final_pass=False,
                                   random_state=0, return_vt=False,
                                   placement=placement())  # fmt: skip
        Ub = Ub.compute()
    ran = [(str(t["key"]), t["worker"]) for t in ts.data]
    # a fused task that runs a group pass again has a name of its own with this in it
    groups = [w for k, w in ran if "group_pass" in k]
    qrs = [w for k, w in ran if k.startswith(("_qr_reflectors-", "_lu_basis-"))]
    assert groups == [one] * 6, ran  # the sketch and 2 power iterations, 2 groups each
    assert qrs and set(qrs) == {one}, ran
    assert any(k.startswith("_qr_reflectors-") for k, _ in ran), ran  # 2 row blocks: TSQR
    np.testing.assert_array_equal(s, sb)
    np.testing.assert_array_equal(U, Ub)
    np.testing.assert_allclose(s, s0[:6], rtol=1e-3)
    assert _min_cos(U, U0[:, :6]) > 0.99


def test_a_one_worker_svd_of_rank_deficient_data_falls_back_from_the_lu(tmp_path):
    """Data of rank 3 and l = 16, on one worker (one row block: the LU's basis is tried):
    every basis's Y is rank-deficient, so each LU gives no basis and the QR's is taken
    instead, from the same persisted Y: each pass's group task still runs once, and the
    SVD finds the 3 directions there are."""
    from distributed import get_task_stream

    rng = np.random.default_rng(5)
    lat = rng.standard_normal((600, 3)) * [10.0, 5.0, 2.0]
    subs = [(f"s{i}", (lat @ rng.standard_normal((3, 50))).astype(np.float32)) for i in range(4)]
    p = write_split(tmp_path / "split.zarr", subs, n_vertices=600, timepoints=50, vertex_chunk=128)
    X = np.concatenate([x for _, x in subs], axis=1).astype(np.float64)
    with _two_workers(1) as client:
        client.wait_for_workers(1)
        one = sorted(client.nthreads())[0]
        with get_task_stream(client) as ts:
            _, s, _ = randomized_svd(open_split(p).column_blocks, 6, n_power_iter=3,
                                     final_pass=True, random_state=0, return_vt=False,
                                     placement=placement([one]))  # fmt: skip
    keys = [str(t["key"]) for t in ts.data]
    assert sum("group_pass" in k for k in keys) == 5, keys  # sketch, 3 powers, transpose
    assert sum(k.startswith("_lu_basis-") for k in keys) == 3, keys
    # the reflectors of the 3 bases the LUs gave none for, and of the last
    assert sum(k.startswith("_qr_reflectors-") for k in keys) == 4, keys
    np.testing.assert_allclose(s[:3], np.linalg.svd(X, compute_uv=False)[:3], rtol=1e-5)
    assert np.all(s[3:] < 1e-4 * s[0])


def test_a_client_without_workers_puts_no_restriction_on_the_group_tasks():
    """All workers lost (a killed SVD worker's nanny not yet back): no thread to ask for,
    so no restriction; the tasks wait for the workers that come. Without a client, the
    placement is the scheduler's choice."""
    from distributed import Client, LocalCluster

    assert isinstance(placement(), SchedulerChoice)  # no client here
    assert placement().slots() is None
    with (
        LocalCluster(n_workers=0, processes=True, host="127.0.0.1", dashboard_address=":0") as c,
        Client(c),
    ):
        assert isinstance(placement(), ClientPlacement)
        assert placement().slots() is None
        assert placement().threads() == 1


def test_bad_k(store):
    p, _, _ = store
    with pytest.raises(ValueError, match="k must be in"):
        randomized_svd(open_split(p).data, 1000)
    with pytest.raises(ValueError, match="n_keep"):
        streaming_svd([np.ones((5, 5))], 4, n_keep=2)
    with pytest.raises(ValueError, match="test_matrix must be one of"):
        randomized_svd(open_split(p).data, 4, test_matrix="normal")


def test_wide_column_chunks_are_split_to_bounded_blocks():
    from lsd_dask.linalg.passes import _bounded_column_blocks

    X = da.zeros((1000, 600), chunks=(250, 600), dtype=np.float32)
    # one column of all rows is 4 kB: a 100 kB cap allows 25 columns per block
    Xb = _bounded_column_blocks(X, target_bytes=100e3)
    assert max(Xb.chunks[1]) == 25 and Xb.chunks[0] == X.chunks[0]
    assert _bounded_column_blocks(X, target_bytes=10e6) is X


def test_column_blocks_read_in_tasks_and_match_dask_input(store):
    """A column-block source gives the dask path's answer (same Ω, same passes), as a dask
    U; a zarr array given as it is goes through dask with the same answer."""
    p, _, (U0, s0, _) = store
    st = open_split(p)
    U, s, Vt = randomized_svd(st.column_blocks, 6, random_state=2)
    assert isinstance(U, da.Array) and U.dtype == np.float32
    Ud, sd, Vtd = randomized_svd(st.data, 6, random_state=2)
    np.testing.assert_allclose(s, sd, rtol=1e-5)
    np.testing.assert_allclose(U.compute(), Ud.compute(), atol=2e-4)
    np.testing.assert_allclose(Vt, Vtd, atol=2e-4)
    np.testing.assert_allclose(s, s0[:6], rtol=1e-3)
    # without fused passes the zarr array is read through dask: same subspace
    U2, s2, _ = randomized_svd(st.column_blocks, 6, random_state=2, fuse_passes=False)
    np.testing.assert_allclose(s2, s, rtol=1e-4)
    # a zarr array (one subject's) given as it is: the dask path on the same columns
    z = st.arrays[0]
    Uz, sz, _ = randomized_svd(z, 6, random_state=2)
    U1, s1, _ = randomized_svd(st.data[:, : z.shape[1]], 6, random_state=2)
    np.testing.assert_allclose(sz, s1, rtol=1e-5)
    np.testing.assert_allclose(Uz.compute(), U1.compute(), atol=2e-4)


def test_linalg_imports_no_storage_library():
    """Linear algebra knows arrays and column-block sources, not how they are stored."""
    import ast
    from pathlib import Path

    import lsd_dask.linalg

    storage = {"zarr", "nibabel", "fsspec", "s3fs", "h5py"}
    for path in Path(lsd_dask.linalg.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not {n.split(".")[0] for n in names} & storage, f"{path.name}: {names}"


def test_zarr_input_under_distributed_workers(store):
    """Worker processes open the store themselves; one group task per worker thread."""
    p, _, (U0, s0, _) = store
    with _two_workers():
        here = placement()
        U, s, _ = randomized_svd(open_split(p).column_blocks, 6, random_state=0, placement=here)
        U = U.compute()
        # without the final pass: the group tasks give both products from one read
        Uf, sf, Vtf = randomized_svd(
            open_split(p).column_blocks, 6, random_state=0, final_pass=False, placement=here
        )
        Uf = Uf.compute()
    np.testing.assert_allclose(s, s0[:6], rtol=1e-3)
    assert _min_cos(U, U0[:, :6]) > 0.999
    Un, sn, Vtn = randomized_svd(open_split(p).data.compute(), 6, random_state=0, final_pass=False)
    np.testing.assert_allclose(sf, sn, rtol=1e-5)
    np.testing.assert_allclose(Uf, Un, atol=2e-4)
    np.testing.assert_allclose(Vtf, Vtn, atol=2e-4)


def test_block_passes_sum_each_row_block_of_the_basis_on_its_own(store):
    """A pass's sum is one task per row block of the basis, each over only those rows of
    every group's result: the blocks' sums (and their QRs) can run on different workers,
    where one sum of the whole put both row blocks on one worker. Under 2 worker processes
    the answer is numpy's passes', and without Vt the same U and s."""
    from lsd_dask.linalg.block_passes import BlockPasses
    from lsd_dask.linalg.sketch import TestMatrix

    p, subs, _ = store
    with _two_workers():
        blocks = open_split(p).column_blocks
        passes = BlockPasses(blocks, 16, TestMatrix(0), np.float32, True, placement())
        Y = passes.sketch()
        assert passes.row_chunks == (300, 300) and Y.chunks == ((300, 300), (16,))
        graph = dict(Y.__dask_graph__())
        sums = [t for k, t in graph.items() if str(k).startswith("_add_all-")]
        assert len(sums) == 2  # one per row block
        for t in sums:  # over a row piece of each group's result, never a whole one
            assert all(str(d).startswith("_rows-") for d in t.dependencies)
            groups = {g for d in t.dependencies for g in graph[d].dependencies}
            assert len(t.dependencies) == 2 and len(groups) == 2
        X = np.concatenate([x for _, x in subs], axis=1)
        np.testing.assert_allclose(Y.compute(), passes_numpy_sketch(X, 16), rtol=1e-4, atol=1e-3)
        U, s, Vt = randomized_svd(blocks, 6, random_state=3, placement=placement())
        U = U.compute()
        Uv, sv, no_vt = randomized_svd(
            blocks, 6, random_state=3, return_vt=False, placement=placement()
        )
        Uv = Uv.compute()
    Un, sn, Vtn = randomized_svd(X, 6, random_state=3)
    np.testing.assert_allclose(s, sn, rtol=1e-5)
    np.testing.assert_allclose(U, Un, atol=2e-4)
    np.testing.assert_allclose(Vt, Vtn, atol=2e-4)
    assert no_vt is None
    np.testing.assert_array_equal(sv, s)
    np.testing.assert_array_equal(Uv, U)


def passes_numpy_sketch(X, l):
    from lsd_dask.linalg.passes import NumpyPasses
    from lsd_dask.linalg.sketch import TestMatrix

    return NumpyPasses(X, l, TestMatrix(0)).sketch()


@pytest.mark.parametrize("final_pass", [True, False])
def test_without_vt_the_same_u_and_s(final_pass):
    """``return_vt=False`` forms no row basis and changes nothing else."""
    X = np.concatenate([x for _, x in _low_rank(n=300, t=40, s=3)], axis=1)
    U, s, Vt = randomized_svd(X, 8, random_state=1, final_pass=final_pass)
    U2, s2, Vt2 = randomized_svd(X, 8, random_state=1, final_pass=final_pass, return_vt=False)
    assert Vt.shape == (8, X.shape[1]) and Vt2 is None
    np.testing.assert_allclose(s2, s, rtol=1e-6)
    np.testing.assert_allclose(U2, U, atol=1e-6)


def test_a_received_misaligned_operand_is_copied_once_to_an_aligned_array():
    """A float32 array whose data start 2 bytes past a 4-byte boundary (as one rebuilt on a
    message's bytes can) comes back aligned and equal; an aligned one comes back as is;
    a group pass given misaligned row blocks of Q gives the aligned blocks' result."""
    from lsd_dask.linalg.block_passes import _aligned, _group_pass
    from lsd_dask.linalg.sketch import TestMatrix

    rng = np.random.default_rng(0)
    q = rng.standard_normal((50, 7)).astype(np.float32)
    raw = np.zeros(q.nbytes + 2, np.uint8)
    raw[2:] = q.view(np.uint8).ravel()
    odd = np.ndarray(q.shape, np.float32, buffer=raw, offset=2)
    assert not odd.flags.aligned
    np.testing.assert_array_equal(odd, q)
    fixed = _aligned(odd)
    assert fixed.flags.aligned and fixed.flags.c_contiguous
    np.testing.assert_array_equal(fixed, q)
    assert _aligned(q) is q

    class Source:  # a column-block source of one 50 × 12 block
        x = rng.standard_normal((50, 12)).astype(np.float32)
        shape, dtype = x.shape, x.dtype

        def read_columns(self, a, b, out):
            out[...] = self.x[:, a:b]
            return out

    src = Source()
    blocks = [q[:30], q[30:]]
    half = [
        np.ndarray(
            b.shape,
            np.float32,
            buffer=np.concatenate([np.zeros(2, np.uint8), b.view(np.uint8).ravel()]),
            offset=2,
        )
        for b in blocks
    ]
    assert not any(h.flags.aligned for h in half)
    args = ([(0, 12)], "power")
    rest = (TestMatrix(0), 7, np.float32)
    got = _group_pass(src, *args, half, *rest)
    want = _group_pass(src, *args, blocks, *rest)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got[0], src.x @ (src.x.T @ q), rtol=1e-4, atol=1e-3)


def test_rank_deficient_input_is_handled():
    """Exactly rank 3 with l > 3: the Householder QR keeps a valid basis; s[3:] ~ 0."""
    rng = np.random.default_rng(0)
    X = (rng.standard_normal((400, 3)) @ rng.standard_normal((3, 120))).astype(np.float64)
    s0 = np.linalg.svd(X, compute_uv=False)
    U, s, Vt = randomized_svd(da.from_array(X, chunks=(100, 40)), 5, random_state=0)
    np.testing.assert_allclose(s[:3], s0[:3], rtol=1e-8)
    assert np.all(s[3:] < 1e-8 * s[0])
    np.testing.assert_allclose((U[:, :3].compute() * s[:3]) @ Vt[:3], X, atol=1e-8)


def test_streaming_is_exact_when_it_keeps_every_column(store):
    """With n_keep at least the total column count nothing is truncated: numpy's SVD."""
    _, subs, (U0, s0, _) = store
    blocks = [x.astype(np.float64) for _, x in subs]
    total = sum(b.shape[1] for b in blocks)
    U, s, _ = streaming_svd(iter(blocks), 12, n_keep=total)
    np.testing.assert_allclose(s, s0[:12], rtol=1e-10)
    np.testing.assert_allclose(np.abs(U.T @ U0[:, :12]), np.eye(12), atol=1e-8)
    # keeping fewer columns can only lose accuracy in the tail here
    U_small, s_small, _ = streaming_svd(iter(blocks), 12, n_keep=12)
    assert np.abs(s_small / s0[:12] - 1).max() >= np.abs(s / s0[:12] - 1).max()


class _InMemoryBlocks:
    """The column-block protocol over a numpy array: what randomized_svd needs of a
    source, with no storage library behind it."""

    def __init__(self, X, chunks):
        self.X, self.shape, self.dtype, self.chunks, self.ndim = X, X.shape, X.dtype, chunks, 2
        self.reads = self.columns_read = 0

    def read_columns(self, start, stop, out):
        self.reads += 1
        self.columns_read += stop - start
        out[...] = self.X[:, start:stop]
        return out


@settings(max_examples=40, deadline=None)
@given(
    start=st.integers(0, 3000),
    width=st.integers(1, 1500),
    l=st.integers(1, 40),
    seed=st.integers(0, 2**32),
)
def test_the_sparse_sign_test_matrix_does_not_depend_on_how_it_is_cut(start, width, l, seed):
    """Any rows of Ω are those rows of one draw, whatever block asks for them: each row
    has min(l, 8) entries ±1, in distinct columns."""
    from lsd_dask.linalg.sketch import TestMatrix

    stop = start + width
    whole = TestMatrix(seed).rows(0, stop, l, np.float64).toarray()
    part = TestMatrix(seed).rows(start, stop, l, np.float32)
    assert part.shape == (width, l) and part.dtype == np.float32
    np.testing.assert_array_equal(part.toarray(), whole[start:])
    assert set(np.unique(whole)) <= {-1.0, 0.0, 1.0}
    assert ((whole != 0).sum(axis=1) == min(l, 8)).all()
    other = TestMatrix(seed + 1).rows(0, stop, l, np.float64).toarray()
    assert stop < 20 or not np.array_equal(other, whole)  # by chance: 2⁻²⁰ at most


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 700),
    width=st.integers(1, 60),
    l=st.integers(1, 30),
    kind=st.sampled_from(["sparse", "gaussian"]),
    seed=st.integers(0, 2**16),
)
def test_a_sketch_product_adds_x_times_omega_in_place(n, width, l, kind, seed):
    """``_add_times`` adds x Ω (Ω's block dense or CSR) into ``out`` itself, as numpy's
    dense product does, for row counts across its 256-row pieces; ``out`` may be a view.
    The sparse product through scipy's kernel and buffers gives scipy's own ``x @ Ω``
    bit for bit."""
    from lsd_dask.linalg.passes import _add_times
    from lsd_dask.linalg.sketch import TestMatrix

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, width)).astype(np.float32)
    rows = TestMatrix(seed, kind).rows(3, 3 + width, l, np.float32)
    dense = rows.toarray() if kind == "sparse" else rows
    base = rng.standard_normal((2, n, l)).astype(np.float32)
    start = base[1].copy()
    expect = base[1] + x.astype(np.float64) @ dense
    got = _add_times(base[1], x, rows)
    assert got is base[1] or np.shares_memory(got, base)
    np.testing.assert_allclose(base[1], expect, rtol=1e-5, atol=1e-4)
    if kind == "sparse":
        start += np.asarray(x @ rows)  # scipy's public product, added the same way
        np.testing.assert_array_equal(base[1], start)


def test_a_sketch_product_without_scipys_kernel_takes_its_public_product(monkeypatch):
    """Where scipy has no ``csr_matvecs`` (a private name), or x is not in out's dtype,
    the sparse product is scipy's public one: the same sums."""
    import lsd_dask.linalg.passes as R
    from lsd_dask.linalg.sketch import TestMatrix

    rng = np.random.default_rng(5)
    x = rng.standard_normal((600, 40)).astype(np.float32)
    rows = TestMatrix(5).rows(0, 40, 20, np.float32)
    with_kernel = R._add_times(np.zeros((600, 20), np.float32), x, rows)
    as_float64 = R._add_times(np.zeros((600, 20), np.float32), x.astype(np.float64), rows)
    monkeypatch.setattr(R, "_csr_matvecs", lambda: None)
    without = R._add_times(np.zeros((600, 20), np.float32), x, rows)
    np.testing.assert_array_equal(without, with_kernel)
    np.testing.assert_allclose(as_float64, with_kernel, rtol=1e-5, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(
    widths=st.lists(st.integers(1, 40), min_size=1, max_size=12),
    n_groups=st.integers(1, 9),
)
def test_equal_groups_cover_the_columns_once_in_runs_of_equal_width(widths, n_groups):
    """Every column in exactly one piece, in order; each piece inside one block; the runs
    of equal width (±1), at most ``n_groups`` of them."""
    from lsd_dask.linalg.block_passes import _equal_groups

    edges = np.cumsum([0, *widths]).tolist()
    bounds = list(zip(edges[:-1], edges[1:], strict=True))
    groups = _equal_groups(bounds, n_groups)
    pieces = [p for g in groups for p in g]
    assert [a for a, _ in pieces] == [0] + [b for _, b in pieces[:-1]]
    assert pieces[-1][1] == edges[-1] and all(a < b for a, b in pieces)
    assert all(any(a <= lo and hi <= b for a, b in bounds) for lo, hi in pieces)
    runs = [g[-1][1] - g[0][0] for g in groups]
    assert max(runs) - min(runs) <= 1
    assert len(groups) == min(n_groups, edges[-1])


@settings(max_examples=60, deadline=None)
@given(
    widths=st.lists(st.integers(1, 40), min_size=1, max_size=12),
    gaps=st.lists(st.integers(0, 30), min_size=12, max_size=12),
    n_groups=st.integers(1, 9),
)
def test_equal_groups_of_blocks_apart_cover_each_column_once(widths, gaps, n_groups):
    """Blocks with columns between them (the blocks a sketch of part of X reads) are
    shared out the same way: each of their columns in exactly one piece, in order, inside
    its block, in runs of equal width (±1); none of the columns between them."""
    from lsd_dask.linalg.block_passes import _equal_groups

    bounds, a = [], 0
    for w, g in zip(widths, gaps, strict=False):
        bounds.append((a + g, a + g + w))
        a += g + w
    groups = _equal_groups(bounds, n_groups)
    pieces = [p for g in groups for p in g]
    covered = [c for lo, hi in pieces for c in range(lo, hi)]
    assert covered == [c for lo, hi in bounds for c in range(lo, hi)]
    assert all(any(a <= lo and hi <= b for a, b in bounds) for lo, hi in pieces)
    runs = [sum(hi - lo for lo, hi in g) for g in groups]
    assert max(runs) - min(runs) <= 1
    assert len(groups) == min(n_groups, sum(widths))


@settings(max_examples=40, deadline=None)
@given(
    widths=st.lists(st.integers(1, 60), min_size=1, max_size=15),
    columns=st.integers(1, 400),
    seed=st.integers(0, 2**32),
)
def test_a_sketch_of_part_of_x_takes_whole_blocks_until_it_has_the_columns(widths, columns, seed):
    """Whole blocks, in column order, drawn from the seed: enough of them for the columns
    asked (all when X has fewer), and no more than that draw's first few."""
    from lsd_dask.linalg.sketch import sketch_blocks

    X = _InMemoryBlocks(np.zeros((2, sum(widths))), (2, 1))
    cuts = np.cumsum([0, *widths]).tolist()
    X.block_bounds = list(zip(cuts[:-1], cuts[1:], strict=True))
    keep = sketch_blocks(X, columns, seed)
    assert list(keep) == sorted(keep) and set(keep) <= set(X.block_bounds)
    held = sum(b - a for a, b in keep)
    assert held >= min(columns, sum(widths))
    # minimal for its draw: without its last block the draw held too few columns
    order = np.random.default_rng([seed, 1]).permutation(len(widths))
    drawn = [X.block_bounds[j] for j in order[: len(keep)]]
    assert sorted(drawn) == list(keep)
    assert held - (drawn[-1][1] - drawn[-1][0]) < columns
    assert sketch_blocks(X, columns, seed) == keep


def test_a_sketch_of_part_of_x_reads_only_its_blocks_at_the_same_accuracy():
    """``sketch_columns``: the sketch reads the blocks drawn and no others; a dask input
    of the same column chunks gets the same Ω and the same result; and after the power
    iterations the basis is as accurate as the whole sketch's (rank-k error within 1 %
    of it, both within 5 % of the best rank-k)."""
    X = _decaying(m=800)
    k = 10
    U0, s0, Vt0 = np.linalg.svd(X, full_matrices=False)
    best = np.linalg.norm(X - (U0[:, :k] * s0[:k]) @ Vt0[:k])

    def error(U, s, Vt):
        return np.linalg.norm(X - (np.asarray(U) * s) @ Vt) / best - 1

    excess = {}
    for cols in (None, 3 * (k + 5)):
        blocks = _InMemoryBlocks(X, (128, 50))  # 16 blocks of 50 columns
        U, s, Vt = randomized_svd(
            blocks, k, n_power_iter=2, n_oversamples=5, random_state=3, sketch_columns=cols,
            final_pass=False,
        )  # fmt: skip
        U = np.asarray(U.compute())
        sketched = 16 if cols is None else 1 + (cols - 1) // 50  # blocks the sketch read
        assert blocks.columns_read == 50 * sketched + 2 * 800
        Ud, sd, _ = randomized_svd(
            da.from_array(X, chunks=(128, 50)), k, n_power_iter=2, n_oversamples=5,
            random_state=3, sketch_columns=cols, final_pass=False,
        )  # fmt: skip
        np.testing.assert_allclose(sd, s, rtol=1e-8)
        np.testing.assert_allclose(Ud.compute(), U, atol=1e-8)
        excess[cols] = error(U, s, Vt)
    whole, part = excess.values()
    assert 0 < whole < 0.05 and 0 < part < 0.05 and abs(part - whole) < 0.01
    with pytest.raises(ValueError, match="sketch_columns must be a positive"):
        randomized_svd(X, k, n_power_iter=0, sketch_columns=100)
    with pytest.raises(ValueError, match="sketch_columns must be a positive"):
        randomized_svd(X, k, sketch_columns=0)


@pytest.mark.parametrize("kind", ["sparse", "gaussian"])
@pytest.mark.parametrize("width", [50, 57])
@pytest.mark.parametrize("fuse", [True, False])
def test_one_range_finder_for_every_kind_of_input(store, fuse, width, kind):
    """numpy, dask and a column-block source run the same loop from the same Ω (of either
    kind): the same Bt = Xᵀ Q and the same basis, with fused or unfused power iterations
    (57-column blocks: groups of equal width cut some of them in two; there, a sketch of
    two 50-column ranges only, which the column-block source reads alone)."""
    from lsd_dask.linalg.block_passes import BlockPasses
    from lsd_dask.linalg.passes import DaskPasses, NumpyPasses
    from lsd_dask.linalg.randomized import range_finder
    from lsd_dask.linalg.sketch import TestMatrix

    _, subs, _ = store
    X = np.concatenate([x for _, x in subs], axis=1).astype(np.float64)
    # a sketch of part of X (columns 50-100 and 150-200 only) where the blocks are cut
    keep = ((50, 100), (150, 200)) if width == 57 else None
    l, omega, here = 8, TestMatrix(11, kind, keep), SchedulerChoice()
    runs = {
        "numpy": NumpyPasses(X, l, omega),
        "dask": DaskPasses(da.from_array(X, chunks=(128, 50)), l, omega, True, here),
        "blocks": BlockPasses(_InMemoryBlocks(X, (128, width)), l, omega, np.float64, True, here),
    }
    lines = []
    out = {name: range_finder(p, 2, fuse=fuse, progress=lines.append) for name, p in runs.items()}
    P0, M0, Q0 = out["numpy"]
    Bt0 = P0 @ M0
    assert len(lines) == 3 * 4 and lines[0].startswith("pass 1 of 4 (sketch)")
    np.testing.assert_allclose(Bt0, X.T @ Q0, atol=1e-10 * np.abs(Bt0).max())
    for name in ("dask", "blocks"):
        P, M, Q = out[name]
        np.testing.assert_allclose(P.T @ P, np.eye(l), atol=1e-10)
        Bt, Q = P @ M, np.asarray(Q.compute())
        np.testing.assert_allclose(Q.T @ Q, np.eye(l), atol=1e-10)
        # the same subspace (QR signs may differ), hence the same Bt up to those signs
        signs = np.sign(np.sum(Q * Q0, axis=0))
        np.testing.assert_allclose(Q * signs, Q0, atol=1e-8)
        np.testing.assert_allclose(Bt * signs, Bt0, atol=1e-6 * np.abs(Bt0).max())


def _decaying(n=600, m=400, r=40, seed=0):
    rng = np.random.default_rng(seed)
    L = rng.standard_normal((n, r)) * np.geomspace(10, 0.5, r)
    return L @ rng.standard_normal((r, m)) + 0.3 * rng.standard_normal((n, m))


def test_without_the_final_pass_one_read_fewer_at_an_accuracy_between():
    """``final_pass=False`` reads X ``n_power_iter + 1`` times, and its rank-k error lies
    between one power iteration fewer and the same number with the final pass (its row
    basis has one application of X fewer than Q's range); numpy, dask and column-block
    inputs agree."""
    X = _decaying()
    k = 10
    U0, s0, Vt0 = np.linalg.svd(X, full_matrices=False)
    best = np.linalg.norm(X - (U0[:, :k] * s0[:k]) @ Vt0[:k])

    def excess(q, final_pass):
        blocks = _InMemoryBlocks(X, (128, 50))
        U, s, Vt = randomized_svd(
            blocks, k, n_power_iter=q, n_oversamples=2, random_state=0, final_pass=final_pass
        )
        U = np.asarray(U.compute())
        assert blocks.reads == (q + (2 if final_pass else 1)) * 8  # 8 column blocks
        Un, sn, Vtn = randomized_svd(
            X, k, n_power_iter=q, n_oversamples=2, random_state=0, final_pass=final_pass
        )
        np.testing.assert_allclose(s, sn, rtol=1e-8)
        np.testing.assert_allclose(U, Un, atol=1e-8)
        Ud, sd, _ = randomized_svd(
            da.from_array(X, chunks=(128, 100)), k, n_power_iter=q, n_oversamples=2,
            random_state=0, final_pass=final_pass,
        )  # fmt: skip
        np.testing.assert_allclose(sd, sn, rtol=1e-8)
        np.testing.assert_allclose(Ud.compute(), Un, atol=1e-8)
        return np.linalg.norm(X - (Un * sn) @ Vtn) / best - 1

    for q in (1, 2, 3):
        without = excess(q, False)
        assert excess(q - 1, True) > without > excess(q, True) > 0, q
    with pytest.raises(ValueError, match="final_pass=False needs"):
        randomized_svd(X, k, n_power_iter=0, final_pass=False)
    with pytest.raises(ValueError, match="final_pass=False needs"):
        randomized_svd(X, k, fuse_passes=False, final_pass=False)


def test_a_start_from_the_whole_replaces_the_sketch_for_a_part_of_it():
    """``start``: the basis of a matrix that holds X (the whole's U, for half of its
    columns) stands for the sketch. No sketch pass: one power iteration without the
    final pass reads X once. Its rank-k error is below the sketch's with two power
    iterations, which reads X three times (and within 2 % of the best rank-k); numpy,
    dask and column-block inputs, and numpy or dask starts, agree. Without a power
    iteration, X is projected on the start's span, orthonormalised whatever its scale."""
    whole = _decaying(m=800)
    X = np.ascontiguousarray(whole[:, :400])
    k, l0 = 10, 12
    start = np.linalg.svd(whole, full_matrices=False)[0][:, :l0]
    U0, s0, Vt0 = np.linalg.svd(X, full_matrices=False)
    best = np.linalg.norm(X - (U0[:, :k] * s0[:k]) @ Vt0[:k])

    def excess(U, s, Vt):
        return np.linalg.norm(X - (np.asarray(U) * s) @ Vt) / best - 1

    blocks = _InMemoryBlocks(X, (128, 50))
    U, s, Vt = randomized_svd(
        blocks, k, n_power_iter=1, final_pass=False, random_state=0, start=start
    )
    U = np.asarray(U.compute())
    assert blocks.reads == 8  # 8 column blocks, each read once
    for x, st0 in ((X, start), (da.from_array(X, chunks=(128, 100)), da.from_array(start))):
        Ux, sx, _ = randomized_svd(
            x, k, n_power_iter=1, final_pass=False, random_state=0, start=st0
        )
        np.testing.assert_allclose(sx, s, rtol=1e-8)
        np.testing.assert_allclose(np.asarray(Ux), U, atol=1e-8)
    sketched = randomized_svd(X, k, n_power_iter=2, n_oversamples=l0 - k, final_pass=False)
    assert 0 < excess(U, s, Vt) < min(0.02, excess(*sketched))
    # no power iteration: X projected on the start's span, orthonormalised first
    Up, sp_, Vtp = randomized_svd(X, k, n_power_iter=0, start=3 * start)
    np.testing.assert_allclose(Up.T @ Up, np.eye(k), atol=1e-10)
    Pu = start @ start.T
    np.testing.assert_allclose(Pu @ Up, Up, atol=1e-10)  # within the start's span
    np.testing.assert_allclose(sp_, np.linalg.svd(Pu @ X, compute_uv=False)[:k], rtol=1e-8)
    with pytest.raises(ValueError, match="start must be an"):
        randomized_svd(X, k, start=start[:-1])
    with pytest.raises(ValueError, match="start must be an"):
        randomized_svd(X, k, start=start[:, : k - 1])
    with pytest.raises(ValueError, match="start replaces the sketch"):
        randomized_svd(X, k, start=start, sketch_columns=100)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tsqr_against_scipy(dtype):
    import scipy.linalg as sla

    from lsd_dask.linalg.bases import tsqr

    rng = np.random.default_rng(3)
    Y = rng.standard_normal((500, 12)).astype(dtype)
    tol = 1e-4 if dtype == np.float32 else 1e-11
    Q = tsqr(da.from_array(Y, chunks=(60, 12)), (100,) * 5).compute()
    assert Q.dtype == dtype and Q.shape == (500, 12)
    np.testing.assert_allclose(Q.T @ Q, np.eye(12), atol=tol)
    Qr = sla.qr(Y.astype(np.float64), mode="economic")[0]
    # the same column space as scipy's QR: every principal angle is 0
    np.testing.assert_allclose(np.linalg.svd(Qr.T @ Q, compute_uv=False), 1.0, atol=tol * 10)
    lazy = tsqr(da.from_array(Y, chunks=(60, 12)), (100,) * 5, persist=False)
    np.testing.assert_allclose(lazy.compute(), Q, atol=tol)
    # with R: Y = Q R, R upper triangular, and the same Q
    Q2, R = tsqr(da.from_array(Y, chunks=(60, 12)), (100,) * 5, with_r=True)
    np.testing.assert_allclose(Q2.compute(), Q, atol=tol)
    np.testing.assert_allclose(R, np.triu(R))
    np.testing.assert_allclose(Q @ R, Y, atol=tol * 10 * np.abs(Y).max())
    # rank-deficient: Householder still gives orthonormal columns that span Y
    Y[:, 5] = Y[:, 0] + Y[:, 1]
    Q = tsqr(da.from_array(Y, chunks=(60, 12)), (100,) * 5).compute()
    np.testing.assert_allclose(Q.T @ Q, np.eye(12), atol=tol)
    np.testing.assert_allclose(Q @ (Q.T @ Y), Y, atol=tol * 10 * np.abs(Y).max())


@contextmanager
def _counting_solves():
    """The rows of each ``Y R⁻¹`` solve tsqr makes in this process (local scheduler)."""
    from lsd_dask.linalg import bases

    rows: list[int] = []
    solve = bases._times_r_inverse

    def counted(y, r):
        rows.append(y.shape[0])
        return solve(y, r)

    bases._times_r_inverse = counted
    try:
        yield rows
    finally:
        bases._times_r_inverse = solve


@settings(max_examples=25, deadline=None)
@given(
    cond=st.floats(1.0, 1e3),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**16),
)
def test_tsqr_basis_for_a_power_iteration_is_y_times_r_inverse(cond, dtype, seed):
    """``exact=False``: Q = Y R⁻¹ with the R of Y's QR, so Q R = Y and Q's columns span
    Y's, orthonormal to about ε κ(Y) (checked densely in float64 against Y's condition
    number, set here up to 1e3)."""
    from lsd_dask.linalg.bases import tsqr

    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.standard_normal((300, 20)))[0]
    V = np.linalg.qr(rng.standard_normal((20, 20)))[0]
    Y = (U * np.geomspace(1.0, 1.0 / cond, 20) @ V).astype(dtype)
    exact = tsqr(da.from_array(Y, chunks=(60, 20)), (150, 150)).compute()
    with _counting_solves() as solves:
        Q = tsqr(da.from_array(Y, chunks=(60, 20)), (150, 150), exact=False).compute()
    assert solves == [150, 150]  # a triangular solve per row block, no reflectors' Q
    assert Q.dtype == dtype and Q.shape == Y.shape
    eps = np.finfo(dtype).eps
    Q64 = Q.astype(np.float64)
    assert np.abs(Q64.T @ Q64 - np.eye(20)).max() < 50 * eps * cond
    # the same R: Q equals the reflectors' Q to the same ε κ
    np.testing.assert_allclose(Q64, exact, atol=50 * eps * cond)


@settings(max_examples=25, deadline=None)
@given(
    cond=st.floats(1.0, 1e4),
    m=st.integers(20, 400),
    seed=st.integers(0, 2**16),
    order=st.sampled_from("CF"),
)
def test_the_row_basis_r_from_the_gram_is_the_qrs_up_to_signs(cond, m, seed, order):
    """``_gram_r``: the Cholesky factor of zᵀ z is z's QR's R with its rows' signs
    flipped to a positive diagonal, to ε κ(z)² (κ set here up to 1e4), against scipy's QR
    in float64; for a C- or an F-ordered z (the Gram is taken from either as it lies)."""
    import scipy.linalg as sla

    from lsd_dask.linalg.bases import _gram_r

    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.standard_normal((m, 20)))[0]
    V = np.linalg.qr(rng.standard_normal((20, 20)))[0]
    z = np.asarray(U * np.geomspace(1.0, 1.0 / cond, 20) @ V, order=order)
    r = _gram_r(z)
    ref = sla.qr(z, mode="r")[0][:20]
    ref *= np.sign(np.diag(ref))[:, None]
    assert np.all(np.diag(r) > 0)
    np.testing.assert_allclose(r, ref, atol=1e3 * np.finfo(float).eps * cond**2)


def test_the_row_basis_r_of_a_rank_deficient_z_is_the_qrs():
    """Where z is near rank-deficient (its Gram's Cholesky factor fails or spreads its
    diagonal past 10⁶), ``_gram_r`` gives the QR's R itself, and the SVD without Vt
    still finds the few directions there are."""
    import scipy.linalg as sla

    from lsd_dask.linalg.bases import _gram_r

    rng = np.random.default_rng(0)
    z = rng.standard_normal((200, 3)) @ rng.standard_normal((3, 12))
    np.testing.assert_array_equal(_gram_r(z), sla.qr(z, mode="r")[0][:12])
    X = (rng.standard_normal((300, 5)) @ rng.standard_normal((5, 200))).astype(np.float32)
    _, s, _ = randomized_svd(X, 20, final_pass=False, random_state=0, return_vt=False)
    np.testing.assert_allclose(s[:5], np.linalg.svd(X, compute_uv=False)[:5], rtol=1e-5)
    assert np.all(s[5:] < 1e-4 * s[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tsqr_left_factored_forms_q_times_w_in_one_step(dtype):
    """``formed=False``: the basis's ``times(W)`` is the formed Q times W (Q applied to
    Q' W, Q never formed), ``times()`` is Q itself, and R is the formed call's."""
    from lsd_dask.linalg.bases import tsqr

    rng = np.random.default_rng(0)
    Y = rng.standard_normal((300, 12)).astype(dtype)
    W = rng.standard_normal((12, 5))
    Yd = da.from_array(Y, chunks=(60, 12))
    Q, R = tsqr(Yd, (150, 150), with_r=True)
    basis, R2 = tsqr(Yd, (150, 150), with_r=True, formed=False)
    tol = 50 * np.finfo(dtype).eps
    np.testing.assert_array_equal(R2, R)
    np.testing.assert_allclose(basis.times().compute(), Q.compute(), atol=tol)
    QW = basis.times(W).compute()
    assert QW.shape == (300, 5) and QW.dtype == dtype
    np.testing.assert_allclose(QW, Q.compute().astype(np.float64) @ W, atol=10 * tol)


def test_tsqr_basis_of_a_rank_deficient_y_is_the_reflectors_q():
    """Where R's diagonal shows Y near singular, ``exact=False`` gives the orthonormal Q
    of the reflectors (Y R⁻¹ would blow up)."""
    from lsd_dask.linalg.bases import tsqr

    Y = np.random.default_rng(0).standard_normal((300, 12)).astype(np.float32)
    Y[:, 5] = Y[:, 0] + Y[:, 1]
    with _counting_solves() as solves:
        Q = tsqr(da.from_array(Y, chunks=(60, 12)), (150, 150), exact=False).compute()
    assert solves == []
    assert np.isfinite(Q).all()
    np.testing.assert_allclose(Q.T @ Q, np.eye(12), atol=1e-4)
    np.testing.assert_allclose(Q @ (Q.T @ Y), Y, atol=1e-4 * np.abs(Y).max())


@settings(max_examples=40, deadline=None)
@given(
    n_extra=st.integers(0, 300),
    l=st.integers(1, 40),
    cond=st.floats(1.0, 1e3),
    dtype=st.sampled_from([np.float32, np.float64]),
    order=st.sampled_from("CF"),
    seed=st.integers(0, 2**16),
)
def test_the_lu_basis_is_p_times_l_of_scipys_lu(n_extra, l, cond, dtype, order, seed):
    """``_lu_basis(y)`` is ``P L`` of scipy's LU with partial pivoting (``y = P L U``), in
    y's dtype: so ``B U = y`` (the same span), every entry at most 1 in magnitude, and a
    unit lower triangle in the pivot rows; for a C- or an F-ordered y."""
    import scipy.linalg as sla

    from lsd_dask.linalg.bases import _lu_basis

    rng = np.random.default_rng(seed)
    n = l + n_extra
    U = np.linalg.qr(rng.standard_normal((n, l)))[0]
    V = np.linalg.qr(rng.standard_normal((l, l)))[0]
    y = np.asarray((U * np.geomspace(1.0, 1.0 / cond, l) @ V).astype(dtype), order=order)
    B = _lu_basis(y)
    assert B is not None and B.dtype == dtype and B.shape == y.shape
    p, lower, upper = sla.lu(y)
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(B, p @ lower, atol=100 * eps * cond)
    assert np.abs(B).max() <= 1.0
    np.testing.assert_allclose(B @ upper, y, atol=100 * eps * np.abs(y).max())


def test_the_lu_basis_of_a_rank_deficient_y_is_none_and_the_svd_falls_back():
    """Where U's diagonal shows y near singular there is no LU basis (``L`` there is
    rounding); the numpy SVD's power iterations then take the QR's, and still find the
    few directions X has."""
    from lsd_dask.linalg.bases import _lu_basis

    rng = np.random.default_rng(0)
    y = rng.standard_normal((300, 12)).astype(np.float32)
    y[:, 5] = y[:, 0] + y[:, 1]
    assert _lu_basis(y) is None
    X = (rng.standard_normal((300, 4)) @ rng.standard_normal((4, 200))).astype(np.float32)
    _, s, _ = randomized_svd(X, 10, n_power_iter=3, random_state=0, return_vt=False)
    np.testing.assert_allclose(s[:4], np.linalg.svd(X, compute_uv=False)[:4], rtol=1e-5)


@pytest.mark.parametrize(
    ("n_power_iter", "final_pass", "lus"),
    [(0, True, 0), (1, True, 1), (1, False, 0), (2, False, 1), (3, False, 2), (3, True, 3)],
)
def test_only_a_basis_that_starts_a_plain_power_pass_is_an_lu(
    monkeypatch, n_power_iter, final_pass, lus
):
    """The range finder takes Y's LU for the bases that only start a product by X Xᵀ:
    not the last (U is made from it), nor, without a final pass, the one whose Xᵀ Q the
    row basis is made from (an LU basis's spread of scales would drop directions there).
    Its singular values and U are the all-QR run's to float32 rounding, and as close to
    the exact ones."""
    from lsd_dask.linalg import passes

    rng = np.random.default_rng(3)
    lat = np.linalg.qr(rng.standard_normal((600, 60)))[0] * np.geomspace(50, 2, 60)
    X = (lat @ rng.standard_normal((60, 400)) + rng.standard_normal((600, 400))).astype(np.float32)
    calls = []
    lu = passes._lu_basis
    monkeypatch.setattr(passes, "_lu_basis", lambda y: calls.append(y.shape) or lu(y))
    kw = dict(n_power_iter=n_power_iter, final_pass=final_pass, random_state=0)
    U, s, _ = randomized_svd(X, 40, return_vt=False, **kw)
    assert len(calls) == lus
    monkeypatch.setattr(passes.NumpyPasses, "scaled_basis", passes.NumpyPasses.basis)
    Uq, sq, _ = randomized_svd(X, 40, return_vt=False, **kw)
    np.testing.assert_allclose(s, sq, rtol=1e-4)
    assert _min_cos(U, Uq) > 1 - 1e-4
    exact = np.linalg.svd(X.astype(np.float64), compute_uv=False)[:40]
    err, err_q = np.abs(s - exact) / exact, np.abs(sq - exact) / exact
    assert err.max() <= err_q.max() + 1e-4


def test_lu_basis_on_the_workers_is_the_numpy_ones():
    """``lu_basis`` on a real 2-process cluster: a one-row-block dask Y gives the basis
    ``_lu_basis`` gives here, bit for bit; a near-singular Y gives None; Y in two row
    blocks is refused."""
    from lsd_dask.linalg.bases import _lu_basis, lu_basis

    rng = np.random.default_rng(1)
    y = rng.standard_normal((400, 30)).astype(np.float32)
    bad = y.copy()
    bad[:, 7] = bad[:, 3]
    with _two_workers() as client:
        client.wait_for_workers(2)
        B = lu_basis(da.from_array(y, chunks=(400, 30)), placement())
        assert B is not None
        np.testing.assert_array_equal(B.compute(), _lu_basis(y))
        assert lu_basis(da.from_array(bad, chunks=(400, 30)), placement()) is None
    with pytest.raises(ValueError, match="one row block, not 2"):
        lu_basis(da.from_array(y, chunks=(200, 30)))


@settings(max_examples=25, deadline=None)
@given(
    l=st.integers(1, 140),
    extra=st.lists(st.integers(0, 40), min_size=1, max_size=3),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**16),
)
def test_tsqr_factors_any_tall_blocks(l, extra, dtype, seed):
    """Blocks of at least l rows, l on both sides of the reflectors' block size (128):
    Y = Q R with Q orthonormal and R upper triangular, checked densely in float64."""
    from lsd_dask.linalg.bases import tsqr

    rows = tuple(l + e for e in extra)
    Y = np.random.default_rng(seed).standard_normal((sum(rows), l)).astype(dtype)
    Q, R = tsqr(da.from_array(Y, chunks=(max(rows), l)), rows, with_r=True)
    Q = np.asarray(Q.compute(), np.float64)
    tol = 2e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(Q.T @ Q, np.eye(l), atol=tol)
    np.testing.assert_array_equal(R, np.triu(R))
    np.testing.assert_allclose(Q @ R, Y, atol=tol * np.abs(Y).max())


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 60),
    t=st.integers(1, 30),
    l=st.integers(1, 20),
    dtype=st.sampled_from([np.float32, np.float64]),
    fortran_x=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_add_product_adds_x_times_w_into_the_buffer_itself(n, t, l, dtype, fortran_x, seed):
    """``acc += x @ w`` in place, whatever the operands' order (an F-ordered x takes the
    numpy path), equal to numpy's product and sum."""
    from lsd_dask.linalg.block_passes import _add_product

    rng = np.random.default_rng(seed)
    acc = rng.standard_normal((n, l)).astype(dtype)
    x = rng.standard_normal((n, t)).astype(dtype)
    x = np.asfortranarray(x) if fortran_x else x
    w = rng.standard_normal((t, l)).astype(dtype)
    expected = acc.astype(np.float64) + x.astype(np.float64) @ w.astype(np.float64)
    out = _add_product(acc, x, w)
    assert out is acc
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(acc, expected, rtol=tol, atol=tol * max(t, 1))


def test_add_product_holds_no_product_sized_buffer():
    """The BLAS call adds into the C-ordered buffer through its transpose: the largest
    allocation is far below one n × l array (``acc += x @ w`` holds a whole one)."""
    import tracemalloc

    from lsd_dask.linalg.block_passes import _add_product

    rng = np.random.default_rng(0)
    acc = rng.standard_normal((4000, 300)).astype(np.float32)
    x = rng.standard_normal((4000, 50)).astype(np.float32)
    w = rng.standard_normal((50, 300)).astype(np.float32)
    expected = acc + x @ w
    tracemalloc.start()
    try:
        _add_product(acc, x, w)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < acc.nbytes / 10
    np.testing.assert_allclose(acc, expected, rtol=1e-5, atol=1e-4)


@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(1, 199), min_size=0, max_size=8, unique=True), pause=st.booleans())
def test_read_ahead_gives_each_block_in_order_and_never_writes_one_in_use(store, cuts, pause):
    """Blocks of a real split store (4 subjects × 50 columns) cut anywhere come in order,
    each equal to its columns; a block is unchanged after the next read has had time to
    finish, and two blocks in a row never share memory (the reader fills the other)."""
    import time

    from lsd_dask.linalg.block_passes import _read_ahead

    p, subs, _ = store
    X = np.concatenate([x for _, x in subs], axis=1)
    z = open_split(p).column_blocks
    edges = [0, *sorted(cuts), 200]
    spans = list(zip(edges[:-1], edges[1:], strict=True))
    got, last = [], None
    for (a, b), buf in _read_ahead(z, spans):
        if pause:
            time.sleep(0.01)  # the next block's read finishes meanwhile
        np.testing.assert_array_equal(buf, X[:, a:b])
        assert last is None or not np.shares_memory(buf, last)
        got.append((a, b))
        last = buf
    assert got == spans


def test_a_read_ahead_error_reaches_the_task_naming_the_file(tmp_path):
    """A block the second thread fails to read (a damaged shard) raises in the caller with
    the reader's message, at the block it belongs to."""
    from lsd_dask.linalg.block_passes import _read_ahead

    subs = _low_rank(n=64, t=10, s=3, r=3)
    p = write_split(tmp_path / "split.zarr", subs, n_vertices=64, timepoints=10)
    shard = sorted((tmp_path / "split.zarr" / "subject" / "2").rglob("c/*/*"))[0]
    bad = bytearray(shard.read_bytes())
    bad[5] ^= 0x10
    shard.write_bytes(bytes(bad))
    z = open_split(p).column_blocks
    seen = []
    with pytest.raises(ValueError, match="fails its checksum"):
        for span, buf in _read_ahead(z, [(0, 10), (10, 20), (20, 30)]):
            seen.append(span)
            np.testing.assert_array_equal(buf, subs[len(seen) - 1][1])
    assert seen == [(0, 10), (10, 20)]
