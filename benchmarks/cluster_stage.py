"""The cluster stage (or the SVD stage) alone, at a finished run's scale, as the run made it.

A finished run's work folder (its U, singular values, mask and records; the split stores
linked, not copied) is copied to a scratch folder, and the pipeline's cluster stage
(:class:`lsd_dask.pipeline.stages.cluster.ClusterStage`) fits every (split, method, K) of its
pipeline file again there, on a LocalCluster of one-thread worker processes started as a
run starts them. Printed, for each round: the stage's seconds, the workers' CPU seconds
(user and system) and this process's (the client's, with the LocalCluster's
scheduler), and each fit's seconds as the stage logs them; then how many labels are bit
for bit the run's (or those of ``--compare``, a folder that ``--keep`` filled in a
round with another version). ``--stage svd`` makes each split's SVD again instead, from
the run's stores, and compares its U and singular values.

The run's own labels are never touched. Compare two versions of the library by running
this file with ``PYTHONPATH`` set to each in turn (the workers inherit it).

Run: ``python benchmarks/cluster_stage.py --pipeline /work/full/study/e2e-2w.yaml
--scratch /work/cluster-stage --workers 2 --rounds 2``.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import shutil
import time
from pathlib import Path

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")  # the workers' BLAS on one thread, as the pipeline runs it

import numpy as np  # noqa: E402
import psutil  # noqa: E402


def main() -> None:
    from lsd_dask.distributed import connect, one_blas_thread_beside_workers
    from lsd_dask.pipeline import load_config
    from lsd_dask.pipeline.engine.context import RunContext
    from lsd_dask.pipeline.preflight import preflight
    from lsd_dask.pipeline.stages.cluster import ClusterStage
    from lsd_dask.pipeline.stages.svd import SvdStage

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pipeline", type=Path, required=True, help="the finished run's file")
    ap.add_argument("--scratch", type=Path, required=True, help="a folder to make (replaced)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-limit", default="4GB", help="per worker")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument(
        "--stage", choices=["cluster", "svd"], default="cluster",
        help="svd: the SVD stage instead (each split's U and singular values again)",
    )  # fmt: skip
    ap.add_argument(
        "--compare",
        type=Path,
        help="a work folder whose outputs to compare with (default: the run's own), e.g. "
        "one --keep made with another version of the library",
    )
    ap.add_argument("--keep", type=Path, help="copy this round's outputs there (replaced)")
    args = ap.parse_args()
    run = load_config(args.pipeline)
    source = run.output / "work"
    if not (source / "stamps").is_dir():
        raise SystemExit(f"{source}: no finished run's work folder here (no stamps/)")
    cfg = load_config(args.pipeline, output=str(args.scratch))
    _copy_work(source, args.scratch / "work")
    meshes = preflight(cfg)[0]
    lib = Path(__import__("lsd_dask").__file__).parent
    print(f"library: {lib}; {args.workers} one-thread workers, {args.memory_limit} each")
    local = {
        "n_workers": args.workers, "threads_per_worker": 1, "memory_limit": args.memory_limit,
        "host": "127.0.0.1", "dashboard_address": ":0",
    }  # fmt: skip
    # started as a run starts its cluster (its workers' settings included)
    with (
        connect({"type": "local", "local": local}, log=None) as client,
        one_blas_thread_beside_workers(client),
    ):
        client.wait_for_workers(args.workers)
        workers = [psutil.Process(p) for p in client.run(os.getpid).values()]
        for r in range(1, args.rounds + 1):
            shutil.rmtree(args.scratch / "work" / "labels", ignore_errors=True)
            lines: list[str] = []
            start = [time.perf_counter()]  # the stage's start, once it starts
            log = functools.partial(_timed, lines, start)
            ctx = RunContext.open(cfg, log, meshes)
            try:
                stage = ClusterStage() if args.stage == "cluster" else SvdStage()
                with ctx.reading(stage.reads):
                    units = stage.plan(ctx)
                cpu0 = np.sum([_cpu(p) for p in workers], axis=0)
                own0 = _cpu(psutil.Process())
                t0 = start[0] = time.perf_counter()
                for u, _ in stage.compute(ctx, units):
                    ctx.wd.record(u.name, u.key, u.outputs)
                    if args.stage == "svd":
                        log(f"[svd] {u.name} saved")
                seconds = time.perf_counter() - t0
                cpu = np.sum([_cpu(p) for p in workers], axis=0) - cpu0
                own = np.subtract(_cpu(psutil.Process()), own0)
            finally:
                ctx.close()
            fits = [m.groups() for ln in lines if (m := _FIT.search(ln))]
            print(
                f"round {r}: {len(units)} units in {seconds:.1f} s; workers' CPU {cpu.sum():.1f} s "
                f"(user {cpu[0]:.1f}, system {cpu[1]:.1f}); this process's (the client and "
                f"the scheduler) {own.sum():.1f} s (user {own[0]:.1f}, system {own[1]:.1f})"
            )
            for ln in lines:
                if "fits as" in ln or "[svd]" in ln:
                    print(f"  {ln}")
            print("  " + "; ".join(f"{s} {m} K={k} {t} s" for s, m, k, t in sorted(fits)))
        made = (
            sorted((args.scratch / "work" / "labels").glob("*.npy"))
            if args.stage == "cluster"
            else sorted((args.scratch / "work").glob("split*_[Us].npy"))
        )
        work = args.scratch / "work"
        reference = args.compare or source
        pairs = [(p, reference / p.relative_to(work)) for p in made]
        same = [np.array_equal(np.load(p), np.load(q)) for p, q in pairs if q.is_file()]
        print(
            f"outputs bit for bit those in {reference}: {sum(same)} of {len(same)} "
            f"({len(made) - len(same)} not there to compare)"
        )
        if args.keep:
            shutil.rmtree(args.keep, ignore_errors=True)
            for p in made:
                dest = args.keep / p.relative_to(work)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(p, dest)
        if args.stage == "svd":
            for split in sorted({p.name.split("_")[0] for p in made}):
                _compare_svd(split, work, source)


def _compare_svd(split: str, made: Path, run: Path) -> None:
    """How far a split's SVD made again is from the run's: the singular values' largest
    relative difference, and the smallest cosine of the principal angles between the
    two U's column spans (1 where they span the same subspace)."""
    s, s0 = (np.load(d / f"{split}_s.npy").astype(np.float64) for d in (made, run))
    U, U0 = (np.load(d / f"{split}_U.npy") for d in (made, run))
    cosines = np.linalg.svd(U.T.astype(np.float64) @ U0, compute_uv=False)
    print(
        f"  {split}: singular values within {np.max(np.abs(s - s0) / s0):.1e} (relative), "
        f"U's span: smallest principal cosine {cosines.min():.7f}"
    )


def _timed(lines: list[str], start: list[float], line: str) -> None:
    """A log line kept with its second of the stage."""
    lines.append(f"{time.perf_counter() - start[0]:7.1f} s {line}")


#: a fit's log line: split, method, K, seconds
_FIT = re.compile(r"\[cluster\] \[[#.]*\] \d+/\d+ (\S+) (\S+) K=(\d+): ([\d.]+) s")


def _copy_work(source: Path, dest: Path) -> None:
    """The work folder without its labels: files copied, the split stores linked."""
    shutil.rmtree(dest.parent, ignore_errors=True)
    dest.mkdir(parents=True)
    for p in source.iterdir():
        if p.name == "labels":
            continue
        if p.suffix == ".zarr":
            (dest / p.name).symlink_to(p.resolve())
        elif p.is_dir():
            shutil.copytree(p, dest / p.name)
        else:
            shutil.copy2(p, dest / p.name)


def _cpu(p: psutil.Process) -> tuple[float, float]:
    t = p.cpu_times()
    return float(t.user), float(t.system)


if __name__ == "__main__":
    main()
