import numpy as np
import pytest
from hypothesis import given
from sklearn import metrics as skm

from lsd_dask import metrics as M
from lsd_dask.testing.strategies import labeling_pairs, labelings


def test_dice_hand_computed():
    a = np.array([1, 1, 1, 2, 2, 0])
    b = np.array([5, 5, 7, 7, 7, 7])
    # regions a1={0,1,2}, a2={3,4}; b5={0,1}, b7={2,3,4,5}
    # Dice(a1,b5)=2*2/5=0.8, Dice(a1,b7)=2*1/7, Dice(a2,b5)=0, Dice(a2,b7)=2*2/6
    res = M.dice_matched(a, b, background=0)
    assert res.n_regions == (2, 2)
    np.testing.assert_allclose(res.dice, [0.8, 2 / 3])
    assert res.pairs.tolist() == [[1, 5], [2, 7]]
    assert res.mean == pytest.approx((0.8 + 2 / 3) / 2)


def test_dice_greedy_not_optimal_assignment():
    # the greedy rule takes the largest entry first even when a different matching has a
    # larger total; Hungarian would give another answer here
    D = np.array([[0.9, 0.8], [0.8, 0.0]])
    rows, cols = M._greedy_match(D)
    assert list(zip(rows, cols, strict=True)) == [(0, 0), (1, 1)]


def test_dice_unequal_region_counts_uses_min():
    a = np.array([1, 1, 2, 2, 3, 3])
    b = np.array([1, 1, 1, 1, 1, 1])
    res = M.dice_matched(a, b)
    assert res.n_regions == (3, 1)
    assert res.dice.size == 1
    assert res.mean == pytest.approx(2 * 2 / 8)


@given(labelings())
def test_dice_self_is_one(a):
    assert M.dice_matched(a, a).mean == pytest.approx(1.0)


@given(labeling_pairs())
def test_dice_symmetric(pair):
    a, b = pair
    assert M.dice_matched(a, b).mean == pytest.approx(M.dice_matched(b, a).mean)


@given(labeling_pairs())
def test_dice_invariant_to_relabeling(pair):
    a, b = pair
    perm = np.random.default_rng(int(a.sum())).permutation(50) + 100
    assert M.dice_matched(perm[a], b).mean == pytest.approx(M.dice_matched(a, b).mean)


@given(labeling_pairs(min_size=2))
def test_nmi_ari_match_sklearn(pair):
    a, b = pair
    assert M.nmi(a, b) == pytest.approx(
        skm.normalized_mutual_info_score(a, b, average_method="geometric"), abs=1e-10
    )
    assert M.ari(a, b) == pytest.approx(skm.adjusted_rand_score(a, b), abs=1e-10)


@given(labeling_pairs())
def test_nmi_ari_symmetric(pair):
    a, b = pair
    assert M.nmi(a, b) == pytest.approx(M.nmi(b, a))
    assert M.ari(a, b) == pytest.approx(M.ari(b, a))


def test_nmi_eq47_hand():
    a = np.array([0, 0, 1, 1])
    b = np.array([0, 0, 0, 1])
    n = 4
    # eq. 47 directly
    C = np.array([[2, 0], [1, 1]])
    na, nb = C.sum(1), C.sum(0)
    num = sum(
        C[i, j] * np.log(n * C[i, j] / (na[i] * nb[j]))
        for i in range(2)
        for j in range(2)
        if C[i, j]
    )
    den = np.sqrt(np.sum(na * np.log(na / n)) * np.sum(nb * np.log(nb / n)))
    assert M.nmi(a, b) == pytest.approx(num / den)


def test_background_excluded():
    a = np.array([0, 0, 1, 1, 2, 2])
    b = np.array([3, 4, 1, 1, 2, 2])
    assert M.nmi(a, b, background=0) == pytest.approx(1.0)
    assert M.ari(a, b, background=0) == pytest.approx(1.0)
    assert M.nmi(a, b) < 1.0


def test_purity_accuracy_perplexity_hand():
    truth = np.array([0, 0, 0, 1, 1, 1])
    pred = np.array([0, 0, 1, 1, 1, 1])
    assert M.purity(truth, pred) == pytest.approx(5 / 6)
    assert M.accuracy(truth, pred) == pytest.approx(5 / 6)
    assert M.misclassification_rate(truth, pred) == pytest.approx(1 / 6)
    # cluster 0: pure (H=0), cluster 1: 1/4 vs 3/4 -> H = 0.811278 bits; weight 4/6
    h = 4 / 6 * -(0.25 * np.log2(0.25) + 0.75 * np.log2(0.75))
    assert M.perplexity(truth, pred) == pytest.approx(2**h)
    assert M.perplexity(truth, truth) == pytest.approx(1.0)


