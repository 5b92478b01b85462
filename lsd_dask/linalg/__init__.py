"""Linear algebra: randomized/streaming SVD, eigenpairs, simplex projection, rotations."""

from .eigen import top_eigenpairs, top_eigenpairs_from_factor
from .randomized import randomized_svd, svd_flip
from .reductions import cluster_sums
from .rotations import procrustes_about_axis, rotate_givens
from .simplex import project_rows_simplex, project_simplex
from .streaming import streaming_svd

__all__ = [
    "randomized_svd",
    "streaming_svd",
    "svd_flip",
    "top_eigenpairs",
    "top_eigenpairs_from_factor",
    "cluster_sums",
    "project_simplex",
    "project_rows_simplex",
    "rotate_givens",
    "procrustes_about_axis",
]
