import dask.array as da
import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment
from sklearn.base import clone

from lsd_dask import metrics
from lsd_dask.cluster import LSD, HierarchicalLSD
from lsd_dask.cluster.lsd import lsd_scale, rotate_simplex, solve_lsd
from lsd_dask.datasets import brain_grid, lsdable_similarity
from lsd_dask.similarity import SimilarityFactor, SimilarityOperator


def _match(P, P_true):
    r, c = linear_sum_assignment(-(P @ P_true.T))
    return np.abs(P[r] - P_true[c]).max()


def test_scale_is_one_for_onehot():
    labels = np.array([0, 0, 1, 2, 2, 2, 1])
    P = np.eye(3)[:, labels]
    K = P.T @ P
    w, V = np.linalg.eigh(K)
    w, V = w[::-1][:3], V[:, ::-1][:, :3]
    assert lsd_scale(w, V.sum(axis=0)) == pytest.approx(1.0)
    assert LSD(3, similarity="precomputed").fit(K).scale_ == pytest.approx(1.0)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_lsdable_recovered_exactly(k):
    d = lsdable_similarity(150, k, random_state=k)
    m = LSD(k, similarity="precomputed", max_iter=2000, tol=0).fit(d.K)
    assert metrics.ari(m.labels_, d.labels) == 1.0
    assert m.scale_ == pytest.approx(1.0)
    assert _match(m.probabilities_, d.P) < 1e-5
    np.testing.assert_allclose(m.probabilities_.sum(axis=0), 1.0)
    assert m.objective_ < 1e-8


@pytest.mark.parametrize("k", [3, 4])
def test_lsdable_from_features_equals_precomputed(k):
    d = lsdable_similarity(120, k, random_state=10 + k)
    a = LSD(k, similarity="precomputed", max_iter=2000, tol=0).fit(d.K)
    assert metrics.ari(a.labels_, d.labels) == 1.0
    # the same K given as its factor F = P^T (K = F F^T, never formed): the solver's
    # factor path recovers the planted clustering too, with the same objective
    op = SimilarityOperator(n=d.K.shape[0], factor=SimilarityFactor(d.features, "factor"))
    res = solve_lsd(op, k, solver="rotation", max_iter=2000, tol=0, rng=np.random.default_rng(0))
    assert metrics.ari(res.P.argmax(axis=1), d.labels) == 1.0
    assert res.objective == pytest.approx(a.objective_, abs=1e-8 * np.sum(d.K**2))


def _distance_to_simplex(Y):
    """``||Y - (Y)_Δ||_F^2`` with each row's Euclidean projection onto the probability
    simplex by sorting (Duchi et al. 2008), written here as the reference."""
    u = -np.sort(-Y, axis=1)
    css = np.cumsum(u, axis=1) - 1.0
    idx = np.arange(1, Y.shape[1] + 1)
    rho = (u - css / idx > 0).sum(axis=1)
    theta = css[np.arange(Y.shape[0]), rho - 1] / rho
    return float(np.sum((Y - np.maximum(Y - theta[:, None], 0.0)) ** 2))


@pytest.mark.parametrize("k", [3, 5, 6])
def test_rotate_simplex_never_increases_J(rng, k):
    """Points of the simplex turned by a random rotation about its axis u, so that many
    lie outside it: J, recomputed here from the rows and the rotation, starts at the
    solver's first value and never increases; the returned rotation fixes u, ends at the
    last value reported, and brings the rows most of the way back into the simplex."""
    from scipy.stats import special_ortho_group

    P = rng.dirichlet(np.full(k, 0.3), size=300)
    u = np.ones(k) / np.sqrt(k)
    B = np.linalg.svd(np.eye(k) - np.outer(u, u))[0][:, : k - 1]  # the plane's basis
    turn = np.outer(u, u) + B @ special_ortho_group.rvs(k - 1, random_state=k) @ B.T
    Q = P @ turn.T
    np.testing.assert_allclose(Q.sum(axis=1), 1.0, atol=1e-12)
    hist: list[float] = []
    R, n_iter = rotate_simplex(Q, max_iter=60, tol=0, history=hist)
    assert n_iter > 2 and len(hist) == n_iter + 1
    np.testing.assert_allclose(hist[0], _distance_to_simplex(Q), rtol=1e-9)
    assert np.all(np.diff(hist) <= 1e-12 * hist[0])
    np.testing.assert_allclose(R @ R.T, np.eye(k), atol=1e-10)
    np.testing.assert_allclose(R @ u, u, atol=1e-10)
    final = _distance_to_simplex(Q @ R.T)
    np.testing.assert_allclose(final, hist[-1], rtol=1e-9)
    assert final < 1e-3 * hist[0]


