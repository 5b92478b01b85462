"""Parcellations read from the label files researchers download: CIFTI ``.dlabel.nii``, a
GIFTI ``.label.gii`` pair, a FreeSurfer ``.annot`` pair.

Every reader returns parcel ids over the left-then-right vertex order, ``0`` where no
parcel is (the medial wall, an ``unknown`` or ``???`` label). A parcel belongs to one
hemisphere: the right hemisphere's ids are shifted past the left's when both files number
their parcels from 1, so that ``L_1`` and ``R_1`` stay two parcels.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np

from .surface_files import HEMISPHERES, load_image

__all__ = ["LABEL_KEYS", "read_parcellation"]

#: how a parcellation's files are given: one CIFTI, or a file per hemisphere
LABEL_KEYS = ("dlabel", "left", "right")

_CIFTI_NAMES = {"left": "CIFTI_STRUCTURE_CORTEX_LEFT", "right": "CIFTI_STRUCTURE_CORTEX_RIGHT"}


def read_parcellation(
    files: Mapping[str, str | os.PathLike[str]],
) -> tuple[np.ndarray, list[int]]:
    """Parcel ids per vertex and the vertex count of each hemisphere's surface.

    Parameters
    ----------
    files : {"dlabel": path} or {"left": path, "right": path}
        A ``.dlabel.nii`` (its surface size from the brain models), or two ``.label.gii``
        or two ``.annot`` files.

    Returns
    -------
    labels : ndarray of int64, shape (n_left + n_right,)
    sizes : [n_left, n_right]

    Raises
    ------
    ValueError
        One line naming the file: unreadable, of an unknown kind, or without a
        hemisphere's cortex.
    """
    if "dlabel" in files:
        return _read_dlabel(Path(files["dlabel"]))
    parts = [_read_hemisphere(Path(files[h])) for h in HEMISPHERES]
    left, right = parts
    shift = int(left.max(initial=0))
    right = np.where(right > 0, right + shift, 0)
    return np.concatenate([left, right]), [left.size, right.size]


def _read_dlabel(path: Path) -> tuple[np.ndarray, list[int]]:
    try:
        img: Any = nib.load(str(path))
        bm = img.header.get_axis(1)
        data = np.asarray(img.get_fdata()[0]).astype(np.int64)
    except Exception as err:  # nibabel raises many kinds on a damaged or wrong file
        raise ValueError(f"{path}: not a readable CIFTI label file ({err}).") from err
    found = {name: (sl, model) for name, sl, model in bm.iter_structures()}
    out, sizes = [], []
    for h in HEMISPHERES:
        if _CIFTI_NAMES[h] not in found:
            raise ValueError(f"{path}: no {_CIFTI_NAMES[h]} in its brain models.")
        sl, model = found[_CIFTI_NAMES[h]]
        n = int(model.nvertices[_CIFTI_NAMES[h]])
        labels = np.zeros(n, np.int64)
        labels[np.asarray(model.vertex)] = data[sl]
        out.append(labels)
        sizes.append(n)
    return np.concatenate(out), sizes


def _read_hemisphere(path: Path) -> np.ndarray:
    name = path.name
    try:
        if name.endswith(".annot"):
            labels, _, _ = nib.freesurfer.read_annot(str(path))
            # -1: no label; 0: the table's first entry, "unknown" or the medial wall
            return np.where(np.asarray(labels) > 0, labels, 0).astype(np.int64)
        if name.endswith(".label.gii"):
            gii: Any = load_image(path)
            labels = np.asarray(gii.darrays[0].data).astype(np.int64).ravel()
            return np.where(labels > 0, labels, 0)
    except Exception as err:  # nibabel raises many kinds on a damaged file
        raise ValueError(f"{path}: not a readable label file ({err}).") from err
    raise ValueError(
        f"{path}: a parcellation is a .dlabel.nii, a .label.gii pair or an .annot pair."
    )
