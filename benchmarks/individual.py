"""Each subject's own parcels from a group prior, against the prior itself.

    python -m benchmarks.individual --seed 0 --prior vosdewael
    python -m benchmarks.individual --seed 0 --prior schaefer

Both of the package's estimators, side by side in one run:
:class:`lsd_dask.cluster.IterativeIndividualParcellation` (Wang et al. 2015; "iterative")
and :class:`lsd_dask.cluster.PriorPottsIndividualParcellation` (von Mises–Fisher parcels,
the group prior and a Potts term; "prior_potts"), on the realistic study with per-subject
borders (``realistic_study(border_shift=4, border_jitter=0.2)``: about a tenth of each
subject's vertices in another parcel than the atlas'; Vos de Wael 400 as the group's
truth). Each subject's series are cut in two halves of time points: each estimator is
fitted on the first half with the prior (``--prior``: the truth's atlas, Vos de Wael 400,
or Schaefer 400, an atlas that is not the truth), and the prior and each subject's own
labels are scored on the second half: held-out homogeneity (CBIG) on that half's unit
rows, and NMI to the subject's own truth. One row per subject, then the means and the
share of subjects where the individual map wins; each fit's seconds on one thread.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from threadpoolctl import threadpool_limits

from lsd_dask import evaluation as ev
from lsd_dask import metrics
from lsd_dask.cluster import IterativeIndividualParcellation, PriorPottsIndividualParcellation
from lsd_dask.datasets import load_atlas, realistic_study


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prior", choices=("vosdewael", "schaefer"), default="vosdewael")
    ap.add_argument(
        "--scale",
        type=int,
        default=400,
        choices=(100, 200, 300, 400),
        help="parcels of the truth (Vos de Wael) and of the prior",
    )
    ap.add_argument("--subjects", type=int, default=3, help="per split")
    ap.add_argument("--timepoints", type=int, default=600)
    ap.add_argument("--border-shift", type=int, default=4)
    ap.add_argument("--border-jitter", type=float, default=0.2)
    ap.add_argument("--kappa", type=float, default=200.0, help="prior_potts' concentration")
    args = ap.parse_args()
    study = realistic_study(
        n_subjects=(args.subjects, args.subjects), n_timepoints=args.timepoints,
        border_shift=args.border_shift, border_jitter=args.border_jitter,
        scale=args.scale, random_state=args.seed,
    )  # fmt: skip
    c = study.cortex
    prior = load_atlas(args.prior, args.scale)[c]
    prior = np.where(prior > 0, prior, -1)
    print(f"realistic study (seed {args.seed}), {len(study.subjects)} subjects x "
          f"{args.timepoints} TRs, border_shift {args.border_shift}, jitter "
          f"{args.border_jitter}; prior {args.prior}_{args.scale}; fit on the first half, "
          "scored on the second")  # fmt: skip
    ap_kappa = args.kappa
    methods = {
        "iterative": lambda: IterativeIndividualParcellation(prior),
        "prior_potts": lambda: PriorPottsIndividualParcellation(
            prior, study._adjacency, kappa=ap_kappa
        ),
    }
    print("| subject | moved (%) | NMI prior | " + " | ".join(f"NMI {m}" for m in methods)
          + " | homogeneity prior | " + " | ".join(f"homogeneity {m}" for m in methods)
          + " | " + " | ".join(f"s {m}" for m in methods) + " |")  # fmt: skip
    print("|---" * (3 + 3 * len(methods) + 1) + "|")
    rows = []
    for s in study.subjects:
        truth = study.subject_labels(s)[c]
        X = study.subject_data(s)[c].astype(np.float32)
        half = X.shape[1] // 2
        held = ev.unit_series(X[:, half:])
        row: dict[str, float] = {
            "moved": 100 * np.mean(truth != study.labels[c]),
            "nmi prior": metrics.nmi(truth, prior),
            "hom prior": ev.homogeneity(held, prior, background=-1),
        }
        for m, make in methods.items():
            with threadpool_limits(1):
                t0 = time.perf_counter()
                est = make().fit(X[:, :half])
                row[f"s {m}"] = time.perf_counter() - t0
            row[f"nmi {m}"] = metrics.nmi(truth, est.labels_)
            row[f"hom {m}"] = ev.homogeneity(held, est.labels_, background=-1)
        rows.append(row)
        print(_line(s, row, methods), flush=True)
    mean = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
    print(_line("mean", mean, methods))
    for m in methods:
        hom = np.mean([r[f"hom {m}"] > r["hom prior"] for r in rows])
        nmi = np.mean([r[f"nmi {m}"] > r["nmi prior"] for r in rows])
        print(f"{m} above the prior: held-out homogeneity {100 * hom:.0f} % of subjects, "
              f"NMI to the own truth {100 * nmi:.0f} %")  # fmt: skip


def _line(name: str, row: dict[str, float], methods: dict[str, object]) -> str:
    cells = [f"{row['moved']:.1f}", f"{row['nmi prior']:.3f}"]
    cells += [f"{row[f'nmi {m}']:.3f}" for m in methods]
    cells += [f"{row['hom prior']:.4f}"] + [f"{row[f'hom {m}']:.4f}" for m in methods]
    cells += [f"{row[f's {m}']:.2f}" for m in methods]
    return f"| {name} | " + " | ".join(cells) + " |"


if __name__ == "__main__":
    main()
