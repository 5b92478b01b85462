"""Cost against cohort size: the pipeline at 33, 66, 132 and 264 subjects per split.

Short runs (250 time points by default) at the full vertex count (2 × 32,492 vertices), so
that the number of subjects, not their length, is what grows. The inputs are written once,
for the largest cohort (``lsd-dask synth --format zarr``), and each smaller cohort is the
first subjects of each split. Each cohort runs in a fresh child process (the client's
memory is its own) on a LocalCluster of single-threaded workers, into a fresh output
folder that is removed afterwards (a cohort's stores are about 2 × S × 65 MB).

Before the run, every worker imports the pipeline, timed and reported apart
(``--no-warm`` leaves it in the run): it is a fixed cost of every run (1–3 s: the
pipeline's configuration imports the estimators and scikit-learn), which ingest's first
tasks would otherwise pay and spread over the subjects.

Per stage it records the seconds and the seconds per subject (``report.json``), the tasks
the scheduler ran (a scheduler plugin, attributed to the stage whose log line came last),
and the peak resident memory of the client and of each worker (``benchmarks/end_to_end.py``'s
meter). For the run it records the files written (the split stores', per subject), the
stamps' bytes, and the bytes of ``report.json``: anything that grows faster than the
subjects is a defect.

Run: ``python -m benchmarks.cohort --root /work/cohort --subjects 33 66``. Prints a Markdown
table and writes ``cohort.json`` in the root. The settings are fixed so that the stages'
work is linear in the subjects: spherical k-means and directional clustering at K = 100,
rank 200, 100 spins.

``--cold`` drops the page cache before each run, so that every run reads its inputs from
disk. On a virtual machine that returns its free memory to the host (free page
reporting), every page a run then takes is faulted in from the host (1.3–2.7 s a GiB on
the development VM), which a small cohort pays for all its pages and a large one only
until memory is full: the 33-subject run read 1.16–1.29× the 264-subject one per subject
that way. ``--fill FOLDER ...`` then reads other files (not the cohort's) into the page
cache until under 1 GiB is free, so that the runs take memory already in use, as a node
that has run before does: 1.036–1.058× (``docs/benchmarks.md``). The command of record:
``python -m benchmarks.cohort --root /work/cohort --subjects 33 66 132 264 --cold --fill
/work/full/study /opt``.

``--individual`` adds the pipeline's stage of each participant's own parcels (its
default estimator, prior_potts, from the first method's other split at every K), and the
table then gives its seconds per participant: each participant is one unit, whose work
depends only on its own data and the prior, so that anything that grows faster than the
participants (planning, stamps, the cohort's summary, the outputs) shows there.
``--frequency 32`` writes icospheres of 2 × 10,242 vertices (fsaverage5's count) instead
of 32k_fs_LR's, so that 264 participants a split fit on the disk and in an hour:
``python -m benchmarks.cohort --root /work/cohort5 --frequency 32 --timepoints 150
--methods directional --individual``.

On a machine whose speed drifts from run to run (a shared VM), ``--repeat 3`` runs the
sizes in turn three times and reports each size's median run with every run's figure:
the 10 % between the smallest and the largest cohort is then told apart from the drift.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from benchmarks.end_to_end import (
    STAGES,
    StageMeter,
    fresh_memory_seconds,
    sustained_gflops,
    svd_passes,
)


def n_vertices(frequency: int) -> int:
    """Both hemispheres' vertices of ``lsd-dask synth --frequency``'s icospheres."""
    return 2 * (10 * frequency**2 + 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--subjects", type=int, nargs="+", default=[33, 66, 132, 264])
    ap.add_argument("--timepoints", type=int, default=250)
    ap.add_argument(
        "--frequency",
        type=int,
        default=57,
        help="icosphere frequency of the synthetic study (57: 2 x 32,492 vertices, "
        "32k_fs_LR's count; 32: 2 x 10,242, fsaverage5's)",
    )
    ap.add_argument(
        "--individual",
        nargs="?",
        const="prior_potts",
        choices=["prior_potts", "iterative"],
        help="also run each participant's own parcels (the pipeline's `individual:` at the "
        "run's K's) with this estimator (default prior_potts)",
    )
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-limit", default="4GB", help="per worker")
    ap.add_argument("--methods", nargs="+", default=["spherical_kmeans", "directional"])
    ap.add_argument("--ks", type=int, nargs="+", default=[100])
    ap.add_argument("--rank", type=int, default=200)
    ap.add_argument("--spins", type=int, default=100)
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run every cohort this many times, the sizes in turn (33, 66, …, 33, 66, …), "
        "so that a drift of the machine falls on every size alike; each cohort's row is "
        "its run with the median ingest + SVD seconds, and the table gives every run's",
    )
    ap.add_argument(
        "--cold",
        action="store_true",
        help="drop the page cache before each run (root), so that every run reads its "
        "inputs from disk",
    )
    ap.add_argument(
        "--fill",
        type=Path,
        nargs="+",
        metavar="FOLDER",
        help="with --cold: after dropping the page cache, read the files under these "
        "folders (not the cohort's inputs) into it until under 1 GiB of memory is free, so "
        "that the run's pages come from memory already in use, as on a machine that has "
        "run before, not fresh from the free pool (on a VM that returns its free memory "
        "to the host, fresh pages cost 1.3–2.7 s a GiB, which a small cohort pays for all "
        "its pages and a large one only until the page cache is full)",
    )
    ap.add_argument(
        "--gemm-seconds",
        type=float,
        default=8.0,
        help="before each run, the float32 GEMM rate as many one-thread processes as workers "
        "sustain for this long on the SVD's products (0: none); the table then gives the "
        "SVD against its GEMM bound run by run, which a drift of the machine's speed does "
        "not move",
    )
    ap.add_argument(
        "--no-warm",
        dest="warm",
        action="store_false",
        help="leave the workers' first import of the pipeline in the run (by default it is "
        "made and timed before the run, and reported apart: a fixed cost of every run)",
    )
    ap.add_argument(
        "--project",
        type=float,
        metavar="FIXED_S",
        help="print HCP-S1200's projection from <root>/cohort.json, with FIXED_S seconds for "
        "the stages that do not grow with the subjects (the full-scale study's fits, "
        "held-out measures, scores and outputs), and exit",
    )
    ap.add_argument("--store-gbps", type=float, default=10.0, help="with --project")
    ap.add_argument(
        "--svd-gflops",
        type=float,
        help="with --project: the SVD's GFLOP/s per worker at rank 1,000 (default: the "
        "cohort runs' own, at their rank)",
    )
    ap.add_argument(
        "--table",
        action="store_true",
        help="print the table of <root>/cohort.json (the last runs' medians) and exit",
    )
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.fill and not args.cold:
        ap.error("--fill fills the page cache once --cold has dropped it: add --cold")
    inputs = args.root / "inputs"
    if args.project is not None:
        saved = json.loads((args.root / "cohort.json").read_text())
        measured = {int(k): v for k, v in saved.items()}
        rows = project(
            measured, store_gbps=args.store_gbps, fixed_s=args.project, svd_gflops=args.svd_gflops
        )
        print_projection(rows)
        return
    if args.table:
        saved = json.loads((args.root / "cohort.json").read_text())
        print_table({int(k): v for k, v in saved.items()})
        return
    if args.child is not None:
        print(json.dumps(run_child(args, inputs, args.child)))
        return
    write_inputs(inputs, max(args.subjects), args.timepoints, args.frequency)
    runs: dict[int, list[dict[str, Any]]] = {s: [] for s in sorted(args.subjects)}
    for _ in range(args.repeat):
        for s in runs:
            # the last run's writes settled, so that none is written back during this one
            # (a 264-subject run writes 34 GB of stores), and with --cold the inputs
            # dropped from the page cache, so that every run reads them from disk
            os.sync()
            if args.cold:
                Path("/proc/sys/vm/drop_caches").write_text("3\n")
            filled = fill_page_cache(args.fill, skip=args.root) if args.fill else None
            # the machine's speed just before the run: what the SVD's products can do
            gemm = None
            if args.gemm_seconds > 0:
                gemm = sustained_gflops(
                    args.workers, seconds=args.gemm_seconds, t=args.timepoints, l=args.rank + 10
                )
            # and what memory the run takes from the free pool costs on this machine
            fresh = fresh_memory_seconds()
            cmd = [sys.executable, "-m", "benchmarks.cohort", "--child", str(s), *sys.argv[1:]]
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
            if proc.returncode != 0:
                sys.exit(f"the {s}-subject run failed (its log is above)")
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            runs[s].append({**result, "gemm": gemm, "fresh_s_per_gib": fresh, "fill": filled})
            print_row(s, runs[s][-1])
    results = {s: median_run(r) for s, r in runs.items()}
    (args.root / "cohort.json").write_text(json.dumps(results, indent=2))
    print_table(results)


def ingest_svd_seconds(r: dict[str, Any]) -> float:
    """A run's mask + ingest and SVD seconds: the part that grows with the subjects."""
    t = r["timings_s"]
    return float(t["mask_ingest"] + t["svd"])


