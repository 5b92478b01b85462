"""81 bad inputs through ``lsd-dask run``, one case each.

Each case starts from a valid 3 + 3-subject GIFTI study (a CIFTI one for the CIFTI cases),
breaks one thing and runs the command line. An input that should run, runs: constant
vertices are masked, a rank above the time points keeps half of them (said in the log).
Every other input fails with one ``Error:`` line that names the problem and the file,
subject or key, and leaves no stamp, store, label or report that a later run would reuse.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from lsd_dask import cli
from lsd_dask.datasets import surface_study
from lsd_dask.io.surface_files import write_func_gifti
from lsd_dask.pipeline import write_study
from lsd_dask.surface import two_hemisphere_mesh

N_LEFT, N_RIGHT = 252, 362  # two_hemisphere_mesh(5, 6)
T = 40


@dataclass
class Case:
    """One bad input: how to make it, the extra CLI arguments and what must happen."""

    make: Callable[[Path, dict[str, Any]], None] = lambda d, raw: None
    args: list[str] = field(default_factory=list)
    error: str | None = None  # regex the Error line must match; None: the run succeeds
    fmt: str = "gifti"
    out: bool = True  # pass --out
    # fails after fits that a later run rightly reuses (they do not depend on the cause)
    keeps_fits: bool = False


def _study(frequency: tuple[int, int] = (5, 6), seed: int = 0) -> Any:
    return surface_study(
        two_hemisphere_mesh(*frequency, radius=50.0),
        n_parcels=6,
        n_subjects=(3, 3),
        n_timepoints=T,
        medial_wall_fraction=0.1,
        noise_std=0.7,
        random_state=seed,
    )


@pytest.fixture(scope="module")
def templates(tmp_path_factory) -> dict[str, Path]:
    """The valid studies, written once; every case copies one."""
    root = tmp_path_factory.mktemp("bad_inputs")
    out = {}
    for fmt in ("gifti", "cifti", "fmriprep"):
        path = write_study(_study(), root / fmt, fmt=fmt, rank=20)
        raw = yaml.safe_load(path.read_text())
        # no spin nulls: no case is about them, and each would cost a second
        raw.update(ks=[4], min_region_size=3, null_repeats=2, spins=0)
        raw.pop("output")
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        out[fmt] = root / fmt
    other = write_study(_study((4, 5), seed=1), root / "other", fmt="gifti", rank=20)
    out["other"] = other.parent
    return out


# --------------------------------------------------------------------------- edits


def _gifti(d: Path, sid: str, hemi: str) -> Path:
    return d / f"{sid}.{hemi}.func.gii"


def _edit_gifti(sid: str, hemi: str, change: Callable[[np.ndarray], np.ndarray]):
    def make(d: Path, raw: dict[str, Any]) -> None:
        path = _gifti(d, sid, hemi)
        img = nib.load(str(path))
        x = np.column_stack([a.data for a in img.darrays])
        write_func_gifti(path, change(x.copy()), hemisphere="left" if hemi == "L" else "right")

    return make


def _set(sid: str, hemi: str, value: float, vertex: int = 100, t: int | None = 10):
    def change(x: np.ndarray) -> np.ndarray:
        if t is None:
            x[vertex, :] = value
        else:
            x[vertex, t] = value
        return x

    return _edit_gifti(sid, hemi, change)


def _both(*makes):
    def make(d: Path, raw: dict[str, Any]) -> None:
        for m in makes:
            m(d, raw)

    return make


def _raw(change: Callable[[dict[str, Any]], None]):
    return lambda d, raw: change(raw)


def _cut(name: str, fraction: float):
    def make(d: Path, raw: dict[str, Any]) -> None:
        data = (d / name).read_bytes()
        (d / name).write_bytes(data[: int(len(data) * fraction)])

    return make


def _overwrite(name: str, start: float, data: bytes):
    def make(d: Path, raw: dict[str, Any]) -> None:
        buf = bytearray((d / name).read_bytes())
        at = int(len(buf) * start)
        buf[at : at + len(data)] = data
        (d / name).write_bytes(bytes(buf))

    return make


def _corrupt_base64(name: str):
    def make(d: Path, raw: dict[str, Any]) -> None:
        text = (d / name).read_text()
        at = text.index("<Data>") + 200
        (d / name).write_text(text[:at] + "A!" * 100 + text[at + 200 :])

    return make


def _rm(name: str):
    return lambda d, raw: (d / name).unlink()


def _int_gifti(d: Path, raw: dict[str, Any]) -> None:
    for path in d.glob("*.func.gii"):
        img = nib.load(str(path))
        x = np.column_stack([a.data for a in img.darrays])
        hemi = "left" if ".L." in path.name else "right"
        write_func_gifti(path, np.round(100 * x).astype(np.int32), hemisphere=hemi)


def _short(sid: str, hemis: str, t: int):
    return _both(*[_edit_gifti(sid, h, lambda x: x[:, :t]) for h in hemis])


def _same_data(source: str, target: str, how: Callable[[Path, Path], Any]):
    """``target``'s files replaced by hard links to (or copies of) ``source``'s."""

    def make(d: Path, raw: dict[str, Any]) -> None:
        for h in "LR":
            dest = _gifti(d, target, h)
            dest.unlink()
            how(_gifti(d, source, h), dest)

    return make


def _squashed_sphere(d: Path, raw: dict[str, Any]) -> None:
    """The meshes are spheres; a copy flattened to half its height given as ``sphere:``."""
    from lsd_dask.io.surface_files import load_mesh, write_surface_gifti
    from lsd_dask.surface import Mesh

    mesh = load_mesh(d / "lh.surf.gii")
    flat = mesh.vertices * np.array([1.0, 1.0, 0.5])
    write_surface_gifti(d / "lh.squashed.surf.gii", Mesh(flat, mesh.faces), hemisphere="left")
    raw["sphere"] = {"left": "lh.squashed.surf.gii", "right": "rh.surf.gii"}


def _external_gifti(name: str):
    """The file's data arrays pointed at another file on the machine (GIFTI's
    ``ExternalFileBinary``), their own data dropped."""

    def make(d: Path, raw: dict[str, Any]) -> None:
        text = (d / name).read_text()
        text = re.sub(r'Encoding="[A-Za-z0-9]+"', 'Encoding="ExternalFileBinary"', text)
        text = re.sub(r'ExternalFileName="[^"]*"', 'ExternalFileName="/etc/hostname"', text)
        text = re.sub(r"<Data>[^<]*</Data>", "<Data></Data>", text)
        (d / name).write_text(text)

    return make


def _other_subject(d: Path, raw: dict[str, Any]) -> None:
    # sub-005 from a study on another mesh
    other = d.parent / "other_copy"
    for h in "LR":
        shutil.copy(other / f"sub-005.{h}.func.gii", _gifti(d, "sub-005", h))


def _other_mesh(d: Path, raw: dict[str, Any]) -> None:
    shutil.copy(d.parent / "other_copy" / "lh.surf.gii", d / "lh.surf.gii")


def _python_tag(key: str):
    def make(d: Path, raw: dict[str, Any]) -> None:
        raw[key] = "__TAG__"

    return make


def _cluster_yaml(text: str):
    def make(d: Path, raw: dict[str, Any]) -> None:
        (d / "cluster.yaml").write_text(text)

    return make


def _bad_faces(d: Path, raw: dict[str, Any]) -> None:
    """A triangle of the left mesh names a vertex past its last."""
    img = nib.load(str(d / "lh.surf.gii"))
    img.darrays[1].data[3, 1] = N_LEFT + 5
    nib.save(img, str(d / "lh.surf.gii"))


def _ragged(name: str):
    """One time point's data array shorter than the others (each array well formed)."""

    def make(d: Path, raw: dict[str, Any]) -> None:
        img = nib.load(str(d / name))
        arrays = [a.data for a in img.darrays]
        arrays[5] = arrays[5][:-3]
        nib.save(nib.gifti.GiftiImage(meta=img.meta, darrays=[
            nib.gifti.GiftiDataArray(a, intent="NIFTI_INTENT_TIME_SERIES",
                                     datatype="NIFTI_TYPE_FLOAT32") for a in arrays
        ]), str(d / name))  # fmt: skip

    return make


