"""The evaluation stage in a real run: each split's parcels scored on the other split's
stored features, with spin nulls, into the report, the HTML page and the sidecars; reused
on a rerun, recomputed for what changed."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lsd_dask import evaluation as ev
from lsd_dask.io.bids import find_atlas_folder
from lsd_dask.pipeline import load_config, run_pipeline, write_study
from lsd_dask.pipeline.stages.held_out import MAX_DIST_MM
from lsd_dask.similarity import unit_rows
from lsd_dask.surface import mesh_adjacency


def test_held_out_scores_equal_the_measures_on_the_other_splits_features(tmp_path, study):
    write_study(study, tmp_path, fmt="gifti")
    cfg = load_config(tmp_path / "pipeline.yaml", ks=[5, 10], null_repeats=4)
    logs: list[str] = []
    report = run_pipeline(cfg, log=logs.append)
    # the last line names the page to open
    assert logs[-1].startswith("[done]") and f"open {cfg.output / 'report.html'}" in logs[-1]
    work = cfg.output / "work"
    kept = np.load(work / "mask.npy")
    V, A, pairs = _kept_mesh_and_pairs(study, kept)
    Z2 = unit_rows(np.load(work / "split2_U.npy") * np.load(work / "split2_s.npy"))
    for row in report["scores"]:
        k = row["k"]
        saved = json.loads((work / "evaluation" / f"directional_K{k}.json").read_text())
        lab1 = np.load(work / "labels" / f"split1_directional_K{k}.npy")[kept]
        direction = saved["split1_on_split2"]
        assert direction["homogeneity"]["value"] == pytest.approx(ev.homogeneity(Z2, lab1))
        r = ev.pair_correlations(Z2, pairs)
        assert direction["dcbc"]["value"] == pytest.approx(ev.dcbc(lab1, pairs, r).value)
        assert direction["silhouette"]["value"] == pytest.approx(
            ev.neighbour_silhouette(Z2, lab1, A)
        )
        assert direction["pca_homogeneity"]["value"] == pytest.approx(ev.pca_homogeneity(Z2, lab1))
        assert direction["pca_homogeneity"]["z"] is None  # no null for Gordon's
        directions = [d for d in saved if d not in ("mean", "parcels")]
        assert (
            sorted(saved["parcels"])
            == sorted(directions)
            == ["split1_on_split2", "split2_on_split1"]
        )
        mean = np.mean([saved[d]["homogeneity"]["value"] for d in directions])
        assert row["heldout_homogeneity"] == pytest.approx(mean)
        # the planted parcels are found: far above their spins on held-out data
        assert row["heldout_homogeneity_z"] > 3 and row["heldout_dcbc"] > 0
    assert "heldout" in report["scores_explained"]
    page = (cfg.output / "report.html").read_text()
    assert "held-out homogeneity" in page and "DCBC" in page
    sidecar = next(find_atlas_folder(cfg.output).glob("*5split1_scale-5_*dseg.json"))
    held = json.loads(sidecar.read_text())["HeldOutScores"]
    assert held["homogeneity"] == pytest.approx(report["scores"][0]["heldout_homogeneity"])

    logs.clear()
    run_pipeline(load_config(tmp_path / "pipeline.yaml", ks=[5, 8], null_repeats=4),
                 log=logs.append)  # fmt: skip
    assert "[evaluate] directional K=5 done earlier, skipped" in logs
    assert any(line.startswith("[evaluate] directional K=8: held-out") for line in logs)


def test_report_page_marks_the_best_parcellation_of_each_measure_per_k(tmp_path, study):
    import re

    write_study(study, tmp_path, fmt="gifti")
    cfg = load_config(tmp_path / "pipeline.yaml", ks=[6], null_repeats=2,
                      methods=["directional", "ward"])  # fmt: skip
    report = run_pipeline(cfg, log=lambda line: None)
    page = (cfg.output / "report.html").read_text()
    table = page.split("<h3>K = 6</h3>", 1)[1].split("</table>", 1)[0]
    rows = {r["method"]: r for r in report["scores"]}
    for column, key in enumerate(["heldout_homogeneity", "heldout_dcbc", "dice"]):
        best = max(rows, key=lambda m, key=key: rows[m][key])
        # the best method's cell of this measure is the bold one
        line = re.search(rf"<tr><td class='l'>{best}(?: &dagger;)?</td>(.*?)</tr>", table).group(1)
        cells = re.findall(r"<td>(.*?)</td>", line)
        index = {"heldout_homogeneity": 1, "heldout_dcbc": 2, "dice": 5}[key]
        assert cells[index].startswith("<b>") and f"{rows[best][key]:.3f}" in cells[index]
        other = next(m for m in rows if m != best)
        if rows[other][key] != rows[best][key]:
            row = rf"<tr><td class='l'>{other}(?: &dagger;)?</td>(.*?)</tr>"
            line = re.search(row, table).group(1)
            assert not re.findall(r"<td>(.*?)</td>", line)[index].startswith("<b>"), column
    # a method split into over 10 % more regions than K is marked as not like for like
    for method, r in rows.items():
        marked = f"<td class='l'>{method} &dagger;</td>" in table
        assert marked == (max(r["n_regions"]) > 1.1 * 6), method


def test_time_halves_score_each_half_fit_on_the_other_half(tmp_path, study):
    """held_out: [splits, time_halves]: each method fitted on one half of a split's time
    points, scored on the other half; checked against the measures on the store's own
    half data (with the rank at the half's width, unit rows of U·Σ have the data's
    correlations), and the fit against the estimator on those data."""
    from lsd_dask.io import open_split
    from lsd_dask.pipeline.settings.methods import parse_methods

    write_study(study, tmp_path, fmt="gifti")
    text = (tmp_path / "pipeline.yaml").read_text()
    (tmp_path / "pipeline.yaml").write_text(text + "\nheld_out: [splits, time_halves]\n")
    cfg = load_config(tmp_path / "pipeline.yaml", ks=[6], null_repeats=2, svd={"rank": 60})
    logs: list[str] = []
    report = run_pipeline(cfg, log=logs.append)
    work = cfg.output / "work"
    kept = np.load(work / "mask.npy")
    V, A, pairs = _kept_mesh_and_pairs(study, kept)
    saved = json.loads((work / "evaluation" / "halves_directional_K6.json").read_text())
    (spec,) = parse_methods(["directional"], {})
    for split in ("split1", "split2"):
        st = open_split(work / f"{split}.zarr")
        X = np.asarray(st.data.compute(), np.float64)
        cols = np.cumsum([0, *st.timepoints])
        spans = [(a, a + (b - a) // 2, b) for a, b in zip(cols[:-1], cols[1:], strict=True)]
        halves = {
            "half1": unit_rows(np.hstack([X[:, a:mid] for a, mid, _ in spans])),
            "half2": unit_rows(np.hstack([X[:, mid:b] for _, mid, b in spans])),
        }
        for fitted, other in (("half1", "half2"), ("half2", "half1")):
            est = spec.estimator(6, cfg.random_state, connectivity=A, vertices=V)
            labels = est.fit(halves[fitted]).labels_ + 1
            got = saved[f"{split}_{fitted}_on_{other}"]
            Z = halves[other]
            assert got["homogeneity"]["value"] == pytest.approx(ev.homogeneity(Z, labels), abs=1e-4)
            r = ev.pair_correlations(Z, pairs)
            assert got["dcbc"]["value"] == pytest.approx(ev.dcbc(labels, pairs, r).value, abs=1e-4)
            assert got["silhouette"]["value"] == pytest.approx(
                ev.neighbour_silhouette(Z, labels, A), abs=1e-4
            )
    (row,) = report["scores"]
    mean = np.mean([saved[d]["homogeneity"]["value"] for d in saved if d != "mean"])
    assert row["timehalves_homogeneity"] == pytest.approx(mean)
    # the planted parcels hold on the other half: far above their spins
    assert row["timehalves_homogeneity_z"] > 3 and row["timehalves_dcbc"] > 0
    assert "timehalves" in report["scores_explained"]
    assert "held-out homogeneity, time halves" in (cfg.output / "report.html").read_text()
    sidecar = next(find_atlas_folder(cfg.output).glob("*6split1_scale-6_*dseg.json"))
    halves_scores = json.loads(sidecar.read_text())["TimeHalvesScores"]
    assert halves_scores["dcbc"] == pytest.approx(row["timehalves_dcbc"])

    logs.clear()
    run_pipeline(load_config(tmp_path / "pipeline.yaml", ks=[6], null_repeats=2, svd={"rank": 60}),
                 log=logs.append)  # fmt: skip
    assert "[evaluate_halves] directional K=6 (time halves) done earlier, skipped" in logs


def test_scores_made_as_tasks_on_workers_equal_those_made_here(tmp_path, study, scheduler_address):
    """With a cluster, the held-out scorings run as tasks by held-out split (each finds
    the pairs, the sample and the spins itself) and the split-half scores as a task per
    method and K: on the same labels they write what this process writes."""
    import shutil

    import yaml
    from distributed import Client

    from lsd_dask.io.surface_files import write_label_gifti

    path = write_study(study, tmp_path, fmt="gifti")
    n_left = study.meshes["left"].n_vertices
    write_label_gifti(tmp_path / "truth.L.label.gii", study.labels[:n_left], hemisphere="left")
    write_label_gifti(tmp_path / "truth.R.label.gii", study.labels[n_left:], hemisphere="right")
    raw = yaml.safe_load(path.read_text())
    raw["compare_atlases"] = [
        {"name": "truth", "left": "truth.L.label.gii", "right": "truth.R.label.gii"}
    ]
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(path, ks=[5, 10], null_repeats=3, spins=200)
    here = run_pipeline(cfg, log=lambda line: None)
    work = cfg.output / "work"
    names = ["directional_K5.json", "directional_K10.json", "atlas_truth.json"]
    saved = {n: json.loads((work / "evaluation" / n).read_text()) for n in names}
    # the same run again with the scores only to make, on the workers
    shutil.rmtree(work / "evaluation")
    for stamp in (work / "stamps").glob("evaluate__*"):
        stamp.unlink()
    logs: list[str] = []
    with Client(scheduler_address):
        there = run_pipeline(cfg, log=logs.append)
    assert "[evaluate] 6 parcellations on held-out data as 2 tasks on 2 workers" in logs
    assert "[cluster] split1 directional K=5 done earlier, skipped" in logs
    # equal up to the float32 products' order (a worker's BLAS runs on one thread)
    for n in names:
        _assert_close(json.loads((work / "evaluation" / n).read_text()), saved[n])
    assert len(there["scores"]) == len(here["scores"]) == 2
    pairs = zip(there["scores"] + there["atlases"], here["scores"] + here["atlases"], strict=True)
    for a, b in pairs:
        _assert_close(a, b)


@pytest.mark.parametrize("value", ["[]", "[splits, splits]", "[halves]", "3"])
def test_held_out_names_what_it_may_hold(tmp_path, study, value):
    write_study(study, tmp_path, fmt="gifti")
    text = (tmp_path / "pipeline.yaml").read_text()
    (tmp_path / "pipeline.yaml").write_text(text + f"\nheld_out: {value}\n")
    with pytest.raises(ValueError, match=r"^held_out: a list of splits and time_halves"):
        load_config(tmp_path / "pipeline.yaml")


def _kept_mesh_and_pairs(study, kept):
    """The kept vertices' coordinates, adjacency and pairs within 35 mm, from the study's
    own meshes (not the pipeline's)."""
    m = study.meshes
    sizes = [m["left"].n_vertices, m["right"].n_vertices]
    A = mesh_adjacency([m["left"].faces, m["right"].faces], sizes)[kept][:, kept].tocsr()
    V = np.concatenate([m["left"].vertices, m["right"].vertices])[kept]
    return V, A, ev.geodesic_pairs(V, A, MAX_DIST_MM)


def _assert_close(got, want):
    """Equal keys and values; numbers within 1e-6 (relative) or 1e-7 (the spin null's
    float32 DCBC sums near 0) of each other."""
    got, want = _flat(got), _flat(want)
    assert got.keys() == want.keys()
    for key, w in want.items():
        g = got[key]
        if isinstance(w, float) and isinstance(g, float):
            assert g == pytest.approx(w, rel=1e-6, abs=1e-7, nan_ok=True), key
        else:
            assert g == w, key


def _flat(d, prefix=""):
    """A nested dict's leaves by their path; lists as their items."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out |= _flat(v, f"{prefix}{k}.")
        elif isinstance(v, list):
            out |= {f"{prefix}{k}.{i}": x for i, x in enumerate(v)}
        else:
            out[f"{prefix}{k}"] = v
    return out