def ingest_svd_per_subject(r: dict[str, Any]) -> float:
    """:func:`ingest_svd_seconds` per subject (both splits')."""
    return ingest_svd_seconds(r) / (2 * r["subjects_per_split"])


def ingest_svd_cpu_per_subject(r: dict[str, Any]) -> float:
    """The CPU seconds of mask + ingest and the SVD per subject, the client's process
    (with the LocalCluster's scheduler) and the workers' together: the work, whatever the
    schedule left idle."""
    u = r["usage"]
    cpu = sum(u[st]["client_cpu"] + u[st]["worker_cpu"] for st in ("mask_ingest", "svd"))
    return float(cpu) / (2 * r["subjects_per_split"])


def ingest_svd_sys_per_subject(r: dict[str, Any]) -> float | None:
    """The system part of :func:`ingest_svd_cpu_per_subject` (None in results saved before
    it was counted): the kernel's work for the processes, where a machine that returns
    its free memory to its host charges each page a run takes from the free pool."""
    u = r["usage"]
    if "worker_sys" not in u["svd"]:
        return None
    cpu = sum(u[st]["client_sys"] + u[st]["worker_sys"] for st in ("mask_ingest", "svd"))
    return float(cpu) / (2 * r["subjects_per_split"])


def individual_per_participant(r: dict[str, Any]) -> float:
    """The individual stage's seconds per participant (both splits')."""
    return float(r["timings_s"]["individual"]) / (2 * r["subjects_per_split"])


