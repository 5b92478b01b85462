"""Shared fixtures."""

from __future__ import annotations

import logging

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


class _RunSpecClashes(logging.Handler):
    """The distributed scheduler's warnings that a key came back with another task: dask's
    known route to a task that waits forever (it hung a test here now and then)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.keys: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "Detected different `run_spec`" in message:
            self.keys.append(message.split(" between ")[0])


@pytest.fixture(autouse=True)
def no_key_resubmitted_with_another_task():
    """Fail a test whose graphs sent an in-process scheduler (a LocalCluster's) one key with
    two different tasks, whether or not that run happened to hang."""
    handler = _RunSpecClashes()
    logger = logging.getLogger("distributed.scheduler")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
    if handler.keys:
        pytest.fail(f"{len(handler.keys)} key(s) resubmitted with another task: {handler.keys[0]}")
