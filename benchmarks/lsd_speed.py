"""Flat LSD, hierarchical LSD and spherical k-means timed side by side at K = 200 on
rank-1,000 features of the realistic surface study (58,558 cortical vertices).

The study has 3 subjects × 400 TRs in split 1 (1,200 columns), so rank-1,000 features
exist; LSD needs rank >= K. Each estimator is fitted once per seed in the same process, one
after the other, on the same features; NMI is against the Vos de Wael 400 atlas.

    python benchmarks/lsd_speed.py --k 200 --rank 1000 --seeds 0
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from lsd_dask import cluster, metrics
from lsd_dask.datasets import realistic_study

sys.path.insert(0, str(Path(__file__).parent))
from realistic import features  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=200)
    ap.add_argument("--rank", type=int, default=1000)
    ap.add_argument("--timepoints", type=int, default=400)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--max-iter", type=int, default=None, help="LSD's max_iter (default: its own).")
    args = ap.parse_args()
    warnings.simplefilter("ignore", ConvergenceWarning)
    study = realistic_study(n_timepoints=args.timepoints, random_state=0)
    truth = study.labels[study.cortex]
    t0 = time.perf_counter()
    # unit rows of U: LSD's pipeline default
    F = features(study, "split1", args.rank, 0, kind="u")
    print(f"features {F.shape[0]} x {F.shape[1]} in {time.perf_counter() - t0:.1f} s")
    k = args.k
    lsd_kw = {} if args.max_iter is None else {"max_iter": args.max_iter}
    estimators = {
        "spherical_kmeans": lambda s: cluster.SphericalKMeans(k, random_state=s),
        "lsd": lambda s: cluster.LSD(k, random_state=s, **lsd_kw),
        "hierarchical_lsd": lambda s: cluster.HierarchicalLSD(k, random_state=s),
    }
    print("| method | seed | NMI | s per fit | iterations |")
    print("|---|---|---|---|---|")
    for seed in args.seeds:
        for name, make in estimators.items():
            t0 = time.perf_counter()
            est = make(seed).fit(F)
            secs = time.perf_counter() - t0
            nmi = metrics.nmi(truth, np.asarray(est.labels_))
            print(
                f"| {name} | {seed} | {nmi:.3f} | {secs:.1f} | {getattr(est, 'n_iter_', '-')} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