def individual_cpu_per_participant(r: dict[str, Any]) -> float:
    """The individual stage's CPU seconds per participant, the client's process and the
    workers' together."""
    u = r["usage"]["individual"]
    return float(u["client_cpu"] + u["worker_cpu"]) / (2 * r["subjects_per_split"])


def svd_over_bound(r: dict[str, Any]) -> float | None:
    """The SVD's seconds over its GEMM bound (its dense products at the rate measured
    just before the run, on all the workers): a drift of the machine's speed moves both."""
    if not r.get("gemm"):
        return None
    return float(r["timings_s"]["svd"] / (r["svd_flops"] / (r["gemm"] * 1e9)))


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median ingest + SVD seconds per subject (the lower middle one of
    an even number), with every run's figures: ingest + SVD seconds, CPU seconds and
    system CPU seconds per subject, the SVD against its GEMM bound, and the machine's
    readings before the run."""
    ranked = sorted(runs, key=ingest_svd_per_subject)
    return {
        **ranked[(len(ranked) - 1) // 2],
        "ingest_svd_runs": [ingest_svd_per_subject(r) for r in runs],
        "ingest_svd_cpu_runs": [ingest_svd_cpu_per_subject(r) for r in runs],
        "ingest_svd_sys_runs": [ingest_svd_sys_per_subject(r) for r in runs],
        "ingest_svd_user_runs": [_user(r) for r in runs],
        "fresh_s_per_gib_runs": [r.get("fresh_s_per_gib") for r in runs],
        "free_gib_runs": [(r.get("fill") or {}).get("free_gib") for r in runs],
        "svd_bound_runs": [svd_over_bound(r) for r in runs],
        "gemm_runs": [r.get("gemm") for r in runs],
    }


def _user(r: dict[str, Any]) -> float | None:
    """The user part of :func:`ingest_svd_cpu_per_subject`: the pipeline's own work."""
    kernel = ingest_svd_sys_per_subject(r)
    return None if kernel is None else ingest_svd_cpu_per_subject(r) - kernel


