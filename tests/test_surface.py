import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse.csgraph import connected_components

from lsd_dask import surface as S


def test_mesh_adjacency_single_triangle_pair():
    faces = np.array([[0, 1, 2], [1, 3, 2]])
    A = S.mesh_adjacency(faces, 4).toarray()
    expected = np.zeros((4, 4), bool)
    for i, j in [(0, 1), (1, 2), (0, 2), (1, 3), (2, 3)]:
        expected[i, j] = expected[j, i] = True
    np.testing.assert_array_equal(A, expected)


def test_mesh_adjacency_two_hemispheres_offset(tiny_meshes):
    lh, rh = tiny_meshes["left"], tiny_meshes["right"]
    A = S.mesh_adjacency([lh.faces, rh.faces], [lh.n_vertices, rh.n_vertices])
    n_l = lh.n_vertices
    assert A.shape == (n_l + rh.n_vertices,) * 2
    assert A[:n_l, n_l:].nnz == 0  # no edge across the midline
    np.testing.assert_array_equal(A[n_l:, n_l:].toarray(), rh.adjacency().toarray())
    assert (A != A.T).nnz == 0


def test_mesh_adjacency_rejects_bad_faces():
    with pytest.raises(ValueError, match="index vertex"):
        S.mesh_adjacency(np.array([[0, 1, 5]]), 3)


@pytest.mark.parametrize("freq", [1, 2, 3, 5])
def test_icosphere_counts_and_euler(freq):
    m = S.icosphere(freq)
    A = m.adjacency()
    n_edges = A.nnz // 2
    assert m.n_vertices == 10 * freq**2 + 2
    assert m.n_vertices - n_edges + m.faces.shape[0] == 2  # a sphere
    np.testing.assert_allclose(np.linalg.norm(m.vertices, axis=1), 100.0)


def test_mission_size_mesh():
    meshes = S.two_hemisphere_mesh(57)
    assert [m.n_vertices for m in meshes.values()] == [32492, 32492]  # 32k_fs_LR
    assert S.icosphere(32).n_vertices == 10242  # fsaverage5


def test_split_connected_splits_and_drops(tiny_meshes):
    lh, rh = tiny_meshes["left"], tiny_meshes["right"]
    A = S.mesh_adjacency([lh.faces, rh.faces], [lh.n_vertices, rh.n_vertices])
    n_l, n = lh.n_vertices, A.shape[0]
    # one label over both hemispheres -> two regions, one per hemisphere
    labels = np.ones(n, int)
    out = S.split_connected(labels, A, min_size=1)
    assert set(np.unique(out)) == {1, 2}
    assert np.all(out[:n_l] == 1) and np.all(out[n_l:] == 2)
    # the smaller hemisphere is dropped when min_size is above its size
    out = S.split_connected(labels, A, min_size=n_l + 1)
    assert np.all(out[:n_l] == 0) and np.all(out[n_l:] == 1)


def test_split_connected_path_graph():
    # path 0-1-2-3-4-5 with labels a a b a a a: label a has regions {0,1} and {3,4,5}
    import scipy.sparse as sp

    i = np.arange(5)
    A = sp.coo_matrix((np.ones(5), (i, i + 1)), shape=(6, 6))
    A = (A + A.T).tocsr()
    lab = np.array([4, 4, 9, 4, 4, 4])
    np.testing.assert_array_equal(S.split_connected(lab, A, min_size=1), [1, 1, 3, 2, 2, 2])
    np.testing.assert_array_equal(S.split_connected(lab, A, min_size=2), [1, 1, 0, 2, 2, 2])
    np.testing.assert_array_equal(S.split_connected(lab, A, min_size=3), [0, 0, 0, 1, 1, 1])
    # background stays background and does not join regions
    lab0 = np.array([4, 4, 0, 4, 4, 0])
    np.testing.assert_array_equal(S.split_connected(lab0, A, min_size=1), [1, 1, 0, 2, 2, 0])


def test_split_connected_shape_mismatch(tiny_meshes):
    A = tiny_meshes["left"].adjacency()
    with pytest.raises(ValueError, match="same mesh"):
        S.split_connected(np.ones(A.shape[0] + 1, int), A)


