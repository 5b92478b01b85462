"""Seed-to-seed spread of directional clustering beside KMeans and spherical k-means on the
realistic surface study (both splits, clustering seeds 0, 1, 2; NMI against the truth).

    python benchmarks/realistic_seeds.py 100
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans

from lsd_dask import cluster, metrics
from lsd_dask.datasets import realistic_study

sys.path.insert(0, str(Path(__file__).parent))
from realistic import features  # noqa: E402


def main() -> None:
    k = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    study = realistic_study(scale=400, snr=0.5, random_state=0)
    truth = study.labels[study.cortex]
    feats = {s: features(study, s, 100, 0, kind="u") for s in study.splits}  # as recorded
    variants = {
        "kmeans": lambda s: KMeans(k, n_init=1, random_state=s),
        "skm": lambda s: cluster.SphericalKMeans(k, random_state=s),
        "dir": lambda s: cluster.DirectionalClustering(k, random_state=s),
        "dir_tol6": lambda s: cluster.DirectionalClustering(
            k, random_state=s, tol=1e-6, max_iter=300
        ),
        "dir_n3": lambda s: cluster.DirectionalClustering(k, random_state=s, n_init=3),
    }
    for name in sys.argv[2:] or variants:
        nmis, secs = [], []
        for seed in (0, 1, 2):
            for F in feats.values():
                t0 = time.perf_counter()
                lab = np.asarray(variants[name](seed).fit(F).labels_)
                secs.append(time.perf_counter() - t0)
                nmis.append(metrics.nmi(truth, lab))
        print(
            f"K={k} {name:10s} NMI mean {np.mean(nmis):.4f} sd {np.std(nmis):.4f} "
            f"min {np.min(nmis):.3f} s/fit {np.mean(secs):.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
