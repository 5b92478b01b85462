"""One fine fit for every K: against the chain written out by hand from the public
estimators, the nesting of its merges, and its independence of smaller K's."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsd_dask.cluster import (
    LSD,
    DirectionalClustering,
    MeshParcellation,
    MultiScaleParcellation,
    ward_merge,
)
from lsd_dask.datasets import brain_grid
from lsd_dask.metrics import nmi
from lsd_dask.surface import grid_adjacency


def _grid(seed: int = 0, regions: int = 12, shape: tuple[int, int] = (24, 24)):
    X, truth, _ = brain_grid(snr_db=-3, n_features=30, n_regions=regions, shape=shape,
                             random_state=seed)  # fmt: skip
    return X, truth, grid_adjacency(*shape)


def _one(A, oversegment=2.0, **options):
    return MeshParcellation(DirectionalClustering(), connectivity=A, spatial_weight=1.0,
                            oversegment=oversegment, random_state=0, **options)  # fmt: skip


def _by_hand(X, A, ks, f):
    """The chain from the public pieces: a fine directional fit with the Potts term at
    ceil(f × K) (tol 1e-3) where the K above holds more than f × K clusters (or at the
    largest K), a Ward merge on the mesh to K, and the Potts refinement of the merge."""
    out, source = {}, None
    for k in sorted(ks, reverse=True):
        if source is None or np.unique(source).size > math.ceil(f * k):
            source = DirectionalClustering(math.ceil(f * k), spatial_weight=1.0, connectivity=A,
                                           tol=1e-3, random_state=0).fit(X).labels_  # fmt: skip
        start, _ = ward_merge(X, source, k, connectivity=A)
        source = DirectionalClustering(k, spatial_weight=1.0, connectivity=A,
                                       random_state=0).refine(X, start).labels_  # fmt: skip
        out[k] = source
    return out


def test_every_k_is_the_chain_written_out_by_hand():
    X, _, A = _grid()
    ks = [3, 6, 12, 40]
    est = MultiScaleParcellation(_one(A), ks).fit(X)
    ref = _by_hand(X, A, ks, 2.0)
    assert sorted(est.labels_) == ks
    for k in ks:
        np.testing.assert_array_equal(est.labels_[k], ref[k], err_msg=f"K={k}")
        # the Potts term may empty a cluster (labels then skip its number, as the
        # wrapper's do): K at most
        assert est.n_clusters_[k] == est.labels_[k].max() + 1 <= k
    # 40 → 12 would merge more than 2 clusters into one: a fresh fine fit at 24 there
    assert est.fine_clusters_ == {40: 80, 12: 24}


@settings(max_examples=8, deadline=None)
@given(
    seed=st.integers(0, 50),
    ks=st.lists(st.integers(2, 30), min_size=2, max_size=4, unique=True),
)
def test_a_k_does_not_depend_on_the_smaller_ks_asked_with_it(seed, ks):
    """Each K starts from the one above: dropping the smallest K leaves the rest as they
    were, bit for bit."""
    X, _, A = _grid(seed, shape=(16, 16))
    full = MultiScaleParcellation(_one(A), ks).fit(X).labels_
    fewer = MultiScaleParcellation(_one(A), sorted(ks)[1:]).fit(X).labels_
    for k, lab in fewer.items():
        np.testing.assert_array_equal(full[k], lab, err_msg=f"K={k}")


def test_without_refinement_the_ks_nest():
    """Merges only: each K's clusters are unions of the K above's (within one fine fit)."""
    X, _, A = _grid(1)
    ks = [4, 6, 9, 12]
    est = MultiScaleParcellation(_one(A, oversegment=3.0), ks, refine=False).fit(X)
    assert list(est.fine_clusters_) == [12]
    for fine, coarse in zip(ks[::-1], ks[::-1][1:], strict=False):
        a, b = est.labels_[fine], est.labels_[coarse]
        # every fine cluster lies in one coarse cluster
        assert all(np.unique(b[a == c]).size == 1 for c in np.unique(a)), (fine, coarse)


def test_refinement_finds_the_planted_regions_the_merge_blurs():
    """On a grid with 12 planted regions, K = 12 from a fine fit at 48 clusters: the
    refinement's NMI to the truth is above the merged start's, and its combined cost
    (data term and cut mesh edges) never rose on the way."""
    X, truth, A = _grid(2)
    merged = MultiScaleParcellation(_one(A, oversegment=4.0), [12], refine=False).fit(X)
    refined = MultiScaleParcellation(_one(A, oversegment=4.0), [12]).fit(X)
    assert nmi(truth, refined.labels_[12]) > nmi(truth, merged.labels_[12])
    est = DirectionalClustering(12, spatial_weight=1.0, connectivity=A).refine(
        X, merged.labels_[12]
    )
    np.testing.assert_array_equal(est.labels_, refined.labels_[12])
    history = np.asarray(est.spatial_cost_history_)
    assert np.all(np.diff(history) <= 1e-9 * history[0])


def test_the_wrappers_contiguity_applies_at_every_k():
    X, _, A = _grid(3)
    est = MultiScaleParcellation(_one(A, contiguous=True, min_region_size=4), [5, 10]).fit(X)
    from lsd_dask.surface import split_connected

    for k, lab in est.labels_.items():
        assert split_connected(lab + 1, A, min_size=1).max() == est.n_clusters_[k] >= k


def test_a_method_without_a_potts_refinement_is_merged_only():
    X, _, A = _grid(4)
    one = MeshParcellation(LSD(), connectivity=A, oversegment=2.0, random_state=0)
    est = MultiScaleParcellation(one, [4, 8]).fit(X)
    merged_only = MultiScaleParcellation(one, [4, 8], refine=False).fit(X)
    for k in (4, 8):
        np.testing.assert_array_equal(est.labels_[k], merged_only.labels_[k])


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda A: MultiScaleParcellation(DirectionalClustering(), [4]), TypeError,
         "parcellation: a MeshParcellation"),
        (lambda A: MultiScaleParcellation(_one(A, oversegment=1.0), [4]), ValueError,
         "needs oversegment > 1"),
        (lambda A: MultiScaleParcellation(_one(A), []), ValueError, "empty list"),
        (lambda A: MultiScaleParcellation(_one(A), 4), ValueError, "a list of K's"),
        (lambda A: MultiScaleParcellation(_one(A), [4, 10_000]), ValueError, "10000"),
    ],
)  # fmt: skip
def test_bad_settings_are_named(make, error, match):
    X, _, A = _grid()
    with pytest.raises(error, match=match):
        make(A).fit(X)


def test_refine_keeps_a_clean_planted_labelling_and_names_bad_labels():
    """At high SNR and a light Potts weight the planted regions are the combined cost's
    minimum: refined from the truth they stay (up to numbering; at weight 1 the term
    would outweigh the data on this grid's 15-vertex regions, 4 edges a vertex). Labels
    that are not K non-empty clusters, and a refinement without a Potts term, are refused
    in one line."""
    X, truth, _ = brain_grid(snr_db=10, n_features=30, n_regions=8, shape=(16, 16),
                             random_state=5)  # fmt: skip
    A = grid_adjacency(16, 16)
    lab = np.unique(truth, return_inverse=True)[1]
    k = int(lab.max()) + 1
    est = DirectionalClustering(k, spatial_weight=0.1, connectivity=A).refine(X, lab)
    assert nmi(lab, est.labels_) == pytest.approx(1.0)
    with pytest.raises(ValueError, match=rf"labels: 256 integers in \[0, {k + 1}\), every"):
        DirectionalClustering(k + 1, spatial_weight=1.0, connectivity=A).refine(X, lab)
    with pytest.raises(ValueError, match="labels: 256 integers"):
        DirectionalClustering(k, spatial_weight=1.0, connectivity=A).refine(X, lab[:-1])
    with pytest.raises(ValueError, match="refine: needs spatial_weight > 0"):
        DirectionalClustering(k, connectivity=A).refine(X, lab)