def test_grow_regions_connected_and_cover():
    A = S.grid_adjacency(16, 16)
    r = S.grow_regions(A, 7, random_state=3)
    assert np.all(r >= 0)
    assert set(np.unique(r)) == set(range(7))
    # each grown region is one connected piece
    assert S.connected_regions(r, A, background=None).max() + 1 == 7
    np.testing.assert_array_equal(r, S.grow_regions(A, 7, random_state=3))


def test_smooth_on_mesh_preserves_constant(tiny_meshes):
    A = tiny_meshes["right"].adjacency()
    x = np.full((A.shape[0], 3), 2.5)
    np.testing.assert_allclose(S.smooth_on_mesh(x, A, 3), 2.5)


def _grow_reference(A, sizes, seed, mask):
    """Blumensath's growth step by step on numpy arrays: a random region among those that
    can still grow, then a random vertex of its frontier (numpy's draws, in that order)."""
    rng = np.random.default_rng(seed)
    A = A.tocsr()
    out = np.zeros(A.shape[0], np.int64)
    seeds = rng.choice(np.flatnonzero(mask), size=len(sizes), replace=False)
    out[seeds] = np.arange(1, len(sizes) + 1)

    def free(v):
        return [int(u) for u in A.indices[A.indptr[v] : A.indptr[v + 1]] if mask[u] and not out[u]]

    frontier = [free(s) for s in seeds]
    active = [r for r in range(len(sizes)) if frontier[r] and 1 < sizes[r]]
    while active:
        k = int(rng.integers(len(active)))
        r = active[k]
        j = int(rng.integers(len(frontier[r])))
        v = frontier[r][j]
        frontier[r][j] = frontier[r][-1]
        frontier[r].pop()
        if not out[v]:
            out[v] = r + 1
            frontier[r].extend(free(v))
        if not frontier[r] or (out == r + 1).sum() >= sizes[r]:
            active[k] = active[-1]
            active.pop()
    return out


@given(seed=st.integers(0, 2**16), n_regions=st.integers(1, 30))
@settings(max_examples=15, deadline=None)
def test_grow_sized_regions_draws_as_the_step_by_step_growth(seed, n_regions):
    """The same regions, vertex for vertex, as the growth written out on numpy arrays: a
    seed gives the nulls (and the synthetic truths of :mod:`lsd_dask.datasets`) it gave."""
    mesh, _ = S.combine_meshes(S.two_hemisphere_mesh(6, 6))
    A = S.mesh_adjacency(mesh.faces, mesh.n_vertices)
    rng = np.random.default_rng(seed + 1)
    mask = rng.random(A.shape[0]) > 0.1
    sizes = rng.integers(1, 40, size=n_regions)
    got = S.grow_sized_regions(A, sizes, random_state=seed, mask=mask)
    np.testing.assert_array_equal(got, _grow_reference(A, sizes, seed, mask))


@given(
    seed=st.integers(0, 2**32),
    skip=st.integers(0, 3),
    highs=st.lists(
        st.one_of(st.integers(1, 8), st.integers(1, 2**32 - 1), st.just(3 * 2**30 + 7)),
        max_size=60,
    ),
    chunk=st.sampled_from([1, 2, 5, 1 << 16]),
)
@settings(max_examples=60, deadline=None)
def test_bounded_draws_are_numpys_integers(seed, skip, highs, chunk):
    """The growth's draws are ``Generator.integers(high)``'s values, and leave the generator
    in the state numpy's own calls leave it (its next draws agree), from any start (half
    of a 64-bit output buffered or not) and across the bulk reads' boundaries. Highs near
    2³² make Lemire's rejection step run."""
    ours, ref = np.random.default_rng(seed), np.random.default_rng(seed)
    for g in (ours, ref):
        g.integers(2**20, size=skip)  # 32-bit draws: odd counts leave a half buffered
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(S._BoundedDraws, "_CHUNK", chunk)
        draws = S._BoundedDraws.of(ours)
        assert draws is not None
        got = [draws(h) for h in highs]
        draws.close()
    assert got == [int(ref.integers(h)) for h in highs]
    assert ours.bit_generator.state == ref.bit_generator.state
    np.testing.assert_array_equal(ours.integers(2**40, size=5), ref.integers(2**40, size=5))


