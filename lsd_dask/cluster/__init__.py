"""Clustering estimators (scikit-learn API; numpy or dask input)."""

from .hierarchical import HierarchicalLSD
from .lsd import LSD

__all__ = ["LSD", "HierarchicalLSD"]
