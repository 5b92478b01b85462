"""Resume keyed on what produced each file: a change recomputes exactly what it affects."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import yaml

from lsd_dask.io.bids import find_atlas_folder
from lsd_dask.io.ownership import OutputRecord
from lsd_dask.io.surface_files import read_hemisphere, write_func_gifti
from lsd_dask.pipeline import load_config, run_pipeline
from lsd_dask.pipeline.engine.workdir import WorkDir


def test_stamp_records_key_and_a_change_says_what_changed(tmp_path):
    logs: list[str] = []
    wd = WorkDir(tmp_path / "work", logs.append)
    out = wd.u("split1")
    key = {"ingest": "abc", "svd": {"rank": 100, "method": "randomized"}}
    assert not wd.is_current("svd/split1", key, [out])
    assert logs == []  # nothing was there: nothing to explain
    np.save(out, np.ones(3))
    wd.record("svd/split1", key)
    assert wd.is_current("svd/split1", key, [out])
    assert wd.fingerprints() == {"svd/split1": wd.fingerprint_of("svd/split1")}
    changed = {"ingest": "abc", "svd": {"rank": 50, "method": "randomized"}}
    assert not wd.is_current("svd/split1", changed, [out])
    assert logs == ["[svd] svd/split1: recomputing (changed: svd.rank 100 -> 50)"]
    assert not os.path.exists(out)  # the stale output is gone before the stage runs
    with pytest.raises(RuntimeError, match="has no record"):
        wd.fingerprint_of("svd/split1")


def test_downstream_keys_hold_what_a_stage_wrote_not_only_its_settings(tmp_path):
    """``fingerprint_of`` (what later stages key on) follows the outputs' content: the same
    settings with other outputs (another writer's, an edit stamped over) give another one;
    the same content gives the same one, so a deterministic rerun reuses what follows."""
    wd = WorkDir(tmp_path / "work", lambda line: None)
    out = wd.u("split1")
    key = {"svd": {"rank": 100}}
    fps = []
    for content in (np.ones(3), np.ones(3), np.zeros(3)):
        np.save(out, content)
        wd.record("svd/split1", key, [out])
        fps.append(wd.fingerprint_of("svd/split1"))
    assert fps[0] == fps[1] != fps[2]
    assert wd.fingerprints() == {"svd/split1": fps[2]}


def test_an_output_stamped_over_by_another_writer_recomputes_what_reads_it(folder, tmp_path):
    """A split's U replaced and stamped under the same settings (as a second writer would,
    without the lock) changes the keys of the fits that read it: split 1's fits run again
    on it, split 2's are reused."""
    out = tmp_path / "run"
    _run(folder, out)
    wd = WorkDir(out / "work", lambda line: None)
    stamp = json.loads((out / "work" / "stamps" / "svd__split1.json").read_text())
    U = np.load(wd.u("split1"))
    np.save(wd.u("split1"), U[:, ::-1].copy())  # the same columns in another order
    wd.record("svd/split1", stamp["key"], [wd.u("split1"), wd.s("split1")])
    _, _, logs = _run(folder, out)
    assert _recomputed(logs) == {"cluster"}
    changed = "[cluster] cluster/split1/directional/K4: recomputing (changed: svd "
    assert any(line.startswith(changed) for line in logs), logs
    assert "[cluster] split2 directional K=4 done earlier, skipped" in logs


def test_output_without_a_stamp_is_not_trusted(tmp_path):
    logs: list[str] = []
    wd = WorkDir(tmp_path / "work", logs.append)
    np.save(wd.mask, np.ones(3, bool))
    assert not wd.is_current("mask", {"a": 1}, [wd.mask])
    assert "no record of what produced" in logs[0] and not os.path.exists(wd.mask)


@pytest.fixture(scope="module")
def folder(tmp_path_factory, write_tiny_study):
    path = tmp_path_factory.mktemp("study")
    write_tiny_study(path, random_state=3)
    return path