def _blank_atlas(d: Path, raw: dict[str, Any]) -> None:
    """A comparison atlas whose every value is 0."""
    from lsd_dask.io.surface_files import write_label_gifti

    for hemi, n in (("L", N_LEFT), ("R", N_RIGHT)):
        name = "left" if hemi == "L" else "right"
        write_label_gifti(d / f"blank.{hemi}.label.gii", np.zeros(n, int), hemisphere=name)
    raw["compare_atlases"] = [{"name": "blank", "left": "blank.L.label.gii",
                               "right": "blank.R.label.gii"}]  # fmt: skip


def _confounds(sid: str, change: Callable[[Any], Any] | None):
    """A participant's fMRIPrep confounds TSV changed (None: removed)."""

    def make(d: Path, raw: dict[str, Any]) -> None:
        import pandas as pd

        path = d / sid / "func" / f"{sid}_task-rest_desc-confounds_timeseries.tsv"
        if change is None:
            path.unlink()
            return
        change(pd.read_csv(path, sep="\t")).to_csv(path, sep="\t", index=False, na_rep="n/a")

    return make


def _unwritable(d: Path, raw: dict[str, Any]) -> None:
    (d / "locked").mkdir()
    os.chmod(d / "locked", 0o555)


_TAG = "!!python/object/apply:os.system ['echo pwned > pwned.txt']"

