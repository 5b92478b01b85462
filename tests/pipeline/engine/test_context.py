"""A run owns only what it wrote: folders holding the user's files or links are refused
before any work, and a run writes, replaces and removes its own files only."""

from __future__ import annotations

import hashlib
import os
from fnmatch import fnmatch
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from lsd_dask import cli
from lsd_dask.io.lock import WorkLock
from lsd_dask.io.ownership import LOCK_NAMES, OUTPUT_PATTERNS, RECORD, WORK_MARK, OutputRecord
from lsd_dask.io.storage import Folder
from lsd_dask.io.surface_files import write_label_gifti


@pytest.fixture(scope="module")
def folder(tmp_path_factory, write_tiny_study):
    path = tmp_path_factory.mktemp("study")
    study = write_tiny_study(path, random_state=4)
    raw = yaml.safe_load((path / "pipeline.yaml").read_text())
    raw.update(ks=[3], methods=["directional"], spins=0, null_repeats=1, min_region_size=2)
    raw["svd"] = {"method": "randomized", "rank": 10}
    (path / "pipeline.yaml").write_text(yaml.safe_dump(raw))
    return path, study


def _tree(root: Path) -> dict[str, bytes | str]:
    """Every file under root by relative path: its bytes, or a link's target."""
    out: dict[str, bytes | str] = {}
    for top, dirs, names in os.walk(root):
        for name in [*names, *(d for d in dirs if (Path(top) / d).is_symlink())]:
            p = Path(top) / name
            rel = p.relative_to(root).as_posix()
            out[rel] = f"-> {os.readlink(p)}" if p.is_symlink() else p.read_bytes()
    return out


def _errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("Error:")]


def _seed(out: Path, work: Path, outside: Path, study) -> None:
    """User files of every kind an earlier version replaced or removed: files named like
    outputs, a folder under tpl-*/anat, an atlas the run is told to compare with, links
    out of the folder at the log and the lock, and a work folder of the user's own."""
    for name in ("README.md", "CITATION.cff", "report.html", "report.json", ".bidsignore",
                 "dataset_description.json", "dice_vs_k.png", "parcellations_K3.png",
                 "atlas-mine_description.json", "surfaces/mine.surf.gii",
                 "tpl-custom/anat/old_dseg.d/notes.txt", "labels/x_dseg.label.gii",
                 "notes/plan.txt"):  # fmt: skip
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(f"the user's {name}")
    sizes = [study.meshes["left"].n_vertices, study.meshes["right"].n_vertices]
    anat = out / "tpl-custom" / "anat"
    for hemi, part in (("left", study.labels[: sizes[0]]), ("right", study.labels[sizes[0] :])):
        name = f"mine_hemi-{hemi[0].upper()}_dseg.label.gii"
        write_label_gifti(anat / name, part, hemisphere=hemi)
    outside.mkdir()
    for name in ("log.txt", "lock.txt"):
        (outside / name).write_text(f"outside {name}")
    (out / "lsd-dask.log").symlink_to(outside / "log.txt")
    (out / "work").mkdir()
    (out / "work" / LOCK_NAMES[1]).symlink_to(outside / "lock.txt")
    for name in ("mask.npy", "split1.zarr/data.bin", "labels/split1_directional_K3.npy"):
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_bytes(hashlib.sha256(name.encode()).digest())


