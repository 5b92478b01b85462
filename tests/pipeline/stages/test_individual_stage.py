"""The individual stage in real runs: each participant's own parcels from the other split's
group parcellation (tasks on a real cluster) or from an atlas (in this process); their
held-out scores against the dense measures, the BIDS files the validator, pybids and
xcp_d's selection read, the report's section, and a participant's map unchanged when
others join the run."""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest
import yaml
from sklearn.metrics import roc_auc_score

from lsd_dask import evaluation as ev
from lsd_dask.datasets import surface_study
from lsd_dask.distributed import connect
from lsd_dask.io.bids import find_atlas_folder, parse_bids_name
from lsd_dask.io.surface_files import write_label_gifti
from lsd_dask.pipeline import load_config, run_pipeline, write_study
from lsd_dask.surface import two_hemisphere_mesh
from lsd_dask.testing.bids_validator import bids_validator_errors
from lsd_dask.testing.browser import chromium_page, front_vertex, hover_vertex, require_chromium
from lsd_dask.testing.xcp_d import XCP_D_ATLAS_CONFIG


@pytest.fixture(scope="module")
def own_prior_run(tmp_path_factory, study, scheduler_address):
    """The small study as CIFTI with ``individual: true`` (prior_potts, the other split's
    directional parcels at K = 5 and 10), its participants as tasks on the cluster."""
    folder = tmp_path_factory.mktemp("individual")
    write_study(study, folder, fmt="cifti")
    cfg = load_config(folder / "pipeline.yaml", ks=[5, 10], spins=100, null_repeats=2,
                      individual=True)  # fmt: skip
    logs: list[str] = []
    with connect(scheduler_address):
        report = run_pipeline(cfg, log=logs.append)
    return cfg, report, logs


def test_own_parcels_are_scored_as_the_dense_measures_beside_their_prior(own_prior_run, study):
    cfg, report, logs = own_prior_run
    work = cfg.output / "work"
    kept = np.load(work / "mask.npy")
    assert any(line.startswith("[individual] 4 participant(s) as tasks") for line in logs)
    for split, ids in study.splits.items():
        other = next(s for s in study.splits if s != split)
        for sid in ids:
            label = sid.removeprefix("sub-")
            saved = json.loads((work / "individual" / f"{label}.json").read_text())
            labels = np.load(work / "individual" / f"{label}_labels.npy")
            X = study.subject_data(sid)[kept]
            half = X.shape[1] // 2
            Z = {"half1": ev.unit_series(X[:, :half]), "half2": ev.unit_series(X[:, half:])}
            for p, k in enumerate((5, 10)):
                entry = saved["priors"][p]
                assert entry["prior"] == f"directional K={k} ({other})"
                prior = np.load(work / "labels" / f"{other}_directional_K{k}.npy")[kept]
                for i, (fitted, held) in enumerate((("half1", "half2"), ("half2", "half1"))):
                    own = entry["own"][f"{fitted}_on_{held}"]["homogeneity"]["value"]
                    lab = labels[p, 1 + i][kept]
                    assert own == pytest.approx(ev.homogeneity(Z[held], lab), rel=1e-4)
                    grp = entry["group"][f"on_{held}"]["homogeneity"]["value"]
                    assert grp == pytest.approx(ev.homogeneity(Z[held], prior), rel=1e-4)
                    assert entry["own"][f"{fitted}_on_{held}"]["homogeneity"]["z"] is not None
                # every kept vertex labelled, with the prior's ids; the moved share as stated
                assert set(np.unique(labels[p, 0][kept])) <= set(np.unique(prior))
                assert entry["moved"] == pytest.approx(np.mean(labels[p, 0][kept] != prior))
                assert 0 < entry["within_dice"] <= 1
                # the confidence against where the halves disagree, by sklearn's ROC AUC
                disagree = labels[p, 1][kept] != labels[p, 2][kept]
                conf = np.load(work / "individual" / f"{label}_confidence.npy")[p][kept]
                if disagree.any() and not disagree.all():
                    assert entry["confidence_auc"] == pytest.approx(roc_auc_score(disagree, -conf))
    section = report["individual"]
    assert len(section["rows"]) == 8 and [s["k"] for s in section["summary"]] == [5, 10]
    for s in section["summary"]:
        assert s["participants"] == 4
        mean = np.mean([r["own_homogeneity"] for r in section["rows"] if r["k"] == s["k"]])
        assert s["own_homogeneity"] == pytest.approx(mean)
        assert 0 <= s["share_own_better_homogeneity"] <= 1
        assert s["between_dice"] is not None
    # between: a participant's first-half map against its split peer's second half (the same
    # prior, so the same ids), by the definition of Dice per id
    for row in section["rows"]:
        peer = next(i for i in study.splits[row["split"]] if i != f"sub-{row['participant']}")
        p = (5, 10).index(row["k"])
        a = np.load(work / "individual" / f"{row['participant']}_labels.npy")[p, 1][kept]
        b = np.load(work / "individual" / f"{peer.removeprefix('sub-')}_labels.npy")[p, 2][kept]
        ids = np.setdiff1d(np.union1d(a, b), [0])
        dice = [2 * np.sum((a == i) & (b == i)) / (np.sum(a == i) + np.sum(b == i)) for i in ids]
        assert row["between_dice"] == pytest.approx(np.mean(dice))
    page = (cfg.output / "report.html").read_text()
    assert "<h2>Each participant's own parcels</h2>" in page and "sub-001" in page
    # the methods paragraph says how, and cites the model it follows
    assert (
        "Each participant's own parcellation was made from parcellation 'directional'"
        in (report["methods_text"])
    )
    assert "Kong" in report["methods_text"].split("References")[1]
    assert "Spatial topography of individual-specific" in (cfg.output / "CITATION.cff").read_text()