CASES: dict[int, Case] = {
    1: Case(_set("sub-002", "L", np.nan), error=r"sub-002.*NaN|NaN.*sub-002"),
    2: Case(_both(_set("sub-002", "L", np.nan), _raw(lambda r: r.update(nonfinite="mask")))),
    3: Case(_set("sub-002", "R", np.inf), error=r"sub-002.*(inf|NaN)|(inf|NaN).*sub-002"),
    4: Case(
        _both(
            _edit_gifti("sub-005", "L", lambda x: x * np.nan),
            _edit_gifti("sub-005", "R", lambda x: x * np.nan),
            _raw(lambda r: r.update(nonfinite="mask")),
        ),
        error="sub-005",
    ),
    5: Case(_set("sub-003", "L", 5.0, vertex=40, t=None)),
    6: Case(_set("sub-003", "L", 0.1, vertex=40, t=None)),
    7: Case(_set("sub-003", "L", 100.3, vertex=40, t=None)),
    8: Case(
        _both(
            _edit_gifti("sub-004", "L", lambda x: x * 0),
            _edit_gifti("sub-004", "R", lambda x: x * 0),
        ),
        error="sub-004",
    ),
    9: Case(_other_subject, error=r"sub-005.*vertices"),
    10: Case(_rm("sub-006.R.func.gii"), error=r"sub-006\.R\.func\.gii"),
    11: Case(_cut("sub-002.L.func.gii", 0.5), error=r"sub-002\.L\.func\.gii"),
    12: Case(_corrupt_base64("sub-002.L.func.gii"), error=r"sub-002\.L\.func\.gii"),
    13: Case(_cut("sub-002.L.func.gii", 0.0), error=r"sub-002\.L\.func\.gii"),
    14: Case(_cut("sub-002.dtseries.nii", 0.6), error=r"sub-002\.dtseries\.nii", fmt="cifti"),
    15: Case(
        _overwrite("sub-002.dtseries.nii", 0.0, bytes(np.random.default_rng(0).bytes(348))),
        error=r"sub-002\.dtseries\.nii",
        fmt="cifti",
    ),
    16: Case(
        _overwrite("sub-002.dtseries.nii", 0.7, b"\xff" * 2000),
        error=r"sub-002",
        fmt="cifti",
    ),
    17: Case(_raw(lambda r: r["splits"]["split2"].append("sub-001")), error="sub-001"),
    18: Case(args=["--k", "5000"], error="5000"),
    19: Case(args=["--k", "600"], error="600"),
    20: Case(args=["--k", "1"], error=r"\bk|\bks|K"),
    21: Case(args=["--k", "-3"], error=r"-3"),
    22: Case(_unwritable, args=["--out", "{locked}/results"], error="not writable", out=False),
    23: Case(_unwritable, args=["--out", "{locked}"], error="not writable", out=False),
    24: Case(
        lambda d, r: (d / "afile").write_text("x"),
        args=["--out", "{d}/afile"],
        error="afile",
        out=False,
    ),
    25: Case(_other_mesh, error=r"vertices"),
    26: Case(
        _raw(lambda r: r["mesh"].update(left="sub-001.L.func.gii")), error=r"sub-001\.L\.func"
    ),
    27: Case(_rm("rh.surf.gii"), error=r"rh\.surf\.gii"),
    28: Case(_raw(lambda r: r["splits"].update(split1=[])), error="split1"),
    29: Case(
        _raw(lambda r: r.update(splits={"split1": [s["id"] for s in r["subjects"]]})),
        error="split",
    ),
    30: Case(_raw(lambda r: r["splits"]["split1"].append("sub-404")), error="sub-404"),
    31: Case(_raw(lambda r: r.update(k=[4])), error=r"'k'.*'ks'"),
    32: Case(_raw(lambda r: r.update(method=["kmeans"])), error=r"'method'.*'methods'"),
    33: Case(_raw(lambda r: r.update(outptu="x")), error=r"'outptu'.*'output'", out=False),
    34: Case(_raw(lambda r: r.update(nonfinite="masked")), error="nonfinite"),
    35: Case(args=["--method", "lsdd"], error="lsdd"),
    36: Case(_raw(lambda r: r.update(ks=["ten"])), error=r"ks.*ten|ten.*ks"),
    37: Case(_int_gifti),
    38: Case(_short("sub-003", "LR", 30)),
    39: Case(_short("sub-003", "L", 30), error="sub-003"),
    40: Case(_short("sub-004", "LR", 1), error="sub-004"),
    41: Case(_raw(lambda r: r["subjects"][0].update(time_slice=[0, 500])), error="sub-001"),
    42: Case(args=["--rank", "5000"]),
    43: Case(args=["--rank", "0"], error="rank"),
    44: Case(args=["--rank", "-5"], error="rank"),
    45: Case(_raw(lambda r: r["subjects"][1].update(id="sub-001")), error="sub-001"),
    46: Case(
        _raw(
            lambda r: r["subjects"][3].update(left="sub-001.L.func.gii", right="sub-001.R.func.gii")
        ),
        error="sub-001",
    ),
    47: Case(_python_tag("output"), error=r"pipeline\.yaml"),
    48: Case(
        _cluster_yaml(f"type: local\nlocal:\n  n_workers: {_TAG}\n"),
        args=["--cluster", "{d}/cluster.yaml"],
        error=r"cluster\.yaml",
    ),
    49: Case(
        _cluster_yaml(f"type: local\nlocal:\n  n_workers: {_TAG}\n"),
        args=["--cluster", "{d}/cluster.yaml", "--rank", "10"],
        error=r"cluster\.yaml",
    ),
    50: Case(lambda d, r: r.update(__text__="ks:\n\t- 4\n"), error=r"pipeline\.yaml"),
    51: Case(lambda d, r: r.update(__missing__=True), error=r"pipeline\.yaml"),
    52: Case(args=["--cluster", "{d}/nope.yaml"], error=r"nope\.yaml"),
    53: Case(args=["--scheduler", "tcp://127.0.0.1:1"], error=r"127\.0\.0\.1:1"),
    54: Case(
        _raw(lambda r: r["splits"].update({"../../escaped_split": r["splits"].pop("split2")})),
        error="escaped_split",
    ),
    55: Case(
        _raw(lambda r: r["subjects"][0].update(time_slice=[0.9, 30.7])),
        error=r"sub-001.*time_slice.*0\.9.*not an integer",
    ),
    56: Case(
        _raw(lambda r: r.update(output="$LSD_DASK_UNSET_VAR/results")),
        error=r"LSD_DASK_UNSET_VAR.*not set",
        out=False,
    ),
    57: Case(_raw(lambda r: r.update(ks=[4, 4, 5])), error=r"ks: 4 given more than once"),
    58: Case(_short("sub-004", "LR", 2), error=r"sub-004: 2 time point"),
    59: Case(
        _raw(lambda r: r["mesh"].update(left="pkg://os.path/lh.surf.gii")),
        error=r"pkg:// takes a top-level package name, got 'os\.path'",
    ),
    60: Case(args=["--out", "{d}"], error=r"output folder .* holds the input", out=False),
    61: Case(
        args=["--work", "{d}/sub-001.L.func.gii/.."], error=r"work folder .* holds the input"
    ),
    62: Case(
        _raw(
            lambda r: r["subjects"][2].update(left="sub-003.R.func.gii", right="sub-003.L.func.gii")
        ),
        error=r"sub-003: .*sub-003\.R\.func\.gii is given as the left hemisphere .*CortexRight",
    ),
    63: Case(
        _raw(lambda r: r["mesh"].update(left="rh.surf.gii", right="lh.surf.gii")),
        error=r"mesh\.left: .*rh\.surf\.gii is given as the left hemisphere",
    ),
    64: Case(_same_data("sub-001", "sub-004", os.link), error=r"sub-001.*sub-004.*leak"),
    65: Case(_same_data("sub-002", "sub-005", shutil.copyfile), error=r"sub-002.*sub-005.*leak"),
    66: Case(_squashed_sphere, error=r"sphere\.left .*lh\.squashed\.surf\.gii.* not a sphere"),
    67: Case(_raw(lambda r: r.update(min_region_size=5000)), error=r"min_region_size: 5000"),
    68: Case(
        lambda d, r: r.update(
            __text__="a: &a [x, x, x, x, x, x, x, x, x]\n"
            + "".join(f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
                      for p, c in zip("abcdefgh", "bcdefghi", strict=True))  # fmt: skip
            + "ks: *i\n"
        ),
        error=r"pipeline\.yaml .*line 2: aliases \(\*a\) are not allowed",
    ),
    69: Case(_external_gifti("sub-002.L.func.gii"), error=r"sub-002\.L\.func\.gii .*external file"),
    70: Case(_set("sub-002", "L", np.nan), args=["--nonfinite", "mask"]),  # as case 2, by flag
    71: Case(args=["--denoise", "ica_aroma"], error=r"ica_aroma needs fMRIPrep's volumetric"),
    72: Case(args=["--denoise", "motion,ica_aroma"], error=r"strategy: ica_aroma needs"),
    73: Case(
        _raw(lambda r: r["subjects"][0].update(id="sub-001\n\x1b[31mforged")),
        error=r"subject id 'sub-001\\n\\x1b\[31mforged': printable characters only",
    ),
    74: Case(_bad_faces, error=r"mesh\.left \(.*lh\.surf\.gii\): faces index vertices that"),
    75: Case(_ragged("sub-002.L.func.gii"),
             error=r"subject sub-002: .*sub-002\.L\.func\.gii: its data arrays differ in length"),
    76: Case(_raw(lambda r: r.update(cluster="nope.yaml")),
             error=r"cluster: the cluster config file .*nope\.yaml does not exist"),
    77: Case(_blank_atlas, error=r"compare_atlases: .*blank\.L\.label\.gii.* labels no vertex"),
    78: Case(_confounds("sub-002", lambda t: t.assign(csf="n/a")), fmt="fmriprep",
             error=r"subject sub-002: .*sub-002_task-rest_desc-confounds_timeseries\.tsv holds "
             r"n/a or non-numbers in column\(s\) \['csf'\]"),
    79: Case(_confounds("sub-003", lambda t: t.iloc[:-1]), fmt="fmriprep",
             error=r"subject sub-003: .*confounds_timeseries\.tsv has 39 rows, .* 40 time points"),
    80: Case(_confounds("sub-004", None), fmt="fmriprep",
             error=r"subject sub-004: preprocess\.denoise needs fMRIPrep's confounds file"),
    81: Case(_raw(lambda r: r.update(min_region_size=300)), keeps_fits=True,
             error=r"min_region_size: 300 leaves the two splits no labelled vertex in common"),
}  # fmt: skip