def test_user_files_and_links_survive_every_run(folder, tmp_path):
    """Seeded with the user's files and links: the run refuses in one line before any
    work, each time naming what stops it, until only files it may write beside are left;
    then, adopted, it writes its own files only. Every user file and link target is
    byte-identical at the end, and the next run removes none of them."""
    study_dir, study = folder
    out, work, outside = tmp_path / "out", tmp_path / "work", tmp_path / "outside"
    out.mkdir()
    work.mkdir()
    _seed(out, work, outside, study)
    raw = yaml.safe_load((study_dir / "pipeline.yaml").read_text())
    for entry in raw["subjects"]:  # the study's files where they are
        entry.update({h: str(study_dir / entry[h]) for h in ("left", "right")})
    raw["mesh"] = {h: str(study_dir / p) for h, p in raw["mesh"].items()}
    anat = out / "tpl-custom" / "anat"
    raw["compare_atlases"] = [{"name": "mine", "left": str(anat / "mine_hemi-L_dseg.label.gii"),
                               "right": str(anat / "mine_hemi-R_dseg.label.gii")}]  # fmt: skip
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(yaml.safe_dump(raw))
    before = {"out": _tree(out), "work": _tree(work), "outside": _tree(outside)}
    runner = CliRunner()
    base = ["run", str(pipeline), "--out", str(out)]

    def refused(args: list[str], match: str) -> None:
        res = runner.invoke(cli.main, args)
        assert res.exit_code != 0 and len(_errors(res.output)) == 1, res.output
        assert match in _errors(res.output)[0], res.output
        assert "Traceback" not in res.output
        now = {"out": _tree(out), "work": _tree(work), "outside": _tree(outside)}
        assert now == before  # nothing written, replaced or removed, nor a lock made

    # the links first: no flag lets a run write through one
    refused([*base, "--adopt-folders"], f"work folder {out}/work holds 1 symbolic link(s) (.lock")
    (out / "work" / ".lock").unlink()
    before["out"].pop("work/.lock")
    refused(base, "1 symbolic link(s) (lsd-dask.log -> ")
    (out / "lsd-dask.log").unlink()
    before["out"].pop("lsd-dask.log")
    # a work folder of the user's own
    refused([*base, "--work", str(work)], f"work folder {work} holds files no lsd-dask run made")
    # the user's files: refused, named; adopted, still refused where they take an output's
    # name (README.md, tpl-*/anat/...), which a run would write over
    refused(base, "holds 15 file(s) no lsd-dask run wrote (.bidsignore, CITATION.cff,")
    refused([*base, "--adopt-folders"], "under names its outputs take (.bidsignore,")
    for rel in [r for r in before["out"] if any(fnmatch(r, p) for p in OUTPUT_PATTERNS)]:
        if not rel.startswith("tpl-custom/anat/mine_"):
            (out / rel).unlink()
            before["out"].pop(rel)
    # the atlas the run compares with is the user's too: it moves out of tpl-*/anat
    refused([*base, "--adopt-folders"], "tpl-custom/anat/mine_hemi-L_dseg.label.gii")
    kept = tmp_path / "atlas"
    kept.mkdir()
    for h in "LR":
        name = f"mine_hemi-{h}_dseg.label.gii"
        (out / "tpl-custom/anat" / name).rename(kept / name)
        before["out"].pop(f"tpl-custom/anat/{name}")
    raw["compare_atlases"] = [{"name": "mine", "left": str(kept / "mine_hemi-L_dseg.label.gii"),
                               "right": str(kept / "mine_hemi-R_dseg.label.gii")}]  # fmt: skip
    pipeline.write_text(yaml.safe_dump(raw))
    assert set(before["out"]) == {"notes/plan.txt", "labels/x_dseg.label.gii"}
    # adopted: the run writes beside the user's files, into its own work folder
    res = runner.invoke(cli.main, [*base, "--adopt-folders"])
    assert res.exit_code == 0, res.output
    assert "output folder adopted: 2 file(s) no lsd-dask run wrote" in res.output
    after = _tree(out)
    for rel, data in before["out"].items():
        assert after[rel] == data, rel
    assert _tree(outside) == before["outside"] and _tree(work) == before["work"]
    record = OutputRecord.read(out)
    ours = set(after) - set(before["out"]) - {RECORD, LOCK_NAMES[0]}
    ours = {r for r in ours if not r.startswith("work/")}
    assert ours == set(record.files)  # every file it wrote, and nothing else, recorded
    assert all(any(fnmatch(r, p) for p in OUTPUT_PATTERNS) for r in ours), sorted(ours)
    assert (out / "work" / WORK_MARK).exists()
    # a second run with another K: the first run's label files go, the user's stay
    res = runner.invoke(cli.main, [*base, "--adopt-folders", "--k", "4"])
    assert res.exit_code == 0, res.output
    assert "removed" in res.output and "earlier run wrote" in res.output
    after = _tree(out)
    assert not [r for r in after if "scale-3_" in r] and [r for r in after if "scale-4_" in r]
    for rel, data in before["out"].items():
        assert after[rel] == data, rel
    # without the flag the user's files still stop it
    res = runner.invoke(cli.main, base)
    assert res.exit_code != 0 and "holds 2 file(s) no lsd-dask run wrote" in res.output


def test_two_runs_into_one_output_folder_with_two_work_folders(folder, tmp_path):
    """The output folder has a lock of its own: a run with another work folder but the
    same output folder fails at once, naming the holder, and writes nothing."""
    study_dir, _ = folder
    out = tmp_path / "out"
    out.mkdir()
    holder = WorkLock(Folder(out), "the first run", name=LOCK_NAMES[0], what="output folder")
    holder.acquire()
    try:
        res = CliRunner().invoke(
            cli.main,
            ["run", str(study_dir / "pipeline.yaml"), "--out", str(out), "--work",
             str(tmp_path / "other-work")],
        )  # fmt: skip
    finally:
        holder.release()
    assert res.exit_code != 0
    assert f"output folder {out} is in use by another run" in _errors(res.output)[0]
    assert "(the first run)" in res.output
    assert sorted(os.listdir(out)) == [LOCK_NAMES[0]] and not (tmp_path / "other-work").exists()