def write_inputs(inputs: Path, n_subjects: int, timepoints: int, frequency: int = 57) -> None:
    """``n_subjects`` per split of ``timepoints`` each on icospheres of ``frequency``,
    unless already there (inputs of another length or mesh are written again)."""
    marker, made = inputs / "pipeline.yaml", inputs / "synth.json"
    wanted = {"timepoints": timepoints, "frequency": frequency}
    if marker.exists():
        raw = yaml.safe_load(marker.read_text())
        # inputs written before synth.json was: 32k_fs_LR's icospheres at the default length
        old = {"timepoints": 250, "frequency": 57}
        same = (json.loads(made.read_text()) if made.exists() else old) == wanted
        if same and len(raw["splits"]["split1"]) >= n_subjects:
            return
    need = 2 * n_subjects * n_vertices(frequency) * timepoints * 4 * 2  # inputs + stores
    free = shutil.disk_usage(inputs.parent if inputs.parent.exists() else Path("/")).free
    if need > free:
        sys.exit(
            f"{n_subjects} subjects per split need about {need / 1e9:.0f} GB here (inputs and "
            f"stores); {free / 1e9:.0f} GB are free."
        )
    t0 = time.perf_counter()
    shutil.rmtree(inputs, ignore_errors=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "lsd_dask.cli",
            "synth",
            str(inputs),
            "--format",
            "zarr",
            "--subjects",
            str(n_subjects),
            "--timepoints",
            str(timepoints),
            "--frequency",
            str(frequency),
        ],  # fmt: skip
        check=True,
        stdout=sys.stderr,  # stdout carries the table only
    )
    made.write_text(json.dumps(wanted))
    print(f"inputs written in {time.perf_counter() - t0:.0f} s", file=sys.stderr)


def fill_page_cache(folders: list[Path], skip: Path, leave: int = 2**30) -> dict[str, float]:
    """Read the files under ``folders`` (those under ``skip`` left out) into the page cache
    until less than ``leave`` bytes of memory are free, or every file is read; the GB read
    and the GiB then free. Reads a piece of 16 MiB at a time, its contents thrown away."""
    read, skip = 0, skip.resolve()
    files = (f for d in folders for f in sorted(d.rglob("*")) if f.is_file())
    for f in files:
        if f.resolve().is_relative_to(skip):
            continue
        if _free_bytes() < leave:
            break
        try:
            with f.open("rb", buffering=0) as fh:
                while piece := fh.read(16 * 2**20):
                    read += len(piece)
        except OSError:
            continue  # unreadable: the next file fills as well
    return {"read_gb": read / 1e9, "free_gib": _free_bytes() / 2**30}


