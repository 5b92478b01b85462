"""One participant's own parcels at full size: the fit's seconds and memory, and the whole
unit of the individual stage (three fits, their held-out scores with spin nulls).

    python -m benchmarks.individual_cost --work <study>/e2e-2w/work --k 400

Reads one participant of split 1 from a finished run's work folder (its store, its mask,
the other split's ``--prior`` labels at ``--k``), in a fresh process per estimator so that
each peak is its own, on one thread:

- ``fit``: the estimator on all the participant's time points (the map the outputs
  write), seconds and the process' peak resident memory;
- ``unit``: :func:`lsd_dask.pipeline.stages.individual.fit_participant` as the stage runs
  it (the three fits, the vertex pairs' correlations and spin nulls of both halves, the
  held-out scores of the participant's and the prior's parcels), the vertex pairs found
  before (as the stage finds them once per run).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--k", type=int, default=400)
    ap.add_argument("--prior", default="directional", help="the run's method used as prior")
    ap.add_argument("--methods", nargs="+", default=["iterative", "prior_potts"])
    ap.add_argument("--spins", type=int, default=1000)
    ap.add_argument("--part", choices=("fit", "unit"), default=None, help=argparse.SUPPRESS)
    ap.add_argument("--method", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.part is not None:
        print(json.dumps(_measure(args)))
        return
    for method in args.methods:
        for part in ("fit", "unit"):
            out = subprocess.run(
                [sys.executable, "-m", "benchmarks.individual_cost", "--work", str(args.work),
                 "--k", str(args.k), "--prior", args.prior, "--spins", str(args.spins),
                 "--part", part, "--method", method],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{method} {part}: {r['seconds']:.2f} s, peak {r['peak_gb']:.2f} GB "
                  f"({r['before_gb']:.2f} GB before), {r['what']}", flush=True)  # fmt: skip


def _measure(args: argparse.Namespace) -> dict[str, object]:
    from lsd_dask.evaluation import geodesic_pairs
    from lsd_dask.io.surface_files import load_mesh
    from lsd_dask.io.zarr_store import ColumnBlocks, open_split
    from lsd_dask.pipeline.settings.individual import IndividualSettings
    from lsd_dask.pipeline.stages.held_out import MAX_DIST_MM, NullSettings
    from lsd_dask.pipeline.stages.individual import ParticipantJob, Prior, fit_participant
    from lsd_dask.spin import find_spheres
    from lsd_dask.surface import mesh_adjacency

    work = args.work
    kept = np.load(work / "mask.npy")
    st = open_split(str(work / "split1.zarr"))
    blocks = ColumnBlocks(st.arrays[:1], st.rows, path=st.path)
    prior = np.load(work / "labels" / f"split2_{args.prior}_K{args.k}.npy").astype(np.int32)
    settings = IndividualSettings(args.method, args.prior, [args.k])
    study = work.parent.parent
    meshes = {h: load_mesh(study / f"{h[0]}h.surf.gii", h) for h in ("left", "right")}
    sizes = [m.n_vertices for m in meshes.values()]
    A = mesh_adjacency([m.faces for m in meshes.values()], sizes)[kept][:, kept].tocsr()
    V = np.concatenate([m.vertices for m in meshes.values()])[kept]
    if args.part == "fit":
        X = blocks.read_columns(0, blocks.shape[1], np.empty(blocks.shape, blocks.dtype))
        before = _peak_gb()
        group = np.where(prior[kept] > 0, prior[kept], -1)
        t0 = time.perf_counter()
        with threadpool_limits(1):
            est = settings.estimator(group, A).fit(X)
        return {"seconds": time.perf_counter() - t0, "peak_gb": _peak_gb(),
                "before_gb": before, "what": f"{X.shape[0]} x {X.shape[1]}, K = {args.k}, "
                f"{est.n_iter_} iteration(s)"}  # fmt: skip
    pairs = geodesic_pairs(V, A, MAX_DIST_MM)
    nulls = NullSettings(find_spheres(meshes)["spheres"], args.spins, 0)
    before = _peak_gb()
    with tempfile.TemporaryDirectory() as tmp:
        job = ParticipantJob(
            "001",
            "split1",
            [st.subjects[0]],
            blocks,
            [Prior(f"{args.prior} K={args.k}", args.k, prior, "")],
            [f"{tmp}/001.json", f"{tmp}/001_labels.npy", f"{tmp}/001_confidence.npy"],
        )
        t0 = time.perf_counter()
        with threadpool_limits(1):
            out = fit_participant(job, settings, A, kept, pairs, nulls, tmp, None)
    seconds = out["priors"][0]["seconds"]
    return {"seconds": time.perf_counter() - t0, "peak_gb": _peak_gb(), "before_gb": before,
            "what": f"{len(pairs)} vertex pairs, {args.spins} spins; fits " + ", ".join(
                f"{k} {v:.2f} s" for k, v in seconds.items())}  # fmt: skip


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


if __name__ == "__main__":
    main()
