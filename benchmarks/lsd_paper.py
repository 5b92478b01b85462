"""Check Arora et al.'s claims on data we can make or ship.

Table 2: the rotation solver reaches a lower LSD objective than multiplicative updates on
most data sets. Table 7: hierarchical LSD is much faster than flat LSD as K grows.
Also reported: misclassification rate and conditional perplexity.

Run: ``.venv/bin/python benchmarks/lsd_paper.py [--quick]``. Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np
from sklearn import datasets
from sklearn.preprocessing import StandardScaler

from lsd_dask import metrics
from lsd_dask.cluster import LSD, HierarchicalLSD
from lsd_dask.datasets import brain_grid, lsdable_similarity


def uci_sets():
    iris = datasets.load_iris()
    wine = datasets.load_wine()
    bc = datasets.load_breast_cancer()
    digits = datasets.load_digits()
    sc = StandardScaler()
    return {
        "iris (raw)": (iris.data, iris.target),
        "wine (std)": (sc.fit_transform(wine.data), wine.target),
        "breast cancer (std)": (sc.fit_transform(bc.data), bc.target),
        "digits (raw)": (digits.data, digits.target),
    }


def table2(quick: bool) -> str:
    rows = [
        "| data | n | K | similarity | objective rotation | objective multiplicative | lower "
        "| misclass. rot / mult | perplexity rot / mult |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    sets = {name: (X, y, "rbf") for name, (X, y) in uci_sets().items()}
    for k in (3, 5, 8):
        d = lsdable_similarity(400, k, max_mixing=0.45, random_state=k)
        noise = np.random.default_rng(k).normal(0, 0.02, d.K.shape)
        sets[f"LSDable+noise k={k}"] = ((d.K + noise + noise.T) / 2, d.labels, "precomputed")
    X, y, _ = brain_grid(snr_db=-3, n_features=50, n_regions=10, shape=(32, 32), random_state=0)
    sets["brain grid -3 dB (10 regions)"] = (X, y, "cosine")
    wins = 0
    for name, (X, y, sim) in sets.items():
        k = int(np.unique(y).size)
        res = {}
        for solver in ("rotation", "multiplicative"):
            m = LSD(
                k, solver=solver, similarity=sim, random_state=0, max_iter=200 if quick else 500
            ).fit(X)
            res[solver] = (
                m.objective_,
                metrics.misclassification_rate(y, m.labels_),
                metrics.perplexity(y, m.labels_),
            )
        lower = "rotation" if res["rotation"][0] <= res["multiplicative"][0] else "multiplicative"
        wins += lower == "rotation"
        r, m_ = res["rotation"], res["multiplicative"]
        rows.append(
            f"| {name} | {X.shape[0]} | {k} | {sim} | {r[0]:.4g} | {m_[0]:.4g} | {lower} | "
            f"{r[1]:.3f} / {m_[1]:.3f} | {r[2]:.3f} / {m_[2]:.3f} |"
        )
    rows.append(f"\nRotation reaches the lower objective on {wins} of {len(sets)} sets.")
    return "\n".join(rows)


def table7(quick: bool) -> str:
    X, y, _ = brain_grid(snr_db=0, n_features=200, n_regions=160, shape=(64, 64), random_state=1)
    ks = (10, 20, 40, 80) if quick else (10, 20, 40, 80, 160)
    rows = [
        "| K | flat LSD s | hierarchical LSD s | speed-up | NMI flat | NMI hier. "
        "| within-sim flat | within-sim hier. |",
        "|---|---|---|---|---|---|---|---|",
    ]
    F = X / np.linalg.norm(X, axis=1, keepdims=True)
    for k in ks:
        t0 = time.perf_counter()
        flat = LSD(k, random_state=0).fit(X)
        t_flat = time.perf_counter() - t0
        t0 = time.perf_counter()
        hier = HierarchicalLSD(k).fit(X)
        t_hier = time.perf_counter() - t0
        rows.append(
            f"| {k} | {t_flat:.2f} | {t_hier:.2f} | {t_flat / t_hier:.1f}x | "
            f"{metrics.nmi(y, flat.labels_):.3f} | {metrics.nmi(y, hier.labels_):.3f} | "
            f"{metrics.within_cluster_similarity(flat.labels_, features=F):.3f} | "
            f"{metrics.within_cluster_similarity(hier.labels_, features=F):.3f} |"
        )
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer iterations and K values")
    args = ap.parse_args()
    print(
        f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}"
    )
    print("\n### Table 2: rotation vs multiplicative updates\n")
    print(table2(args.quick))
    print("\n### Table 7: flat vs hierarchical LSD runtime")
    print("(brain grid 4096 x 200, 160 regions, 0 dB)\n")
    print(table7(args.quick))


if __name__ == "__main__":
    main()
