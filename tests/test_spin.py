"""The spin-test null: properties of a rotation on the sphere, and brainspace's spins as
an independent reference."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from lsd_dask import metrics
from lsd_dask.spin import find_spheres, spin_indices, spin_labels
from lsd_dask.surface import grow_regions, icosphere, two_hemisphere_mesh

SPHERE = icosphere(20, radius=1.0)
A = SPHERE.adjacency()
LABELS = grow_regions(A, 20, random_state=0) + 1


def _spheres():
    # the right hemisphere is the left mirrored across the midline
    return {"left": SPHERE.vertices, "right": SPHERE.vertices * np.array([-1.0, 1.0, 1.0])}


def test_a_spin_moves_parcels_and_keeps_their_sizes():
    n = SPHERE.n_vertices
    both = np.concatenate([LABELS, LABELS])
    for index in spin_indices(_spheres(), 5, random_state=0):
        spun = both[index]
        assert np.unique(index[:n]).size > 0.9 * n  # nearly a permutation
        assert np.all(index[:n] < n) and np.all(index[n:] >= n)  # hemispheres stay apart
        sizes, spun_sizes = np.bincount(LABELS), np.bincount(spun[:n], minlength=21)
        # nearest-vertex resampling on an icosphere changes a small parcel by up to a quarter
        rel = np.abs(spun_sizes[1:] - sizes[1:]) / sizes[1:]
        assert rel.mean() < 0.1 and rel.max() < 0.35
        assert metrics.ari(LABELS, spun[:n]) < 0.5  # moved
        # mirrored rotations keep a mirror-symmetric map symmetric
        np.testing.assert_array_equal(spun[:n], spun[n:])


def test_spins_are_seeded_and_respect_the_mask():
    a = spin_indices(_spheres(), 3, random_state=7)
    b = spin_indices(_spheres(), 3, random_state=7)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    kept = np.ones(2 * SPHERE.n_vertices, bool)
    kept[:50] = False
    both = np.concatenate([LABELS, LABELS])
    spun = spin_labels(both, a[0], kept)
    assert np.all(spun[~kept] == 0)
    assert np.all(spun[kept & ~kept[a[0]]] == 0)


@pytest.mark.skipif(importlib.util.find_spec("brainspace") is None, reason="needs brainspace")
def test_the_null_matches_brainspace_spin_permutations():
    from brainspace.null_models import SpinPermutations

    n = SPHERE.n_vertices
    both = np.concatenate([LABELS, LABELS]).astype(float)
    ours = [
        metrics.dice_matched(LABELS, both[i][:n], background=0).mean
        for i in spin_indices(_spheres(), 40, random_state=0)
    ]
    sp = SpinPermutations(n_rep=40, random_state=0)
    sp.fit(_spheres()["left"], points_rh=_spheres()["right"])
    left, _ = sp.randomize(LABELS.astype(float), LABELS.astype(float))
    theirs = [metrics.dice_matched(LABELS, r.astype(int), background=0).mean for r in left]
    assert abs(np.mean(ours) - np.mean(theirs)) < 0.05
    assert abs(np.std(ours) - np.std(theirs)) < 0.05


def test_spheres_are_found_for_spherical_meshes_and_refused_otherwise():
    meshes = two_hemisphere_mesh(4, 4, radius=50.0)
    found = find_spheres(meshes)
    assert found["spheres"] is not None and "spheres" in found["source"]
    bumpy = {
        h: type(m)(m.vertices * np.linspace(0.5, 1.5, m.n_vertices)[:, None], m.faces)
        for h, m in meshes.items()
    }
    assert find_spheres(bumpy)["spheres"] is None


def test_spins_at_some_vertices_are_the_full_spins_there():
    n = 2 * SPHERE.n_vertices
    at = np.random.default_rng(0).choice(n, 300, replace=False)  # both hemispheres, unsorted
    full = spin_indices(_spheres(), 4, random_state=3)
    part = spin_indices(_spheres(), 4, random_state=3, at=at)
    for f, p in zip(full, part, strict=True):
        np.testing.assert_array_equal(f[at], p)


def test_a_32k_icosphere_spins_on_its_own_sphere_not_conte69s():
    """Spins rotate a template's sphere only when the meshes are that template: an
    icosphere with conte69's vertex count spins on itself, and made bumpy (no sphere of its
    own, no template) it gets no spin null, with the reason, where conte69's sphere would
    scramble its parcels."""
    pytest.importorskip("brainspace")
    from lsd_dask.datasets.templates import load_template

    ico = two_hemisphere_mesh(57, radius=50.0)
    found = find_spheres(ico)
    assert found["source"] == "the meshes themselves, which are spheres"
    for h in ("left", "right"):
        centred = ico[h].vertices - ico[h].vertices.mean(axis=0)
        np.testing.assert_allclose(found["spheres"][h], centred)
    bumpy = {
        h: type(m)(m.vertices * np.linspace(0.5, 1.5, m.n_vertices)[:, None], m.faces)
        for h, m in ico.items()
    }
    refused = find_spheres(bumpy)
    assert refused["spheres"] is None and "neither a standard template nor" in refused["source"]
    conte = find_spheres(load_template("conte69").meshes)
    assert conte["source"] == "brainspace's conte69 32k sphere"
