"""What the split-half scores' random-region null costs: ``grow_sized_regions`` at full
vertex count.

    python benchmarks/null_regions.py [--frequency 57] [--ks 50 400] [--repeats 5]

Two icospheres of ``10 f² + 2`` vertices each (f = 57: 2 × 32,492, 32k_fs_LR's count) stand
in for the cortex; the sizes are those of K regions grown on the mesh (a parcellation's, as
the scores stage takes them from split 2's labels). For each K, ``--repeats`` null maps are
grown from one seeded generator, as the scores stage grows them for a pair of splits; the
seconds a null map, and a digest of the maps and of the generator's state after them (equal
digests across versions of the library: the same nulls).
"""

from __future__ import annotations

import argparse
import hashlib
import time

import numpy as np

from lsd_dask.surface import grow_regions, grow_sized_regions, mesh_adjacency, two_hemisphere_mesh


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frequency", type=int, default=57)
    parser.add_argument("--ks", type=int, nargs="+", default=[50, 400])
    parser.add_argument("--repeats", type=int, default=5, help="null maps per K")
    args = parser.parse_args()
    meshes = two_hemisphere_mesh(args.frequency, radius=100.0)
    sizes_h = [meshes[h].n_vertices for h in ("left", "right")]
    A = mesh_adjacency([meshes[h].faces for h in ("left", "right")], sizes_h)
    print(f"{A.shape[0]} vertices")
    print("| K | seconds a null map | digest of the maps and the generator's state |")
    print("|---|---|---|")
    for k in args.ks:
        labels = grow_regions(A, k, random_state=0) + 1
        sizes = np.bincount(labels)[1:]
        rng = np.random.default_rng([0, k])
        t0 = time.perf_counter()
        maps = [grow_sized_regions(A, sizes, random_state=rng) for _ in range(args.repeats)]
        seconds = (time.perf_counter() - t0) / args.repeats
        digest = hashlib.sha256(np.stack(maps).tobytes())
        digest.update(repr(rng.bit_generator.state).encode())
        print(f"| {k} | {seconds:.3f} | {digest.hexdigest()[:12]} |")


if __name__ == "__main__":
    main()
