"""The demo's run (the README's main job at its defaults), shared by the tests of the
report's per-parcel tables and of its page."""

from __future__ import annotations

import pytest

from lsd_dask.pipeline import run_demo


@pytest.fixture(scope="package")
def demo(tmp_path_factory):
    """``lsd-dask demo``'s outputs (its own local cluster of two workers) and report."""
    root = tmp_path_factory.mktemp("demo")
    report = run_demo(root, log=lambda line: None)
    return root / "results", report