def test_objective_from_features_equals_dense(rng):
    X = rng.standard_normal((80, 6))
    m = LSD(3, similarity="cosine", random_state=0).fit(X)
    F = X / np.linalg.norm(X, axis=1, keepdims=True)
    dense = metrics.lsd_objective(m.probabilities_, scale=m.scale_, K=F @ F.T)
    assert m.objective_ == pytest.approx(dense, rel=1e-8)
    # and precomputed on the same K gives the same clustering
    m2 = LSD(3, similarity="precomputed").fit(F @ F.T)
    assert metrics.ari(m.lsd_labels_, m2.labels_) == pytest.approx(1.0)


@pytest.mark.parametrize("solver", ["rotation", "multiplicative"])
@pytest.mark.parametrize("similarity", ["cosine", "shifted_cosine", "rbf"])
def test_numpy_and_dask_same_labels(solver, similarity):
    X, lab, _ = brain_grid(snr_db=0, n_features=30, n_regions=5, shape=(20, 20), random_state=2)
    kw = dict(solver=solver, similarity=similarity, random_state=0, max_iter=50, n_landmarks=200)
    if similarity == "rbf":
        kw["gamma"] = 0.01
    a = LSD(5, **kw).fit(X)
    b = LSD(5, **kw).fit(da.from_array(X, chunks=(97, 30)))
    # labels are numpy whatever the input; the n × k probabilities stay lazy
    assert type(b.labels_) is np.ndarray and isinstance(b.probabilities_, da.Array)
    lb = b.labels_
    if similarity != "rbf":  # numpy RBF on <= 3000 samples is exact, dask uses Nyström
        np.testing.assert_array_equal(a.labels_, lb)
        np.testing.assert_allclose(a.probabilities_, b.probabilities_.compute(), atol=1e-3)
    if solver == "rotation":
        assert metrics.nmi(lb, lab) > 0.9


def test_multiplicative_finds_planted_clusters():
    X, lab, _ = brain_grid(snr_db=0, n_features=40, n_regions=4, shape=(16, 16), random_state=3)
    m = LSD(4, solver="multiplicative", similarity="cosine", random_state=0).fit(X)
    assert metrics.nmi(m.labels_, lab) > 0.9
    # the paper's Table 2 finding on this input: rotation reaches the lower objective
    r = LSD(4, solver="rotation", similarity="cosine").fit(X)
    assert r.objective_ <= m.objective_
    np.testing.assert_allclose(m.probabilities_.sum(axis=0), 1.0)
    assert m.probabilities_.min() >= 0


def test_bad_inputs():
    X = np.random.default_rng(0).standard_normal((10, 3))
    with pytest.raises(ValueError, match="larger than the number of samples"):
        LSD(11).fit(X)
    X_nan = X.copy()
    X_nan[2, 1] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        LSD(2).fit(X_nan)
    X0 = X.copy()
    X0[4] = 0
    with pytest.raises(ValueError, match="all-zero"):
        LSD(2).fit(X0)
    with pytest.raises(ValueError, match="invalid solver"):
        LSD(2, solver="nope").fit(X)
    with pytest.raises(ValueError, match="square"):
        LSD(2, similarity="precomputed").fit(X)
    # cosine of 3-D data has rank 3: 5 positive eigenvalues cannot exist
    with pytest.raises(ValueError, match="rank at most 3|positive"):
        LSD(5).fit(X)


def test_negative_eigenvalues_raise():
    K = np.diag([3.0, 1.0, -1.0, -2.0])
    with pytest.raises(ValueError, match="only 2 of the top 3 eigenvalues"):
        LSD(3, similarity="precomputed").fit(K)


@pytest.mark.parametrize("similarity", ["cosine", "precomputed"])
def test_hierarchical_concurrent_equals_sequential(similarity):
    X, lab, _ = brain_grid(snr_db=-3, n_features=25, n_regions=12, shape=(24, 24), random_state=4)
    data = X
    if similarity == "precomputed":
        F = X / np.linalg.norm(X, axis=1, keepdims=True)
        data = (1 + F @ F.T) / 2
    seq = HierarchicalLSD(12, similarity=similarity, concurrent=False).fit(data)
    con = HierarchicalLSD(12, similarity=similarity, concurrent=True).fit(data)
    np.testing.assert_array_equal(seq.labels_, con.labels_)
    assert seq.tree_ == con.tree_
    assert len(seq.tree_) == 11 and seq.n_clusters_ == 12


