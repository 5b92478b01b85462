"""Comparison atlases in a real run: read from label files, scored on both splits' held-out
data beside the methods at the nearest K, and refused before heavy work when they do not
fit the run's mesh or data."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from lsd_dask import evaluation as ev
from lsd_dask.io.surface_files import write_dlabel, write_label_gifti
from lsd_dask.pipeline import load_config, run_pipeline, write_study
from lsd_dask.pipeline.settings.atlases import AtlasSpec, load_atlases
from lsd_dask.similarity import unit_rows
from lsd_dask.surface import grow_regions, mesh_adjacency


def _sizes(study):
    return [study.meshes[h].n_vertices for h in ("left", "right")]


def _with_atlases(tmp_path, study, atlases):
    path = write_study(study, tmp_path, fmt="gifti")
    cfg = yaml.safe_load(path.read_text())
    cfg["compare_atlases"] = atlases
    path.write_text(yaml.safe_dump(cfg))
    return path


def _write_pair(tmp_path, labels, sizes, stem):
    write_label_gifti(tmp_path / f"{stem}.L.label.gii", labels[: sizes[0]], hemisphere="left")
    write_label_gifti(tmp_path / f"{stem}.R.label.gii", labels[sizes[0] :], hemisphere="right")
    return {"left": f"{stem}.L.label.gii", "right": f"{stem}.R.label.gii"}


def test_atlases_are_scored_on_both_splits_beside_the_methods(tmp_path, study):
    sizes = _sizes(study)
    A = mesh_adjacency([study.meshes[h].faces for h in ("left", "right")], sizes)
    other = grow_regions(A, 10, random_state=5) + 1  # a published atlas that is not the truth
    tmp_path.mkdir(exist_ok=True)
    write_dlabel(tmp_path / "other.dlabel.nii", other, sizes)
    path = _with_atlases(tmp_path, study, [
        {"name": "truth", **_write_pair(tmp_path, study.labels, sizes, "truth")},
        {"name": "other", "dlabel": "other.dlabel.nii"},
    ])  # fmt: skip
    cfg = load_config(path, ks=[5, 10], spins=200)
    logs: list[str] = []
    report = run_pipeline(cfg, log=logs.append)
    rows = {r["atlas"]: r for r in report["atlases"]}
    assert rows["truth"]["n_parcels"] == 10 and rows["truth"]["k"] == 10
    work = cfg.output / "work"
    kept = np.load(work / "mask.npy")
    # the stored value is the measure of the atlas on each split's own features
    saved = json.loads((work / "evaluation" / "atlas_truth.json").read_text())
    Z2 = unit_rows(np.load(work / "split2_U.npy") * np.load(work / "split2_s.npy"))
    truth = np.where(kept, study.labels, 0)
    assert saved["on_split2"]["homogeneity"]["value"] == pytest.approx(
        ev.homogeneity(Z2, truth[kept])
    )
    # the planted truth scores above the other atlas and every method at its K
    method = next(r for r in report["scores"] if r["k"] == 10)
    for key in ("heldout_homogeneity", "heldout_dcbc"):
        assert rows["truth"][key] > rows["other"][key]
        assert rows["truth"][key] >= method[key] - 1e-9
    assert rows["truth"]["heldout_dcbc_z"] > 3
    page = (cfg.output / "report.html").read_text()
    table = page.split("<h3>K = 10</h3>", 1)[1].split("</table>", 1)[0]
    assert "atlas: truth" in table and "atlas: other" in table
    assert "atlas: truth" not in page.split("<h3>K = 10</h3>", 1)[0]

    logs.clear()
    run_pipeline(load_config(path, ks=[5, 10], spins=200), log=logs.append)
    assert "[evaluate] atlas truth done earlier, skipped" in logs


def test_an_atlas_on_another_mesh_fails_before_any_data_is_read(tmp_path, study):
    sizes = _sizes(study)
    wrong = np.ones(sizes[0] + sizes[1] + 6, np.int64)
    pair = _write_pair(tmp_path, wrong, [sizes[0] + 3, sizes[1] + 3], "wrong")
    path = _with_atlases(tmp_path, study, [{"name": "wrong", **pair}])
    cfg = load_config(path)
    with pytest.raises(ValueError, match=r"wrong\.L\.label\.gii.*must be on the run's mesh"):
        run_pipeline(cfg, log=lambda line: None)
    assert not (cfg.output / "work" / "mask.npy").exists()
    # a built-in atlas is on 32k_fs_LR only
    path = _with_atlases(tmp_path, study, ["schaefer_400"])
    with pytest.raises(ValueError, match=r"schaefer_400 is on 32k_fs_LR"):
        run_pipeline(load_config(path), log=lambda line: None)


def test_an_atlas_that_leaves_the_data_unlabelled_fails_before_the_svd(tmp_path, study):
    sizes = _sizes(study)
    half = np.where(np.arange(sum(sizes)) < sizes[0], study.labels, 0)  # left only
    path = _with_atlases(tmp_path, study, [{"name": "half", **_write_pair(tmp_path, half, sizes,
                                                                            "half")}])  # fmt: skip
    cfg = load_config(path)
    with pytest.raises(ValueError, match=r"half\.L\.label\.gii.*labels \d+% of the \d+ vertices"):
        run_pipeline(cfg, log=lambda line: None)
    assert not (cfg.output / "work" / "split1_U.npy").exists()


@pytest.mark.parametrize(
    "entry, message",
    [
        ("schaefer_500", r"unknown atlas 'schaefer_500'; the built-in ones are .*schaefer_400"),
        ({"name": "x", "left": "a.annot"}, r"atlas 'x' needs either dlabel: or both left:"),
        ({"name": "x/y", "dlabel": "a.dlabel.nii"}, r"needs a name of letters"),
        ({"name": "x", "dlabel": "missing.dlabel.nii"}, r"atlas 'x': .*missing.dlabel.nii does"),
        ({"name": "x", "dlabl": "a.dlabel.nii"}, r"did you mean 'dlabel'"),
        (["vosdewael_100", "vosdewael_100"], r"'vosdewael_100' is listed twice"),
    ],
)
def test_bad_atlas_entries_fail_with_one_line(tmp_path, study, entry, message):
    atlases = entry if isinstance(entry, list) else [entry]
    path = _with_atlases(tmp_path, study, atlases)
    with pytest.raises((ValueError, FileNotFoundError), match=message) as err:
        load_config(path)
    assert "\n" not in str(err.value)


def test_built_in_atlases_are_brainspaces_conte69_parcellations():
    pytest.importorskip("brainspace")
    from lsd_dask.datasets.templates import load_atlas

    got = load_atlases([AtlasSpec("schaefer_200"), AtlasSpec("vosdewael_400")], [32492, 32492])
    assert np.unique(got["schaefer_200"][got["schaefer_200"] > 0]).size == 200
    assert np.array_equal(got["vosdewael_400"], load_atlas("vosdewael", 400))
