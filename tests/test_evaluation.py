"""The field's measures against their dense pairwise definitions, on a sphere mesh: CBIG
homogeneity from every pair's correlation, DCBC from all-pairs shortest paths and binned
correlations, the neighbour silhouette from the full distance matrix; and the properties
that make them worth reporting (a planted truth beats its spins, random parcels score
DCBC about 0)."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.sparse.csgraph import shortest_path
from scipy.spatial import cKDTree
from scipy.spatial.transform import Rotation

from lsd_dask import evaluation as ev
from lsd_dask.spin import spin_indices
from lsd_dask.surface import grow_regions, icosphere, mesh_adjacency, two_hemisphere_mesh


def _mesh(frequency=12, radius=50.0):
    m = icosphere(frequency, radius=radius)
    return m.vertices, m.adjacency()


def _planted(frequency=12, k=8, T=80, noise=2.0, seed=0):
    """Series of parcels grown on the sphere: a signal per parcel plus white noise."""
    V, A = _mesh(frequency)
    truth = grow_regions(A, k, random_state=seed) + 1
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((k + 1, T))[truth] + noise * rng.standard_normal((V.shape[0], T))
    return X, truth, V, A


def _edge_lengths(V, A):
    """The mesh graph weighted by edge length (the dense reference's own)."""
    coo = A.tocoo()
    lengths = np.linalg.norm(V[coo.row] - V[coo.col], axis=1)
    return sp.csr_matrix((lengths, (coo.row, coo.col)), shape=A.shape)


def _dense_homogeneity(X, labels):
    """CBIG's definition: the off-diagonal mean of each parcel's correlation matrix,
    weighted by parcel size (one run, so no Fisher averaging)."""
    total, weight = 0.0, 0
    for p in np.unique(labels[labels > 0]):
        C = np.atleast_2d(np.corrcoef(X[labels == p]))  # one vertex: corrcoef's scalar
        n = int((labels == p).sum())
        c = (C.sum() - n) / (n * (n - 1)) if n > 1 else 0.0  # a singleton: 0, as in CBIG
        total += n * c
        weight += n
    return total / weight


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 1000), k=st.integers(2, 15))
@example(seed=605, k=11)  # a parcel left with one vertex once the background is cut
def test_homogeneity_equals_every_pair_and_dask_equals_numpy(seed, k):
    X, _, _, A = _planted(frequency=6, seed=seed)
    labels = grow_regions(A, k, random_state=seed) + 1
    labels[::17] = 0  # background vertices are left out
    Z = ev.unit_series(X)
    ref = _dense_homogeneity(X, labels)
    assert ev.homogeneity(Z, labels) == pytest.approx(ref, abs=1e-10)
    lazy = ev.homogeneity(ev.unit_series(da.from_array(X, chunks=(100, 80))), labels)
    assert lazy == pytest.approx(ref, abs=1e-10)


def test_homogeneity_of_singletons_is_zero_as_in_cbig():
    X, _, _, _ = _planted(frequency=4)
    labels = np.arange(X.shape[0]) + 1
    assert ev.homogeneity(ev.unit_series(X), labels) == 0.0


@pytest.mark.parametrize("max_dist, batch", [(20.0, 37), (9.0, 5), (30.0, 64)])
def test_geodesic_pairs_equal_all_pairs_shortest_paths(max_dist, batch):
    """Each batch's Dijkstra runs on the vertices near its sources only (on this 50 mm
    sphere a 9 mm reach leaves out most of it): the pairs are still exactly all of them."""
    V, A = _mesh(8)
    pairs = ev.geodesic_pairs(V, A, max_dist=max_dist, batch=batch)
    D = shortest_path(_edge_lengths(V, A), directed=False)
    i, j = np.nonzero(np.triu(D <= max_dist, k=1))
    got = dict(zip(zip(pairs.rows.tolist(), pairs.cols.tolist(), strict=True),
                   pairs.distances.tolist(), strict=True))  # fmt: skip
    assert set(got) == set(zip(i.tolist(), j.tolist(), strict=True))
    np.testing.assert_allclose([got[p] for p in zip(i, j, strict=True)], D[i, j], rtol=1e-12)
    threaded = ev.geodesic_pairs(V, A, max_dist=max_dist, batch=batch, n_jobs=2)
    assert set(zip(threaded.rows.tolist(), threaded.cols.tolist(), strict=True)) == set(got)