def test_bounded_draws_only_for_pcg64():
    """Another bit generator keeps numpy's own draws (its stream is not PCG64's)."""
    assert S._BoundedDraws.of(np.random.Generator(np.random.MT19937(0))) is None


@given(seed=st.integers(0, 2**16), n_regions=st.integers(1, 30))
@settings(max_examples=25, deadline=None)
def test_grow_sized_regions_the_null_model(seed, n_regions):
    """The split-half null: connected regions of the prescribed sizes (never larger), only
    inside the mask, reproducible from the seed; each region's size is reached unless it
    is hemmed in, so almost all of the prescribed vertices are placed."""
    mesh, _ = S.combine_meshes(S.two_hemisphere_mesh(6, 6))
    A = S.mesh_adjacency(mesh.faces, mesh.n_vertices)
    n = A.shape[0]
    rng = np.random.default_rng(seed)
    mask = rng.random(n) > 0.1
    sizes = rng.integers(1, 12, size=n_regions)
    q = S.grow_sized_regions(A, sizes, random_state=seed, mask=mask)
    assert np.array_equal(q, S.grow_sized_regions(A, sizes, random_state=seed, mask=mask))
    assert np.all(q[~mask] == 0)
    got = np.bincount(q, minlength=n_regions + 1)[1:]
    assert np.all(got >= 1) and np.all(got <= sizes)
    assert got.sum() >= 0.8 * sizes.sum()
    # every region is one connected piece of the mesh
    for r in range(1, n_regions + 1):
        sub = A[q == r][:, q == r]
        assert connected_components(sub, directed=False)[0] == 1


def test_smooth_on_mesh_dask_equals_numpy():
    import dask.array as da

    mesh, _ = S.combine_meshes(S.two_hemisphere_mesh(8, 9))
    A = S.mesh_adjacency(mesh.faces, mesh.n_vertices)
    X = np.random.default_rng(0).standard_normal((mesh.n_vertices, 7)).astype(np.float32)
    want = S.smooth_on_mesh(X, A, n_iter=4)
    lazy = S.smooth_on_mesh(da.from_array(X, chunks=(300, 7)), A, n_iter=4)
    assert (
        isinstance(lazy, da.Array) and lazy.chunks[0] == da.from_array(X, chunks=(300, 7)).chunks[0]
    )
    np.testing.assert_allclose(lazy.compute(), want, rtol=1e-5, atol=1e-6)
    # mass-preserving averaging: constants stay, the spread of noise falls
    assert want.std() < 0.6 * X.std()


@pytest.mark.parametrize("fwhm", [6.0, 12.0])
def test_smoothing_steps_give_the_requested_fwhm(fwhm):
    """A unit impulse on a sphere of radius 100 mm, smoothed by the steps for ``fwhm``: the
    measured FWHM of the blur (from its second moment about the source) is within 20 %."""
    mesh = S.icosphere(40, radius=100.0)
    A = mesh.adjacency()
    t = S.smoothing_steps(mesh.vertices, A, fwhm)
    src = 123
    x = np.zeros(mesh.n_vertices)
    x[src] = 1.0
    w = S.smooth_on_mesh(x, A, n_iter=t)
    d2 = np.sum((mesh.vertices - mesh.vertices[src]) ** 2, axis=1)
    sigma = np.sqrt(np.sum(w * d2) / w.sum() / 2.0)
    measured = np.sqrt(8 * np.log(2)) * sigma
    assert abs(measured - fwhm) / fwhm < 0.2, (t, measured)
    assert S.smoothing_steps(mesh.vertices, A, 0.0) == 0


