"""Clustering estimators (scikit-learn API; numpy or dask input; labels_ always numpy)."""

from .directional import DirectionalClustering, directional_assign, select_n_clusters
from .hierarchical import HierarchicalLSD
from .individual import IterativeIndividualParcellation, PriorPottsIndividualParcellation
from .kmeans import KEVD, KMeans, SphericalKMeans
from .lsd import LSD
from .multiscale import MultiScaleParcellation
from .nmf import NMF, SemiNMF
from .parcellation import SPATIAL_OPTIONS, MeshParcellation, check_spatial_options
from .sof import SoF
from .spectral import SpectralClustering
from .ward import MeshWard, WardMerge, cut_merges, ward_merge

__all__ = [
    "LSD",
    "HierarchicalLSD",
    "DirectionalClustering",
    "directional_assign",
    "select_n_clusters",
    "KMeans",
    "SphericalKMeans",
    "KEVD",
    "SpectralClustering",
    "SoF",
    "NMF",
    "SemiNMF",
    "MeshWard",
    "WardMerge",
    "cut_merges",
    "ward_merge",
    "MeshParcellation",
    "MultiScaleParcellation",
    "IterativeIndividualParcellation",
    "PriorPottsIndividualParcellation",
    "SPATIAL_OPTIONS",
    "check_spatial_options",
]
