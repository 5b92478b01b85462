"""Parcellations read back from the files researchers download, written here with nibabel
(and by the project's own writers): every format gives the same ids over the left-then-
right vertex order, 0 where no parcel is, one-line errors naming the file."""

from __future__ import annotations

import nibabel as nib
import numpy as np
import pytest

from lsd_dask.io.label_files import read_parcellation
from lsd_dask.io.surface_files import write_dlabel, write_label_gifti
from lsd_dask.metrics import ari

SIZES = [40, 50]


def _labels(seed=0):
    rng = np.random.default_rng(seed)
    left = rng.integers(0, 4, SIZES[0])  # 0: the medial wall
    right = rng.integers(0, 5, SIZES[1])
    return left, right


def test_a_label_gifti_pair_keeps_each_hemispheres_parcels_apart(tmp_path):
    left, right = _labels()
    write_label_gifti(tmp_path / "lh.label.gii", left, hemisphere="left")
    write_label_gifti(tmp_path / "rh.label.gii", right, hemisphere="right")
    labels, sizes = read_parcellation(
        {"left": tmp_path / "lh.label.gii", "right": tmp_path / "rh.label.gii"}
    )
    assert sizes == SIZES
    assert np.array_equal(labels == 0, np.concatenate([left, right]) == 0)
    assert np.array_equal(labels[: SIZES[0]], left)
    # both files number parcels from 1: the right's come after the left's
    assert set(labels[SIZES[0] :][right > 0]) == {v + left.max() for v in set(right[right > 0])}
    assert ari(labels, np.concatenate([left, np.where(right > 0, right + 10, 0)])) == 1.0


def test_an_annot_pair_reads_minus_one_and_the_first_entry_as_no_parcel(tmp_path):
    left, right = _labels(1)
    for h, lab in (("lh", left), ("rh", right)):
        n = int(lab.max()) + 1
        ctab = np.column_stack([np.arange(n) * 20, np.zeros((n, 3), int), np.arange(n)])
        names = [b"Medial_Wall"] + [f"p{i}".encode() for i in range(1, n)]
        out = np.where(lab == 0, -1 if h == "lh" else 0, lab)  # both ways of "none"
        nib.freesurfer.write_annot(str(tmp_path / f"{h}.x.annot"), out, ctab, names)
    labels, sizes = read_parcellation(
        {"left": tmp_path / "lh.x.annot", "right": tmp_path / "rh.x.annot"}
    )
    assert sizes == SIZES
    assert np.array_equal(labels == 0, np.concatenate([left, right]) == 0)
    assert ari(labels, np.concatenate([left, np.where(right > 0, right + 10, 0)])) == 1.0


def test_a_dlabel_places_its_vertices_on_the_whole_surface(tmp_path):
    left, right = _labels(2)
    full = np.concatenate([left, np.where(right > 0, right + 10, 0)])
    # brain models that leave out a few vertices per hemisphere (a medial wall), as HCP's do
    vertices = {"left": np.arange(3, SIZES[0]), "right": np.arange(0, SIZES[1] - 5)}
    path = write_dlabel(tmp_path / "a.dlabel.nii", full, SIZES, vertices=vertices)
    labels, sizes = read_parcellation({"dlabel": path})
    assert sizes == SIZES
    expected = full.copy()
    expected[:3] = 0
    expected[SIZES[0] + SIZES[1] - 5 :] = 0
    assert np.array_equal(labels, expected)


def test_unreadable_or_unknown_files_fail_with_their_name(tmp_path):
    bad = tmp_path / "lh.label.gii"
    bad.write_text("not gifti")
    write_label_gifti(tmp_path / "rh.label.gii", _labels()[1], hemisphere="right")
    with pytest.raises(ValueError, match="lh.label.gii: not a readable label file"):
        read_parcellation({"left": bad, "right": tmp_path / "rh.label.gii"})
    csv = tmp_path / "lh.csv"
    csv.write_text("1\n2\n")
    with pytest.raises(ValueError, match=r"lh.csv: a parcellation is a \.dlabel\.nii"):
        read_parcellation({"left": csv, "right": tmp_path / "rh.label.gii"})
    with pytest.raises(ValueError, match="x.dlabel.nii: not a readable CIFTI"):
        (tmp_path / "x.dlabel.nii").write_bytes(b"\0" * 100)
        read_parcellation({"dlabel": tmp_path / "x.dlabel.nii"})