@pytest.mark.parametrize("number", sorted(CASES))
def test_bad_input(number, templates, tmp_path, scheduler_address):
    case = CASES[number]
    d = tmp_path / "study"
    shutil.copytree(templates[case.fmt], d)
    shutil.copytree(templates["other"], tmp_path / "other_copy")
    raw = yaml.safe_load((d / "pipeline.yaml").read_text())
    case.make(d, raw)
    _write_pipeline(d, raw)
    out = tmp_path / "out"
    args = ["run", str(d / "pipeline.yaml")]
    if case.out:
        args += ["--out", str(out)]
    # root writes into a read-only folder anyway: then /proc stands in for it (Linux)
    locked = d / "locked" if not os.access(d / "locked", os.W_OK) else Path("/proc")
    args += [a.format(d=d, locked=locked) for a in case.args]
    if "--scheduler" not in args and "--cluster" not in args:
        args += ["--scheduler", scheduler_address]
    if number in (22, 23) and locked == Path("/proc") and not Path("/proc/self").exists():
        pytest.skip("running as root without /proc: no folder here is read-only to root")
    result = CliRunner().invoke(cli.main, args, catch_exceptions=False)
    outputs = [out, d / "locked", d / "results", tmp_path / "escaped_split", tmp_path / "x"]
    if case.error is None:
        assert result.exit_code == 0, result.output
        report = json.loads((out / "report.json").read_text())
        assert report["config"]["ks"] == [4]
        return
    lines = [ln for ln in result.output.splitlines() if ln.startswith("Error:")]
    assert result.exit_code != 0, result.output
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    assert re.search(case.error, lines[0]), lines[0]
    assert not (d / "pwned.txt").exists() and not Path("pwned.txt").exists()
    for folder in outputs:
        left = _reusable(folder)
        if case.keeps_fits:  # what came before the failing scores, each stamped with its key
            left = [p for p in left if "scores" in p or p.endswith("report.json")]
        assert left == [], f"left behind: {left}"


