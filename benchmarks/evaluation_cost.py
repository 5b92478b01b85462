"""What the held-out measures cost at full vertex count, per parcellation and per spin.

    python benchmarks/evaluation_cost.py [--frequency 57] [--rank 1000] [--k 400]
        [--spins 1000] [--jobs N] [--run PIPELINE_YAML]

Two icospheres of ``10 f² + 2`` vertices each (f = 57: 2 × 32,492, 32k_fs_LR's count and
about its 2 mm spacing at radius 100 mm) stand in for the cortex; the features are random
unit rows of width ``--rank`` (the cost does not depend on their values); the parcellation
is K regions grown on the mesh. Prints the seconds of each step of the evaluation stage
(:mod:`lsd_dask.pipeline.stages.evaluation`, with its null samples and ``--spins``
spins), the stage's cost for a study of ``--methods`` × ``--ks`` parcellations, and the peak
resident memory of this process.

``--run`` scores a finished run's own output instead: its mesh and mask, split 2's features
(the unit rows of its U·Σ) and split 1's parcellations (every method and K of the file),
each per-parcellation step averaged over them. Random features have no structure, which
some steps' cost depends on (Gordon's homogeneity converges faster on parcels of alike rows).
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

from lsd_dask import evaluation as ev
from lsd_dask.pipeline.stages.held_out import NULL_PAIRS, NULL_VERTICES
from lsd_dask.spin import find_spheres
from lsd_dask.surface import grow_regions, mesh_adjacency, two_hemisphere_mesh


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frequency", type=int, default=57)
    parser.add_argument("--rank", type=int, default=1000)
    parser.add_argument("--k", type=int, default=400)
    parser.add_argument("--mesh", choices=("icosphere", "conte69"), default="icosphere",
                        help="conte69: the real 32k_fs_LR midthickness and medial-wall mask "
                        "(brainspace's files) instead of two icospheres")  # fmt: skip
    parser.add_argument("--spins", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=2, help="threads of the geodesic pairs")
    parser.add_argument("--parcellations", type=int, default=10,
                        help="methods × K of the study the stage's cost is given for")  # fmt: skip
    parser.add_argument("--run", type=Path, default=None,
                        help="a finished run's pipeline file: its mesh, mask, split 2's "
                        "features and split 1's parcellations")  # fmt: skip
    args = parser.parse_args()
    spheres = None
    if args.run is not None:
        meshes, kept, Z, parcellations, spheres = _finished_run(args.run)
    elif args.mesh == "conte69":
        from lsd_dask.datasets.templates import load_template

        template = load_template("conte69")
        meshes, kept = template.meshes, template.cortex
    else:
        meshes = two_hemisphere_mesh(args.frequency, radius=100.0)
        kept = None
    sizes = [meshes[h].n_vertices for h in ("left", "right")]
    A = mesh_adjacency([meshes[h].faces for h in ("left", "right")], sizes)
    V = np.concatenate([meshes[h].vertices for h in ("left", "right")])
    kept = np.ones(V.shape[0], bool) if kept is None else kept
    A, V = A[kept][:, kept].tocsr(), V[kept]
    n = V.shape[0]
    if args.run is None:
        rng = np.random.default_rng(0)
        Z = rng.standard_normal((n, args.rank), dtype=np.float32)
        Z /= np.linalg.norm(Z, axis=1, keepdims=True)
        full = np.zeros(kept.size, np.int64)
        full[kept] = grow_regions(A, args.k, random_state=0) + 1
        parcellations = [full]
        print(f"{n} vertices, rank {args.rank}, K = {args.k}")
    else:
        print(f"{n} vertices, rank {Z.shape[1]}, {len(parcellations)} parcellations of {args.run}")
    rows = []

    def timed(name, fn, times=1):
        t0 = time.perf_counter()
        out = fn()
        rows.append((name, (time.perf_counter() - t0) / times))
        return out

    def each(fn):
        """``fn(labels on the kept vertices, labels on every vertex)`` for every parcellation."""
        return lambda: [fn(full[kept], full) for full in parcellations]

    pairs = timed("geodesic pairs within 35 mm (once per run)",
                  lambda: ev.geodesic_pairs(V, A, n_jobs=args.jobs))  # fmt: skip
    r = timed("pair correlations (once per split)", lambda: ev.pair_correlations(Z, pairs))
    spheres = find_spheres(meshes)["spheres"] if spheres is None else spheres
    null = timed(
        f"spin null: samples and {args.spins} rotations (once per run)",
        lambda: ev.SpinNull(
            Z,
            pairs,
            r,
            spheres,
            kept,
            n_spins=args.spins,
            n_vertices=NULL_VERTICES,
            n_pairs=NULL_PAIRS,
            random_state=0,
        ),  # fmt: skip
    )
    timed("spin null: the other split's data (once per run)", lambda: null.with_data(Z, r))
    ev.dcbc(parcellations[0][kept], pairs, r)  # the pairs' bins, once per run
    m = len(parcellations)
    timed("homogeneity (per parcellation and direction)",
          each(lambda lab, _: ev.homogeneity(Z, lab)), m)  # fmt: skip
    timed("DCBC (per parcellation and direction)",
          each(lambda lab, _: ev.dcbc(lab, pairs, r)), m)  # fmt: skip
    timed("neighbour silhouette (per parcellation and direction)",
          each(lambda lab, _: ev.neighbour_silhouette(Z, lab, A)), m)  # fmt: skip
    timed("Gordon's homogeneity (per parcellation and direction)",
          each(lambda lab, _: ev.pca_homogeneity(Z, lab)), m)  # fmt: skip
    timed("each parcel's homogeneity and DCBC (per parcellation and direction)",
          each(lambda lab, _: (ev.parcel_homogeneity(Z, lab),
                               ev.parcel_dcbc(lab, pairs, r))), m)  # fmt: skip
    timed(f"{args.spins} spins, three measures (per parcellation and direction)",
          each(lambda _, full: null.z_scores(full, A)), m)  # fmt: skip
    print(f"{len(pairs)} pairs ({len(pairs) / n:.0f} per vertex); {null.n_pairs} in the "
          f"null's pair sample")  # fmt: skip
    print("| step | seconds |\n|---|---|")
    for name, s in rows:
        print(f"| {name} | {s:.2f} |")
    # the pair correlations once per split, everything else "once" once per run
    once = sum(s for name, s in rows if "once per" in name) + rows[1][1]
    each = sum(s for name, s in rows if "per parcellation" in name)
    total = once + 2 * args.parcellations * each
    runs = 2 * args.parcellations
    print(f"stage for {args.parcellations} parcellations, both directions: "
          f"{once:.0f} s once + {runs} × {each:.2f} s = {total:.0f} s")  # fmt: skip
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"peak RSS {peak:.2f} GB")


def _finished_run(path: Path) -> tuple[Any, np.ndarray, np.ndarray, list[np.ndarray], Any]:
    """A finished run's meshes, mask, split 2's features, split 1's parcellations (over
    every vertex) and spheres."""
    from lsd_dask.pipeline.engine.context import RunContext
    from lsd_dask.pipeline.run import preflight
    from lsd_dask.pipeline.settings.load import load_config
    from lsd_dask.pipeline.stages.svd import svd_features

    cfg = load_config(path)
    with RunContext.open(cfg, lambda line: None, preflight(cfg)[0]) as ctx:
        wd = ctx.wd
        first, second = list(ctx.splits)[:2]
        Z = svd_features(wd.load_npy(wd.u(second)), wd.load_npy(wd.s(second)))
        labels = [
            np.asarray(wd.load_npy(wd.labels(first, m.name, k)), np.int64)
            for m in cfg.methods
            for k in cfg.ks
        ]
        spheres = find_spheres(ctx.meshes, cfg.sphere)["spheres"]
        return ctx.meshes, np.asarray(ctx.kept, bool), Z, labels, spheres


if __name__ == "__main__":
    main()
