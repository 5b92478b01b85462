"""Per-subject preprocessing at ingest: against scipy/numpy references and in the pipeline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.signal
from hypothesis import given, settings
from hypothesis import strategies as st

from lsd_dask.io.surface_files import (
    SubjectFiles,
    subject_t_r,
    write_dtseries,
    write_func_gifti,
    write_zarr_subject,
)
from lsd_dask.pipeline import load_config, run_pipeline, write_study
from lsd_dask.pipeline.settings.preprocess import PreprocessSettings
from lsd_dask.pipeline.stages.preprocess import clean_subject, read_confounds
from lsd_dask.surface import icosphere, smooth_on_mesh

RNG = np.random.default_rng(0)


def _settings(**kw):
    return PreprocessSettings.from_mapping(kw, "test", Path("/data"))


def test_band_pass_keeps_the_band_and_removes_the_rest():
    t_r, T = 0.72, 1200
    t = np.arange(T) * t_r
    inside, outside = np.sin(2 * np.pi * 0.05 * t), np.sin(2 * np.pi * 0.3 * t)
    x = np.stack([inside + outside, 3 * outside, inside])
    out = clean_subject(x, _settings(high_pass=0.01, low_pass=0.1), t_r=t_r)
    mid = slice(200, -200)  # away from the filter's edge effects
    assert np.corrcoef(out[0, mid], inside[mid])[0, 1] > 0.99
    assert np.std(out[1, mid]) < 0.02 * np.std(x[1])
    with pytest.raises(ValueError, match="repetition time"):
        clean_subject(x, _settings(low_pass=0.1))


@settings(max_examples=15, deadline=None)
@given(block=st.integers(1, 40), scrub=st.booleans())
def test_cleaning_in_blocks_equals_nilearns_one_call(block, scrub):
    """Vertices cleaned a block at a time (any block size, the last one short) equal
    nilearn's ``signal.clean`` of the whole subject in one call: detrend, band-pass,
    confounds and scrubbing together. The caller's float64 array is left as it was."""
    from nilearn import signal

    import lsd_dask.pipeline.stages.preprocess as pre

    rng = np.random.default_rng(block)
    T, t_r = 120, 2.0
    x = rng.standard_normal((33, T)) + np.linspace(0, 5, T)
    c = rng.standard_normal((T, 2))
    keep = np.delete(np.arange(T), [10, 11, 50]) if scrub else None
    given = x.copy()
    options = {"detrend": True, "high_pass": 0.01, "low_pass": 0.2, "t_r": t_r}
    options |= {"confounds": "c/{subject}.tsv", "confound_columns": ["a", "b"]}
    old, pre.CLEAN_BLOCK = pre.CLEAN_BLOCK, block
    try:
        out = clean_subject(x, _settings(**options), t_r=t_r, confounds=c, sample_mask=keep)
    finally:
        pre.CLEAN_BLOCK = old
    want = signal.clean(
        x.T, detrend=True, standardize=None, confounds=c, sample_mask=keep,
        filter="butterworth", low_pass=0.2, high_pass=0.01, t_r=t_r,
    ).T  # fmt: skip
    np.testing.assert_allclose(out, want, rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(x, given)


def test_cleaning_is_the_same_whatever_the_blas_threads():
    """A subject cleaned in a process of many BLAS threads equals the same subject cleaned
    on a Dask worker's one thread, to the bit (the confound regression's last bits change
    with the thread count unless the cleaning pins it)."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    T = 40
    x = rng.standard_normal((20_000, T)).astype(np.float32)
    c = rng.standard_normal((T, 8))
    keep = np.delete(np.arange(T), [5, 6])
    pre = _settings(confounds="c/{subject}.tsv", confound_columns=list("abcdefgh"))
    outs = []
    for threads in (1, 4):
        with threadpool_limits(threads):
            outs.append(clean_subject(x, pre, confounds=c, sample_mask=keep))
    np.testing.assert_array_equal(outs[0], outs[1])


def test_detrend_matches_scipy():
    x = RNG.standard_normal((5, 200)) + np.linspace(0, 30, 200) + 7.0
    out = clean_subject(x, _settings(detrend=True))
    np.testing.assert_allclose(out, scipy.signal.detrend(x, axis=1, type="linear"), atol=1e-8)


def test_confound_regression_matches_least_squares():
    T = 300
    c = RNG.standard_normal((T, 3))
    x = RNG.standard_normal((6, T)) + RNG.standard_normal((6, 3)) @ c.T
    out = clean_subject(
        x, _settings(confounds="c/{subject}.tsv", confound_columns=["a"]), confounds=c
    )
    # the reference: residuals of a least-squares fit on the confounds and a constant
    design = np.column_stack([np.ones(T), c])
    beta, *_ = np.linalg.lstsq(design, x.T, rcond=None)
    resid = x.T - design @ beta
    np.testing.assert_allclose(out - out.mean(axis=1, keepdims=True), resid.T, atol=1e-8)
    assert np.abs(out @ (c - c.mean(axis=0))).max() < 1e-8


def test_mesh_smoothing_is_smooth_on_mesh():
    mesh = icosphere(4, radius=50.0)
    x = RNG.standard_normal((mesh.n_vertices, 20))
    A = mesh.adjacency()
    out = clean_subject(x, _settings(smoothing_mm=8.0), smoothing=(3, A))
    np.testing.assert_allclose(out, smooth_on_mesh(x, A, n_iter=3))


def test_confound_file_checks(tmp_path):
    path = tmp_path / "s1.tsv"
    pd.DataFrame({"trans_x": ["n/a", 1.0, 2.0, 3.0], "csf": [1.0, 2.0, 4.0, 5.0]}).to_csv(
        path, sep="\t", index=False
    )
    got = read_confounds(path, ["trans_x", "csf"], "s1", n_timepoints=4)
    np.testing.assert_allclose(got[:, 0], [2.0, 1.0, 2.0, 3.0])  # n/a -> column mean
    assert read_confounds(path, ["csf"], "s1", n_timepoints=2, time_slice=(2, 4))[0, 0] == 4.0
    with pytest.raises(ValueError, match=r"subject s1: .*s1.tsv has no column\(s\) \['wm'\]"):
        read_confounds(path, ["wm"], "s1")
    with pytest.raises(ValueError, match="has 4 rows, the data 5 time points"):
        read_confounds(path, ["csf"], "s1", n_timepoints=5)
    with pytest.raises(FileNotFoundError, match="subject s2: confound file"):
        read_confounds(tmp_path / "s2.tsv", ["csf"], "s2")
    # a gap after the first number is a damaged row, not fMRIPrep's leading n/a
    gap = tmp_path / "s3.tsv"
    pd.DataFrame({"csf": [1.0, 2.0, "n/a", 5.0]}).to_csv(gap, sep="\t", index=False)
    with pytest.raises(ValueError, match=r"subject s3: .*s3.tsv: column 'csf' .* data row 3"):
        read_confounds(gap, ["csf"], "s3")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"smoothing": 5}, r"unknown key\(s\) \['smoothing'\]"),
        ({"high_pass": 0.1, "low_pass": 0.01}, "must be below low_pass"),
        ({"low_pass": 0}, "preprocess.low_pass: a number > 0"),
        ({"detrend": "yes"}, "preprocess.detrend: true or false"),
        ({"confounds": "conf.tsv", "confound_columns": ["a"]}, r"with \{subject\} in it"),
        ({"confounds": "c/{subject}.tsv"}, "non-empty list"),
        ({"confound_columns": ["a"]}, "confounds is not"),
    ],
)
def test_settings_errors_name_the_key(raw, message):
    with pytest.raises(ValueError, match=message):
        _settings(**raw)


def test_t_r_is_read_from_every_format(tmp_path):
    x = RNG.standard_normal((10, 6)).astype(np.float32)
    write_dtseries(tmp_path / "a.dtseries.nii", x, [5, 5], tr=0.8)
    write_zarr_subject(tmp_path / "a.zarr", x, [5, 5], tr=0.8)
    for h in ("L", "R"):
        write_func_gifti(tmp_path / f"a.{h}.func.gii", x[:5], hemisphere="left", tr=0.8)
    write_func_gifti(tmp_path / "plain.func.gii", x[:5], hemisphere="left")
    files = {
        "cifti": SubjectFiles.from_keys("a", cifti=tmp_path / "a.dtseries.nii"),
        "zarr": SubjectFiles.from_keys("a", zarr=tmp_path / "a.zarr"),
        "gifti": SubjectFiles.from_keys(
            "a", left=tmp_path / "a.L.func.gii", right=tmp_path / "a.R.func.gii"
        ),
    }
    for kind, f in files.items():
        assert subject_t_r(f) == pytest.approx(0.8), kind
    plain = tmp_path / "plain.func.gii"
    assert subject_t_r(SubjectFiles.from_keys("x", left=plain, right=plain)) is None


def test_pipeline_preprocesses_each_subject_at_ingest(tmp_path, study):
    from lsd_dask.io.zarr_store import open_split

    folder = tmp_path / "cifti"
    write_study(study, folder, fmt="cifti", rank=20)
    (folder / "conf").mkdir()
    for i, sid in enumerate(study.subjects):
        rng = np.random.default_rng(i)
        table = pd.DataFrame(rng.standard_normal((60, 3)), columns=["trans_x", "csf", "other"])
        table.to_csv(
            folder / "conf" / f"{sid}_desc-confounds_timeseries.tsv", sep="\t", index=False
        )
    pre = {
        "detrend": True,
        "high_pass": 0.01,
        "low_pass": 0.15,
        "confounds": "conf/{subject}_desc-confounds_timeseries.tsv",
        "confound_columns": ["trans_x", "csf"],
    }

    def config(preprocess):
        return load_config(
            folder / "pipeline.yaml",
            output=str(folder / "results"),
            ks=[10],
            svd={"rank": 20},
            null_repeats=2,
            min_region_size=3,
            preprocess=preprocess,
        )

    cfg = config(pre)
    logs: list[str] = []
    report = run_pipeline(cfg, log=logs.append)
    assert report["config"]["preprocess"]["confound_columns"] == ["trans_x", "csf"]
    # the store holds each subject cleaned (TR 1 s, from the CIFTI file), then z-scored
    store = open_split(folder / "results" / "work" / "split1.zarr")
    kept = store.vertex_mask
    sid = store.subjects[0]
    x = study.subject_data(sid)[kept]
    conf = pd.read_csv(folder / "conf" / f"{sid}_desc-confounds_timeseries.tsv", sep="\t")
    ref = clean_subject(x, cfg.preprocess, t_r=1.0, confounds=conf[["trans_x", "csf"]].to_numpy())
    ref = (ref - ref.mean(axis=1, keepdims=True)) / ref.std(axis=1, keepdims=True)
    got = np.asarray(store.data[:, : store.timepoints[0]])
    np.testing.assert_allclose(got, ref, atol=2e-4)
    # a changed setting re-runs ingest (and what follows); an unchanged one does not
    cfg2 = config({**pre, "low_pass": 0.12})
    logs.clear()
    run_pipeline(cfg2, log=logs.append)
    assert not any("[ingest] split1 done earlier" in line for line in logs)
    assert any("[mask] done earlier" in line for line in logs)


@pytest.mark.parametrize(
    ("pre", "message"),
    [
        (
            {"confounds": "conf/{subject}.tsv", "confound_columns": ["csf"]},
            r"subject sub-001: confound file .*conf/sub-001\.tsv does not exist",
        ),
        ({"low_pass": 0.9}, r"subject sub-001: preprocess.low_pass = 0.9 Hz is at or above"),
    ],
)
def test_pipeline_preprocess_errors_before_any_work(tmp_path, study, pre, message):
    folder = tmp_path / "s"
    write_study(study, folder, fmt="gifti", rank=20)
    cfg = load_config(
        folder / "pipeline.yaml", output=str(folder / "results"), ks=[10], preprocess=pre
    )
    logs: list[str] = []
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        run_pipeline(cfg, log=logs.append)
    assert not any("[mask]" in line for line in logs)


@pytest.mark.parametrize("sid", ["../../etc/passwd", "a/b", ".."])
def test_a_subject_id_cannot_lead_the_confounds_template_out_of_its_folder(tmp_path, sid):
    settings = _settings(confounds=str(tmp_path / "conf" / "{subject}.tsv"),
                         confound_columns=["csf"])  # fmt: skip
    with pytest.raises(ValueError, match="path separator or a leading"):
        settings.confound_path(sid)
    assert settings.confound_path("sub-01") == tmp_path / "conf" / "sub-01.tsv"


def test_denoise_is_nilearns_load_confounds_then_signal_clean(tmp_path, study):
    """On an fMRIPrep tree of GIFTI pairs (a custom mesh), a denoising strategy regresses
    out what nilearn's own load_confounds finds beside the BOLD files, and scrubbing leaves
    the high-motion volumes out."""
    from nilearn import signal
    from nilearn.interfaces.fmriprep import load_confounds

    from lsd_dask.pipeline.stages.preprocess import preprocess_subject

    cfg = load_config(write_study(study, tmp_path, fmt="fmriprep"))
    s = cfg.subjects[0]
    assert s.subject == "sub-001" and s.kind == "gifti" and "space-custom" in s.paths[0].name
    x = np.asarray(study.subject_data(study.subjects[0]), np.float64)
    strategy = {"strategy": ["motion", "wm_csf", "scrub"], "motion": "basic", "scrub": 0}
    got = preprocess_subject(_settings(denoise=strategy), s, x, None)
    table, mask = load_confounds([str(p) for p in s.paths], **strategy)
    want = signal.clean(x.T, confounds=table, sample_mask=mask, standardize=None, detrend=False).T
    assert mask is not None and got.shape == (x.shape[0], x.shape[1] - 2) == want.shape
    np.testing.assert_allclose(got, want, atol=1e-8)
    # presets, comma lists and mappings; an unknown name fails naming nilearn's choices
    assert _settings(denoise="simple").denoise == {"preset": "simple"}
    assert _settings(denoise="motion, wm_csf").denoise == {"strategy": ["motion", "wm_csf"]}
    with pytest.raises(ValueError, match=r"unknown \['scrubbing'\].*'scrub'"):
        _settings(denoise=["motion", "scrubbing"])
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['fd'\]"):
        _settings(denoise={"strategy": ["scrub"], "fd": 0.2})
    with pytest.raises(ValueError, match="not both"):
        _settings(denoise="simple", confounds="{subject}.tsv", confound_columns=["csf"])


def test_a_subjects_qc_reads_its_own_rows_of_framewise_displacement(tmp_path):
    """A subject that is the second half of a run: its volumes are its slice's, and its
    framewise displacement the mean and largest of its rows of the run's confounds file
    (fMRIPrep's leading n/a left out); a subject without the column has no FD figures."""
    from lsd_dask.pipeline.stages.preprocess import subject_qc

    x = RNG.standard_normal((30, 40)).astype(np.float32)
    write_dtseries(tmp_path / "run.dtseries.nii", x, [15, 15])
    fd = np.r_[np.nan, RNG.uniform(0, 1, 39)]
    pd.DataFrame({"framewise_displacement": fd, "csf": RNG.standard_normal(40)}).to_csv(
        tmp_path / "s_conf.tsv", sep="\t", index=False, na_rep="n/a"
    )
    pp = _settings(confounds=str(tmp_path / "{subject}_conf.tsv"), confound_columns=["csf"])
    late = SubjectFiles("s", "cifti", (tmp_path / "run.dtseries.nii",), time_slice=(20, 40))
    row = subject_qc(late, pp, kept=18)
    assert row == {"subject": "s", "volumes": 20, "kept": 18, "mean_fd": pytest.approx(
        fd[20:].mean()), "max_fd": fd[20:].max()}  # fmt: skip
    early = SubjectFiles("s", "cifti", (tmp_path / "run.dtseries.nii",), time_slice=(0, 20))
    assert subject_qc(early, pp, kept=20)["mean_fd"] == pytest.approx(np.nanmean(fd[:20]))
    pd.DataFrame({"csf": RNG.standard_normal(40)}).to_csv(tmp_path / "s_conf.tsv", sep="\t")
    assert subject_qc(late, pp, kept=20) == {"subject": "s", "volumes": 20, "kept": 20}


def test_the_preprocessing_is_said_in_a_phrase():
    pp = _settings(detrend=True, high_pass=0.01, low_pass=0.1, smoothing_mm=4, denoise="simple")
    assert pp.describe() == (
        "fMRIPrep's confounds regressed out with the 'simple' strategy of nilearn's "
        "load_confounds_strategy; linearly detrended; band-passed 0.01-0.1 Hz (Butterworth); "
        "blurred along the mesh at FWHM 4 mm"
    )
    assert _settings().describe() == "none (each vertex z-scored only)"
