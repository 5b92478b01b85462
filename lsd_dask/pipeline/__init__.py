"""Pipeline orchestration: the split-half parcellation and the demo."""

from .demo import DemoResult, run_demo

__all__ = ["DemoResult", "run_demo"]