def _free_bytes() -> int:
    """MemFree of ``/proc/meminfo``: memory neither in use nor in the page cache."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemFree:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/meminfo has no MemFree line")


def run_child(args: argparse.Namespace, inputs: Path, n_subjects: int) -> dict[str, Any]:
    """One cohort: the first ``n_subjects`` of each split; its measurements."""
    from lsd_dask.pipeline.run import run_pipeline
    from lsd_dask.pipeline.settings.load import load_config

    raw = yaml.safe_load((inputs / "pipeline.yaml").read_text())
    splits = {k: v[:n_subjects] for k, v in raw["splits"].items()}
    keep = {i for ids in splits.values() for i in ids}
    out = inputs / f"cohort-{n_subjects}"
    shutil.rmtree(out, ignore_errors=True)
    raw.update(
        subjects=[s for s in raw["subjects"] if s["id"] in keep],
        splits=splits,
        output=out.name,
        ks=list(args.ks),
        methods=list(args.methods),
        spins=args.spins,
    )
    raw["svd"] = {**raw.get("svd", {}), "rank": args.rank}
    if args.individual:
        raw["individual"] = {"method": args.individual}
    path = inputs / f"cohort-{n_subjects}.yaml"
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(path)
    meter = StageMeter()
    tasks = _task_counter(meter)
    with meter.measured_cluster(args.workers, args.memory_limit) as cluster:
        import_s = _first_import(args.warm)
        cluster.scheduler.add_plugin(tasks)
        report = run_pipeline(cfg, log=meter.log)
    work = out / "work"
    store_files = sum(
        1 for split in splits for f in (work / f"{split}.zarr").rglob("*") if f.is_file()
    )
    n_kept = report["mask"]["n_vertices"] - report["mask"]["n_masked"]
    columns = sum(v["timepoints"] for v in report["mask"]["per_subject"].values())
    products, _ = svd_passes(cfg.svd)
    result = {
        "input_bytes": n_kept * columns * 4,  # the cortex's float32 series, as ingest reads
        # both splits' dense products: columns counts the two splits' time points together
        "svd_flops": products * 2 * n_kept * columns * (report["svd"]["split1"]["rank"] + 10),
        "subjects_per_split": n_subjects,
        "timepoints": args.timepoints,
        "workers": args.workers,
        "timings_s": report["timings_s"],
        "worker_import_s": import_s,
        "tasks": tasks.counts,
        "usage": meter.usage,
        "store_files": store_files,
        "store_files_per_subject": store_files / (2 * n_subjects),
        "stamp_bytes": sum(f.stat().st_size for f in (work / "stamps").glob("*.json")),
        "report_bytes": (out / "report.json").stat().st_size,
        "files": sum(1 for f in out.rglob("*") if f.is_file()),
    }
    shutil.rmtree(out)
    return result


def _first_import(warm: bool) -> dict[str, float] | None:
    """With ``warm``: the package's pipeline imported on every worker before the run, and
    the seconds each took (a fixed cost of every run, 1–3 s at the full vertex count, which
    would otherwise fall in ingest and be spread over the subjects); None without."""
    if not warm:
        return None
    from distributed import default_client

    def timed_import() -> float:
        t0 = time.perf_counter()
        import lsd_dask.pipeline.run  # noqa: F401  (what a run's tasks import, and more)

        return time.perf_counter() - t0

    return dict(default_client().run(timed_import))


def _task_counter(meter: StageMeter) -> Any:
    """A scheduler plugin counting the tasks finished, per stage of the meter."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    class TaskCounter(SchedulerPlugin):
        name = "lsd-dask-cohort-task-counter"

        def __init__(self) -> None:
            self.counts: dict[str, int] = {}

        def transition(self, key: Any, start: str, finish: str, *a: Any, **k: Any) -> None:
            if finish in ("memory", "erred"):
                self.counts[meter.stage] = self.counts.get(meter.stage, 0) + 1

    return TaskCounter()


#: HCP-S1200's resting state: subjects with the four runs, time points per subject, vertices
HCP = {"subjects": 1003, "timepoints": 4800, "kept": 59412}


def project(
    results: dict[int, dict[str, Any]],
    *,
    workers: tuple[int, ...] = (8, 32, 128),
    rank: int = 1000,
    products: int = 4,
    reads: int = 3,
    store_gbps: float = 10.0,
    fixed_s: float = 0.0,
    svd_gflops: float | None = None,
) -> list[dict[str, float]]:
    """HCP-S1200 (2 splits of about 500 subjects × 4,800 TRs) on N workers, from the
    largest measured cohort's rates.

    - ingest: the bytes read (the cortex's float32 time series), at the measured rate per
      worker times N, or the store's aggregate bandwidth ``store_gbps`` when lower;
    - svd: ``products · 2 n m l`` FLOPs per split at the measured rate per worker times
      N, or the ``reads`` of the stores at ``store_gbps``, whichever takes longer (the
      passes stream the data once each). The defaults are the pipeline's SVD at rank
      1,000 (``benchmarks.end_to_end.svd_passes``): 2 power iterations without the final
      pass, a sparse sketch: 4 dense products in 3 reads;
    - the rest (fits, held-out measures, scores, outputs) does not grow with the subjects:
      ``fixed_s``, the full-scale study's seconds for them, taken as is (the fits of a run
      spread over the workers, which this leaves out).

    ``svd_gflops``: the SVD's rate per worker, when measured at the projection's rank
    (the cohort runs use a low rank, at which the passes are bound by reading rather than
    by their products); default: the cohort's own.
    """
    r = results[max(results)]
    w = r["workers"]
    subj_tr = 2 * r["subjects_per_split"] * r["timepoints"]
    bytes_per_tr = r["input_bytes"] / subj_tr
    ingest_rate = r["input_bytes"] / r["timings_s"]["mask_ingest"] / w  # bytes/s per worker
    svd_rate = svd_gflops * 1e9 if svd_gflops else r["svd_flops"] / r["timings_s"]["svd"] / w
    m = HCP["subjects"] * HCP["timepoints"] / 2  # columns per split
    data = HCP["subjects"] * HCP["timepoints"] * bytes_per_tr
    flops = 2 * products * 2 * HCP["kept"] * m * (rank + 10)
    passes = reads
    rows = []
    for n in workers:
        ingest = data / min(n * ingest_rate, store_gbps * 1e9)
        svd = max(flops / (n * svd_rate), passes * data / (store_gbps * 1e9))
        rows.append(
            {
                "workers": n,
                "read_tb": data * (1 + passes) / 1e12,
                "svd_pflop": flops / 1e15,
                "ingest_h": ingest / 3600,
                "svd_h": svd / 3600,
                "total_h": (ingest + svd + fixed_s) / 3600,
                "store_binds": float(n * svd_rate * passes * data > flops * store_gbps * 1e9),
            }
        )
    return rows