def test_hierarchical_splits_the_least_similar_leaf_first_and_dask_agrees():
    """Arora et al. 3.3: each step splits the current leaf of lowest average similarity
    ``w(C) = 2 / (n (n + 1)) * sum_{i <= j in C} K_ij`` (K the cosine similarities),
    recomputed here from the leaves' rows with numpy; a dask X gives the same tree."""
    X, lab, _ = brain_grid(snr_db=0, n_features=25, n_regions=6, shape=(20, 20), random_state=5)
    h = HierarchicalLSD(6).fit(X)
    assert metrics.nmi(h.labels_, lab) > 0.5
    F = X / np.linalg.norm(X, axis=1, keepdims=True)
    children = {s.parent: s.children for s in h.tree_}
    # the final leaves, numbered in the order they were created
    final = sorted({c for s in h.tree_ for c in s.children} - set(children))

    def rows(node):
        if node in children:
            return np.concatenate([rows(c) for c in children[node]])
        return np.flatnonzero(h.leaf_labels_ == final.index(node))

    def w(idx):
        K = F[idx] @ F[idx].T
        return np.triu(K).sum() * 2 / (len(idx) * (len(idx) + 1))

    leaves, chosen, oldest = {0}, [], []
    for split in h.tree_:
        ws = {node: w(rows(node)) for node in leaves}
        chosen.append(min(ws, key=ws.get))
        oldest.append(min(leaves))
        assert split.size == rows(split.parent).size
        np.testing.assert_allclose(split.similarity, ws[split.parent], rtol=1e-9)
        leaves = (leaves - {split.parent}) | set(split.children)
    assert [s.parent for s in h.tree_] == chosen
    # the data tell the greedy order from splitting the oldest leaf first
    assert chosen != oldest
    np.testing.assert_allclose(h.leaf_similarity_, [w(rows(node)) for node in final], rtol=1e-9)
    hd = HierarchicalLSD(6).fit(da.from_array(X, chunks=(100, 25)))
    assert type(hd.labels_) is np.ndarray and type(hd.leaf_labels_) is np.ndarray
    np.testing.assert_array_equal(hd.leaf_labels_, h.leaf_labels_)
    np.testing.assert_array_equal(hd.labels_, h.labels_)


def _nearest_centre(X, labels, k):
    """Each row's nearest centre by cosine, centres the mean directions of ``labels``."""
    F = X / np.linalg.norm(X, axis=1, keepdims=True)
    C = np.zeros((k, X.shape[1]))
    np.add.at(C, labels, F)
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    return (F @ C.T).argmax(axis=1)


@pytest.mark.parametrize(
    "est", [LSD(5, max_iter=50, random_state=0), HierarchicalLSD(5, random_state=0)]
)
def test_refined_partition_is_a_spherical_kmeans_fixed_point(est):
    X, truth, _ = brain_grid(snr_db=-3, n_features=20, n_regions=5, shape=(16, 16), random_state=2)
    est.fit(X)
    paper = est.lsd_labels_ if isinstance(est, LSD) else est.leaf_labels_
    # every sample sits on its nearest mean direction after refinement
    np.testing.assert_array_equal(_nearest_centre(X, est.labels_, 5), est.labels_)
    assert metrics.nmi(truth, est.labels_) >= metrics.nmi(truth, paper) - 1e-12
    plain = clone(est).set_params(refine=None).fit(X)
    np.testing.assert_array_equal(plain.labels_, paper)


def test_default_iterations_depend_on_refinement():
    X, _, _ = brain_grid(snr_db=-3, n_features=20, n_regions=5, shape=(16, 16), random_state=2)
    for refine, expected in (("auto", 25), (None, 100)):
        # tol=0: the iteration count is the cap unless the fit is exact
        m = LSD(5, refine=refine, tol=0.0, random_state=0).fit(X)
        assert m.n_iter_ == expected
        same = LSD(5, refine=refine, tol=0.0, max_iter=expected, random_state=0).fit(X)
        np.testing.assert_array_equal(m.lsd_labels_, same.lsd_labels_)