def test_accuracy_against_bruteforce(rng):
    from itertools import permutations

    t = rng.integers(0, 4, 40)
    p = rng.integers(0, 4, 40)
    best = max(np.mean(np.array(perm)[p] == t) for perm in permutations(range(4)))
    assert M.accuracy(t, p) == pytest.approx(best)


def test_within_cluster_similarity_features_equals_dense(rng):
    F = rng.standard_normal((30, 5))
    K = F @ F.T
    lab = rng.integers(0, 3, 30)
    dense = sum(K[np.ix_(lab == c, lab == c)].sum() for c in range(3)) / sum(
        (lab == c).sum() ** 2 for c in range(3)
    )
    assert M.within_cluster_similarity(lab, K=K) == pytest.approx(dense)
    assert M.within_cluster_similarity(lab, features=F) == pytest.approx(dense)
    import dask.array as da

    Fd = da.from_array(F, chunks=(7, 5))
    assert M.within_cluster_similarity(lab, features=Fd) == pytest.approx(dense)


def test_average_leaf_similarity_pairs_i_le_j(rng):
    F = rng.standard_normal((20, 4))
    K = F @ F.T
    lab = rng.integers(0, 2, 20)
    expected = []
    for c in range(2):
        idx = np.flatnonzero(lab == c)
        sub = K[np.ix_(idx, idx)]
        iu = np.triu_indices(idx.size)
        expected.append(sub[iu].mean())
    np.testing.assert_allclose(M.average_leaf_similarity(lab, features=F), expected)
    np.testing.assert_allclose(M.average_leaf_similarity(lab, K=K), expected)


def test_lsd_objective_features_equals_dense(rng):
    F = rng.random((25, 4))
    P = rng.dirichlet(np.ones(3), size=25).T
    K = F @ F.T
    c = 1.7
    dense = np.sum((c * K - P.T @ P) ** 2)
    assert M.lsd_objective(P, scale=c, K=K) == pytest.approx(dense)
    assert M.lsd_objective(P, scale=c, features=F) == pytest.approx(dense, rel=1e-9)


def test_mismatched_lengths_raise():
    with pytest.raises(ValueError, match="differ in length"):
        M.nmi([0, 1], [0, 1, 1])


def test_dice_tie_case_found_by_hypothesis():
    a = np.array([0, 0, 0, 0, 0, 1, 2, 2, 2, 2, 2])
    b = np.array([1, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0])
    ref = M.dice_matched(a, b).mean
    for perm in ([2, 0, 1], [1, 2, 0], [0, 2, 1]):
        assert M.dice_matched(np.array(perm)[a], b).mean == pytest.approx(ref)
        assert M.dice_matched(a, np.array(perm)[b]).mean == pytest.approx(ref)


def test_ami_is_zero_by_chance_where_nmi_is_not():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 200, 5000), rng.integers(0, 200, 5000)
    assert abs(M.ami(a, b)) < 0.01 and M.nmi(a, b) > 0.3
    assert M.ami(a, a) == pytest.approx(1.0)
    # background: scored on the vertices labelled (non-zero) in both
    a0, b0 = a.copy(), b.copy()
    a0[:100] = 0
    keep = (a0 != 0) & (b0 != 0)
    assert M.ami(a0, b0, background=0) == pytest.approx(M.ami(a0[keep], b0[keep]))


@given(labeling_pairs())
def test_dice_same_ids_equals_the_loop_over_ids(pair):
    """Same-id Dice against its definition, one id at a time (an id in one labeling only
    scores 0); a labeling against itself scores 1."""
    a, b = (np.asarray(x) for x in pair)
    ids = [i for i in np.union1d(a, b) if i != 0]
    if not ids:
        assert M.dice_same_ids(a, b, background=0) == 0.0
        return
    expected = np.mean([2 * np.sum((a == i) & (b == i)) / (np.sum(a == i) + np.sum(b == i))
                        for i in ids])  # fmt: skip
    assert M.dice_same_ids(a, b, background=0) == pytest.approx(expected)
    if np.any(a != 0):
        assert M.dice_same_ids(a, a, background=0) == 1.0