def _run(folder, output, **over):
    over.setdefault("svd", {"method": "randomized", "rank": 12})
    over.setdefault("ks", [4])
    over.setdefault("spins", 0)  # the spin nulls are not what these tests are about
    cfg = load_config(
        folder / "pipeline.yaml",
        output=str(output),
        methods=["directional"],
        min_region_size=2,
        null_repeats=1,
        **over,
    )
    logs: list[str] = []
    report = run_pipeline(cfg, log=logs.append)
    work = output / "work" / "labels"
    labels = {s: np.load(work / f"{s}_directional_K4.npy") for s in ("split1", "split2")}
    return report, labels, logs


def _recomputed(logs):
    """The stages that ran (not skipped), by their log names."""
    ran = set()
    for line in logs:
        if line.startswith("[mask]") and "vertices masked" in line:
            continue
        for stage in ("mask", "ingest", "svd", "cluster"):
            if line.startswith(f"[{stage}]") and "done earlier" not in line and "next:" not in line:
                ran.add(stage)
    return ran


def _same_as_fresh(folder, tmp_path, labels, report, **over):
    fresh_report, fresh, _ = _run(folder, tmp_path / "fresh", **over)
    for s in labels:
        np.testing.assert_array_equal(labels[s], fresh[s])
    assert report["svd"]["split1"]["rank"] == fresh_report["svd"]["split1"]["rank"]
    # the resumed folder records exactly what a fresh run computes from the same inputs
    assert report["fingerprints"] == fresh_report["fingerprints"]


def test_rank_change_recomputes_svd_and_clusters_only(folder, tmp_path):
    out = tmp_path / "run"
    _run(folder, out)
    _, _, logs = _run(folder, out)
    assert _recomputed(logs) == set()  # an unchanged re-run reuses everything
    report, labels, logs = _run(folder, out, svd={"method": "randomized", "rank": 6})
    assert _recomputed(logs) == {"svd", "cluster"}
    assert any("svd.rank 12 -> 6" in line for line in logs)
    assert report["svd"]["split1"]["rank"] == 6
    _same_as_fresh(folder, tmp_path, labels, report, svd={"method": "randomized", "rank": 6})


def test_moved_subjects_recompute_ingest_not_the_mask(folder, tmp_path):
    out = tmp_path / "run"
    raw = yaml.safe_load((folder / "pipeline.yaml").read_text())
    a, b = raw["splits"]["split1"], raw["splits"]["split2"]
    _run(folder, out)
    left = out / "work" / ".split1.partial-0badf00d.zarr"  # what a killed ingest leaves
    (left / "data").mkdir(parents=True)
    moved = {"split1": [a[0], b[0]], "split2": [a[1], b[1]]}
    report, labels, logs = _run(folder, out, splits=moved)
    assert not left.exists() and any("removed .split1.partial-" in line for line in logs)
    assert _recomputed(logs) == {"ingest", "svd", "cluster"}
    assert any("ingest/split1: recomputing (changed: subjects" in line for line in logs)
    _same_as_fresh(folder, tmp_path, labels, report, splits=moved)


def test_changed_data_recomputes_everything(folder, tmp_path):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(folder, data)
    out = tmp_path / "run"
    _run(data, out)
    raw = yaml.safe_load((data / "pipeline.yaml").read_text())
    sub = raw["subjects"][0]
    left = data / sub["left"]
    x = read_hemisphere(left)
    write_func_gifti(left, x[:, ::-1].copy(), hemisphere="left")  # same shape, new content
    report, labels, logs = _run(data, out)
    assert _recomputed(logs) == {"mask", "ingest", "svd", "cluster"}
    assert any("[mask] mask: recomputing (changed: subjects" in line for line in logs)
    _same_as_fresh(data, tmp_path, labels, report)
    saved = json.loads((out / "report.json").read_text())
    assert set(saved["fingerprints"]) >= {"mask", "ingest/split1", "svd/split2"}