def test_refine_needs_features():
    X, _, _ = brain_grid(snr_db=0, n_features=10, n_regions=3, shape=(8, 8), random_state=1)
    F = X / np.linalg.norm(X, axis=1, keepdims=True)
    K = F @ F.T
    with pytest.raises(ValueError, match="refine='spherical_kmeans' needs features"):
        LSD(3, similarity="precomputed", refine="spherical_kmeans").fit(K)
    auto = LSD(3, similarity="precomputed").fit(K)  # "auto": no refinement on a similarity
    np.testing.assert_array_equal(auto.labels_, auto.lsd_labels_)


def test_hierarchical_reference_loop():
    """Labels equal a direct re-implementation of section 3.3 on a dense K."""
    X, _, _ = brain_grid(snr_db=-3, n_features=20, n_regions=5, shape=(12, 12), random_state=6)
    F = X / np.linalg.norm(X, axis=1, keepdims=True)
    K = F @ F.T
    leaves = [np.arange(K.shape[0])]

    def w(idx):
        sub = K[np.ix_(idx, idx)]
        return sub[np.triu_indices(idx.size)].mean()

    while len(leaves) < 5:
        j = int(np.argmin([w(lf) for lf in leaves]))
        idx = leaves.pop(j)
        lab = LSD(2, similarity="precomputed").fit(K[np.ix_(idx, idx)]).labels_
        leaves.insert(j, idx[lab == 0])
        leaves.insert(j + 1, idx[lab == 1])
    ref = np.empty(K.shape[0], int)
    for i, lf in enumerate(leaves):
        ref[lf] = i
    h = HierarchicalLSD(5, similarity="precomputed", split_iter=0).fit(K)
    assert metrics.ari(ref, h.labels_) == pytest.approx(1.0)


def _node_members(h):
    """Members of every node of a fitted HierarchicalLSD's tree, from its leaves."""
    children = {s.parent: s.children for s in h.tree_}
    leaves = sorted({0, *(c for s in h.tree_ for c in s.children)} - set(children))
    members = {lf: np.flatnonzero(h.leaf_labels_ == j) for j, lf in enumerate(leaves)}

    def get(node):
        if node not in members:
            members[node] = np.sort(np.concatenate([get(c) for c in children[node]]))
        return members[node]

    get(0)
    return members


@pytest.mark.parametrize("similarity", ["cosine", "precomputed"])
def test_polished_splits_are_two_means_fixed_points(similarity):
    """With ``split_iter``, every split leaves each sample on the side of its parent whose
    normalised mean similarity is larger (checked on the dense similarity)."""
    X, lab, _ = brain_grid(snr_db=-6, n_features=20, n_regions=8, shape=(20, 20), random_state=3)
    F = X / np.linalg.norm(X, axis=1, keepdims=True)
    K = F @ F.T if similarity == "cosine" else (1 + F @ F.T) / 2
    h = HierarchicalLSD(8, similarity=similarity, split_iter=200, refine=None)
    h.fit(X if similarity == "cosine" else K)
    members = _node_members(h)
    assert sum(members[c].size for c in h.tree_[0].children) == X.shape[0]
    for split in h.tree_:
        parent = members[split.parent]
        sides = [members[c] for c in split.children]
        scores = [K[np.ix_(parent, s)].sum(axis=1) / np.sqrt(K[np.ix_(s, s)].sum()) for s in sides]
        on_right = np.isin(parent, sides[1])
        np.testing.assert_array_equal(scores[1] > scores[0], on_right)
    paper = clone(h).set_params(split_iter=0).fit(X if similarity == "cosine" else K)
    # the paper's closed-form splits are not fixed points here: polishing changed them
    assert not np.array_equal(paper.leaf_labels_, h.leaf_labels_)


def test_k_above_the_similarity_rank_fails_before_the_eigen_step():
    from lsd_dask.cluster.lsd import max_clusters

    X = np.random.default_rng(0).standard_normal((200, 6))
    with pytest.raises(ValueError, match="rank at most 6"):
        LSD(7, random_state=0).fit(X)
    with pytest.raises(ValueError, match="rank at most 7"):
        LSD(8, similarity="shifted_cosine", random_state=0).fit(X)
    assert LSD(7, similarity="shifted_cosine", random_state=0).fit(X).labels_.shape == (200,)
    assert max_clusters("cosine", 6) == 6 and max_clusters("rbf", 6, n_landmarks=50) == 50
