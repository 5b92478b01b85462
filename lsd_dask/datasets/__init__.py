"""Data sets: real cortical templates and a realistic split-half benchmark study.

- :func:`load_template`, :func:`load_atlas`, :func:`load_group_connectivity`: the conte69
  32k_fs_LR and fsaverage5 surfaces, medial-wall masks, the Vos de Wael and Schaefer atlases
  and HCP group connectivity matrices shipped by the ``brainspace`` package (an optional
  extra: ``pip install 'lsd-dask[templates]'``).
- :func:`realistic_study`: a study on a real mesh with a published atlas as the truth and
  parcel time series correlated like real group connectivity.
"""

from .realistic import RealisticStudy, realistic_study
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
]