@given(seed=st.integers(0, 2**16), k=st.integers(2, 12), min_size=st.integers(1, 40))
@settings(max_examples=25, deadline=None)
def test_contiguous_parcels(seed, k, min_size):
    """Every parcel is one connected piece, none under min_size (the mesh is connected), no
    vertex is lost, and a vertex only ever joins its own connected region's merges."""
    mesh = S.icosphere(8, radius=50.0)
    A = mesh.adjacency()
    rng = np.random.default_rng(seed)
    # noisy labels: smooth regions plus 10 % random flips (many small fragments)
    lab = S.grow_regions(A, k, random_state=seed)
    flip = rng.random(lab.size) < 0.1
    lab[flip] = rng.integers(0, k, flip.sum())
    F = rng.standard_normal((lab.size, 4))
    for feats in (None, F):
        out = S.contiguous_parcels(lab, A, min_size=min_size, features=feats)
        assert out.min() == 1
        sizes = np.bincount(out)[1:]
        assert sizes.sum() == lab.size
        assert out.max() == 1 or sizes.min() >= min_size
        for p in range(1, out.max() + 1):
            sub = A[out == p][:, out == p]
            assert connected_components(sub, directed=False)[0] == 1
        # merging only coarsens the connected regions
        regions = S.connected_regions(lab, A, background=None)
        pairs = set(zip(regions.tolist(), out.tolist(), strict=True))
        assert len({r for r, _ in pairs}) == len(pairs)


def test_contiguous_parcels_keeps_a_contiguous_partition():
    mesh = S.icosphere(8, radius=50.0)
    A = mesh.adjacency()
    lab = S.grow_regions(A, 6, random_state=0)
    out = S.contiguous_parcels(lab, A, min_size=1)
    from lsd_dask import metrics

    assert out.max() == S.connected_regions(lab, A, background=None).max() + 1
    assert metrics.ari(lab, out) == pytest.approx(1.0)


@given(seed=st.integers(0, 2**16), k=st.integers(2, 12), min_size=st.integers(1, 300))
@settings(max_examples=25, deadline=None)
def test_merge_small_regions_of_scattered_clusters(seed, k, min_size):
    """Clusters in many pieces merge whole: no vertex is lost, every cluster that is left
    has min_size vertices (the mesh is connected), and a cluster is never split."""
    A = S.icosphere(8, radius=50.0).adjacency()
    rng = np.random.default_rng(seed)
    lab = rng.integers(0, k, A.shape[0])  # scattered: each cluster in many pieces
    F = rng.standard_normal((lab.size, 4))
    out = S.merge_small_regions(lab, A, min_size=min_size, features=F)
    sizes = np.bincount(out)[1:]
    assert out.min() == 1 and sizes.sum() == lab.size
    assert out.max() == 1 or sizes.min() >= min_size
    pairs = set(zip(lab.tolist(), out.tolist(), strict=True))
    assert len({c for c, _ in pairs}) == len(pairs)  # each cluster lands in one parcel


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    n_cols=st.integers(1, 300),
    n_iter=st.integers(0, 6),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_smooth_on_mesh_by_column_blocks_equals_the_dense_heat_kernel(seed, n_cols, n_iter, dtype):
    """2-D float data (more columns than one block, some of them) blurred block by block:
    the dense ``((D + I)^-1 (A + I))^n_iter @ X``, in the data's dtype."""
    mesh = S.icosphere(3, radius=100.0)
    A = mesh.adjacency()
    X = np.random.default_rng(seed).standard_normal((mesh.n_vertices, n_cols)).astype(dtype)
    M = A.toarray().astype(np.float64) + np.eye(mesh.n_vertices)
    M /= M.sum(axis=1, keepdims=True)
    want = np.linalg.matrix_power(M, n_iter) @ X.astype(np.float64)
    got = S.smooth_on_mesh(X, A, n_iter=n_iter)
    assert got.dtype == dtype and got.shape == X.shape
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    if dtype == np.float64:  # the same values as whole-array steps, bit for bit
        step = X
        for _ in range(n_iter):
            step = S._averaging_operator(A) @ step
        np.testing.assert_array_equal(got, step)


def test_a_sparse_matrix_is_smoothed_as_its_dense_copy_and_stays_sparse():
    import scipy.sparse as sp

    from lsd_dask.surface import grid_adjacency, smooth_on_mesh

    A = grid_adjacency(6, 7)
    onehot = sp.csr_matrix((np.ones(42), (np.arange(42), np.arange(42) // 7)), shape=(42, 6))
    out = smooth_on_mesh(onehot, A, 3)
    assert sp.issparse(out)
    np.testing.assert_allclose(out.toarray(), smooth_on_mesh(onehot.toarray(), A, 3), atol=1e-12)