def print_projection(rows: list[dict[str, float]]) -> None:
    print("| workers | read (TB) | SVD (PFLOP) | ingest (h) | svd (h) | total (h) | binds |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['workers']:.0f} | {r['read_tb']:.1f} | {r['svd_pflop']:.2f} | "
            f"{r['ingest_h']:.2f} | {r['svd_h']:.2f} | {r['total_h']:.2f} | "
            f"{'store' if r['store_binds'] else 'compute'} |"
        )


def print_row(s: int, r: dict[str, Any]) -> None:
    total = r["timings_s"]["total"]
    client = max(u["client_peak"] for u in r["usage"].values())
    print(
        f"{s} subjects/split: {total:.0f} s, {total / (2 * s):.2f} s/subject, "
        f"client peak {client / 1e9:.2f} GB, {sum(r['tasks'].values())} tasks",
        file=sys.stderr,
    )


def print_table(results: dict[int, dict[str, Any]]) -> None:
    """Per stage: seconds per subject and tasks per subject, one column per cohort."""
    sizes = sorted(results)
    print("| stage | " + " | ".join(f"{s}/split: s/subj, tasks/subj" for s in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for stage in [*STAGES[:-1], "total"]:
        cells = []
        for s in sizes:
            sec = results[s]["timings_s"].get(stage)
            n = results[s]["tasks"].get(stage, 0) if stage != "total" else None
            n = sum(results[s]["tasks"].values()) if stage == "total" else n
            cells.append("–" if sec is None else f"{sec / (2 * s):.2f}, {n / (2 * s):.1f}")
        print(f"| {stage} | " + " | ".join(cells) + " |")
    both = [ingest_svd_per_subject(results[s]) for s in sizes]
    print("| ingest + svd: s/subj | " + " | ".join(f"{b:.3f}" for b in both) + " |")
    if any(len(results[s].get("ingest_svd_runs", [])) > 1 for s in sizes):
        print(
            "| ingest + svd, every run | "
            + " | ".join(
                ", ".join(f"{v:.3f}" for v in results[s].get("ingest_svd_runs", [])) for s in sizes
            )
            + " |"
        )
    print(f"| ingest + svd: largest / smallest | {max(both) / min(both):.3f} |")
    _print_runs(results, sizes, "ingest_svd_cpu_runs", "ingest + svd: CPU s/subj", "{:.3f}")
    _print_runs(results, sizes, "ingest_svd_user_runs", "of which user", "{:.3f}")
    _print_runs(results, sizes, "ingest_svd_sys_runs", "of which system", "{:.3f}")
    _print_runs(results, sizes, "gemm_runs", "GEMM before the run (GFLOP/s)", "{:.0f}")
    _print_runs(
        results, sizes, "fresh_s_per_gib_runs", "fresh memory before the run (s/GiB)", "{:.2f}"
    )
    _print_runs(results, sizes, "free_gib_runs", "free memory after --fill (GiB)", "{:.1f}")
    _print_runs(results, sizes, "svd_bound_runs", "svd / its GEMM bound", "{:.2f}")
    if len(sizes) > 1:
        fixed, per_subject = fixed_and_marginal(results)
        steps = marginal_steps(results)
        print(
            f"| ingest + svd as fixed + per subject (least squares) | {fixed:.1f} s + "
            f"{per_subject:.3f} s/subj |"
        )
        print(
            "| ingest + svd, marginal s/subj between sizes | "
            + " | ".join(f"{a}→{b}: {v:.3f}" for a, b, v in steps)
            + " |"
        )
    if all("individual" in results[s]["timings_s"] for s in sizes):
        own = [individual_per_participant(results[s]) for s in sizes]
        print("| individual: s/participant | " + " | ".join(f"{v:.3f}" for v in own) + " |")
        cpu = [individual_cpu_per_participant(results[s]) for s in sizes]
        print("| individual: CPU s/participant | " + " | ".join(f"{v:.3f}" for v in cpu) + " |")
        print(f"| individual: largest / smallest | {max(own) / min(own):.3f} |")
        if len(sizes) > 1:
            x = np.array([2.0 * s for s in sizes])
            y = np.array([results[s]["timings_s"]["individual"] for s in sizes])
            per, fixed = np.polyfit(x, y, 1)
            print(f"| individual as fixed + per participant (least squares) | {fixed:.1f} s + "
                  f"{per:.3f} s/participant |")  # fmt: skip
    print(
        "| workers' first import (s, before the run) | "
        + " | ".join(_import_cell(results[s].get("worker_import_s")) for s in sizes)
        + " |"
    )
    for label, f in [
        ("client peak (GB)", lambda r: max(u["client_peak"] for u in r["usage"].values()) / 1e9),
        (
            "worker peak (GB)",
            lambda r: (
                max(max(u["worker_peak"].values(), default=0) for u in r["usage"].values()) / 1e9
            ),
        ),
        ("store files / subject", lambda r: r["store_files_per_subject"]),
        ("stamp bytes / subject", lambda r: r["stamp_bytes"] / (2 * r["subjects_per_split"])),
        ("report bytes / subject", lambda r: r["report_bytes"] / (2 * r["subjects_per_split"])),
    ]:
        print(f"| {label} | " + " | ".join(f"{f(results[s]):.2f}" for s in sizes) + " |")


def _print_runs(
    results: dict[int, dict[str, Any]], sizes: list[int], key: str, label: str, fmt: str
) -> None:
    """A row of each size's median over its runs, then a row of every run's figure, and
    the largest median over the smallest."""
    runs = {s: [v for v in results[s].get(key, []) if v is not None] for s in sizes}
    if not all(runs.values()):
        return
    medians = [float(np.median(runs[s])) for s in sizes]
    print(f"| {label}: median | " + " | ".join(fmt.format(m) for m in medians) + " |")
    cells = [", ".join(fmt.format(v) for v in runs[s]) for s in sizes]
    print(f"| {label}: every run | " + " | ".join(cells) + " |")
    print(f"| {label}: largest / smallest median | {max(medians) / min(medians):.3f} |")


def fixed_and_marginal(results: dict[int, dict[str, Any]]) -> tuple[float, float]:
    """The ingest + SVD seconds of the cohorts as ``fixed + per_subject · subjects`` (both
    splits' subjects), by least squares: what a run pays once, whatever its size, and
    what each subject adds. Seconds per subject are constant exactly when ``fixed`` is 0."""
    x = np.array([2.0 * s for s in results])
    y = np.array([ingest_svd_seconds(r) for r in results.values()])
    per_subject, fixed = np.polyfit(x, y, 1)
    return float(fixed), float(per_subject)


def marginal_steps(results: dict[int, dict[str, Any]]) -> list[tuple[int, int, float]]:
    """Between each cohort and the next larger one: the ingest + SVD seconds the extra
    subjects added, per extra subject (the fixed cost cancels)."""
    sizes = sorted(results)
    total = {s: ingest_svd_seconds(results[s]) for s in sizes}
    pairs = zip(sizes, sizes[1:], strict=False)
    return [(a, b, (total[b] - total[a]) / (2 * (b - a))) for a, b in pairs]


def _import_cell(seconds: dict[str, float] | None) -> str:
    """The slowest worker's first import, or "in the run" when it was not made apart."""
    return "in the run" if not seconds else f"{max(seconds.values()):.2f}"


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
