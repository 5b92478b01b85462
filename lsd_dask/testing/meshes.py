"""Tiny meshes for tests."""

from __future__ import annotations

from ..surface import Mesh, two_hemisphere_mesh


def tiny_two_hemisphere_mesh() -> dict[str, Mesh]:
    """Asymmetric two-hemisphere mesh: 42 left and 92 right vertices.

    Unequal counts catch code that mixes the hemispheres up or forgets the index offset.
    """
    return two_hemisphere_mesh(2, 3, radius=10.0)
