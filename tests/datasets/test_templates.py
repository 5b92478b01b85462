"""Standard meshes known by their triangles, not by their vertex count."""

from __future__ import annotations

import numpy as np
import pytest

from lsd_dask.datasets.templates import identify_template, load_template
from lsd_dask.surface import Mesh, two_hemisphere_mesh

pytest.importorskip("brainspace")


def _surface(kind):
    from nilearn import datasets

    fs = datasets.load_fsaverage("fsaverage5")[kind]
    return {
        h: Mesh(np.asarray(fs.parts[h].coordinates), np.asarray(fs.parts[h].faces))
        for h in ("left", "right")
    }


def test_every_surface_of_a_template_is_that_template():
    """conte69's midthickness (brainspace) and sphere, fsaverage5's pial (brainspace's
    copy), and nilearn's fsaverage5 sphere and inflated surface: one template each."""
    from lsd_dask.datasets.templates import brainspace_data
    from lsd_dask.io.surface_files import load_mesh

    assert identify_template(load_template("conte69").meshes) == "conte69"
    sphere = {
        h: load_mesh(brainspace_data(f"surfaces/conte69_32k_{x}_sphere.gii"))
        for h, x in (("left", "lh"), ("right", "rh"))
    }
    assert identify_template(sphere) == "conte69"
    assert identify_template(load_template("fsaverage5").meshes) == "fsaverage5"
    for kind in ("sphere", "inflated"):
        assert identify_template(_surface(kind)) == "fsaverage5"


def test_a_mesh_with_a_templates_vertex_count_and_other_triangles_is_custom():
    """An icosphere of 32,492 vertices per hemisphere is not 32k_fs_LR; conte69 with one
    edge flipped is not conte69 either; conte69 with its triangles reordered and rewound
    still is."""
    assert identify_template(two_hemisphere_mesh(57)) is None
    conte = load_template("conte69").meshes
    rng = np.random.default_rng(0)
    faces = conte["left"].faces[rng.permutation(len(conte["left"].faces))][:, [1, 2, 0]]
    shuffled = {**conte, "left": Mesh(conte["left"].vertices, faces)}
    assert identify_template(shuffled) == "conte69"
    # flip the edge two triangles share: (a, b, c), (b, a, d) -> (c, d, b), (d, c, a)
    f = conte["left"].faces.copy()
    a, b, c = f[0]
    j = next(i for i in range(1, len(f)) if {a, b} <= set(f[i]) and c not in f[i])
    d = next(v for v in f[j] if v not in (a, b))
    f[0], f[j] = (c, d, b), (d, c, a)
    flipped = {**conte, "left": Mesh(conte["left"].vertices, f)}
    assert identify_template(flipped) is None