@pytest.mark.parametrize("identity", ["stat", "content"])
def test_data_rewritten_with_its_size_and_mtime_kept(folder, tmp_path, identity):
    """Other data of the same size, the file's mtime put back: ``input_identity: stat``
    (the default) sees it in the blocks it samples (the start, middle and end of each
    file), ``content`` in the hash of every byte; both recompute everything."""
    import shutil

    import nibabel as nib

    data = tmp_path / "data"
    shutil.copytree(folder, data)
    raw = yaml.safe_load((data / "pipeline.yaml").read_text())
    left = data / raw["subjects"][0]["left"]

    def rewrite(reverse: bool) -> None:  # uncompressed, so that the size stays
        img = nib.load(left)
        arrays = [d.data for d in img.darrays]
        for d, a in zip(img.darrays, arrays[::-1] if reverse else arrays, strict=True):
            d.data, d.encoding = a, "B64BIN"
        nib.save(img, left)

    rewrite(reverse=False)
    out = tmp_path / "run"
    _run(data, out, input_identity=identity)
    stat = left.stat()
    rewrite(reverse=True)  # the time points in reverse order
    os.utime(left, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert left.stat().st_size == stat.st_size
    report, labels, logs = _run(data, out, input_identity=identity)
    if identity == "content":
        assert any(line.startswith("[ingest] hashing the content of 8 input") for line in logs)
    assert _recomputed(logs) == {"mask", "ingest", "svd", "cluster"}
    _same_as_fresh(data, tmp_path, labels, report, input_identity=identity)


def test_stat_identity_samples_three_blocks_of_a_file(tmp_path):
    """What ``stat`` sees of a file's content: a byte changed in its first, middle or last
    block changes the identity; one between them does not (``content`` is for that)."""
    from lsd_dask.pipeline.engine.workdir import SAMPLE_BYTES, file_identity

    path = tmp_path / "x.bin"
    data = bytearray(os.urandom(5 * SAMPLE_BYTES))
    path.write_bytes(data)
    first = file_identity(path)
    stat = path.stat()
    for where, seen in ((10, True), (len(data) // 2, True), (len(data) - 1, True),
                        (SAMPLE_BYTES + 10, False), (4 * SAMPLE_BYTES - 10, False)):  # fmt: skip
        changed = bytearray(data)
        changed[where] ^= 0xFF
        path.write_bytes(changed)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        assert (file_identity(path) != first) is seen, where


def test_label_files_of_a_dropped_k_are_removed_from_the_output(folder, tmp_path):
    """A second run with other ks leaves no label file of the first run's K behind (it
    would read as this run's), and says so; the record then lists this run's files."""
    out = tmp_path / "run"
    _run(folder, out, ks=[3, 4])
    assert list(find_atlas_folder(out).glob("*3split1_scale-3_*dseg.label.gii"))
    _, _, logs = _run(folder, out)
    names = [p.name for p in find_atlas_folder(out).iterdir()]
    assert names and not [n for n in names if "scale-3_" in n]
    assert [n for n in names if "4split1_scale-4_" in n]
    assert any("[outputs] removed" in line and "earlier run" in line for line in logs)
    assert not [r for r in OutputRecord.read(out).files if "scale-3_" in r]


@pytest.mark.parametrize("bad", ["../escaped", "a/b", "", ".hidden", "x" * 65])
def test_names_that_would_leave_the_work_folder_are_refused_by_the_api_too(tmp_path, bad):
    wd = WorkDir(tmp_path / "work", lambda s: None)
    with pytest.raises(ValueError, match="use letters, digits"):
        wd.labels(bad, "directional", 4)
    with pytest.raises(ValueError, match="use letters, digits"):
        wd.labels("split1", bad, 4)
    with pytest.raises(ValueError, match="use letters, digits"):
        wd.store(bad)
    assert wd.labels("split-1", "dir_merged", 4).endswith("labels/split-1_dir_merged_K4.npy")


def test_a_replaced_mesh_recomputes_the_mesh_smoothed_ingest(folder, tmp_path):
    """Smoothing at ingest follows the mesh: a mesh of the same vertex count with other
    geometry re-ingests, and the labels equal a fresh run's."""
    import shutil

    from lsd_dask.io.surface_files import load_mesh, write_surface_gifti
    from lsd_dask.surface import Mesh

    study = tmp_path / "study"
    shutil.copytree(folder, study)
    out = tmp_path / "run"
    smooth = {"preprocess": {"smoothing_mm": 8.0}}
    _run(study, out, **smooth)
    mesh = load_mesh(study / "lh.surf.gii")
    write_surface_gifti(study / "lh.surf.gii", Mesh(mesh.vertices * 1.6, mesh.faces),
                        hemisphere="left")  # fmt: skip
    report, labels, logs = _run(study, out, **smooth)
    assert "ingest" in _recomputed(logs)
    assert any("changed: mesh" in line for line in logs), logs
    _same_as_fresh(study, tmp_path, labels, report, **smooth)


def test_flipped_mesh_edges_recompute_the_spatial_fits(folder, tmp_path):
    """A Potts fit reads the mesh's edges: 20 edges flipped (the same vertices and edge
    count) refit every spatial fit and nothing before it, and the labels equal a fresh
    run's."""
    import shutil

    from lsd_dask.io.surface_files import load_mesh, write_surface_gifti
    from lsd_dask.surface import Mesh

    study = tmp_path / "study"
    shutil.copytree(folder, study)
    out = tmp_path / "run"
    potts = {"spatial_weight": 1.0}
    _run(study, out, **potts)
    mesh = load_mesh(study / "lh.surf.gii")
    faces = _flip_edges(mesh.faces, 20)
    assert not np.array_equal(np.sort(faces, axis=1), np.sort(mesh.faces, axis=1))
    write_surface_gifti(study / "lh.surf.gii", Mesh(mesh.vertices, faces), hemisphere="left")
    report, labels, logs = _run(study, out, **potts)
    assert _recomputed(logs) == {"cluster"}
    assert any("recomputing (changed: params.connectivity" in line for line in logs), logs
    _same_as_fresh(study, tmp_path, labels, report, **potts)


def _flip_edges(faces: np.ndarray, n: int) -> np.ndarray:
    """``faces`` with ``n`` interior edges flipped: triangles (a, b, c) and (b, a, d)
    become (c, a, d) and (d, b, c); each face takes part in one flip at most."""
    faces = faces.copy()
    owner: dict[tuple[int, int], int] = {}
    used: set[int] = set()
    flipped = 0
    for f, tri in enumerate(faces.tolist()):
        for i in range(3):
            a, b = tri[i], tri[(i + 1) % 3]
            g = owner.get((b, a))
            if g is None or g in used or f in used:
                owner[(a, b)] = f
                continue
            c = tri[(i + 2) % 3]
            d = next(v for v in faces[g].tolist() if v not in (a, b))
            if c == d:
                continue
            faces[f], faces[g] = (c, a, d), (d, b, c)
            used |= {f, g}
            flipped += 1
            break
        if flipped == n:
            return faces
    raise ValueError("not enough edges to flip")


def test_an_edited_output_is_recomputed_not_reused(folder, tmp_path):
    """Each stamp records its output files' digests: labels edited in the work folder
    (with their stamp untouched) are fitted again, and say why."""
    out = tmp_path / "run"
    _run(folder, out)
    path = out / "work" / "labels" / "split1_directional_K4.npy"
    edited = np.load(path)
    edited[edited > 0] = edited[edited > 0] % edited.max() + 1  # every parcel renamed
    np.save(path, edited)
    report, labels, logs = _run(folder, out)
    assert _recomputed(logs) == {"cluster"}
    assert any("labels/split1_directional_K4.npy changed since it was written" in line
               for line in logs), logs  # fmt: skip
    _same_as_fresh(folder, tmp_path, labels, report)


@pytest.mark.parametrize("damage", ["chunk", "mark", "array"])
def test_a_damaged_split_store_is_rebuilt_by_the_next_run(folder, tmp_path, damage):
    """A chunk deleted, the completion mark removed or a subject's array metadata gone:
    the next run says so and ingests that split again, with the labels of a fresh run."""
    out = tmp_path / "run"
    _run(folder, out)
    store = out / "work" / "split1.zarr"
    if damage == "chunk":
        next(f for f in sorted((store / "subject" / "1" / "c").rglob("*")) if f.is_file()).unlink()
    elif damage == "mark":
        meta = json.loads((store / "zarr.json").read_text())
        meta["attributes"].pop("complete")
        (store / "zarr.json").write_text(json.dumps(meta))
    else:
        (store / "subject" / "0" / "zarr.json").unlink()
    report, labels, logs = _run(folder, out)
    assert any("ingest/split1: recomputing (split1.zarr" in line for line in logs), logs
    assert "ingest" in _recomputed(logs)
    _same_as_fresh(folder, tmp_path, labels, report)


def test_a_chunk_damaged_on_disk_fails_its_checksum_and_the_run_rebuilds_it(folder, tmp_path):
    """One bit of a stored chunk flipped (the values stay finite, the file's size and the
    store's structure unchanged): the SVD's read finds it by the chunk's CRC-32C, the log
    names the store, and the same run ingests that split again."""
    out = tmp_path / "run"
    _run(folder, out)
    store = out / "work" / "split1.zarr"
    chunk = next(f for f in sorted((store / "subject" / "0" / "c").rglob("*")) if f.is_file())
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0x01
    chunk.write_bytes(bytes(data))
    (out / "work" / "split1_U.npy").unlink()  # the SVD must read the store again
    report, labels, logs = _run(folder, out)
    failed = "split1.zarr, array subject/0: a chunk fails its checksum"
    assert any(ln.startswith("[work]") and failed in ln and "again in this run" in ln
               for ln in logs), logs  # fmt: skip
    assert any("split1.zarr is damaged: failed a checksum" in line for line in logs), logs
    assert "ingest" in _recomputed(logs)
    _same_as_fresh(folder, tmp_path, labels, report)


def test_spheres_rewritten_in_place_recompute_what_spins_them(folder, tmp_path):
    """The ``sphere:`` files rewritten in place (rotated: still spheres, the same size, the
    mtime put back): the held-out and split-half scores, whose nulls spin on them, are
    computed again and equal a fresh run's; the fits are not."""
    import shutil

    from scipy.spatial.transform import Rotation

    from lsd_dask.io.surface_files import load_mesh, write_surface_gifti
    from lsd_dask.surface import Mesh

    data = tmp_path / "data"
    shutil.copytree(folder, data)
    for h in ("lh", "rh"):
        shutil.copy(data / f"{h}.surf.gii", data / f"{h}.sphere.gii")
    given = {"left": str(data / "lh.sphere.gii"), "right": str(data / "rh.sphere.gii")}
    spheres = {"sphere": given, "spins": 8}
    out = tmp_path / "run"
    _run(data, out, **spheres)
    turn = Rotation.from_euler("xyz", [0.3, -0.5, 0.9]).as_matrix()
    for h, hemi in (("lh", "left"), ("rh", "right")):
        path = data / f"{h}.sphere.gii"
        stat = path.stat()
        mesh = load_mesh(path)
        write_surface_gifti(path, Mesh(mesh.vertices @ turn.T, mesh.faces), hemisphere=hemi)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    report, labels, logs = _run(data, out, **spheres)
    assert _recomputed(logs) == set()  # no fit depends on the spheres
    assert any(ln.startswith("[evaluate]") and "recomputing" in ln for ln in logs), logs
    assert any(ln.startswith("[scores]") and "recomputing" in ln for ln in logs), logs
    fresh, _, _ = _run(data, tmp_path / "fresh", **spheres)
    assert report["scores"] == fresh["scores"]


@pytest.mark.parametrize("damage", [b"\xff\xfe\x00", b'{"fingerprint": "x", "outputs": null}',
                                    b'["a list"]', b'{"fingerprint": 7}'])  # fmt: skip
def test_a_stamp_that_cannot_be_read_counts_as_absent(folder, tmp_path, damage):
    """A stamp of bytes that are not UTF-8, or JSON of another shape: its unit is
    recomputed in the same run (no run fails on it), and the labels equal a fresh run's."""
    out = tmp_path / "run"
    _run(folder, out)
    (out / "work" / "stamps" / "cluster__split1__directional__K4.json").write_bytes(damage)
    report, labels, logs = _run(folder, out)
    assert any(ln.startswith("[cluster] cluster/split1/directional/K4: recomputing (no record")
               for ln in logs), logs  # fmt: skip
    _same_as_fresh(folder, tmp_path, labels, report)
