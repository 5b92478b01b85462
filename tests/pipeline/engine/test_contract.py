"""The stage contract's runner, once for every stage: skip what is current, compute the
rest together, record each unit as the stage yields it, recompute on a changed key or a
missing output; and a new stage runs in a real pipeline from one line in the stage list.
A run holds its work folder's lock: a second run into it fails at once."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest
import yaml

from lsd_dask.io.bids import find_atlas_folder
from lsd_dask.pipeline import load_config, run_pipeline, write_study
from lsd_dask.pipeline.engine.context import RunContext
from lsd_dask.pipeline.engine.contract import Column, StageBase, Unit, run_stage
from lsd_dask.pipeline.engine.workdir import WorkDir


class Squares(StageBase):
    """A toy stage: unit i writes i² to a file; ``fail_after`` stops it part-way."""

    name = "squares"

    def __init__(self, n=3, salt=0, fail_after=None):
        self.n, self.salt, self.fail_after = n, salt, fail_after
        self.computed: list[list[str]] = []

    def plan(self, ctx):
        return [
            Unit(f"squares/{i}", {"i": i, "salt": self.salt}, [ctx.wd.folder.join(f"sq{i}.json")],
                 label=f"unit {i}", item=i)
            for i in range(self.n)
        ]  # fmt: skip

    def load(self, ctx, unit):
        return json.loads(ctx.wd.read_text(unit.outputs[0]))

    def compute(self, ctx, todo):
        self.computed.append([u.name for u in todo])
        for done, u in enumerate(reversed(todo)):  # any order: the runner keeps the plan's
            if self.fail_after is not None and done == self.fail_after:
                raise RuntimeError("interrupted")
            ctx.wd.write_text(u.outputs[0], json.dumps(u.item**2 + self.salt))
            yield u, u.item**2 + self.salt


def _ctx(tmp_path, logs):
    return RunContext(cfg=None, wd=WorkDir(tmp_path / "work", logs.append), log=logs.append,
                      meshes={})  # fmt: skip


def test_skips_current_units_and_computes_the_rest_together(tmp_path):
    logs: list[str] = []
    ctx = _ctx(tmp_path, logs)
    stage = Squares()
    assert run_stage(stage, ctx) == {"squares/0": 0, "squares/1": 1, "squares/2": 4}
    assert list(ctx.results["squares"]) == ["squares/0", "squares/1", "squares/2"]
    assert stage.computed == [["squares/0", "squares/1", "squares/2"]]
    # a second run computes nothing and loads every result
    again = Squares()
    assert run_stage(again, ctx) == {"squares/0": 0, "squares/1": 1, "squares/2": 4}
    assert again.computed == []
    assert "[squares] unit 1 done earlier, skipped" in logs
    # a missing output and a changed key are computed again, alone
    (tmp_path / "work" / "sq1.json").unlink()
    third = Squares()
    run_stage(third, ctx)
    assert third.computed == [["squares/1"]]
    salted = Squares(salt=10)
    assert run_stage(salted, ctx)["squares/2"] == 14
    assert any("squares/0: recomputing (changed: salt 0 -> 10)" in line for line in logs)


def test_an_interrupted_stage_records_only_what_it_yielded(tmp_path):
    ctx = _ctx(tmp_path, [])
    with pytest.raises(RuntimeError, match="interrupted"):
        run_stage(Squares(fail_after=1), ctx)
    stamps = sorted(p.name for p in (tmp_path / "work" / "stamps").iterdir())
    assert stamps == ["squares__2.json"]  # the unit it yielded (its output written)
    resumed = Squares()
    assert run_stage(resumed, ctx) == {"squares/0": 0, "squares/1": 1, "squares/2": 4}
    assert resumed.computed == [["squares/0", "squares/1"]]


def test_a_quiet_stage_says_it_is_still_working(tmp_path, monkeypatch):
    """A stage that computes for a while without a line gets one from the runner every
    HEARTBEAT_S (30 s in a run; 0.3 s here), and its own lines reset the clock."""
    import time

    from lsd_dask.pipeline.engine import contract

    monkeypatch.setattr(contract, "HEARTBEAT_S", 0.3)

    class Slow(Squares):
        def compute(self, ctx, todo):
            time.sleep(1.2)
            ctx.log("[squares] a line of its own")
            yield from super().compute(ctx, todo)

    logs: list[str] = []
    ctx = _ctx(tmp_path, logs)
    run_stage(Slow(n=2), ctx)
    own = logs.index("[squares] a line of its own")
    beats = [i for i, line in enumerate(logs) if line.startswith("[squares] still working, ")]
    assert 2 <= len(beats) <= 4 and all(i < own for i in beats), logs
    assert ctx.log == logs.append  # the stage's log handed back


def test_a_stage_that_skips_a_unit_is_an_error(tmp_path):
    class Lazy(Squares):
        def compute(self, ctx, todo):
            yield from list(super().compute(ctx, todo))[:1]

    missing = r"stage squares did not compute \['squares/0', 'squares/1'\]"
    with pytest.raises(RuntimeError, match=missing):
        run_stage(Lazy(), _ctx(tmp_path, []))


def test_a_new_stage_is_one_line_in_the_stage_list(tmp_path, study, monkeypatch):
    """A stage that reads the cluster stage's labels and states one score column: one
    line in the stage list puts it after the fits, with its stamps, and its column in
    report.json's rows, report.html's comparison and each label file's sidecar. A plan
    that takes the fingerprint of a stage it does not name in ``reads`` fails."""
    import lsd_dask.pipeline.stages as plan

    class LargestParcel(StageBase):
        name = "sizes"
        reads = ("cluster",)
        columns = (Column("largest_share", "largest parcel share", higher_is_better=False,
                          sidecar_key="largest_share"),)  # fmt: skip
        sidecar_section = "ParcelSizes"

        def plan(self, ctx):
            return [
                Unit(f"sizes/{m.name}/K{k}",
                     {s: ctx.fingerprint(f"cluster/{s}/{m.name}/K{k}") for s in ctx.splits},
                     [ctx.wd.folder.join(f"sizes_{m.name}_K{k}.json")], item=(m.name, k))
                for m in ctx.cfg.methods for k in ctx.cfg.ks
            ]  # fmt: skip

        def load(self, ctx, unit):
            return json.loads(ctx.wd.read_text(unit.outputs[0]))

        def compute(self, ctx, todo):
            for u in todo:
                shares = []
                for split in ctx.splits:
                    lab = ctx.wd.load_npy(ctx.wd.labels(split, *u.item))
                    shares.append(float(np.bincount(lab)[1:].max() / (lab > 0).sum()))
                value = {"largest_share": float(np.mean(shares))}
                ctx.wd.write_text(u.outputs[0], json.dumps(value))
                yield u, value

        def rows(self, ctx):
            return {tuple(u.split("/")[1:2]) + (int(u.rsplit("K", 1)[1]),): v
                    for u, v in ctx.results[self.name].items()}  # fmt: skip

    monkeypatch.setattr(plan, "STAGES", [*plan.STAGES, LargestParcel()])
    write_study(study, tmp_path, fmt="gifti")
    cfg = load_config(tmp_path / "pipeline.yaml", ks=[5], null_repeats=0)
    logs: list[str] = []
    report = run_pipeline(cfg, log=logs.append)
    [row] = [r for r in report["scores"] if r["method"] == "directional"]
    shares = [
        np.bincount(lab)[1:].max() / (lab > 0).sum()
        for lab in (np.load(cfg.output / "work" / "labels" / f"{s}_directional_K5.npy")
                    for s in ("split1", "split2"))
    ]  # fmt: skip
    assert row["largest_share"] == pytest.approx(np.mean(shares))
    saved = json.loads((cfg.output / "report.json").read_text())["scores"]
    assert [r["largest_share"] for r in saved] == [r["largest_share"] for r in report["scores"]]
    assert "largest parcel share" in (cfg.output / "report.html").read_text()
    sidecars = sorted(find_atlas_folder(cfg.output).glob("*atlas-directional[0-9]*_dseg.json"))
    assert sidecars and all(
        json.loads(p.read_text())["ParcelSizes"] == {"largest_share": row["largest_share"]}
        for p in sidecars
    )
    logs.clear()
    run_pipeline(cfg, log=logs.append)
    assert "[sizes] done earlier, skipped" in logs

    class Unnamed(LargestParcel):
        reads = ()

    monkeypatch.setattr(plan, "STAGES", [*plan.STAGES[:-1], Unnamed()])
    with pytest.raises(RuntimeError, match="stage cluster is not among the stages"):
        run_pipeline(cfg, log=logs.append)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from lsd_dask.cli import main; main()", *args]


def _labels(out):
    work = out / "work" / "labels"
    return {p.name: np.load(p) for p in sorted(work.glob("*.npy"))}


@pytest.fixture(scope="module")
def contended(tmp_path_factory, write_tiny_study, scheduler_address):
    """A tiny study's pipeline file and the labels of one uncontended run of it (the
    reference every paused run must end with)."""
    study = tmp_path_factory.mktemp("contended")
    write_tiny_study(study, random_state=3)
    raw = yaml.safe_load((study / "pipeline.yaml").read_text())
    raw.update(ks=[4], methods=["directional"], min_region_size=2, null_repeats=1, spins=0)
    raw["svd"] = {"method": "randomized", "rank": 12}
    (study / "pipeline.yaml").write_text(yaml.safe_dump(raw))
    args = [str(study / "pipeline.yaml"), "--scheduler", scheduler_address]
    fresh = study / "fresh"
    subprocess.run(_cli("run", *args, "--out", str(fresh)), check=True, capture_output=True)
    return args, _labels(fresh)


@pytest.mark.parametrize("stage", ["ingest", "svd", "cluster"])
def test_two_runs_into_one_folder_the_second_fails_at_once_and_the_first_is_unharmed(
    tmp_path, contended, stage
):
    """Run A is paused (SIGSTOP) at its first line of a stage (ingest, the SVD, the first
    fit); run B into the same output folder fails with one line naming A, before it reads
    any input; A, continued, finishes with the labels of a fresh run."""
    args, want = contended
    out = tmp_path / "shared"
    a = subprocess.Popen(
        _cli("run", *args, "--out", str(out)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    paused = threading.Event()
    lines: list[str] = []

    def read() -> None:
        assert a.stdout is not None
        for line in a.stdout:
            lines.append(line)
            # the CLI's console lines start with their time (HH:MM:SS)
            if not paused.is_set() and re.sub(r"^\d\d:\d\d:\d\d ", "", line).startswith(
                f"[{stage}]"
            ):
                os.kill(a.pid, signal.SIGSTOP)
                paused.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert paused.wait(240), "".join(lines)
        b = subprocess.run(
            _cli("run", *args, "--out", str(out)), capture_output=True, text=True, timeout=60
        )
        assert b.returncode != 0
        message = (b.stdout + b.stderr).strip().splitlines()
        assert len(message) == 1, b.stdout + b.stderr  # no progress line: nothing was read
        assert f"in use by another run: pid {a.pid}" in message[0]
    finally:
        os.kill(a.pid, signal.SIGCONT)
    assert a.wait(timeout=240) == 0, "".join(lines)
    reader.join(timeout=10)
    got = _labels(out)
    assert list(got) == list(want) and got
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_a_write_the_disk_refuses_ends_the_run_in_one_line_naming_the_file(
    tmp_path, write_tiny_study
):
    """Files capped at 64 KiB (RLIMIT_FSIZE: the kernel refuses the write as a full disk
    would): the run fails with one Error line naming the file it could not write."""
    import resource

    study = tmp_path / "study"
    write_tiny_study(study, random_state=3)
    cluster = tmp_path / "threads.yaml"
    cluster.write_text("type: local\nlocal:\n  n_workers: 1\n  threads_per_worker: 2\n"
                       "  processes: false\n  dashboard_address: \":0\"\n")  # fmt: skip

    def cap() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))

    res = subprocess.run(
        _cli("run", str(study / "pipeline.yaml"), "--out", str(tmp_path / "out"),
             "--cluster", str(cluster), "--k", "4"),
        capture_output=True, text=True, timeout=300, preexec_fn=cap,
    )  # fmt: skip
    errors = [line for line in res.stderr.splitlines() if line.startswith("Error:")]
    assert res.returncode != 0
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert "File too large" in errors[0] and str(tmp_path / "out") in errors[0], errors[0]