@pytest.mark.parametrize("max_dist", [9.0, 20.0])
def test_pair_count_estimate_is_exact_from_every_vertex_and_near_from_a_sample(max_dist):
    """With every vertex a source the estimate is the count of :func:`geodesic_pairs`;
    from 256 of the 2 × 2,562-vertex mesh's vertices it is within 10 % of it."""
    meshes = two_hemisphere_mesh(16, radius=50.0)
    V, A, _ = _two_hemispheres(meshes)
    n = V.shape[0]
    count = len(ev.geodesic_pairs(V, A, max_dist=max_dist))
    assert ev.pair_count_estimate(V, A, max_dist, n_sources=n) == count
    sampled = ev.pair_count_estimate(V, A, max_dist, random_state=1)
    assert abs(sampled - count) <= 0.1 * count, (sampled, count)


def test_geodesic_pairs_never_join_two_hemispheres():
    meshes = two_hemisphere_mesh(5, radius=50.0)
    V, A, _ = _two_hemispheres(meshes)
    n_left = meshes["left"].n_vertices
    pairs = ev.geodesic_pairs(V, A, max_dist=400.0)
    assert np.all((pairs.rows < n_left) == (pairs.cols < n_left))
    # within a hemisphere every pair is there (400 mm spans a 50 mm sphere)
    assert len(pairs) == n_left * (n_left - 1)


def _dense_dcbc(X, labels, D, max_dist, width, parcel=None):
    """DiedrichsenLab's numpy DCBC on dense matrices: per bin the mean covariance over the
    mean standard-deviation product of within and between pairs, weighted; with
    ``parcel``, on the pairs with an end in that parcel only."""
    cov = np.cov(X)
    sd = np.sqrt(np.diag(cov))
    var = np.outer(sd, sd)
    iu = np.triu_indices(X.shape[0], k=1)
    d, r, c = D[iu], iu[0], iu[1]
    fg = (labels[r] > 0) & (labels[c] > 0)
    if parcel is not None:
        fg &= (labels[r] == parcel) | (labels[c] == parcel)
    d, r, c = d[fg], r[fg], c[fg]
    cw, cb, nw, nb = [], [], [], []
    for b in range(int(np.floor(max_dist / width))):
        inb = (d > b * width) & (d <= (b + 1) * width)
        same = labels[r[inb]] == labels[c[inb]]
        rw, cwi = r[inb][same], c[inb][same]
        rb, cbi = r[inb][~same], c[inb][~same]
        nw.append(rw.size)
        nb.append(rb.size)
        with np.errstate(invalid="ignore"):
            cw.append(np.nanmean(cov[rw, cwi]) / np.nanmean(var[rw, cwi]) if rw.size else np.nan)
            cb.append(np.nanmean(cov[rb, cbi]) / np.nanmean(var[rb, cbi]) if rb.size else np.nan)
    nw, nb = np.array(nw, float), np.array(nb, float)
    with np.errstate(divide="ignore"):
        w = np.where((nw > 0) & (nb > 0), 1 / (1 / nw + 1 / nb), 0.0)
    w = w / w.sum()
    return float(np.nansum((np.array(cw) - np.array(cb)) * w))


