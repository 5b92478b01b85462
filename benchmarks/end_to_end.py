"""The whole pipeline at full scale, stage by stage, with 1 and with 2 workers.

Writes the study once (``lsd-dask synth --format cifti``: 2 × 33 subjects × 1,000 TRs on
2 × 32,492 vertices, 17 GB), then for each worker count runs ``lsd-dask``'s pipeline in a
fresh child process (so the client's peak memory is its own) on a LocalCluster of
single-threaded workers with a per-worker memory limit, into a fresh output folder. With
``--cold`` the page cache is dropped first (root only), so the inputs come from disk.

Per stage it reports the seconds (``report.json``), the peak resident memory of the client
and of each worker and the bytes the client and the workers read from disk (``/proc/<pid>/io``),
and the bytes they wrote (``/proc/<pid>/io``), sampled every 0.5 s and attributed to the
stage whose log line came last, beside the stage's bound:
- mask and ingest: it reads the inputs and writes the split stores, as much again, through
  the same disk: the larger of the input bytes at the disk's cold read rate and the bytes
  written at its write rate, both measured at the start of the run on the study's file
  system (:func:`disk_rates`: a 2 GB file written and synced, dropped from the page cache
  and read back; ``--disk-gbps`` sets both rates instead). A lower bound: it assumes the
  reads and the writes overlap in full;
- svd: the GEMM work ``p × 2 n m l`` per split, p the dense products (``svd_passes``:
  ``2 q`` without the final pass, the pipeline's default; the sketch with its sparse
  sign test matrix is not a GEMM and is not counted) at the float32 rate that as many
  single-threaded processes as workers sustain side by side for 10 s
  (:func:`sustained_gflops`, the faster of a reading before the run and one after it);
  the burst rate (the fastest of 7 products on as many threads, :func:`gemm_gflops`)
  and the bounds at it are reported beside it, since on some machines the first
  seconds of products run well above what minutes of them sustain; then the same
  ``randomized_svd`` call timed on its own on split 1's store, as ``benchmarks/svd.py``
  does, in the same cluster (the stage should be within 1.15× of it);
- cluster: ``2 n d K`` per iteration (the assignment GEMM) times the iterations each fit
  reports.

The held-out measures (``evaluate``: homogeneity, DCBC and silhouette on the other split's
data, with ``spins`` rotations each, 1,000 by default) are a stage of their own; the summary
line gives their share of the total.

Run: ``python benchmarks/end_to_end.py --study /work/full/study --workers 1 2 --cold``.
Prints a Markdown table per worker count and writes ``end_to_end.json`` beside the study.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import yaml

# the checkout this file is in, whatever lsd_dask the interpreter has installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STAGES = (
    "preflight",
    "mask_ingest",
    "svd",
    "blur",
    "cluster",
    "evaluate",
    "scores",
    "individual",
    "outputs",
    "svd_alone",
)
_PREFIX = {"[mask]": "mask_ingest", "[ingest]": "mask_ingest", "[svd]": "svd"}
_PREFIX |= {"[blur]": "blur", "[cluster]": "cluster", "[evaluate]": "evaluate"}
_PREFIX |= {"[scores]": "scores", "[individual]": "individual", "[outputs]": "outputs"}
_PREFIX |= {"[done]": "outputs"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", type=Path, required=True)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--methods", nargs="+", default=["directional", "spherical_kmeans"],
                    help="method names; `default`: the pipeline's default method (its "
                    "spatial options included). With `default` and others, each fit's "
                    "seconds are compared per K with the first other's")  # fmt: skip
    ap.add_argument("--ks", type=int, nargs="+", default=[50, 100, 200, 300, 400])
    ap.add_argument("--memory-limit", default="4GB", help="per worker")
    ap.add_argument("--cold", action="store_true", help="drop the page cache first (root)")
    ap.add_argument(
        "--disk-gbps",
        type=float,
        default=None,
        help="the disk's read and write rate (default: measured at the start)",
    )
    ap.add_argument("--no-svd-reference", action="store_true")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(run_child(args, args.child)))
        return
    if not (args.study / "pipeline.yaml").exists():
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "lsd_dask.cli", "synth", "--format", "cifti", str(args.study)],
            check=True,
        )
        print(f"study written in {time.perf_counter() - t0:.0f} s")
    results = {}
    for w in args.workers:
        cmd = [sys.executable, __file__, "--child", str(w), *sys.argv[1:]]
        # the pipeline's lines go to stderr as they come; the measurements to stdout
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            sys.exit(f"the {w}-worker run failed (its log is above)")
        results[w] = json.loads(proc.stdout.strip().splitlines()[-1])
        print_table(w, results[w])
    if len(results) > 1:
        base = results[min(results)]["total_s"]
        for w, r in sorted(results.items()):
            print(f"{w} worker(s): {r['total_s']:.0f} s, speed-up {base / r['total_s']:.2f}x")
    (args.study / "end_to_end.json").write_text(json.dumps(results, indent=2))


def run_child(args: argparse.Namespace, n_workers: int) -> dict:
    """One pipeline run on ``n_workers`` single-threaded workers; the measurements."""
    from lsd_dask.pipeline.run import run_pipeline
    from lsd_dask.pipeline.settings.load import load_config

    burst = gemm_gflops(n_workers)
    sustained = [sustained_gflops(n_workers)]
    disk = (
        {"read_gbps": args.disk_gbps, "write_gbps": args.disk_gbps}
        if args.disk_gbps
        else disk_rates(args.study)
    )
    if args.cold:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    raw = yaml.safe_load((args.study / "pipeline.yaml").read_text())
    out = args.study / f"e2e-{n_workers}w"
    subprocess.run(["rm", "-rf", str(out)], check=True)
    raw.update(output=out.name, ks=list(args.ks), methods=_methods(args.methods))
    if args.methods == ["default"]:
        del raw["methods"]  # a file without methods runs the pipeline's default
    path = args.study / f"e2e-{n_workers}w.yaml"
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(path)
    fits: list[dict[str, Any]] = []
    meter = StageMeter()

    def log(line: str) -> None:
        meter.log(line)
        m = re.search(
            r"^\[cluster\] \[[#.]*\] .*? (split\d+) (\w+) K=(\d+): ([\d.]+) s, (\d+) iterations",
            line,
        )
        if m:
            fine = re.search(r"from a fine fit at (\d+) clusters \((\d+) iterations\)", line)
            fits.append({
                "split": m[1], "method": m[2], "k": int(m[3]), "seconds": float(m[4]),
                "iterations": int(m[5]),
                "fine": None if fine is None else [int(fine[1]), int(fine[2])],
            })  # fmt: skip

    with meter.measured_cluster(n_workers, args.memory_limit):
        report = run_pipeline(cfg, log=log)
        svd_reference = None
        if not args.no_svd_reference:
            meter.stage = "svd_alone"
            svd_reference = time_svd(cfg, out, args.cold)
    sustained.append(sustained_gflops(n_workers))  # the machine may have changed meanwhile
    gflops = max(sustained)  # the faster reading: the lower bound
    usage, lines = meter.usage, meter.lines
    timings = report["timings_s"]
    rank = report["svd"]["split1"]["rank"]
    input_bytes = sum(Path(p).stat().st_size for s in cfg.subjects for p in s.paths)
    n_kept = report["mask"]["n_vertices"] - report["mask"]["n_masked"]
    m = sum(v["timepoints"] for v in report["mask"]["per_subject"].values()) // 2
    l_cols = rank + 10
    products, _ = svd_passes(cfg.svd)
    svd_flops = 2 * products * 2 * n_kept * m * l_cols
    fit_flops = sum(
        2 * n_kept * rank * (f["k"] * f["iterations"] + (f["fine"][0] * f["fine"][1] if f["fine"]
                                                          else 0))
        for f in fits
    )  # fmt: skip
    written = usage["mask_ingest"]["written"]
    bounds = {
        "mask_ingest": max(
            input_bytes / (disk["read_gbps"] * 1e9), written / (disk["write_gbps"] * 1e9)
        ),
        "svd": svd_flops / (gflops * 1e9),
        "cluster": fit_flops / (gflops * 1e9),
    }
    burst_bounds = {"svd": svd_flops / (burst * 1e9), "cluster": fit_flops / (burst * 1e9)}
    return {
        "workers": n_workers,
        "memory_limit": args.memory_limit,
        "cold": args.cold,
        "gemm_gflops": gflops,
        "gemm_sustained_gflops": sustained,
        "gemm_burst_gflops": burst,
        "disk_gbps": disk,
        "input_gb": input_bytes / 1e9,
        "timings_s": timings,
        "total_s": timings["total"],
        "bounds_s": bounds,
        "burst_bounds_s": burst_bounds,
        "svd_split_s": {s: v.get("seconds") for s, v in report["svd"].items()},
        "svd_reference_s": svd_reference,
        "usage": usage,
        "fits": fits,
        "log": lines,
    }


class StageMeter:
    """Peak resident memory of the client and of each worker, the bytes they read from
    and wrote to disk, and the CPU seconds they used (and of those, the system's), sampled
    every ``interval`` seconds and attributed to the stage whose log line came last
    (:meth:`log` receives the pipeline's lines). The client's CPU includes the
    LocalCluster's scheduler, which runs in the same process."""

    def __init__(self, interval: float = 0.5) -> None:
        self.stage = "preflight"
        self.interval = interval
        self.usage = {
            s: {
                "client_peak": 0,
                "worker_peak": {},
                "read": 0,
                "written": 0,
                "client_cpu": 0.0,
                "worker_cpu": 0.0,
                "client_sys": 0.0,
                "worker_sys": 0.0,
            }  # fmt: skip
            for s in STAGES
        }
        self.lines: list[str] = []

    def log(self, line: str) -> None:
        self.lines.append(f"{time.perf_counter():.1f} {line}")
        print(line, file=sys.stderr, flush=True)
        for prefix, stage in _PREFIX.items():
            if line.startswith(prefix):
                self.stage = stage

    @contextmanager
    def measured_cluster(self, n_workers: int, memory_limit: str) -> Iterator[Any]:
        """A LocalCluster of ``n_workers`` single-threaded workers on 127.0.0.1 with its
        client, started as a run starts one (``lsd_dask.distributed.connect``: its worker
        settings included), sampled while the block runs; yields the cluster."""
        from lsd_dask.distributed import connect

        local = {
            "n_workers": n_workers, "threads_per_worker": 1, "memory_limit": memory_limit,
            "host": "127.0.0.1", "dashboard_address": ":0",
        }  # fmt: skip
        with connect({"type": "local", "local": local}, log=None) as client, self.sampling(client):
            yield client.cluster

    @contextmanager
    def sampling(self, client: Any) -> Iterator[None]:
        """Sample the client (this process) and ``client``'s workers while the block runs."""
        import psutil

        pids = client.run(os.getpid)
        procs = {"client": psutil.Process()} | {a: psutil.Process(p) for a, p in pids.items()}
        last = {name: _io_bytes(p) for name, p in procs.items()}
        cpu = {name: _cpu_seconds(p) for name, p in procs.items()}
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                u = self.usage[self.stage]
                for name, p in procs.items():
                    try:
                        rss = p.memory_info().rss
                        io = _io_bytes(p)
                        used = _cpu_seconds(p)
                    except psutil.Error:
                        continue
                    u["read"] += io[0] - last[name][0]
                    u["written"] += io[1] - last[name][1]
                    last[name] = io
                    who = "client" if name == "client" else "worker"
                    u[f"{who}_cpu"] += used[0] - cpu[name][0]
                    u[f"{who}_sys"] += used[1] - cpu[name][1]
                    cpu[name] = used
                    if name == "client":
                        u["client_peak"] = max(u["client_peak"], rss)
                    else:
                        u["worker_peak"][name] = max(u["worker_peak"].get(name, 0), rss)
                time.sleep(self.interval)

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


def svd_passes(svd: Any) -> tuple[int, int]:
    """(dense products with X, reads of X) of one split's randomized SVD at the pipeline's
    ``svd`` settings: two products per power iteration in one read each, the sketch's read
    (its product a GEMM only with a Gaussian test matrix: the sparse sign one's costs a
    quarter of one and is left out), and the final pass's read and product when on."""
    final = 1 if svd.final_pass else 0
    products = 2 * svd.n_power_iter + final + (1 if svd.test_matrix == "gaussian" else 0)
    return products, 1 + svd.n_power_iter + final


def time_svd(cfg, out: Path, cold: bool) -> float:
    """The pipeline's SVD call on split 1's store, on its own (as benchmarks/svd.py)."""
    from lsd_dask.io import open_split
    from lsd_dask.pipeline.stages.svd import group_svd

    if cold:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    st = open_split(out / "work" / "split1.zarr")
    t0 = time.perf_counter()
    U, _ = group_svd(st.column_blocks, cfg.svd, cfg.random_state)
    U.compute()
    return time.perf_counter() - t0


def gemm_gflops(threads: int, repeats: int = 7) -> float:
    """float32 GEMM rate with ``threads`` BLAS threads (4000² @ 4000 × 1000): the fastest of
    ``repeats`` products, so that a moment's interference (the page cache just dropped, a
    daemon waking) lowers neither the rate nor, through it, the bounds."""
    from threadpoolctl import threadpool_limits

    a = np.random.default_rng(0).standard_normal((4000, 4000), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((4000, 1000), dtype=np.float32)
    best = float("inf")
    with threadpool_limits(threads):
        a @ b
        for _ in range(repeats):
            t0 = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - t0)
    return 2 * 4000 * 4000 * 1000 / best / 1e9


def sustained_gflops(
    processes: int, seconds: float = 10.0, n: int = 16384, t: int = 1000, l: int = 1010
) -> float:
    """float32 GEMM rate that ``processes`` single-threaded processes sustain side by side,
    as the SVD's and the fits' workers run: each repeats a power pass's two products on
    an ``n``-row block of a subject (``xᵀ q`` then ``x w``: ``n × t`` against ``n × l``
    and ``t × l``) for ``seconds``, and the rate is the products' FLOPs over the wall time
    from the processes' common start. Where a machine's first products run faster than
    it can keep up (turbo, a neighbour's idle cores), this is the rate a stage of minutes
    sees; :func:`gemm_gflops` is the burst."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    with ctx.Pool(processes) as pool:
        start = time.time() + 3.0  # after every process has imported numpy and its data
        counts = pool.starmap(_sustained_products, [(start, seconds, n, t, l)] * processes)
    return sum(counts) * 2 * 2 * n * t * l / seconds / 1e9


def _sustained_products(start: float, seconds: float, n: int, t: int, l: int) -> int:
    """How many (``xᵀ q``, ``x w``) pairs this process completes from ``start`` for
    ``seconds`` (a pair still running at the end counts by the share it completed:
    pairs take about 0.3 s, so rounding would move a 10 s reading by 3 %)."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(os.getpid())
    x = rng.standard_normal((n, t), dtype=np.float32)
    q = rng.standard_normal((n, l), dtype=np.float32)
    out = np.empty((n, l), np.float32)
    done = 0.0
    with threadpool_limits(1):
        w = x.T @ q  # the first product's page faults and BLAS set-up, before the clock
        np.matmul(x, w, out=out)
        time.sleep(max(0.0, start - time.time()))
        end = start + seconds
        while (now := time.time()) < end:
            w = x.T @ q
            np.matmul(x, w, out=out)
            took = time.time() - now
            done += 1.0 if now + took <= end else (end - now) / took
    return done  # type: ignore[return-value]


def print_table(w: int, r: dict) -> None:
    d = r["disk_gbps"]
    print(
        f"\n### {w} worker(s), {r['memory_limit']} each; GEMM {r['gemm_gflops']:.0f} GFLOP/s "
        f"sustained by {w} process(es) (before and after the run: "
        f"{', '.join(f'{g:.0f}' for g in r['gemm_sustained_gflops'])}; the burst, fastest of "
        f"7 on {w} thread(s): {r['gemm_burst_gflops']:.0f}); disk read {d['read_gbps']:.2f} "
        f"GB/s, write {d['write_gbps']:.2f} GB/s"
    )
    print(
        "| stage | seconds | bound (s) | client peak (GB) | worker peaks (GB) | read (GB) "
        "| written (GB) | CPU s: client, workers |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for stage in STAGES:
        u = r["usage"].get(stage)
        sec = r["timings_s"].get(stage)
        if u is None or (sec is None and stage == "individual"):
            continue  # a run without the stage, or saved before it was measured
        bound = r["bounds_s"].get(stage)
        peaks = ", ".join(f"{v / 1e9:.2f}" for v in u["worker_peak"].values()) or "–"
        print(
            f"| {stage} | {'–' if sec is None else f'{sec:.0f}'} | "
            f"{'–' if bound is None else f'{bound:.0f}'} | {u['client_peak'] / 1e9:.2f} | "
            f"{peaks} | {u['read'] / 1e9:.1f} | {u['written'] / 1e9:.1f} | "
            f"{_cpu_cell(u)} |"
        )
    print(f"| total | {r['total_s']:.0f} | | | | | | |")
    ratios = [
        f"{stage} {r['timings_s'][stage] / bound:.2f}x"
        + (f" ({r['timings_s'][stage] / r['burst_bounds_s'][stage]:.2f}x the burst's)"
           if stage in r.get("burst_bounds_s", {}) else "")
        for stage, bound in r["bounds_s"].items()
        if r["timings_s"].get(stage) and bound
    ]  # fmt: skip
    print("against the bounds: " + ", ".join(ratios))
    ev = r["timings_s"].get("evaluate")
    if ev is not None:
        rest = r["total_s"] - ev
        print(f"evaluate: {ev:.0f} s, {100 * ev / rest:.1f} % on top of the other {rest:.0f} s")
    _print_fit_ratios(r["fits"])
    split = r["svd_split_s"]
    if r["svd_reference_s"]:
        print(
            f"SVD per split {', '.join(f'{v:.0f}' for v in split.values() if v)} s; the same "
            f"call alone on split1: {r['svd_reference_s']:.0f} s "
            f"(ratio {split['split1'] / r['svd_reference_s']:.2f})"
        )


def _methods(names: list[str]) -> list[Any]:
    """The pipeline file's methods: ``default`` as the pipeline's default variant."""
    from lsd_dask.pipeline.settings.methods import DEFAULT_METHOD

    return [dict(DEFAULT_METHOD) if n == "default" else n for n in names]


def _print_fit_ratios(fits: list[dict[str, Any]]) -> None:
    """Each method's fits per K (seconds summed over the splits, as the log gives them),
    beside the first method's: the per-fit ratio the default method is held to."""
    methods = list(dict.fromkeys(f["method"] for f in fits))
    if len(methods) < 2:
        return
    ks = sorted({f["k"] for f in fits})
    secs = {(m, k): sum(f["seconds"] for f in fits if (f["method"], f["k"]) == (m, k))
            for m in methods for k in ks}  # fmt: skip
    base = "directional" if "directional" in methods else methods[0]
    others = [m for m in methods if m != base]
    print(f"\n| K | {base} (s) | " + " | ".join(f"{m} (s) | ratio" for m in others) + " |")
    print("|---|---|" + "---|---|" * len(others))
    for k in [*ks, None]:
        row = [sum(secs[(m, x)] for x in ks) if k is None else secs[(m, k)] for m in methods]
        b = row[methods.index(base)]
        cells = " | ".join(f"{row[methods.index(m)]:.1f} | {row[methods.index(m)] / b:.2f}x"
                           for m in others)  # fmt: skip
        print(f"| {'all' if k is None else k} | {b:.1f} | {cells} |")


def _io_bytes(p) -> tuple[int, int]:
    """Bytes the process made the storage layer fetch (page-cache hits excluded) and send
    (its writes, counted when they dirty the page cache)."""
    try:
        with open(f"/proc/{p.pid}/io") as f:
            fields = dict(line.split(": ") for line in f.read().splitlines())
        return int(fields["read_bytes"]), int(fields["write_bytes"])
    except (OSError, KeyError, ValueError):
        return 0, 0


def _cpu_seconds(p) -> tuple[float, float]:
    """User + system CPU seconds of process ``p`` (its threads, not its children), and the
    system part alone: what the kernel did for it (the page cache's copies, page faults)."""
    t = p.cpu_times()
    return float(t.user + t.system), float(t.system)


def _cpu_cell(u: dict) -> str:
    """A stage's client and workers' CPU seconds (absent in results saved before they
    were counted)."""
    if "client_cpu" not in u:
        return "–"
    return f"{u['client_cpu']:.1f}, {u['worker_cpu']:.1f}"


def fresh_memory_seconds(gib: float = 1.0) -> float:
    """Seconds per GiB that a new process takes to touch memory for the first time (a
    float32 array of ``gib`` GiB filled with ones, in a child process).

    A machine's figure, not the pipeline's: on an idle machine about 0.2–0.4 s. On a
    virtual machine whose guest returns its free memory to the host (free page
    reporting), memory freed a moment earlier (a page cache dropped, a run's files
    deleted) must be given back by the host page by page on its next use: 2.5–3 s per GiB
    on the AVX-512 development machine, all of it system time. Every page a run takes
    from free memory (its inputs' and stores' page cache, its workers' arrays) pays that.
    """
    code = (
        "import time, numpy as np; t = time.perf_counter(); "
        f"np.ones(int({gib} * 2**28), np.float32); print(time.perf_counter() - t)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip()) / gib


def disk_rates(folder: Path, nbytes: int = 2 * 2**30) -> dict[str, float]:
    """The disk's write and cold read rates (GB/s) under ``folder``: a file of ``nbytes``
    written in 64 MiB pieces and synced, dropped from the page cache
    (``posix_fadvise(DONTNEED)``, no root needed) and read back, then removed."""
    path = folder / ".disk_rates.tmp"
    piece = np.random.default_rng(0).integers(0, 255, 64 * 2**20, dtype=np.uint8).tobytes()
    try:
        t0 = time.perf_counter()
        with open(path, "wb") as f:
            for _ in range(nbytes // len(piece)):
                f.write(piece)
            f.flush()
            os.fsync(f.fileno())
        write = nbytes / (time.perf_counter() - t0) / 1e9
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            t0 = time.perf_counter()
            while os.read(fd, len(piece)):
                pass
            read = nbytes / (time.perf_counter() - t0) / 1e9
        finally:
            os.close(fd)
    finally:
        path.unlink(missing_ok=True)
    return {"read_gbps": read, "write_gbps": write}


if __name__ == "__main__":
    main()
