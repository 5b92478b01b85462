"""A group parcellation adjusted to one subject (Wang et al. 2015), against a dense numpy
reference built on ``np.corrcoef``, and on subjects whose borders the generator moved."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsd_dask.cluster import IterativeIndividualParcellation
from lsd_dask.metrics import nmi


def _subject(seed: int, shift: int, n_regions: int = 6, width: int = 10, t: int = 80,
             noise: float = 1.0):  # fmt: skip
    """Vertices on a line; the group's regions are ``width`` wide, the subject's borders
    are ``shift`` vertices to the right; one signal per region, plus noise."""
    rng = np.random.default_rng(seed)
    n = n_regions * width
    group = np.arange(n) // width
    own = np.clip((np.arange(n) - shift) // width, 0, n_regions - 1)
    X = rng.standard_normal((n_regions, t))[own] + noise * rng.standard_normal((n, t))
    return X, group, own


def _reference(X, group, weight, core, max_iter, tol):
    """The method written out with np.corrcoef: references as mean standardised series."""
    Zs = (X - X.mean(1, keepdims=True)) / X.std(1, keepdims=True)
    ids = np.unique(group)
    first = np.stack([Zs[group == c].mean(0) for c in ids])
    first /= first.std(1, keepdims=True)  # a reference's scale does not change a correlation
    labels, conf, refs = np.searchsorted(ids, group), None, first
    for it in range(1, max_iter + 1):
        if it > 1:
            own = np.stack([
                Zs[(labels == c) & (conf >= core)].mean(0)
                if np.any((labels == c) & (conf >= core)) else np.zeros(X.shape[1])
                for c in range(ids.size)
            ])  # fmt: skip
            own = np.stack([r / np.linalg.norm(r) if np.linalg.norm(r) else r for r in own])
            unit_first = first / np.linalg.norm(first, axis=1, keepdims=True)
            refs = own + weight / (it - 1) * unit_first
        live = np.linalg.norm(refs, axis=1) > 0  # a parcel with no core vertex: r = 0
        C = np.zeros((X.shape[0], refs.shape[0]))
        with np.errstate(invalid="ignore"):
            C[:, live] = np.corrcoef(X, refs[live])[: X.shape[0], X.shape[0] :]
        new = C.argmax(1)
        s = np.sort(C, axis=1)
        conf = np.maximum(s[:, -1], 1e-6) / np.maximum(s[:, -2], 1e-6)
        moved = np.mean(new != labels)
        labels = new
        if moved <= tol:
            break
    return ids[labels], conf, it


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), shift=st.integers(0, 6),
       weight=st.sampled_from([0.0, 0.5, 2.0]), core=st.sampled_from([1.0, 1.1, 1.5]))  # fmt: skip
def test_labels_and_confidence_equal_the_dense_reference(seed, shift, weight, core):
    X, group, _ = _subject(seed, shift)
    est = IterativeIndividualParcellation(group, group_weight=weight, core_confidence=core)
    est.fit(X)
    labels, conf, n_iter = _reference(X, group, weight, core, 10, 0.02)
    np.testing.assert_array_equal(est.labels_, labels)
    np.testing.assert_allclose(est.confidence_, conf, rtol=1e-9)
    assert est.n_iter_ == n_iter


def test_the_subjects_own_borders_are_found_where_the_group_misplaces_them():
    """Borders moved by 4 of 10 vertices: the individual labels agree with the subject's
    own truth better than the group's do, on every seed; and the vertices they still get
    wrong are the unsure ones (confidence pooled over the seeds)."""
    right, wrong = [], []
    for seed in range(10):
        X, group, own = _subject(seed, shift=4, noise=1.5)
        est = IterativeIndividualParcellation(group).fit(X)
        assert nmi(own, est.labels_) > nmi(own, group) + 0.1, seed
        ok = est.labels_ == own
        right += list(est.confidence_[ok])
        wrong += list(est.confidence_[~ok])
    assert 0 < len(wrong) < len(right) / 20
    assert np.median(wrong) < 1.5 < np.median(right)


def test_vertices_outside_the_group_parcels_stay_outside():
    X, group, _ = _subject(1, shift=2)
    group = group.copy()
    group[:5] = -1
    est = IterativeIndividualParcellation(group).fit(X)
    assert (est.labels_[:5] == -1).all() and (est.confidence_[:5] == 0).all()
    assert set(np.unique(est.labels_[5:])) <= set(np.unique(group[5:]))


@pytest.mark.parametrize(
    ("group", "match"),
    [
        (None, "group_labels: the group parcellation"),
        (np.zeros(5, int), r"group_labels: 60 integers \(one per vertex of X\), got shape"),
        (np.full(60, 0.5), "got shape .* of float64"),
        (np.full(60, -1), "no vertex is in a parcel"),
    ],
)
def test_a_bad_group_parcellation_is_named(group, match):
    X, _, _ = _subject(0, 0)
    with pytest.raises(ValueError, match=match):
        IterativeIndividualParcellation(group).fit(X)


def test_a_dask_subject_gives_the_same_map():
    import dask.array as da

    X, group, _ = _subject(3, shift=3)
    here = IterativeIndividualParcellation(group).fit(X)
    lazy = IterativeIndividualParcellation(group).fit(da.from_array(X, chunks=(16, 80)))
    np.testing.assert_array_equal(here.labels_, lazy.labels_)
    np.testing.assert_allclose(here.confidence_, lazy.confidence_, rtol=1e-12)


# ------------------------------------------------------------ the vMF model with the prior


def _grid_subject(seed: int, shift: int, noise: float = 1.5, rows: int = 6, width: int = 8,
                  t: int = 60):  # fmt: skip
    """A grid of ``rows`` × (6 · width) vertices with :func:`_subject`'s regions as
    columns (the subject's borders ``shift`` columns right of the group's); each grid row
    the line's series plus noise of its own."""
    from lsd_dask.surface import grid_adjacency

    line, group, own = _subject(seed, shift, width=width, t=t, noise=noise)
    rng = np.random.default_rng(seed + 1)
    X = np.tile(line, (rows, 1)) + noise * rng.standard_normal((rows * line.shape[0], t))
    return X, np.tile(group, rows), np.tile(own, rows), grid_adjacency(rows, group.size)


