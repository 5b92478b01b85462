"""Spin-test null for surface maps (Alexander-Bloch et al. 2018): rotate a map on the sphere.

Each repeat draws a uniformly random rotation of the sphere; every vertex takes the value of
the vertex nearest to its rotated position. The right hemisphere turns by the left's
rotation mirrored across the midline (``x -> -x``), so both hemispheres spin the same way
in anatomical terms, as brainspace's ``SpinPermutations`` does. A spun parcellation keeps
its parcels' sizes, shapes and contiguity but not where they are: the null for a score of
two parcellations that reviewers of surface maps expect.

The spheres are the meshes' spherical registrations (FreeSurfer's ``?h.sphere``, the 32k
``*.sphere.surf.gii``), vertex for vertex with the meshes. :func:`find_spheres` supplies
them for fsaverage5 (nilearn ships it) and 32k_fs_LR (brainspace ships it), or takes the
meshes themselves when they already are spheres.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.spatial import cKDTree
from scipy.spatial.transform import Rotation

from ._validation import RandomState
from .surface import Mesh

__all__ = ["find_spheres", "is_sphere", "radii", "spin_indices", "spin_labels"]


def spin_indices(
    spheres: dict[str, np.ndarray],
    n_repeats: int,
    *,
    random_state: RandomState | Sequence[int] = None,
    at: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Vertex maps of ``n_repeats`` random spins: ``labels[index]`` is the spun map.

    Parameters
    ----------
    spheres : {"left": (n_left, 3), "right": (n_right, 3)}
        Sphere coordinates of each hemisphere's vertices (centred at the origin).
    n_repeats : int
    random_state : int, sequence of int, Generator or None
    at : ndarray of int, optional
        Only these vertices (left-then-right order) are mapped: the same rotations, so
        ``spin_indices(..., at=v)[i]`` is ``spin_indices(...)[i][v]`` at a fraction of
        the cost when a null is scored on a sample of the vertices.

    Returns
    -------
    list of ndarray of shape (n_left + n_right,) or (len(at),)
        Indices into the left-then-right vertex order.
    """
    rng = np.random.default_rng(random_state)
    coords = {h: _unit(np.asarray(spheres[h], np.float64)) for h in ("left", "right")}
    trees = {h: cKDTree(c) for h, c in coords.items()}
    offset = {"left": 0, "right": coords["left"].shape[0]}
    mirror = np.diag([-1.0, 1.0, 1.0])
    n_left = coords["left"].shape[0]
    if at is None:
        where = {h: slice(None) for h in ("left", "right")}
        order = None
    else:
        at = np.asarray(at, np.int64)
        where = {"left": at[at < n_left], "right": at[at >= n_left] - n_left}
        order = np.argsort(np.argsort(at, kind="stable"), kind="stable")
        where = {h: np.sort(w) for h, w in where.items()}
    out = []
    for _ in range(int(n_repeats)):
        R = Rotation.random(random_state=rng).as_matrix()
        parts = []
        for h in ("left", "right"):
            Rh = R if h == "left" else mirror @ R @ mirror
            _, idx = trees[h].query(coords[h][where[h]] @ Rh.T)
            parts.append(np.asarray(idx, np.int64) + offset[h])
        spun = np.concatenate(parts)
        out.append(spun if order is None else spun[order])
    return out


def spin_labels(
    labels: np.ndarray, index: np.ndarray, kept: np.ndarray | None = None
) -> np.ndarray:
    """``labels`` spun by one map of :func:`spin_indices`; vertices outside ``kept`` (the
    medial wall) are 0 after the spin, and a kept vertex that lands on one gets 0."""
    out = np.asarray(labels)[index]
    if kept is not None:
        out = np.where(kept & kept[index], out, 0)
    return out


def find_spheres(meshes: dict[str, Mesh], given: dict[str, str] | None = None) -> dict[str, Any]:
    """Sphere coordinates for the meshes, and where they came from.

    Returns ``{"spheres": {...} or None, "source": str}``: the ``given`` GIFTI spheres;
    nilearn's fsaverage5 sphere for fsaverage5 meshes, brainspace's conte69 sphere for
    32k_fs_LR ones (a template known by its triangles,
    :func:`~lsd_dask.datasets.templates.identify_template`, not by its vertex count: an
    icosphere of 32,492 vertices rotated on conte69's sphere would scramble its parcels
    instead); the meshes themselves when every vertex lies within 1 % of a common radius;
    otherwise None, with the reason.
    """
    from .datasets.templates import identify_template
    from .io.surface_files import load_mesh

    sizes = {h: meshes[h].n_vertices for h in ("left", "right")}
    if given:
        spheres = {h: load_mesh(given[h]).vertices for h in ("left", "right")}
        for h in ("left", "right"):
            if spheres[h].shape[0] != sizes[h]:
                raise ValueError(
                    f"sphere.{h} has {spheres[h].shape[0]} vertices, the {h} mesh {sizes[h]}."
                )
        return {"spheres": spheres, "source": f"the given spheres ({given['left']}, ...)"}
    template = identify_template(meshes)
    if template == "fsaverage5":
        from nilearn import datasets

        sphere = datasets.load_fsaverage("fsaverage5")["sphere"]
        return {
            "spheres": {h: np.asarray(sphere.parts[h].coordinates) for h in ("left", "right")},
            "source": "nilearn's fsaverage5 sphere",
        }
    if template == "conte69":  # brainspace is installed: the mesh was matched with its own
        from .datasets.templates import brainspace_data

        spheres = {
            h: load_mesh(brainspace_data(f"surfaces/conte69_32k_{x}_sphere.gii")).vertices
            for h, x in (("left", "lh"), ("right", "rh"))
        }
        return {"spheres": spheres, "source": "brainspace's conte69 32k sphere"}
    if all(is_sphere(meshes[h].vertices) for h in sizes):
        centred = {h: meshes[h].vertices - meshes[h].vertices.mean(axis=0) for h in sizes}
        return {"spheres": centred, "source": "the meshes themselves, which are spheres"}
    return {
        "spheres": None,
        "source": "none: the meshes are neither a standard template nor spheres, so no "
        "rotation of them is known (set `sphere:` to their spheres)",
    }


def radii(vertices: np.ndarray) -> np.ndarray:
    """Each vertex's distance from the vertices' centre."""
    return np.asarray(np.linalg.norm(vertices - vertices.mean(axis=0), axis=1))


def is_sphere(vertices: np.ndarray) -> bool:
    """Whether every vertex lies within 1 % of a common radius (a spread of 2 % of the
    mean): what the spin null can rotate without distorting the cortex."""
    r = radii(vertices)
    return bool(np.ptp(r) <= 0.02 * r.mean())


def _unit(X: np.ndarray) -> np.ndarray:
    X = X - X.mean(axis=0)
    return X / np.linalg.norm(X, axis=1, keepdims=True)
