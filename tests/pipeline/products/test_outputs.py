"""The derivatives folder a run writes: BIDS names, look-up tables nilearn reads as they
are, sidecars, the input's own CIFTI brain models, matched split labels, a portable report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import matplotlib
import nibabel as nib
import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from lsd_dask import cli, metrics
from lsd_dask.io.bids import bids_name, find_atlas_folder, parse_bids_name, surface_template
from lsd_dask.io.surface_files import write_dtseries, write_surface_gifti
from lsd_dask.plotting import dseg_colormap
from lsd_dask.testing.bids_validator import bids_validator_errors
from lsd_dask.testing.xcp_d import XCP_D_ATLAS_CONFIG

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def run(tmp_path_factory, study):
    """An HCP-layout CIFTI study (medial wall left out of the brain models), run by the
    CLI as a user would."""
    meshes = study.meshes
    folder = tmp_path_factory.mktemp("hcp")
    sizes = [meshes["left"].n_vertices, meshes["right"].n_vertices]
    cortex = study.labels > 0
    for h in ("left", "right"):
        write_surface_gifti(folder / f"{h[0]}h.surf.gii", meshes[h], hemisphere=h)
    subjects = []
    for sid in study.subjects:
        write_dtseries(
            folder / f"{sid}.dtseries.nii", study.subject_data(sid), sizes, cortex=cortex
        )
        subjects.append({"id": sid, "cifti": f"{sid}.dtseries.nii"})
    cfg = {
        "subjects": subjects,
        "splits": study.splits,
        "mesh": {"left": "lh.surf.gii", "right": "rh.surf.gii"},
        "methods": ["directional", "spherical_kmeans"],
        "ks": [5, 10],
        "svd": {"rank": 20},
        "min_region_size": 3,
        "null_repeats": 2,
        "output": "results",
    }
    (folder / "pipeline.yaml").write_text(yaml.safe_dump(cfg))
    res = CliRunner().invoke(cli.main, ["run", str(folder / "pipeline.yaml")])
    assert res.exit_code == 0, res.output
    return folder / "results", study, sizes, cortex


def test_every_label_file_has_a_bids_name(run):
    out, _, sizes, _ = run
    names = sorted(p.name for p in find_atlas_folder(out).iterdir())
    # 2 methods x 2 K x 2 splits, each: 2 .label.gii, .dlabel.nii, .tsv, .json
    assert len(names) == 8 * 5
    template = surface_template(sizes, None)
    assert find_atlas_folder(out) == out / f"tpl-{template['tpl']}" / "anat"
    for name in names:
        ent, suffix, ext = parse_bids_name(name)
        assert suffix == "dseg" and "split" not in ent
        assert ent["tpl"] == template["tpl"] == "custom" and ent["den"] == template["den"]
        # one name per parcellation: the method, K and the split
        method, k, split = re.fullmatch(r"([a-z]+?)(\d+)(split[12])", ent["atlas"]).groups()
        assert method in {"directional", "sphericalkmeans"} and k in {"5", "10"}
        assert ent["scale"] == k and "desc" not in ent
        assert ext in {".label.gii", ".dlabel.nii", ".tsv", ".json"}
        assert ("hemi" in ent) == (ext == ".label.gii")
    desc = json.loads((out / "dataset_description.json").read_text())
    assert desc["DatasetType"] == "derivative"
    assert desc["GeneratedBy"][0]["Name"] == "lsd-dask"
    assert "lsd-dask run" in desc["GeneratedBy"][0]["Description"]


def test_bids_names_reject_what_bids_forbids():
    with pytest.raises(ValueError, match="out of BIDS order"):
        parse_bids_name("desc-x_space-fsLR_dseg.tsv")
    with pytest.raises(ValueError, match="not a BIDS entity"):
        parse_bids_name("method-x_dseg.tsv")
    with pytest.raises(ValueError, match="letters and digits"):
        bids_name({"seg": "spherical_kmeans"}, "dseg", ".tsv")
    # the order comes from the BIDS schema, which puts tpl first and atlas after hemi
    name = "tpl-fsLR_hemi-L_atlas-a_scale-5_den-32k_desc-s1_dseg.label.gii"
    assert parse_bids_name(name) == (
        {"tpl": "fsLR", "hemi": "L", "atlas": "a", "scale": "5", "den": "32k", "desc": "s1"},
        "dseg",
        ".label.gii",
    )
    assert bids_name(parse_bids_name(name)[0], "dseg", ".label.gii") == name
    with pytest.raises(ValueError, match="out of BIDS order"):
        parse_bids_name("hemi-L_tpl-fsLR_dseg.tsv")
    assert surface_template([32492, 32492], "conte69") == {"tpl": "fsLR", "den": "32k"}
    assert surface_template([10242, 10242], "fsaverage5") == {"tpl": "fsaverage", "den": "10k"}
    # the vertex count alone names no template (an icosphere of 32,492 vertices)
    assert surface_template([32492, 32492], None) == {"tpl": "custom", "den": "32492"}


def test_dlabel_uses_the_inputs_brain_models(run):
    out, study, sizes, cortex = run
    folder = find_atlas_folder(out)
    [path] = folder.glob("tpl-*_atlas-directional10split1_*_dseg.dlabel.nii")
    img = nib.load(str(path))
    src = nib.load(str(out.parent / f"{study.subjects[0]}.dtseries.nii"))
    got, want = img.header.get_axis(1), src.header.get_axis(1)
    assert len(got) == int(cortex.sum()) == len(want)
    np.testing.assert_array_equal(got.vertex, want.vertex)
    assert list(got.name) == list(want.name)
    # a label file per hemisphere too, over every mesh vertex
    [left] = folder.glob("tpl-*_hemi-L_atlas-directional10split1_*_dseg.label.gii")
    lab = nib.load(str(left)).darrays[0].data
    assert lab.shape == (sizes[0],) and np.all(lab[~cortex[: sizes[0]]] == 0)


def test_nilearn_plots_each_dseg_with_its_own_table(run):
    from nilearn import plotting

    out, study, sizes, _ = run
    mesh = study.meshes["left"]
    for gii in sorted(find_atlas_folder(out).glob("*_hemi-L_*.label.gii"))[:3]:
        tsv = Path(str(gii).replace("hemi-L_", "").replace(".label.gii", ".tsv"))
        lut = pd.read_csv(tsv, sep="\t")
        assert list(lut.columns) == ["index", "name", "color", "hemisphere", "n_vertices",
                                     "x", "y", "z"]  # fmt: skip
        assert lut.loc[0, "name"] == "Background"
        img = nib.load(str(gii))
        right = nib.load(str(gii).replace("hemi-L_", "hemi-R_")).darrays[0].data
        both = np.concatenate([img.darrays[0].data, right])
        assert set(np.unique(both)) == set(lut["index"])  # one table for both hemispheres
        # where each parcel lies, as the label files hold it: its hemisphere, its size,
        # and a vertex of its own on the surface the sidecar names
        xyz = np.vstack([study.meshes[h].vertices for h in ("left", "right")])
        for _, row in lut.iloc[1:].iterrows():
            members = np.flatnonzero(both == row["index"])
            sides = {"L" if v < sizes[0] else "R" for v in members}
            assert row["hemisphere"] == "".join(sorted(sides)) and row["n_vertices"] == members.size
            gap = np.abs(xyz[members] - row[["x", "y", "z"]].to_numpy(float)).max(axis=1).min()
            assert gap <= 0.05 + 1e-9  # written to 0.1 mm
        assert json.loads(tsv.with_suffix(".json").read_text())["x"]["Units"] == "mm"
        # the label file's table agrees with the TSV, key 0 included (by name and RGB)
        table = {lb.key: lb.rgba for lb in img.labeltable.labels}
        assert img.labeltable.get_labels_as_dict()[0] == "???"  # Workbench's unlabelled key
        # one colour per parcel: a colour in the viewer or the legend names one parcel
        assert lut["color"].is_unique
        for _, row in lut.iterrows():
            if row["index"] not in table:
                continue  # a parcel of the right hemisphere only
            rgb = tuple(int(round(255 * c)) for c in table[row["index"]][:3])
            assert "#" + "".join(f"{c:02x}" for c in rgb) == row["color"]
        # nilearn draws every parcel and the background in its table colour with
        # dseg_colormap (README's recipe), on the mesh the sidecar names: read back the
        # face colours it set, in face order, where a face's vertices share one id
        sidecar = json.loads(tsv.with_suffix(".json").read_text())
        surface = out / sidecar["SpatialReference"]["left"]
        fig = plotting.plot_surf_roi(
            str(surface), roi_map=str(gii), hemi="left", **dseg_colormap(tsv)
        )
        drawn = fig.axes[0].collections[0]._facecolor3d  # set_facecolors' input, face order
        lab, faces = img.darrays[0].data, mesh.faces
        pure = np.all(lab[faces] == lab[faces][:, :1], axis=1)
        ids = lab[faces[pure, 0]]
        want = np.array(
            [matplotlib.colors.to_rgb(c) for c in lut.set_index("index").loc[ids, "color"]]
        )
        np.testing.assert_allclose(drawn[pure, :3], want, atol=1 / 255)
        assert (ids == 0).any() and len(np.unique(ids)) > 3  # background and parcels seen
        matplotlib.pyplot.close("all")


def test_split2_ids_match_split1(run):
    out, _, sizes, _ = run
    labs = {}
    for split in ("split1", "split2"):
        parts = [
            nib.load(str(p)).darrays[0].data
            for p in sorted(
                find_atlas_folder(out).glob(f"*_hemi-*_atlas-directional10{split}_*_dseg.label.gii")
            )
        ]
        labs[split] = np.concatenate(parts)
    a, b = labs["split1"], labs["split2"]
    fg = (a > 0) & (b > 0)
    # the planted parcels reproduce, and matched ids name the same region
    assert metrics.ari(a[fg], b[fg]) > 0.8
    assert np.mean(a[fg] == b[fg]) > 0.8


def test_sidecar_and_report_explain_themselves(run):
    out, _, _, _ = run
    [side] = find_atlas_folder(out).glob("*_atlas-sphericalkmeans5split2_*_dseg.json")
    meta = json.loads(side.read_text())
    assert meta["Method"] == "spherical_kmeans" and meta["NumberOfClusters"] == 5
    assert meta["Split"] == "split2" and "LabelsMatchedTo" in meta
    report = json.loads((out / "report.json").read_text())
    # the sidecar's scores are the report's row for its method and K, key for key
    [row] = [r for r in report["scores"] if (r["method"], r["k"]) == ("spherical_kmeans", 5)]
    scores = meta["SplitHalfScores"]
    assert set(scores) >= {"dice", "nmi", "null_dice_mean", "null_dice_sd"}
    assert scores == {key: row[key] for key in scores}
    assert scores["dice"] > scores["null_dice_mean"]  # planted parcels beat the null
    assert report["command_line"].startswith("lsd-dask run ")
    subjects = report["config"]["subjects"]
    assert all(not Path(s["cifti"]).is_absolute() for s in subjects)
    assert (out / subjects[0]["cifti"]).resolve().exists()
    assert report["config"]["output"] == "."


def test_workbench_reads_every_label_file(run):
    import os
    import shutil
    import subprocess

    if shutil.which("wb_command") is None:
        if os.environ.get("LSD_DASK_REQUIRE_WB"):
            pytest.fail("wb_command was installed for CI but is not on PATH.")
        pytest.skip("Connectome Workbench (wb_command) is not installed.")
    out, _, _, _ = run
    files = sorted(find_atlas_folder(out).glob("*.label.gii")) + sorted(
        find_atlas_folder(out).glob("*.dlabel.nii")
    )
    assert len(files) == 8 * 3
    for path in files:
        res = subprocess.run(
            ["wb_command", "-file-information", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr
        assert re.search(r"Maps with LabelTable:\s+true", res.stdout), res.stdout
        ent, _, _ = parse_bids_name(path.name)
        # the map is named after the method, K and split
        assert f"K={ent['scale']}" in res.stdout, res.stdout
    # Workbench's own uses of a dense label file: a subject's series parcellated into
    # exactly K parcels (key 0 is its unlabelled ???, not a parcel), and the label table
    # exported and imported again, each without a warning
    dense = next(out.parent.glob("*.dtseries.nii"))
    for path in sorted(find_atlas_folder(out).glob("*.dlabel.nii")):
        k = int(parse_bids_name(path.name)[0]["scale"])
        ids = np.unique(np.asarray(nib.load(str(path)).dataobj))
        assert ids[ids > 0].size == k, path.name  # (the medial wall is not in its models)
        parcels = out.parent / "parcels.ptseries.nii"
        table = out.parent / "table.txt"
        for args in (
            ["-cifti-parcellate", str(dense), str(path), "COLUMN", str(parcels)],
            ["-cifti-label-export-table", str(path), "1", str(table)],
            ["-cifti-label-import", str(path), str(table), str(out.parent / "again.dlabel.nii")],
        ):
            res = subprocess.run(["wb_command", *args], capture_output=True, text=True, timeout=120)
            assert res.returncode == 0 and not (res.stdout + res.stderr).strip(), (
                res.stdout + res.stderr
            )
        assert nib.load(str(parcels)).header.get_axis(1).size == k, path.name
    # the surfaces the sidecars name carry their structure: Workbench draws borders on them
    left = next(find_atlas_folder(out).glob("*_hemi-L_*.label.gii"))
    side = Path(str(left).replace("hemi-L_", "")).with_suffix("").with_suffix(".json")
    sidecar = json.loads(side.read_text())
    border = out.parent / "left.border"
    res = subprocess.run(
        ["wb_command", "-label-to-border", str(out / sidecar["SpatialReference"]["left"]),
         str(left), str(border)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0 and border.stat().st_size > 0, res.stderr
    assert not (res.stdout + res.stderr).strip(), res.stdout + res.stderr  # no key conflict


def test_scores_carry_ami_z_values_and_a_spin_null(run):
    out, _, _, _ = run
    report = json.loads((out / "report.json").read_text())
    row = next(r for r in report["scores"] if r["method"] == "directional" and r["k"] == 10)
    assert -0.1 <= row["ami"] <= row["nmi"] + 1e-9
    # the icosphere meshes are their own spheres: the spin null runs
    assert "spheres" in report["scores_explained"]["spin_null"]
    for prefix in ("null", "spin_null"):
        z = (row["dice"] - row[f"{prefix}_dice_mean"]) / row[f"{prefix}_dice_sd"]
        assert row[f"{prefix}_dice_z"] == pytest.approx(z)
    # planted parcels reproduce far above both nulls
    assert row["null_dice_z"] > 3 and row["spin_null_dice_z"] > 3
    assert set(report["scores_explained"]) >= {"regions", "dice", "ami", "null", "z"}


def test_report_html_holds_the_figures_and_the_table(run):
    import base64
    from html.parser import HTMLParser

    out, study, _, _ = run
    page = (out / "report.html").read_text()

    class Collect(HTMLParser):
        rows, imgs = 0, []

        def handle_starttag(self, tag, attrs):
            if tag == "tr":
                Collect.rows += 1
            if tag == "img":
                Collect.imgs.append(dict(attrs)["src"])

    Collect().feed(page)
    # per K a comparison table (header + 2 methods), the score table (header + 2 methods
    # x 2 K), the subjects' table (header + a row per subject), the timings' 2 rows and
    # the per-parcel table's header (its rows are the page's script's)
    assert Collect.rows == 2 * (1 + 2) + (1 + 4) + (1 + len(study.subjects)) + 2 + 1
    assert len(Collect.imgs) == 2  # dice_vs_k and the parcellations
    for src in Collect.imgs:
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "spin" in page and "lsd-dask run" in page


def test_figures_use_a_given_inflated_surface(tmp_path, study):
    """A run's ``display_mesh`` files are what its figures are drawn on: the figure of the
    same labels on the meshes the config names differs from the figure on the data's own
    meshes (the shading is the data mesh's either way, so only the geometry differs)."""
    import matplotlib.image as mpimg

    from lsd_dask.io.surface_files import load_mesh
    from lsd_dask.pipeline import load_config, preflight, write_study
    from lsd_dask.plotting import plot_parcellations
    from lsd_dask.surface import Mesh

    folder = tmp_path / "s"
    write_study(study, folder, fmt="gifti", rank=20)
    # "inflated": the meshes stretched unevenly; a mesh of another size is refused
    for h in ("left", "right"):
        m = study.meshes[h]
        write_surface_gifti(
            folder / f"{h[0]}h.inflated.gii",
            Mesh(m.vertices * [1.6, 1.0, 0.5], m.faces),
            hemisphere=h,
        )
    display = {"left": "lh.inflated.gii", "right": "rh.inflated.gii"}
    cfg = load_config(folder / "pipeline.yaml", output=str(folder / "out"), display_mesh=display)
    preflight(cfg)
    drawn_on = {h: load_mesh(cfg.display_mesh[h]) for h in ("left", "right")}
    np.testing.assert_allclose(
        drawn_on["left"].vertices, study.meshes["left"].vertices * [1.6, 1.0, 0.5], rtol=1e-6
    )
    panels = {"labels": study.labels}
    plain = mpimg.imread(plot_parcellations(study.meshes, panels, tmp_path / "plain.png"))
    shown = mpimg.imread(
        plot_parcellations(study.meshes, panels, tmp_path / "shown.png", display=drawn_on)
    )
    again = mpimg.imread(plot_parcellations(study.meshes, panels, tmp_path / "again.png"))
    assert np.array_equal(plain, again) and not np.array_equal(plain, shown)
    bad = {"left": "rh.inflated.gii", "right": "rh.inflated.gii"}
    cfg = load_config(folder / "pipeline.yaml", output=str(folder / "out"), display_mesh=bad)
    with pytest.raises(ValueError, match=r"display_mesh.left: .*rh.inflated.gii is given as the "
                       "left hemisphere"):  # fmt: skip
        preflight(cfg)
    # the right hemisphere's vertex count under the left's name, without its own label
    right = nib.load(str(folder / "rh.inflated.gii"))
    right.meta = nib.gifti.GiftiMetaData({})
    for array in right.darrays:
        array.meta = nib.gifti.GiftiMetaData({})
    nib.save(right, str(folder / "unlabelled.gii"))
    bad = {"left": "unlabelled.gii", "right": "rh.inflated.gii"}
    cfg = load_config(folder / "pipeline.yaml", output=str(folder / "out"), display_mesh=bad)
    with pytest.raises(ValueError, match=r"display_mesh.left .* must match the mesh"):
        preflight(cfg)


def test_the_bids_validator_finds_no_error(run):
    """The official validator on a CIFTI run on a custom mesh (tpl-custom): every file is
    BIDS or ignored, and the sidecars name their surfaces (SpatialReference)."""
    out, _, sizes, _ = run
    assert bids_validator_errors(out) == []
    sidecar = json.loads(next(find_atlas_folder(out).glob("*_dseg.json")).read_text())
    assert sorted(sidecar["SpatialReference"]) == ["left", "right"]
    for hemi, n in zip(("left", "right"), sizes, strict=True):
        mesh = nib.load(str(out / sidecar["SpatialReference"][hemi]))
        assert len(mesh.darrays[0].data) == n  # the mesh the labels lie on
    readme = (out / "README.md").read_text()
    assert "Blumensath" in readme and "Dhillon" in readme
    cff = yaml.safe_load((out / "CITATION.cff").read_text())
    assert {r["title"].split()[0] for r in cff["references"]} >= {"Directional", "Concept"}
    for method in ("directional", "spherical_kmeans"):
        path = out / f"atlas-{method.replace('_', '')}10split1_description.json"
        assert json.loads(path.read_text())["AtlasName"] == f"lsd-dask {method} K=10 split1"


def test_pybids_and_xcp_ds_atlas_selection_find_one_image_per_name(run):
    """xcp_d's ``collect_atlases`` (utils/atlas.py), replayed with pybids: a BIDSLayout
    with its atlas entities, ``layout.get(atlas=NAME, suffix="dseg", extension=
    ".dlabel.nii", template=..., den=...)`` (its CIFTI query; the template and density
    are the run's, as its ``bids_filters`` may set them), which must find one image, then
    ``get_nearest`` for the image's ``.tsv`` (strict=False) and ``.json`` (strict=True).
    Every parcellation is found by its own name alone, with its own table and sidecar."""
    from bids.layout import BIDSLayout

    out, _, sizes, _ = run
    layout = BIDSLayout(out, config=["bids", "derivatives", XCP_D_ATLAS_CONFIG], validate=False)
    assert layout.get_dataset_description()["DatasetType"] == "derivative"
    images = sorted(find_atlas_folder(out).glob("*_dseg.dlabel.nii"))
    assert len(images) == 8  # 2 methods x 2 K x 2 splits
    names = set()
    for image in images:
        ent, _, _ = parse_bids_name(image.name)
        names.add(ent["atlas"])
        found = layout.get(atlas=ent["atlas"], suffix="dseg", extension=".dlabel.nii",
                           template=ent["tpl"], den=ent["den"], return_type="file")  # fmt: skip
        assert found == [str(image)], (ent["atlas"], found)
        stem = str(image).removesuffix(".dlabel.nii")
        assert layout.get_nearest(found[0], extension=".tsv", strict=False) == stem + ".tsv"
        assert layout.get_nearest(found[0], extension=".json", strict=True) == stem + ".json"
        table = pd.read_table(stem + ".tsv")
        assert {"index", "name"} <= set(table.columns)  # what xcp_d checks next
        described = json.loads((out / f"atlas-{ent['atlas']}_description.json").read_text())
        method = "directional" if ent["atlas"].startswith("directional") else "spherical_kmeans"
        assert described["AtlasName"] == f"lsd-dask {method} K={ent['scale']} " + (
            "split1" if ent["atlas"].endswith("split1") else "split2"
        )
    assert len(names) == 8


def test_the_report_opens_with_its_recommendation(run):
    """report.json's recommendation is the score row with the least mean rank on held-out
    DCBC and neighbour silhouette (products/recommend.py, tested on its own), and it is
    the first section of report.html."""
    from lsd_dask.pipeline.products.recommend import recommend

    out, _, _, _ = run
    report = json.loads((out / "report.json").read_text())
    pick = report["recommendation"]
    assert pick == recommend(report["scores"])
    assert (pick["method"], pick["k"]) in {(r["method"], r["k"]) for r in report["scores"]}
    page = (out / "report.html").read_text()
    assert page.index("<h2>") == page.index("<h2>Recommendation</h2>")
    assert f"<b>{pick['method']}, K = {pick['k']}.</b>" in page
