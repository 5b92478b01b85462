"""The realistic benchmark study on brainspace's real conte69 mesh, atlas and connectivity."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from lsd_dask.datasets import (
    load_atlas,
    load_group_connectivity,
    load_template,
    realistic_study,
)
from lsd_dask.datasets.realistic import _correlation_factor

if importlib.util.find_spec("brainspace") is None:
    if os.environ.get("CI"):
        pytest.fail("brainspace (a test dependency) is not installed in CI.", pytrace=False)
    pytest.skip("brainspace is not installed (pip install brainspace).", allow_module_level=True)


def test_template_and_atlas_agree():
    tpl = load_template("conte69")
    assert tpl.hemisphere_sizes == [32492, 32492]
    assert tpl.cortex.sum() == 58558
    lab = load_atlas("vosdewael", 200)
    assert lab.shape == (64984,)
    assert set(np.unique(lab)) == set(range(201))
    assert not np.any(lab[~tpl.cortex])  # medial wall is background
    # hemispheres carry disjoint parcels
    assert not set(np.unique(lab[:32492])) - {0} & set(np.unique(lab[32492:]))
    assert load_template("fsaverage5").hemisphere_sizes == [10242, 10242]


def test_bad_names_fail_with_the_choices():
    with pytest.raises(ValueError, match="vosdewael"):
        load_atlas("desikan", 100)
    with pytest.raises(ValueError, match="scales"):
        load_atlas("vosdewael", 150)
    with pytest.raises(ValueError, match="holdout"):
        load_group_connectivity("vosdewael", 100, group="other")


def test_correlation_factor_is_a_nearby_correlation():
    C = load_group_connectivity("vosdewael", 100, "main")
    L = _correlation_factor(C)
    R = L @ L.T
    np.testing.assert_allclose(np.diag(R), 1.0, atol=1e-12)
    assert np.max(np.abs(R - C)) < 0.05


def test_subjects_follow_the_group_connectivity():
    study = realistic_study(scale=100, n_subjects=(1, 1), n_timepoints=600, snr=4.0)
    raw = study.subject_data("sub-001")
    assert raw.shape == (64984, 600) and raw.dtype == np.float32
    x = raw.astype(np.float64)
    assert np.all(x[~study.cortex] == 0) and np.all(x[study.cortex].std(axis=1) > 0)
    lab = study.labels[study.cortex]
    xc = x[study.cortex]
    xc = (xc - xc.mean(1, keepdims=True)) / xc.std(1, keepdims=True)
    # parcel means correlate like the group matrix the split was drawn from
    means = np.stack([xc[lab == p].mean(0) for p in range(1, 101)])
    R = np.corrcoef(means)
    C = study.connectivity["split1"]
    iu = np.triu_indices(100, 1)
    assert np.corrcoef(R[iu], C[iu])[0, 1] > 0.8
    # subjects are not time-locked: two subjects' parcel series are uncorrelated
    y = study.subject_data("sub-002")[study.cortex].astype(np.float64)
    a, b = xc[lab == 1].mean(0), y[lab == 1].mean(0)
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.2
    # deterministic
    np.testing.assert_array_equal(study.subject_data("sub-001"), raw)


def test_synth_template_writes_hcp_layout_cifti_that_the_pipeline_reads(tmp_path):
    import nibabel as nib
    from click.testing import CliRunner

    from lsd_dask.cli import main
    from lsd_dask.io.surface_files import SubjectFiles, load_subject

    args = ["synth", str(tmp_path), "--template", "conte69"]  # CIFTI unless told otherwise
    args += ["--parcels", "100", "--subjects", "1", "--timepoints", "20"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    img = nib.load(str(tmp_path / "sub-001.dtseries.nii"))
    bm = img.header.get_axis(1)
    names = {name for name, _, _ in bm.iter_structures()}
    assert {"CIFTI_STRUCTURE_CORTEX_LEFT", "CIFTI_STRUCTURE_THALAMUS_LEFT"} <= names
    assert img.header.get_axis(0).step == pytest.approx(0.72)
    n_surface = int(bm.surface_mask.sum())
    assert n_surface == 58558 and bm.volume_mask.sum() == 500  # medial wall left out
    x, sizes = load_subject(SubjectFiles.from_keys("s", cifti=tmp_path / "sub-001.dtseries.nii"))
    assert sizes == [32492, 32492]
    study = realistic_study(scale=100, n_subjects=(1, 1), n_timepoints=20)
    np.testing.assert_array_equal(x, study.subject_data("sub-001"))
    truth = np.load(tmp_path / "truth.npy")
    np.testing.assert_array_equal(truth, load_atlas("vosdewael", 100))
    # the truth and the other published atlas at its scale are scored beside the methods
    from lsd_dask.pipeline import load_config

    cfg = load_config(tmp_path / "pipeline.yaml")
    assert [a.name for a in cfg.compare_atlases] == ["vosdewael_100", "schaefer_100"]


def test_missing_brainspace_says_what_to_install(monkeypatch):
    import lsd_dask.datasets.templates as T

    monkeypatch.setattr(T.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match=r"lsd-dask\[templates\]"):
        T.load_template("conte69")


def test_each_subject_has_its_own_borders_within_their_reach():
    """border_shift 4: every subject's parcels differ from the atlas' near the borders
    only (each moved vertex takes a parcel the atlas has within 4 edges of it), about a
    tenth of the vertices move, differently for each subject and the same on every call;
    border_shift 0 keeps the atlas."""
    import scipy.sparse as sp

    from lsd_dask.surface import combine_meshes

    study = realistic_study(border_shift=4, border_jitter=0.2, random_state=0)
    c = study.cortex
    atlas = study.labels[c]
    own = {s: study.subject_labels(s)[c] for s in study.subjects[:2]}
    A = combine_meshes(study.meshes)[0].adjacency()[c][:, c].tocsr()
    reach = sp.identity(c.sum(), format="csr") + A
    for _ in range(3):
        reach = (reach @ (sp.identity(c.sum(), format="csr") + A)).astype(bool).tocsr()
    for lab in own.values():
        moved = np.flatnonzero(lab != atlas)
        assert 0.05 < moved.size / lab.size < 0.2
        for v in moved[::97]:
            near = atlas[reach.indices[reach.indptr[v] : reach.indptr[v + 1]]]
            assert lab[v] in near, v
        assert np.unique(lab).size == study.labels.max()  # no parcel vanishes
    first, second = own.values()
    assert np.mean(first != second) > 0.05
    np.testing.assert_array_equal(study.subject_labels(study.subjects[0])[c], first)
    plain = realistic_study(random_state=0)
    assert plain.subject_labels(plain.subjects[0]) is plain.labels


def test_a_subjects_series_follow_its_own_borders():
    """A vertex the subject's borders moved correlates better with its own parcel's mean
    series than with the atlas parcel it left (on most such vertices)."""
    study = realistic_study(border_shift=4, border_jitter=0.2, n_timepoints=200,
                            snr=2.0, random_state=1)  # fmt: skip
    s = study.subjects[0]
    c = study.cortex
    X = study.subject_data(s)[c].astype(np.float64)
    Z = X - X.mean(1, keepdims=True)
    Z /= np.linalg.norm(Z, axis=1, keepdims=True)
    own, atlas = study.subject_labels(s)[c], study.labels[c]
    moved = np.flatnonzero(own != atlas)[::25]

    def mean_of(lab, p, skip):
        m = (lab == p) & (np.arange(lab.size) != skip)
        r = Z[m].mean(0)
        return r / np.linalg.norm(r)

    better = [Z[v] @ mean_of(own, own[v], v) > Z[v] @ mean_of(own, atlas[v], v) for v in moved]
    assert np.mean(better) > 0.8