@pytest.mark.parametrize("seed", [0, 1])
def test_dcbc_equals_the_dense_reference(seed):
    X, truth, V, A = _planted(frequency=8, seed=seed)
    X = (X - X.mean(1, keepdims=True)) / X.std(1, keepdims=True)  # the reference's var = 1
    pairs = ev.geodesic_pairs(V, A, max_dist=35.0)
    D = shortest_path(_edge_lengths(V, A), directed=False)
    r = ev.pair_correlations(ev.unit_series(X), pairs)
    for labels in (truth, grow_regions(A, 5, random_state=seed + 10) + 1):
        got = ev.dcbc(labels, pairs, r, bin_width=5.0)
        assert got.value == pytest.approx(_dense_dcbc(X, labels, D, 35.0, 5.0), abs=1e-10)
    lazy = ev.pair_correlations(da.from_array(ev.unit_series(X), chunks=(50, 80)), pairs)
    np.testing.assert_allclose(lazy, r, atol=1e-12)


def test_each_parcels_dcbc_and_homogeneity_equal_the_dense_reference():
    """Parcel by parcel: DCBC on the pairs with an end in the parcel (the background's
    pairs left out), and the mean correlation of the parcel's pairs; the whole
    parcellation's homogeneity is their size-weighted mean."""
    X, truth, V, A = _planted(frequency=8, seed=4)
    X = (X - X.mean(1, keepdims=True)) / X.std(1, keepdims=True)
    pairs = ev.geodesic_pairs(V, A, max_dist=35.0)
    D = shortest_path(_edge_lengths(V, A), directed=False)
    Z = ev.unit_series(X)
    r = ev.pair_correlations(Z, pairs)
    labels = truth * 3  # ids need not be 1..K
    labels[np.random.default_rng(4).random(labels.size) < 0.1] = 0
    # small blocks: a pair block ends inside a parcel's pairs
    dc = ev.parcel_dcbc(labels, pairs, r, bin_width=5.0, block=1000)
    ho = ev.parcel_homogeneity(da.from_array(Z, chunks=(100, 80)), labels)
    ids = np.unique(labels[labels > 0])
    np.testing.assert_array_equal(dc.ids, ids)
    np.testing.assert_array_equal(ho.ids, ids)
    np.testing.assert_array_equal(ho.sizes, [(labels == p).sum() for p in ids])
    for i, p in enumerate(ids):
        assert dc.values[i] == pytest.approx(_dense_dcbc(X, labels, D, 35.0, 5.0, p), abs=1e-10)
        C = np.corrcoef(X[labels == p])
        n = C.shape[0]
        assert ho.values[i] == pytest.approx((C.sum() - n) / (n * (n - 1)), abs=1e-10)
    whole = np.sum(ho.sizes * ho.values) / ho.sizes.sum()
    assert ev.homogeneity(Z, labels) == pytest.approx(whole, abs=1e-12)


def test_dcbc_leaves_out_background_vertices_as_the_dense_reference_does():
    """Pairs with an end off every parcel (label 0) count in no bin, within or between."""
    X, truth, V, A = _planted(frequency=8, seed=3)
    X = (X - X.mean(1, keepdims=True)) / X.std(1, keepdims=True)
    pairs = ev.geodesic_pairs(V, A, max_dist=35.0)
    D = shortest_path(_edge_lengths(V, A), directed=False)
    r = ev.pair_correlations(ev.unit_series(X), pairs)
    labels = truth.copy()
    labels[np.random.default_rng(3).random(labels.size) < 0.2] = 0
    got = ev.dcbc(labels, pairs, r, bin_width=5.0)
    assert got.value == pytest.approx(_dense_dcbc(X, labels, D, 35.0, 5.0), abs=1e-10)
    kept = (labels[pairs.rows] > 0) & (labels[pairs.cols] > 0)
    assert got.n_within.sum() + got.n_between.sum() == np.count_nonzero(kept)


