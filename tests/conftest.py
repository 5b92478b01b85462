"""Shared fixtures."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import settings

from lsd_dask.testing import tiny_two_hemisphere_mesh

settings.register_profile("ci", max_examples=60, deadline=None)
settings.register_profile("dev", max_examples=30, deadline=None)
settings.load_profile("ci")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def tiny_meshes():
    """Asymmetric two-hemisphere mesh (42 + 92 vertices)."""
    return tiny_two_hemisphere_mesh()