def _write_pipeline(d: Path, raw: dict[str, Any]) -> None:
    path = d / "pipeline.yaml"
    if raw.pop("__missing__", False):
        path.unlink()
        return
    text = raw.pop("__text__", None)
    if text is None:
        text = yaml.safe_dump(raw, sort_keys=False).replace("__TAG__", _TAG)
    path.write_text(text)


def _reusable(folder: Path) -> list[str]:
    """Files a later run would reuse: stamps, SVD results, stores, labels, a report.

    The vertex mask is not counted: it depends only on the input files and the mask rules,
    its stamp is keyed on both, and a run with other settings reuses it correctly."""
    if not folder.is_dir():
        return []
    found = []
    for p in folder.rglob("*"):
        name = p.name
        if p.parent.name == "stamps" and name == "mask.json":
            continue
        if name == "report.json" or p.suffix == ".zarr" or name.endswith(("_U.npy", "_s.npy")):
            found.append(str(p.relative_to(folder)))
        elif p.parent.name in ("stamps", "labels") and p.is_file():
            found.append(str(p.relative_to(folder)))
    return found


def test_a_file_damaged_past_its_header_names_subject_and_file(templates, tmp_path):
    from lsd_dask.io.surface_files import SubjectFiles, load_subject

    path = tmp_path / "sub-002.dtseries.nii"
    data = (templates["cifti"] / path.name).read_bytes()
    path.write_bytes(data[: int(len(data) * 0.6)])
    with pytest.raises(ValueError, match=r"subject sub-002: cannot read .*sub-002\.dtseries"):
        load_subject(SubjectFiles.from_keys("sub-002", cifti=path))