def test_participant_files_pass_the_validator_and_read_back(own_prior_run, study):
    """The validator finds no error; each dseg reads back with nibabel in the ids and
    colours of the prior's own label file; the confidence maps are the work folder's."""
    cfg, report, _ = own_prior_run
    out, work = cfg.output, cfg.output / "work"
    assert bids_validator_errors(out) == []
    group = find_atlas_folder(out)
    sizes = [m.n_vertices for m in study.meshes.values()]
    for row in report["individual"]["rows"]:
        label, k, split = row["participant"], row["k"], row["split"]
        other = next(s for s in study.splits if s != split)
        anat = out / f"sub-{label}" / "anat"
        files = sorted(anat.glob(f"*atlas-directional{k}priorpotts_*"))
        kinds = sorted(parse_bids_name(f.name)[1:] for f in files)
        assert kinds == [("confidence", ".dscalar.nii")] + [("confidence", ".shape.gii")] * 2 + [
            ("dseg", ".dlabel.nii"), ("dseg", ".json")] + [("dseg", ".label.gii")] * 2 + [
            ("dseg", ".tsv")]  # fmt: skip
        own = np.concatenate([
            nib.load(anat / f"sub-{label}_hemi-{h}_space-custom_atlas-directional{k}priorpotts"
                     f"_scale-{k}_den-{sizes[0]}_dseg.label.gii").darrays[0].data
            for h in "LR"
        ])  # fmt: skip
        prior = np.concatenate([
            nib.load(next(group.glob(f"*hemi-{h}_atlas-directional{k}{other}_*dseg.label.gii")))
            .darrays[0].data for h in "LR"
        ])  # fmt: skip
        sidecar = json.loads(next(anat.glob(f"*directional{k}priorpotts*_dseg.json")).read_text())
        kept = np.load(work / "mask.npy")
        # the same ids as the prior's file: the unmoved vertices agree with it
        assert np.mean(own[kept] == prior[kept]) == pytest.approx(1 - sidecar["MovedFromPrior"])
        assert sidecar["Prior"] == f"directional K={k} ({other})"
        assert sidecar["HeldOutScores"]["Own"]["homogeneity"] == pytest.approx(
            row["own_homogeneity"]
        )
        confidence = np.concatenate([
            nib.load(next(anat.glob(f"*hemi-{h}_*directional{k}priorpotts*_confidence.shape.gii")))
            .darrays[0].data for h in "LR"
        ])  # fmt: skip
        saved = np.load(work / "individual" / f"{label}_confidence.npy")[(5, 10).index(k)]
        np.testing.assert_array_equal(confidence, saved)
        assert np.all((confidence[kept] > 0) & (confidence[kept] <= 1))
        # for CIFTI input, the same map as a dense scalar over the input's brain models,
        # and the parcels as a dense label file, both of which Workbench reads
        scalar = nib.load(next(anat.glob(f"*directional{k}priorpotts*_confidence.dscalar.nii")))
        models = scalar.header.get_axis(1)
        source = nib.load(str(cfg.subjects[0].paths[0])).header.get_axis(1)
        assert models == source
        columns = np.concatenate([
            np.asarray(model.vertex) + (0 if name == "CIFTI_STRUCTURE_CORTEX_LEFT" else sizes[0])
            for name, _, model in models.iter_structures()
        ])  # fmt: skip
        np.testing.assert_array_equal(np.asarray(scalar.dataobj)[0], saved[columns])
        dense = nib.load(next(anat.glob(f"*directional{k}priorpotts*_dseg.dlabel.nii")))
        np.testing.assert_array_equal(np.asarray(dense.dataobj)[0], own[columns])
        _workbench_reads(
            next(anat.glob(f"*directional{k}priorpotts*_confidence.dscalar.nii")),
            next(anat.glob(f"*directional{k}priorpotts*_dseg.dlabel.nii")),
        )