def test_random_parcels_score_dcbc_about_zero_however_smooth_the_data():
    """Smooth data with no parcels in it: random contiguous parcels give DCBC near 0,
    since within and between pairs are compared at the same distance."""
    V, A = _mesh(24, radius=70.0)
    rng = np.random.default_rng(3)
    X = np.column_stack([np.sin(V @ rng.standard_normal(3) / 15) for _ in range(60)])
    X += 0.5 * rng.standard_normal(X.shape)
    pairs = ev.geodesic_pairs(V, A, max_dist=35.0)
    r = ev.pair_correlations(ev.unit_series(X), pairs)
    values = [ev.dcbc(grow_regions(A, 30, random_state=s) + 1, pairs, r, bin_width=2.0).value
              for s in range(5)]  # fmt: skip
    assert max(abs(v) for v in values) < 0.02, values


def _dense_silhouette(X, labels, A):
    Dm = 1.0 - np.corrcoef(X)
    coo = A.tocoo()
    out = []
    for v in np.flatnonzero(labels > 0):
        i = labels[v]
        own = labels == i
        if own.sum() < 2:
            out.append(0.0)
            continue
        a = Dm[v, own & (np.arange(labels.size) != v)].mean()
        touching = {labels[c] for r_, c in zip(coo.row, coo.col, strict=True)
                    if labels[r_] == i and labels[c] not in (i, 0)}  # fmt: skip
        if not touching:
            out.append(0.0)
            continue
        b = min(Dm[v, labels == j].mean() for j in touching)
        out.append((b - a) / max(a, b))
    return float(np.mean(out))


def test_neighbour_silhouette_equals_the_dense_definition():
    X, truth, V, A = _planted(frequency=6, k=6)
    for labels in (truth, grow_regions(A, 9, random_state=4) + 1):
        got = ev.neighbour_silhouette(ev.unit_series(X), labels, A)
        assert got == pytest.approx(_dense_silhouette(X, labels, A), abs=1e-10)


def _spins(V, n, seed):
    """Vertex maps of random rotations of the sphere (nearest vertex after rotating)."""
    tree = cKDTree(V)
    rots = Rotation.random(n, random_state=seed)
    return [tree.query(R.apply(V))[1] for R in rots]


def test_a_planted_truth_beats_every_spin_of_itself_on_every_measure():
    X, truth, V, A = _planted(frequency=12, k=10, noise=3.0, seed=5)
    Z = ev.unit_series(X)
    pairs = ev.geodesic_pairs(V, A, max_dist=35.0)
    r = ev.pair_correlations(Z, pairs)
    spins = _spins(V, 20, seed=1)
    for score in (
        lambda lab: ev.homogeneity(Z, lab),
        lambda lab: ev.dcbc(lab, pairs, r, bin_width=3.0).value,
        lambda lab: ev.neighbour_silhouette(Z, lab, A),
    ):
        res = ev.spin_null(score, truth, spins)
        nulls = [score(truth[index]) for index in spins]
        assert res["value"] > max(nulls)
        assert res["z"] is not None and res["z"] > 3
        assert res["null_mean"] == pytest.approx(np.mean(nulls))


@pytest.mark.parametrize("batch", [16, 512])
def test_pair_correlations_by_blocks_and_pair_by_pair_agree(batch):
    """The product per patch of the geodesic search's own batches, per Voronoi cell
    (local numbering), and pair by pair (numbering spread over the surface) give every
    pair's dot product."""
    V, A = _mesh(10)
    pairs = ev.geodesic_pairs(V, A, max_dist=20.0, batch=batch)
    groups = pairs.groups
    assert groups is not None and groups[0] == 0 and groups[-1] == len(pairs)
    assert np.all(np.diff(groups) >= 0) and groups.size - 1 >= V.shape[0] // batch
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((V.shape[0], 7))
    direct = np.einsum("ij,ij->i", Z[pairs.rows], Z[pairs.cols])
    np.testing.assert_allclose(ev.pair_correlations(Z, pairs), direct, rtol=1e-12)
    np.testing.assert_allclose(ev.pair_correlations(Z, pairs, block=32), direct, rtol=1e-12)
    perm = rng.permutation(V.shape[0])  # vertex v renumbered perm[v]
    spread = ev.VertexPairs(perm[pairs.rows], perm[pairs.cols], pairs.distances, 20.0)
    Zp = np.empty_like(Z)
    Zp[perm] = Z
    np.testing.assert_allclose(ev.pair_correlations(Zp, spread, block=1), direct, rtol=1e-12)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 1000), k=st.integers(2, 12), T=st.sampled_from([20, 200]))
