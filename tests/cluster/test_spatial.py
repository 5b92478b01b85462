"""The Potts/ICM spatial term of spherical k-means on a real mesh graph."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from lsd_dask import metrics
from lsd_dask.cluster import DirectionalClustering, SphericalKMeans
from lsd_dask.cluster._spatial import (
    ScoreColumns,
    component_moves,
    greedy_colouring,
    icm,
    potts_cost,
)
from lsd_dask.surface import grow_regions, icosphere

MESH = icosphere(10, radius=50.0)
A = MESH.adjacency()


def _noisy_parcels(seed: int, k: int = 8, noise: float = 1.5):
    """Contiguous planted parcels; each vertex's row is its parcel's direction plus noise."""
    rng = np.random.default_rng(seed)
    truth = grow_regions(A, k, random_state=seed)
    D = rng.standard_normal((k, 12))
    X = D[truth] + noise * rng.standard_normal((truth.size, 12))
    return X, truth


def test_colouring_is_proper():
    col = greedy_colouring(A)
    Ac = sp.coo_matrix(A)
    assert np.all(col[Ac.row] != col[Ac.col]) and col.max() < 10


@given(seed=st.integers(0, 2**16), beta=st.floats(0.01, 1.0))
@settings(max_examples=15, deadline=None)
def test_icm_and_the_combined_cost_never_increase(seed, beta):
    X, _ = _noisy_parcels(seed)
    rng = np.random.default_rng(seed)
    S = rng.standard_normal((X.shape[0], 8))
    lab = rng.integers(0, 8, X.shape[0])
    new = icm(S, lab, A, beta, sweeps=3)
    assert potts_cost(S, new, A, beta) <= potts_cost(S, lab, A, beta) + 1e-9
    est = SphericalKMeans(8, spatial_weight=beta, connectivity=A, random_state=seed).fit(X)
    hist = np.array(est.spatial_cost_history_)
    assert np.all(np.diff(hist) <= 1e-9 * np.abs(hist[:-1]).max())


def test_the_spatial_term_follows_contiguous_parcels():
    X, truth = _noisy_parcels(0, noise=2.5)
    Ac = sp.triu(sp.coo_matrix(A), k=1)
    plain = SphericalKMeans(8, random_state=0).fit(X).labels_
    spatial = SphericalKMeans(8, spatial_weight=0.3, connectivity=A, random_state=0).fit(X)
    cut = [np.count_nonzero(v[Ac.row] != v[Ac.col]) for v in (plain, spatial.labels_)]
    assert cut[1] < 0.5 * cut[0]
    assert metrics.nmi(truth, spatial.labels_) > metrics.nmi(truth, plain) + 0.05
    lazy = SphericalKMeans(8, spatial_weight=0.3, connectivity=A, random_state=0)
    lazy.fit(da.from_array(X, chunks=(300, 12)))
    assert metrics.ari(np.asarray(lazy.labels_), spatial.labels_) > 0.99
    # no weight: plain spherical k-means
    same = SphericalKMeans(8, spatial_weight=0.0, connectivity=A, random_state=0).fit(X)
    np.testing.assert_array_equal(same.labels_, plain)


def _cut(labels):
    E = sp.triu(sp.coo_matrix(A), k=1)
    return int(np.count_nonzero(labels[E.row] != labels[E.col]))


@given(seed=st.integers(0, 2**16), beta=st.floats(0.01, 3.0))
@settings(max_examples=15, deadline=None)
def test_region_moves_never_raise_the_cost_nor_drop_a_label(seed, beta):
    rng = np.random.default_rng(seed)
    truth = grow_regions(A, 6, random_state=seed)
    S = rng.standard_normal((truth.size, 6)) * 0.5
    S[np.arange(truth.size), truth] += 0.5
    # salt and pepper: a tenth of the vertices on a random label
    lab = np.where(rng.random(truth.size) < 0.1, rng.integers(0, 6, truth.size), truth)
    new = component_moves(S, lab, A, beta)
    assert potts_cost(S, new, A, beta) <= potts_cost(S, lab, A, beta) + 1e-9
    assert set(np.unique(new)) == set(np.unique(lab))


def test_region_moves_remove_islands_that_icm_keeps():
    truth = grow_regions(A, 4, random_state=0)
    S = np.zeros((truth.size, 4))
    S[np.arange(truth.size), truth] = 1.0
    lab = truth.copy()
    # a 7-vertex island (a vertex and its ring) inside its region, whose data favour the
    # island's label a little: a vertex on its edge has 3 neighbours in and 3 out, so a
    # single-vertex move gains no edges and loses data; ICM keeps the island
    v = int(np.flatnonzero(truth == 0)[0])
    ring = np.append(A[v].indices, v)
    inside = ring[truth[ring] == truth[v]]
    assert inside.size >= 5
    other = (truth[v] + 1) % 4
    lab[inside] = other
    S[inside, other] = 1.1
    beta = 1.0
    kept = icm(S, lab, A, beta, sweeps=5)
    assert np.all(kept[inside] == other)
    cleaned = component_moves(S, kept, A, beta)
    assert np.all(cleaned[inside] == truth[v])
    assert potts_cost(S, cleaned, A, beta) < potts_cost(S, kept, A, beta)


@given(seed=st.integers(0, 2**16), beta=st.floats(0.01, 3.0))
@settings(max_examples=10, deadline=None)
def test_directional_combined_cost_never_increases(seed, beta):
    X, _ = _noisy_parcels(seed)
    est = DirectionalClustering(8, spatial_weight=beta, connectivity=A, random_state=seed).fit(X)
    hist = np.array(est.spatial_cost_history_)
    assert np.all(np.diff(hist) <= 1e-9 * np.abs(hist).max())
    # the history is the combined cost: the data term plus beta per cut edge
    D, s, lab = est.cluster_centers_, est.coefficients_, est.labels_
    data = float(np.sum((unit(X) - s[:, None] * D[lab]) ** 2))
    assert data + beta * _cut(lab) <= hist[-1] + 1e-6 * abs(hist[-1])


def unit(X):
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def test_directional_spatial_term_follows_contiguous_parcels():
    X, truth = _noisy_parcels(0, noise=2.5)
    plain = DirectionalClustering(8, random_state=0).fit(X).labels_
    spatial = DirectionalClustering(8, spatial_weight=0.3, connectivity=A, random_state=0).fit(X)
    assert _cut(spatial.labels_) < 0.5 * _cut(plain)
    assert metrics.nmi(truth, spatial.labels_) > metrics.nmi(truth, plain) + 0.1
    lazy = DirectionalClustering(8, spatial_weight=0.3, connectivity=A, random_state=0)
    lazy.fit(da.from_array(X, chunks=(300, 12)))
    assert metrics.ari(np.asarray(lazy.labels_), spatial.labels_) > 0.99
    with pytest.raises(ValueError, match="needs connectivity"):
        DirectionalClustering(8, spatial_weight=0.3).fit(X)
    with pytest.raises(ValueError, match="connectivity has shape"):
        DirectionalClustering(8, spatial_weight=0.3, connectivity=A[:10, :10]).fit(X)


@pytest.mark.parametrize("tol", [0.0, 0.01, 0.05])
def test_the_potts_phase_stops_once_a_round_moves_few_labels(tol):
    """Each round's ICM and region moves change some labels; the phase stops after the
    first round that changes at most ``tol`` of them (0: none), the centres refitted to
    the labels it returns."""
    from lsd_dask.cluster._spatial import potts_phase

    X, _ = _noisy_parcels(3, noise=3.0)
    X = unit(X)
    lab0 = SphericalKMeans(8, random_state=0).fit(X).labels_
    state = {"C": None, "fitted_to": None}

    def refit(lab):
        C = np.stack([X[lab == c].sum(0) for c in range(8)])
        state["C"], state["fitted_to"] = unit(C), lab.copy()

    refit(lab0)
    current, entering = {"lab": lab0}, []

    def scores():
        entering.append(current["lab"])  # the labels this round starts from
        return X @ state["C"].T

    def tracked(lab):
        current["lab"] = lab.copy()
        refit(lab)

    labels, history, n_iter = potts_phase(
        scores, tracked, lab0, A, 0.3, sweeps=2, max_iter=100, tol=tol
    )
    ends = [*entering[1:], labels]
    moves = [int(np.count_nonzero(e != s)) for s, e in zip(entering, ends, strict=True)]
    n = X.shape[0]
    assert len(moves) == n_iter == len(history) and n_iter < 100
    assert moves[-1] <= tol * n
    assert all(m > tol * n for m in moves[:-1])
    np.testing.assert_array_equal(state["fitted_to"], labels)
    assert np.all(np.diff(history) <= 1e-9 * np.abs(history).max())


def _icm_whole_classes(S, labels, adjacency, beta, sweeps):
    """ICM as written before its classes went in blocks: each colour class scored whole."""
    A_ = sp.csr_matrix(adjacency)
    n, k = S.shape
    lab = np.asarray(labels, np.int64).copy()
    col = greedy_colouring(A_)
    for _ in range(sweeps):
        changed = 0
        for c in range(int(col.max()) + 1):
            verts = np.flatnonzero(col == c)
            H = sp.csr_matrix((np.ones(n), (np.arange(n), lab)), shape=(n, k))
            local = S[verts] + beta * (A_[verts] @ H).toarray()
            best = local.argmax(axis=1)
            move = local[np.arange(verts.size), best] > local[np.arange(verts.size), lab[verts]]
            changed += int(move.sum())
            lab[verts[move]] = best[move]
        if changed == 0:
            break
    return lab


def _scores_with_ties(seed, k, dtype):
    """Scores on a coarse grid, so that many labels tie with each other and with the
    Potts bonus: ties must go as a dense argmax sends them."""
    rng = np.random.default_rng(seed)
    return (rng.integers(-4, 5, (A.shape[0], k)) * 0.25).astype(dtype)


@given(
    seed=st.integers(0, 2**16),
    beta=st.sampled_from([0.25, 0.5, 1.0, 0.37]),
    k=st.integers(2, 40),
    dtype=st.sampled_from([np.float32, np.float64]),
)
@settings(max_examples=40, deadline=None)
def test_icm_on_candidate_labels_moves_as_a_dense_argmax_does(seed, beta, k, dtype):
    """ICM weighs each vertex's own, best-scoring and neighbours' labels only; it gives the
    labels of whole-class updates over all K labels in float64, ties included."""
    S = _scores_with_ties(seed, k, dtype)
    lab = np.random.default_rng(seed + 1).integers(0, k, A.shape[0])
    got = icm(S, lab, A, beta, sweeps=3)
    np.testing.assert_array_equal(got, _icm_whole_classes(S.astype(np.float64), lab, A, beta, 3))


def _component_moves_dense(S, labels, adjacency, beta, rounds=20):
    """Region moves as first written: every region weighed against every label, on all
    of S in float64."""
    A_ = sp.csr_matrix(adjacency)
    S = np.asarray(S, np.float64)
    n, k = S.shape
    lab = np.asarray(labels, np.int64).copy()
    coo = sp.coo_matrix(A_)
    s_max = float(np.abs(S).max())
    for _ in range(rounds):
        same = lab[coo.row] == lab[coo.col]
        G = sp.csr_matrix((np.ones(int(same.sum())), (coo.row[same], coo.col[same])), (n, n))
        n_comp, comp = sp.csgraph.connected_components(G, directed=False)
        C = sp.csr_matrix((np.ones(n), (comp, np.arange(n))), shape=(n_comp, n))
        own = np.bincount(comp, weights=S[np.arange(n), lab], minlength=n_comp)
        region_label = np.empty(n_comp, np.int64)
        region_label[comp] = lab
        H = sp.csr_matrix((np.ones(n), (np.arange(n), lab)), shape=(n, k))
        E = (C @ A_ @ H).toarray()
        E[np.arange(n_comp), region_label] = 0.0
        gain = np.asarray(C @ S) - own[:, None] + beta * E
        gain[np.arange(n_comp), region_label] = 0.0
        size = np.bincount(comp, minlength=n_comp)
        order = np.lexsort((-size, region_label))
        first = np.ones(n_comp, bool)
        first[1:] = region_label[order][1:] != region_label[order][:-1]
        gain[order[first]] = 0.0
        best = gain.argmax(axis=1)
        top = gain[np.arange(n_comp), best]
        cand = np.flatnonzero(top > 1e-12 * max(1.0, s_max))
        if cand.size == 0:
            break
        R = (C @ A_ @ C.T).tocsr()
        taken = np.zeros(n_comp, bool)
        blocked = np.zeros(n_comp, bool)
        for c in cand[np.argsort(-top[cand], kind="stable")]:
            if blocked[c]:
                continue
            taken[c] = True
            blocked[R.indices[R.indptr[c] : R.indptr[c + 1]]] = True
        moved = taken[comp]
        lab[moved] = best[comp[moved]]
    return lab


@given(
    seed=st.integers(0, 2**16),
    beta=st.floats(0.01, 3.0),
    k=st.integers(2, 12),
    salt=st.floats(0.0, 0.4),
    dtype=st.sampled_from([np.float32, np.float64]),
)
@settings(max_examples=30, deadline=None)
def test_region_moves_on_fragments_only_match_the_dense_moves(seed, beta, k, salt, dtype):
    """Weighing only the regions that may move (not a label's largest), on their own rows
    of S, gives the labels of weighing every region against every label."""
    rng = np.random.default_rng(seed)
    truth = grow_regions(A, k, random_state=seed)
    S = rng.standard_normal((truth.size, k)) * 0.5
    S[np.arange(truth.size), truth] += 0.5
    S = S.astype(dtype)
    lab = np.where(rng.random(truth.size) < salt, rng.integers(0, k, truth.size), truth)
    np.testing.assert_array_equal(
        component_moves(S, lab, A, beta), _component_moves_dense(S, lab, A, beta)
    )


def test_the_potts_phase_holds_one_score_matrix_at_a_time():
    """The previous round's scores are gone before the next are made, and the region moves
    take no n × K temporary: the phase's peak stays well under two score matrices."""
    import tracemalloc

    from lsd_dask.cluster._spatial import potts_phase

    mesh = icosphere(40, radius=50.0)
    adj = mesh.adjacency()
    k = 200  # wide scores, as at a fine K: the mesh's own arrays are small beside them
    truth = grow_regions(adj, 40, random_state=0)
    rng = np.random.default_rng(0)
    n = truth.size
    state = {"round": 0}

    def scores():
        state["round"] += 1
        S = rng.standard_normal((n, k))
        S *= 0.2  # in place: the test's own scores make one matrix at a time
        S[np.arange(n), truth] += 1.0
        return S

    lab0 = np.asarray(scores().argmax(axis=1))
    nbytes = n * k * 8
    tracemalloc.start()
    try:
        potts_phase(scores, lambda lab: None, lab0, adj, 0.3, sweeps=2, max_iter=4, tol=0.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert state["round"] >= 3  # at least two rounds made new scores while others existed
    assert peak < 1.6 * nbytes, peak / nbytes


@given(
    seed=st.integers(0, 2**16),
    k=st.integers(1, 30),
    shares=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=5),
    dtype=st.sampled_from([np.float32, np.float64]),
    lazy=st.booleans(),
)
@settings(max_examples=30, deadline=None)
def test_score_columns_follow_the_centres_in_one_array(seed, k, shares, dtype, lazy):
    """Each call gives X Cᵀ for the centres of that call; on numpy X in the same array,
    the columns of centres that did not change left as they were, bit for bit, unless so
    many changed that the whole product was made again."""
    from lsd_dask.cluster import _spatial

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 2 * _spatial._ROWS + 50))  # one block of rows and several
    X = rng.standard_normal((n, 7)).astype(dtype)
    src = da.from_array(X, chunks=(max(1, n // 3), 7)) if lazy else X
    C = rng.standard_normal((k, 7))
    products = ScoreColumns(src)
    first = products(C)
    for share in shares:
        before = first.copy()
        changed = rng.random(k) < share
        C[changed] = rng.standard_normal((int(changed.sum()), 7))
        got = products(C)
        assert got.dtype == dtype and got.shape == (n, k)
        np.testing.assert_allclose(got, X @ C.astype(dtype).T, rtol=1e-5, atol=1e-5)
        if not lazy:
            assert got is first
            if changed.sum() <= _spatial._ALL_COLUMNS * k:  # else all made again, by a
                # product of another shape, whose rounding may differ in the last bit
                np.testing.assert_array_equal(got[:, ~changed], before[:, ~changed])
        first = got