def _workbench_reads(*paths):
    """``wb_command -file-information`` reads each file (skipped without Workbench, which
    CI installs)."""
    import os
    import shutil
    import subprocess

    if shutil.which("wb_command") is None:
        if os.environ.get("LSD_DASK_REQUIRE_WB"):
            pytest.fail("wb_command was installed for CI but is not on PATH.")
        return
    for path in paths:
        res = subprocess.run(["wb_command", "-file-information", str(path)],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert res.returncode == 0, res.stderr


def test_the_report_page_shows_a_participants_own_parcels_and_confidence(own_prior_run, study):
    """In headless Chromium: the participant selector draws a participant's own parcels;
    the pointer on a vertex gives its parcel and confidence as the participant's files
    hold them, whether it moved from the prior, and the participant's held-out scores."""
    require_chromium()
    cfg, report, _ = own_prior_run
    out = cfg.output
    sizes = [m.n_vertices for m in study.meshes.values()]
    with chromium_page() as (page, errors):
        page.goto((out / "report.html").as_uri())
        page.wait_for_function("window.lsdViewer && window.lsdViewer.ready", timeout=60_000)
        shown = page.evaluate("window.lsdViewer.data.participants.map(p => [p.participant, p.k])")
        # every participant of the run, one map per prior K, in the run's order
        rows = [[r["participant"], r["k"]] for r in report["individual"]["rows"]]
        assert sorted(shown) == sorted(rows)
        label, k = shown[0]
        page.select_option("#lsd-subject", "0")
        page.wait_for_function(
            f"document.getElementById('lsd-caption').textContent.includes('sub-{label}')"
        )
        assert page.is_disabled("#lsd-k")
        at = front_vertex(page)
        text = hover_vertex(page, at)
        anat = out / f"sub-{label}" / "anat"
        stem = f"sub-{label}_hemi-{{}}_space-custom_atlas-directional{k}priorpotts_scale-{k}"
        own = np.concatenate([
            nib.load(anat / f"{stem.format(h)}_den-{sizes[0]}_dseg.label.gii").darrays[0].data
            for h in "LR"
        ])  # fmt: skip
        confidence = np.concatenate([
            nib.load(next(anat.glob(f"{stem.format(h)}*_confidence.shape.gii"))).darrays[0].data
            for h in "LR"
        ])  # fmt: skip
        v = at["vertex"]
        assert f"parcel{int(own[v]):04d} (id {int(own[v])}) in sub-{label}'s own parcels" in text
        shown_conf = float(text.split("confidence ")[1].split()[0])
        assert shown_conf == pytest.approx(float(confidence[v]), abs=1.5e-4)
        row = next(r for r in report["individual"]["rows"]
                   if r["participant"] == label and r["k"] == k)  # fmt: skip
        assert f"homogeneity {row['own_homogeneity']:.3f}" in text
        assert "(the same)" in text or "(moved)" in text
    assert errors == []


def test_xcp_d_selection_finds_each_participants_atlas_with_a_subject_filter(own_prior_run):
    """xcp_d's atlas query (``layout.get(atlas=..., suffix="dseg", extension=...)``),
    replayed with pybids and its atlas entities: with the participant as a filter (what
    subject-specific atlases need of it) it finds one image per participant and atlas,
    with its own table and sidecar; the group atlases are still found one per name."""
    from bids.layout import BIDSLayout

    cfg, report, _ = own_prior_run
    out = cfg.output
    layout = BIDSLayout(out, config=["bids", "derivatives", XCP_D_ATLAS_CONFIG], validate=False)
    for row in report["individual"]["rows"]:
        atlas = f"directional{row['k']}priorpotts"
        found = layout.get(subject=row["participant"], atlas=atlas, suffix="dseg",
                           extension=".label.gii", hemi="L", return_type="file")  # fmt: skip
        assert len(found) == 1, found
        stem = found[0].replace("hemi-L_", "").removesuffix(".label.gii")
        assert layout.get_nearest(found[0], extension=".tsv", strict=False) == stem + ".tsv"
        assert layout.get_nearest(found[0], extension=".json", strict=False) == stem + ".json"
    for image in find_atlas_folder(out).glob("*hemi-L_*_dseg.label.gii"):
        ent, _, _ = parse_bids_name(image.name)
        found = layout.get(atlas=ent["atlas"], suffix="dseg", extension=".label.gii",
                           hemi="L", return_type="file")  # fmt: skip
        assert found == [str(image)]


def test_a_participants_map_stays_when_others_join(tmp_path):
    """With an atlas prior, a second run with two more participants computes only theirs:
    the first four are skipped and their labels are byte for byte the first run's."""
    study = surface_study(
        two_hemisphere_mesh(6, 7, radius=50.0), n_parcels=10, n_subjects=(3, 3),
        n_timepoints=60, medial_wall_fraction=0.1, noise_std=0.7, random_state=1,
    )  # fmt: skip
    write_study(study, tmp_path, fmt="gifti")
    sizes = [m.n_vertices for m in study.meshes.values()]
    for h, part in (("left", study.labels[: sizes[0]]), ("right", study.labels[sizes[0] :])):
        write_label_gifti(tmp_path / f"truth_{h}.label.gii", part, hemisphere=h)
    raw = yaml.safe_load((tmp_path / "pipeline.yaml").read_text())
    everyone, splits = raw["subjects"], study.splits
    late = [splits["split1"][-1], splits["split2"][-1]]
    raw.update(
        ks=[5], spins=0, null_repeats=1,
        subjects=[s for s in everyone if s["id"] not in late],
        splits={name: [i for i in ids if i not in late] for name, ids in splits.items()},
        compare_atlases=[{"name": "truth", "left": "truth_left.label.gii",
                          "right": "truth_right.label.gii"}],
        individual={"method": "iterative", "prior": "truth"},
    )  # fmt: skip
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(raw))
    run_pipeline(load_config(tmp_path / "pipeline.yaml"), log=lambda line: None)
    work = tmp_path / "results" / "work" / "individual"
    before = {p.name: p.read_bytes() for p in work.glob("*_labels.npy")}
    assert len(before) == 4
    raw.update(subjects=everyone, splits=splits)
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(raw))
    logs: list[str] = []
    run_pipeline(load_config(tmp_path / "pipeline.yaml"), log=logs.append)
    skipped = [line for line in logs if line.startswith("[individual]") and "skipped" in line]
    assert len(skipped) == 4
    after = {p.name: p.read_bytes() for p in work.glob("*_labels.npy")}
    assert {n: after[n] for n in before} == before
    assert sorted(set(after) - set(before)) == sorted(
        f"{i.removeprefix('sub-')}_labels.npy" for i in late
    )