def test_pca_homogeneity_equals_the_first_eigenvalue_of_each_parcels_correlations(seed, k, T):
    """Both Gram sides (parcels larger and smaller than the series' length) against
    numpy's eigenvalues of each parcel's correlation matrix."""
    X, _, _, A = _planted(frequency=6, T=T, seed=seed)
    labels = grow_regions(A, k, random_state=seed) + 1
    labels[::13] = 0
    ref = []
    for p in np.unique(labels[labels > 0]):
        C = np.atleast_2d(np.corrcoef(X[labels == p]))
        ref.append(np.linalg.eigvalsh(C)[-1] / C.shape[0])
    assert ev.pca_homogeneity(ev.unit_series(X), labels) == pytest.approx(np.mean(ref), abs=1e-9)


def _two_hemispheres(meshes):
    sizes = [meshes[h].n_vertices for h in ("left", "right")]
    A = mesh_adjacency([meshes[h].faces for h in ("left", "right")], sizes)
    V = np.concatenate([meshes[h].vertices for h in ("left", "right")])
    return V, A.tocsr(), {h: meshes[h].vertices for h in ("left", "right")}


def _planted_hemispheres(k=16, T=60, noise=2.0, seed=0, frequency=8):
    """A planted study on two sphere hemispheres with a cap of unkept vertices (a medial
    wall): unit rows of the kept vertices, the truth over every vertex (0 off the kept)."""
    meshes = two_hemisphere_mesh(frequency, radius=50.0)
    V, A, spheres = _two_hemispheres(meshes)
    kept = V[:, 2] < 40.0
    truth = np.zeros(V.shape[0], np.int64)
    Ak = A[kept][:, kept]
    truth[kept] = grow_regions(Ak, k, random_state=seed) + 1
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((k + 1, T))[truth[kept]] + noise * rng.standard_normal(
        (int(kept.sum()), T)
    )
    return ev.unit_series(X), truth, V[kept], Ak.tocsr(), spheres, kept


def test_spin_null_on_every_vertex_equals_the_exact_measures_and_their_spins():
    """With the whole kept set as its sample, the sampled null is the exact one: the
    same values, the same spins (the rotations after the two sample draws), the same z."""
    Z, truth, Vk, Ak, spheres, kept = _planted_hemispheres(seed=3)
    n = int(kept.sum())
    pairs = ev.geodesic_pairs(Vk, Ak, max_dist=35.0)
    r = ev.pair_correlations(Z, pairs)
    labels = np.zeros_like(truth)
    labels[kept] = grow_regions(Ak, 12, random_state=7) + 1
    null = ev.SpinNull(Z, pairs, r, spheres, kept, n_spins=15, n_vertices=n,
                       n_pairs=len(pairs), bin_width=2.0, random_state=11)  # fmt: skip
    got = null.z_scores(labels, Ak)
    rng = np.random.default_rng(11)
    rng.choice(n, n, replace=False), rng.choice(n, n, replace=False)
    spins = spin_indices(spheres, 15, random_state=rng)
    exact = {
        "homogeneity": lambda lab: ev.homogeneity(Z, lab[kept]),
        "dcbc": lambda lab: ev.dcbc(lab[kept], pairs, r, bin_width=2.0).value,
    }
    for m, score in exact.items():
        ref = ev.spin_null(score, labels, spins, kept)
        for key in ("value", "null_mean", "null_sd", "z"):
            assert got[m][key] == pytest.approx(ref[key], rel=1e-4, abs=1e-6), (m, key)
    # the silhouette's own value is exact; its spins keep the unspun parcels' neighbours
    silhouette = ev.neighbour_silhouette(Z, labels[kept], Ak)
    assert got["silhouette"]["value"] == pytest.approx(silhouette, abs=1e-6)