def test_a_file_damaged_past_a_header_read_before_names_subject_and_file(templates, tmp_path):
    """The same one line where a subject with the same header was read before in this
    process (its layout known, the header not parsed again)."""
    from lsd_dask.io.surface_files import SubjectFiles, load_subject

    good = templates["cifti"] / "sub-002.dtseries.nii"
    load_subject(SubjectFiles.from_keys("sub-001", cifti=good))
    path = tmp_path / "sub-002.dtseries.nii"
    data = good.read_bytes()
    path.write_bytes(data[: int(len(data) * 0.6)])
    with pytest.raises(ValueError, match=r"subject sub-002: cannot read .*sub-002\.dtseries"):
        load_subject(SubjectFiles.from_keys("sub-002", cifti=path))


@pytest.mark.parametrize("number", [41, 73, 74, 76, 77, 78, 79, 80])
def test_validate_finds_what_run_finds_and_writes_nothing(number, templates, tmp_path):
    """``lsd-dask validate`` fails on these inputs with the line ``run`` gives (their
    headers and settings tell), and makes no folder: not the output folder, nor its work
    folder."""
    case = CASES[number]
    d = tmp_path / "study"
    shutil.copytree(templates[case.fmt], d)
    raw = yaml.safe_load((d / "pipeline.yaml").read_text())
    case.make(d, raw)
    raw["output"] = str(tmp_path / "out")
    _write_pipeline(d, raw)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = CliRunner().invoke(cli.main, ["validate", str(d / "pipeline.yaml")])
    lines = [ln for ln in result.output.splitlines() if ln.startswith("Error:")]
    assert result.exit_code != 0 and len(lines) == 1, result.output
    assert re.search(case.error, lines[0]), lines[0]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
