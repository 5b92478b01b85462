"""Data sets: real cortical templates and a realistic split-half benchmark study.

- :func:`load_template`, :func:`load_atlas`, :func:`load_group_connectivity`: the conte69
  32k_fs_LR and fsaverage5 surfaces, medial-wall masks, the Vos de Wael and Schaefer atlases
  and HCP group connectivity matrices shipped by the ``brainspace`` package (an optional
  extra: ``pip install 'lsd-dask[templates]'``).
- :func:`realistic_study`: a study on a real mesh with a published atlas as the truth and
  parcel time series correlated like real group connectivity.
- Seeded synthetic generators with ground truth (:mod:`lsd_dask.datasets.synthetic`):
  Blumensath's Table I/II data and data sets 1–3, the brain-like grid, LSDable
  similarities, and the synthetic split-half surface study behind ``lsd-dask synth``.
"""

from .realistic import RealisticStudy, realistic_study
from .synthetic import (
    LSDableData,
    SurfaceStudy,
    blumensath_dataset,
    blumensath_table_data,
    brain_grid,
    lsdable_similarity,
    surface_study,
)
from .templates import (
    ATLASES,
    TEMPLATES,
    Template,
    load_atlas,
    load_group_connectivity,
    load_template,
)

__all__ = [
    "ATLASES",
    "TEMPLATES",
    "Template",
    "load_template",
    "load_atlas",
    "load_group_connectivity",
    "RealisticStudy",
    "realistic_study",
    "LSDableData",
    "SurfaceStudy",
    "blumensath_dataset",
    "blumensath_table_data",
    "brain_grid",
    "lsdable_similarity",
    "surface_study",
]