def test_spin_null_on_a_sample_puts_a_planted_truth_far_above_its_spins():
    Z, truth, Vk, Ak, spheres, kept = _planted_hemispheres(k=20, noise=3.0, seed=5)
    pairs = ev.geodesic_pairs(Vk, Ak, max_dist=35.0)
    r = ev.pair_correlations(Z, pairs)
    null = ev.SpinNull(Z, pairs, r, spheres, kept, n_spins=200, n_vertices=300,
                       n_pairs=len(pairs) // 4, random_state=0)  # fmt: skip
    assert 0 < null.n_pairs < len(pairs)
    got = null.z_scores(truth, Ak)
    for m in ("homogeneity", "dcbc", "silhouette"):
        assert got[m]["z"] is not None and got[m]["z"] > 3, m
    # a parcellation that ignores the data sits inside its null
    other = np.zeros_like(truth)
    other[kept] = grow_regions(Ak, 20, random_state=99) + 1
    assert abs(null.z_scores(other, Ak)["dcbc"]["z"]) < 3


def test_spin_null_is_reproducible_and_shares_its_spins_across_data_sets():
    Z, truth, Vk, Ak, spheres, kept = _planted_hemispheres(seed=1)
    Z2 = _planted_hemispheres(seed=2)[0]
    pairs = ev.geodesic_pairs(Vk, Ak, max_dist=35.0)
    r, r2 = ev.pair_correlations(Z, pairs), ev.pair_correlations(Z2, pairs)
    kw = dict(n_spins=30, n_vertices=200, n_pairs=len(pairs) // 4, random_state=4)
    a = ev.SpinNull(Z, pairs, r, spheres, kept, **kw)
    b = ev.SpinNull(Z, pairs, r, spheres, kept, **kw)
    assert a.z_scores(truth, Ak) == b.z_scores(truth, Ak)
    shared = a.with_data(Z2, r2).z_scores(truth, Ak)
    fresh = ev.SpinNull(Z2, pairs, r2, spheres, kept, **kw).z_scores(truth, Ak)
    assert shared == fresh
    assert a.z_scores(truth, Ak) != shared  # the data did change


@pytest.mark.parametrize("T", [260, 900])
def test_pca_homogeneity_of_parcels_wider_than_the_lanczos_threshold_is_the_eigenvalue(T):
    """Parcels and series both over 200 wide go through Lanczos, on the series' side
    (parcels wider than T = 260) and on the parcels' side (T = 900): still numpy's value."""
    X, _, _, A = _planted(frequency=12, k=3, T=T, seed=2)
    labels = grow_regions(A, 3, random_state=2) + 1
    sizes = np.bincount(labels)[1:]
    ref = [
        np.linalg.eigvalsh(np.corrcoef(X[labels == p]))[-1] / np.sum(labels == p) for p in (1, 2, 3)
    ]
    assert min(sizes) > 260 and (min(sizes) > T) == (T == 260) and max(sizes) < 900
    assert ev.pca_homogeneity(ev.unit_series(X), labels) == pytest.approx(np.mean(ref), abs=1e-9)


@pytest.fixture(scope="module")
def realistic100():
    """The realistic study at Vos de Wael 100 as the truth, one subject per split: the
    mesh, the truth and each split's unit rows of U·Σ at rank 60 (fitted and held out)."""
    pytest.importorskip("brainspace")
    from sklearn.utils.extmath import randomized_svd

    from lsd_dask.datasets import realistic_study
    from lsd_dask.surface import combine_meshes

    study = realistic_study(scale=100, n_subjects=(1, 1), n_timepoints=300, random_state=0)
    c = study.cortex
    mesh, _ = combine_meshes(study.meshes)

    def features(split):
        (sid,) = study.splits[split]
        x = study.subject_data(sid)[c].astype(np.float64)
        U, S, _ = randomized_svd(ev.unit_series(x), 60, n_iter=2, random_state=0)
        return (U * S) / np.linalg.norm(U * S, axis=1)[:, None]

    return {
        "A": mesh.adjacency()[c][:, c].tocsr(),
        "V": mesh.vertices[c],
        "cortex": c,
        "truth": study.labels[c],
        "F": {s: features(s) for s in ("split1", "split2")},
    }


def test_blurring_the_features_raises_dice_but_not_held_out_homogeneity(realistic100):
    """On the realistic study (conte69, an atlas as the truth), a 20 mm blur of each
    split's features raises split-half Dice (both splits smooth alike) while the parcels
    read against the other split's data grow less homogeneous, and agree less with the
    truth: what held-out homogeneity is for."""
    from lsd_dask import cluster, metrics
    from lsd_dask.surface import smooth_on_mesh, smoothing_steps, split_connected

    A, V, F = realistic100["A"], realistic100["V"], realistic100["F"]
    steps = smoothing_steps(V, A, 20.0)
    scores = {}
    for blur in (False, True):
        labels = {}
        for s, X in F.items():
            if blur:
                X = smooth_on_mesh(X, A, n_iter=steps)
                X = X / np.linalg.norm(X, axis=1, keepdims=True)
            labels[s] = cluster.SphericalKMeans(100, random_state=0).fit(X).labels_ + 1
        a, b = (split_connected(labels[s], A, min_size=20) for s in F)
        scores[blur] = {
            "dice": metrics.dice_matched(a, b, background=0).mean,
            "homogeneity": np.mean([ev.homogeneity(F["split2"], labels["split1"]),
                                    ev.homogeneity(F["split1"], labels["split2"])]),
            "nmi": metrics.nmi(realistic100["truth"], labels["split1"]),
        }  # fmt: skip
    assert scores[True]["dice"] > scores[False]["dice"] + 0.05
    assert scores[True]["homogeneity"] < scores[False]["homogeneity"]
    assert scores[True]["nmi"] < scores[False]["nmi"]


def test_on_the_realistic_study_the_truth_scores_best_and_the_default_beats_schaefer(
    realistic100,
):
    """The measures rank parcellations by the data: on the realistic study with Vos de
    Wael 100 as the truth, the truth scores highest held-out homogeneity and neighbour
    silhouette, and the pipeline's default method (fitted on each split, scored on the
    other) scores above Schaefer 100, a published atlas that is not the truth. (DCBC needs
    the geodesic pairs of 58,558 vertices, about a minute: ``benchmarks/evaluation.py``
    checks it at K = 100, 200 and 400.)"""
    from lsd_dask.datasets.templates import load_atlas
    from lsd_dask.pipeline.settings.methods import default_methods, parse_methods

    A, V, F, c = realistic100["A"], realistic100["V"], realistic100["F"], realistic100["cortex"]
    (spec,) = parse_methods(default_methods({}), {})
    fitted = {
        s: spec.estimator(100, 0, connectivity=A, vertices=V).fit(X).labels_ + 1
        for s, X in F.items()
    }
    other = {"split1": "split2", "split2": "split1"}

    def score(labels_of):  # split -> the labels read against that split's held-out data
        return {
            "homogeneity": np.mean([ev.homogeneity(F[other[s]], labels_of[s]) for s in F]),
            "silhouette": np.mean(
                [ev.neighbour_silhouette(F[other[s]], labels_of[s], A) for s in F]
            ),
        }

    truth = load_atlas("vosdewael", 100)[c]
    schaefer = load_atlas("schaefer", 100)[c]
    scores = {
        "truth": score({s: truth for s in F}),
        "schaefer": score({s: schaefer for s in F}),
        "default": score(fitted),
    }
    for measure in ("homogeneity", "silhouette"):
        assert scores["truth"][measure] > scores["default"][measure] > scores["schaefer"][measure]


def test_the_measures_table_scores_what_its_functions_score_and_spins_its_spun_rows():
    """``MEASURES`` is the one list of measures: each row's score is its function on the
    held-out data, the rows with a spin null are those ``SpinNull`` scores, and their
    papers are among the references a run cites."""
    from lsd_dask.pipeline.products.citations import REFERENCES

    Z, truth, Vk, Ak, spheres, kept = _planted_hemispheres(seed=3)
    pairs = ev.geodesic_pairs(Vk, Ak, max_dist=35.0)
    r = ev.pair_correlations(Z, pairs)
    data = ev.HeldOutData(Z, pairs, r, Ak, bin_width=2.0)
    lab = truth[kept]
    direct = {
        "homogeneity": ev.homogeneity(Z, lab),
        "dcbc": ev.dcbc(lab, pairs, r, bin_width=2.0).value,
        "silhouette": ev.neighbour_silhouette(Z, lab, Ak),
        "pca_homogeneity": ev.pca_homogeneity(Z, lab),
    }
    assert {m.name: m.score(data, lab) for m in ev.MEASURES} == direct
    null = ev.SpinNull(Z, pairs, r, spheres, kept, n_spins=5, n_vertices=100,
                       n_pairs=len(pairs) // 4, random_state=0)  # fmt: skip
    spun = set(null.z_scores(truth, Ak))
    assert spun == {m.name for m in ev.MEASURES if m.spin_null}
    assert {m.citation for m in ev.MEASURES if m.citation} <= set(REFERENCES)
    assert len({m.name for m in ev.MEASURES}) == len(ev.MEASURES)


def test_a_measure_is_one_row_of_the_table(monkeypatch):
    """A row added to ``MEASURES`` reaches the held-out scores, their means, the report's
    comparison columns and its explanation of the scores, with nothing else changed."""
    from lsd_dask.pipeline.products.report_html import _comparison_tables
    from lsd_dask.pipeline.stages.evaluation import EvaluationStage
    from lsd_dask.pipeline.stages.held_out import held_out_scores, mean_of

    def largest_parcel_share(data, labels):
        return float(np.bincount(labels).max() / labels.size)

    extra = ev.Measure(
        "largest_share", "largest parcel share", largest_parcel_share,
        higher_is_better=False, spin_null=False, explanation="the largest parcel's share",
    )  # fmt: skip
    monkeypatch.setattr(ev, "MEASURES", (*ev.MEASURES, extra))
    Z, truth, Vk, Ak, spheres, kept = _planted_hemispheres(seed=3)
    pairs = ev.geodesic_pairs(Vk, Ak, max_dist=35.0)
    r = ev.pair_correlations(Z, pairs)
    scores = held_out_scores(truth, Z, pairs, r, Ak, kept, None)
    share = np.bincount(truth[kept]).max() / kept.sum()
    assert scores["largest_share"]["value"] == pytest.approx(share)
    means = mean_of({"a_on_b": scores, "b_on_a": scores})
    assert means["largest_share"] == pytest.approx(share)
    stage = EvaluationStage()
    explained = stage.explain(None)["heldout"]  # its words need nothing of a run
    assert "heldout_largest_share, the largest parcel's share" in explained
    assert "heldout_largest_share" in [c.name for c in stage.columns]
    rows = [
        {"method": name, "k": 16, "n_regions": [16, 16], "heldout_homogeneity": 0.5,
         "heldout_largest_share": value}
        for name, value in (("a", 0.2), ("b", 0.1))
    ]  # fmt: skip
    [table] = [p for p in _comparison_tables(rows) if "<table>" in p]
    assert "largest parcel share" in table
    # lower is better for this row: b's 0.100 is the one in bold
    assert "<b>0.100</b>" in table and "<b>0.200</b>" not in table
