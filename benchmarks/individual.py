"""Each subject's own parcels from a group prior, against the prior itself.

    python -m benchmarks.individual --seed 0 --prior vosdewael
    python -m benchmarks.individual --seed 0 --prior schaefer

The realistic study with per-subject borders (``realistic_study(border_shift=4,
border_jitter=0.2)``: about a tenth of each subject's vertices in another parcel than the
atlas'; Vos de Wael 400 as the group's truth). Each subject's series are cut in two halves
of time points: :class:`lsd_dask.cluster.IterativeIndividualParcellation` is fitted on the
first half with the prior (``--prior``: the truth's atlas, Vos de Wael 400, or Schaefer 400,
an atlas that is not the truth), and both the prior and the subject's own labels are scored
on the second half: held-out homogeneity (CBIG) on that half's unit rows, and NMI to the
subject's own truth. One row per subject, then the means and the share of subjects where
the individual map wins; the fit's seconds per subject on one thread.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from threadpoolctl import threadpool_limits

from lsd_dask import evaluation as ev
from lsd_dask import metrics
from lsd_dask.cluster import IterativeIndividualParcellation
from lsd_dask.datasets import load_atlas, realistic_study


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prior", choices=("vosdewael", "schaefer"), default="vosdewael")
    ap.add_argument("--subjects", type=int, default=3, help="per split")
    ap.add_argument("--timepoints", type=int, default=600)
    ap.add_argument("--border-shift", type=int, default=4)
    ap.add_argument("--border-jitter", type=float, default=0.2)
    args = ap.parse_args()
    study = realistic_study(
        n_subjects=(args.subjects, args.subjects), n_timepoints=args.timepoints,
        border_shift=args.border_shift, border_jitter=args.border_jitter,
        random_state=args.seed,
    )  # fmt: skip
    c = study.cortex
    prior = load_atlas(args.prior, 400)[c]
    prior = np.where(prior > 0, prior, -1)
    print(f"realistic study (seed {args.seed}), {len(study.subjects)} subjects x "
          f"{args.timepoints} TRs, border_shift {args.border_shift}, jitter "
          f"{args.border_jitter}; prior {args.prior}_400; fit on the first half, scored on "
          "the second")  # fmt: skip
    print("| subject | moved (%) | NMI prior | NMI own | homogeneity prior | homogeneity own "
          "| iterations | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for s in study.subjects:
        truth = study.subject_labels(s)[c]
        X = study.subject_data(s)[c].astype(np.float32)
        half = X.shape[1] // 2
        held = ev.unit_series(X[:, half:])
        with threadpool_limits(1):
            t0 = time.perf_counter()
            est = IterativeIndividualParcellation(prior).fit(X[:, :half])
            sec = time.perf_counter() - t0
        row = {
            "moved": 100 * np.mean(truth != study.labels[c]),
            "nmi_prior": metrics.nmi(truth, prior),
            "nmi_own": metrics.nmi(truth, est.labels_),
            "hom_prior": ev.homogeneity(held, prior, background=-1),
            "hom_own": ev.homogeneity(held, est.labels_, background=-1),
            "n_iter": est.n_iter_,
            "seconds": sec,
        }
        rows.append(row)
        print(f"| {s} | {row['moved']:.1f} | {row['nmi_prior']:.3f} | {row['nmi_own']:.3f} | "
              f"{row['hom_prior']:.4f} | {row['hom_own']:.4f} | {row['n_iter']} | "
              f"{sec:.2f} |", flush=True)  # fmt: skip
    mean = {k: np.mean([r[k] for r in rows]) for k in rows[0]}
    print(f"| mean | {mean['moved']:.1f} | {mean['nmi_prior']:.3f} | {mean['nmi_own']:.3f} | "
          f"{mean['hom_prior']:.4f} | {mean['hom_own']:.4f} | {mean['n_iter']:.1f} | "
          f"{mean['seconds']:.2f} |")  # fmt: skip
    wins = np.mean([r["hom_own"] > r["hom_prior"] for r in rows])
    nmi_wins = np.mean([r["nmi_own"] > r["nmi_prior"] for r in rows])
    print(f"individual above the prior: held-out homogeneity {100 * wins:.0f} % of subjects, "
          f"NMI to the own truth {100 * nmi_wins:.0f} %")


if __name__ == "__main__":
    main()
