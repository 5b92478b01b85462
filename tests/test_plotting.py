"""Figures: label matching, colours that tell neighbours apart, and the PNGs themselves."""

from __future__ import annotations

import itertools

import matplotlib.image as mpimg
import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from lsd_dask.plotting import (
    convexity,
    match_labels,
    parcel_colours,
    plot_dice_vs_k,
    plot_parcellations,
)
from lsd_dask.surface import grow_regions, icosphere, two_hemisphere_mesh


@given(seed=st.integers(0, 2**16), k=st.integers(2, 6))
@settings(max_examples=25, deadline=None)
def test_match_labels_undoes_a_relabelling_and_maximises_overlap(seed, k):
    rng = np.random.default_rng(seed)
    ref = rng.integers(0, k + 1, 60)
    perm = np.concatenate([[0], rng.permutation(k) + 1])
    noisy = perm[ref]
    flip = rng.random(60) < 0.2
    noisy[flip] = rng.integers(0, k + 1, int(flip.sum()))
    got = match_labels(ref, noisy)
    assert np.array_equal(got > 0, noisy > 0)  # background stays background
    # a relabelling only: the partition of the non-background vertices is unchanged
    fg = noisy > 0
    assert len(set(zip(noisy[fg], got[fg], strict=True))) == len(np.unique(noisy[fg]))
    # the total overlap is the best over every one-to-one relabelling (brute force)
    ids = np.unique(noisy[fg])
    ref_ids = np.unique(ref[ref > 0])

    def overlap(lab):
        return int(np.sum((lab == ref) & (lab > 0)))

    best = 0
    for perm_ids in itertools.permutations(ref_ids, min(len(ids), len(ref_ids))):
        mapping = dict(zip(ids, perm_ids, strict=False))
        trial = np.array([mapping.get(v, -1) if v > 0 else 0 for v in noisy])
        best = max(best, overlap(trial))
    assert overlap(got) == best
    assert match_labels(ref, perm[ref]).tolist() == ref.tolist()


def test_neighbouring_parcels_get_different_colours():
    mesh = icosphere(10, radius=50.0)
    A = mesh.adjacency()
    labels = grow_regions(A, 30, random_state=0) + 1
    colours = parcel_colours([labels], A, 30)
    E = sp.triu(sp.coo_matrix(A), k=1)
    a, b = labels[E.row], labels[E.col]
    touching = a != b
    assert touching.any()
    same = np.all(colours[a[touching]] == colours[b[touching]], axis=1)
    assert not same.any()
    # no grey in the palette: grey is the background
    assert np.all(np.ptp(colours[1:, :3], axis=1) > 0.15)


@given(k=st.integers(2, 600), seed=st.integers(0, 2**16))
@settings(max_examples=15, deadline=None)
def test_every_parcel_has_its_own_colour(k, seed):
    """More parcels than the palette has colours: still one 8-bit RGB per parcel, none the
    background's, and neighbours still apart in colour."""
    mesh = icosphere(12, radius=50.0)
    A = mesh.adjacency()
    k = min(k, mesh.n_vertices // 2)
    labels = grow_regions(A, k, random_state=seed) + 1
    n = int(labels.max())
    colours = parcel_colours([labels], A, n)
    rgb8 = {tuple(np.round(255 * c[:3]).astype(int)) for c in colours}
    assert len(rgb8) == n + 1
    E = sp.triu(sp.coo_matrix(A), k=1)
    a, b = labels[E.row], labels[E.col]
    assert not np.all(colours[a[a != b]] == colours[b[a != b]], axis=1).any()


def test_convexity_of_a_sphere_is_outward_everywhere():
    mesh = icosphere(8, radius=50.0)
    c = convexity(mesh)
    assert np.all(c < 0)  # the neighbours' mean lies inside a convex surface


def test_figures_are_written(tmp_path):
    meshes = two_hemisphere_mesh(4, 4, radius=50.0)
    n = sum(m.n_vertices for m in meshes.values())
    sizes = [m.n_vertices for m in meshes.values()]
    from lsd_dask.surface import mesh_adjacency

    A = mesh_adjacency([m.faces for m in meshes.values()], sizes)
    lab = grow_regions(A, 12, random_state=0) + 1
    lab[:20] = 0
    other = np.roll(lab, 3)
    out = plot_parcellations(meshes, {"a": lab, "b": other}, tmp_path / "p.png", title="t")
    img = mpimg.imread(out)
    assert img.shape[0] > 400 and img.shape[1] > 1000
    assert np.unique(img.reshape(-1, img.shape[2]), axis=0).shape[0] > 20  # not blank

    def dice_figure(dice_y, name):
        scores = [
            {"method": m, "k": k, "dice": d, "null_dice_mean": 0.3, "null_dice_sd": 0.02}
            for m, d in (("x", 0.5), ("y", dice_y))
            for k in (5, 10)
        ]
        return mpimg.imread(plot_dice_vs_k(scores, tmp_path / name))

    same, moved = dice_figure(0.5, "d.png"), dice_figure(0.9, "e.png")
    assert np.unique(same.reshape(-1, same.shape[2]), axis=0).shape[0] > 20  # not blank
    # the figure draws its data: a method's Dice moved moves its line
    assert same.shape == moved.shape and not np.array_equal(same, moved)
    assert np.array_equal(same, dice_figure(0.5, "f.png"))
    assert n == lab.size