def test_prior_potts_confidence_is_the_dense_posterior_and_labels_a_fixed_point():
    """Run until a round moves nothing: every vertex's label is its best under the
    combined energy given its neighbours (ICM's fixed point), the cost never rose, and
    the confidence is the softmax of that energy at the label, computed here in numpy."""
    from lsd_dask.cluster import PriorPottsIndividualParcellation

    X, group, _, A = _grid_subject(3, shift=3)
    est = PriorPottsIndividualParcellation(group, A, kappa=30.0, tol=0.0, max_iter=50).fit(X)
    Z = X - X.mean(1, keepdims=True)
    Z /= np.linalg.norm(Z, axis=1, keepdims=True)
    ids = est.parcel_ids_
    lab = np.searchsorted(ids, est.labels_)
    # the prior: the group's indicators averaged over 4 steps of (D + I)^-1 (A + I), dense
    Ad = A.toarray()
    W = (Ad + np.eye(len(Ad))) / (Ad.sum(1, keepdims=True) + 1)
    P = np.linalg.matrix_power(W, 4) @ np.eye(ids.size)[np.searchsorted(ids, group)]
    M = np.stack([Z[lab == c].sum(0) for c in range(ids.size)])
    M /= np.linalg.norm(M, axis=1, keepdims=True)
    np.testing.assert_allclose(est.means_, M, atol=1e-12)
    E = 30.0 * Z @ M.T + np.log(np.maximum(P, 1e-4)) + Ad @ np.eye(ids.size)[lab]
    assert np.all(E[np.arange(lab.size), lab] >= E.max(1) - 1e-9)
    post = np.exp(E - E.max(1, keepdims=True))
    post /= post.sum(1, keepdims=True)
    np.testing.assert_allclose(est.confidence_, post[np.arange(lab.size), lab], rtol=1e-9)
    history = np.asarray(est.cost_history_)
    assert np.all(np.diff(history) <= 1e-9 * abs(history[0]))


def test_prior_potts_finds_the_subjects_own_borders():
    from lsd_dask.cluster import PriorPottsIndividualParcellation

    for seed in range(3):
        X, group, own, A = _grid_subject(seed, shift=3)
        est = PriorPottsIndividualParcellation(group, A, kappa=30.0).fit(X)
        assert nmi(own, est.labels_) > nmi(own, group) + 0.1, seed


def test_prior_potts_names_bad_settings():
    from lsd_dask.cluster import PriorPottsIndividualParcellation

    X, group, _, A = _grid_subject(0, shift=0)
    with pytest.raises(ValueError, match="prior_floor in"):
        PriorPottsIndividualParcellation(group, A, prior_floor=0).fit(X)
    with pytest.raises(ValueError, match="connectivity has shape"):
        PriorPottsIndividualParcellation(group, A[:10, :10]).fit(X)
