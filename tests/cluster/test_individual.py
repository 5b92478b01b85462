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
            C[:, live] = np.corrcoef(X, refs[live])[: X.shape[0], X.shape[0]:]
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
