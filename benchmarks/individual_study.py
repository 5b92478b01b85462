"""Each participant's own parcels through the pipeline, against the group parcellation they
start from, on the realistic study with per-subject borders.

    python -m benchmarks.individual_study --seed 0 --folder /tmp/individual_seed0

Writes the realistic study (conte69 mesh, Vos de Wael 400 as the group's truth, each
subject's borders moved: ``border_shift=4, border_jitter=0.2``, about a tenth of its
vertices in another parcel; HCP-layout CIFTI) and runs the pipeline twice on it:

1. ``ks: [100, 200, 400]``, the default method, ``individual: true``: each participant's
   prior is the default method's group parcellation of the other split;
2. the same with ``individual: {prior: schaefer_400}``: a published atlas that is not the
   truth (only the individual stage runs again).

For each prior and K: the participants' mean NMI to their own truth, the prior's and their
own parcels' (``metrics.nmi`` on the kept vertices); from ``report.json``, the held-out
measures' means (fitted on one half of each participant's time points, scored on the
other, beside the prior on the same half) and the share of participants whose own parcels
score better; the within- and between-subject Dice; the seconds per fit (all time points,
one thread); the confidence's ROC AUC for the vertices where the two halves' maps
disagree.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from lsd_dask import metrics
from lsd_dask.datasets import realistic_study
from lsd_dask.datasets.studies import synthesize_realistic
from lsd_dask.distributed import connect
from lsd_dask.pipeline import load_config, run_pipeline

#: the study: 3 + 3 subjects x 600 time points, per-subject borders
STUDY = {"n_subjects": (3, 3), "n_timepoints": 600, "scale": 400, "border_shift": 4,
         "border_jitter": 0.2}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--folder", type=Path, required=True)
    ap.add_argument("--ks", type=int, nargs="+", default=[100, 200, 400])
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    kwargs = {**STUDY, "random_state": args.seed}
    path = args.folder / "pipeline.yaml"
    if not path.exists():
        synthesize_realistic(args.folder, fmt="cifti", rank=400, **kwargs)
    study = realistic_study(**kwargs)
    cluster = {
        "type": "local",
        "local": {
            "n_workers": args.workers,
            "threads_per_worker": 1,
            "host": "127.0.0.1",
            "dashboard_address": ":0",
        },
    }
    for prior in ("default", "schaefer_400"):
        raw = yaml.safe_load(path.read_text())
        raw["ks"] = args.ks
        raw["individual"] = True if prior == "default" else {"prior": prior}
        path.write_text(yaml.safe_dump(raw))
        cfg = load_config(path)
        t0 = time.perf_counter()
        with connect(cluster, log=lambda line: None):
            report = run_pipeline(cfg, log=lambda line: None)
        print(
            f"realistic study seed {args.seed}, {len(study.subjects)} participants x "
            f"{STUDY['n_timepoints']} TRs, prior {prior}: run {time.perf_counter() - t0:.0f} s "
            f"(individual stage {report['timings_s'].get('individual', 0):.0f} s)"
        )
        _table(cfg, report, study)


def _table(cfg: Any, report: dict[str, Any], study: Any) -> None:
    work = cfg.output / "work"
    kept = np.load(work / "mask.npy")
    c = study.cortex
    section = report["individual"]
    nmi: dict[int, dict[str, list[float]]] = {}
    for row in section["rows"]:
        saved = json.loads((work / "individual" / f"{row['participant']}.json").read_text())
        p = [e["k"] for e in saved["priors"]].index(row["k"])
        own = np.load(work / "individual" / f"{row['participant']}_labels.npy")[p, 0]
        sid = next(s for s in study.subjects if s.removeprefix("sub-") == row["participant"])
        truth = study.subject_labels(sid)
        if saved["priors"][p]["prior"].startswith("schaefer"):
            from lsd_dask.datasets import load_atlas

            prior = load_atlas("schaefer", 400)
        else:
            other = next(s for s in study.splits if s != row["split"])
            name = cfg.individual.prior
            prior = np.load(work / "labels" / f"{other}_{name}_K{row['k']}.npy")
        mask = kept & c
        cell = nmi.setdefault(row["k"], {"prior": [], "own": []})
        cell["prior"].append(metrics.nmi(truth[mask], prior[mask]))
        cell["own"].append(metrics.nmi(truth[mask], own[mask]))
    print(
        "| K | NMI own truth: prior / own | homogeneity: prior / own (own better) | "
        "DCBC: prior / own (own better) | silhouette: prior / own (own better) | "
        "Dice within / between | moved | confidence AUC | s per fit |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for s in section["summary"]:
        k = s["k"]
        cells = [f"{np.mean(nmi[k]['prior']):.3f} / {np.mean(nmi[k]['own']):.3f}"]
        for m in ("homogeneity", "dcbc", "silhouette"):
            cells.append(
                f"{s[f'group_{m}']:.4f} / {s[f'own_{m}']:.4f} "
                f"({100 * s[f'share_own_better_{m}']:.0f} %)"
            )
        cells += [
            f"{s['within_dice']:.3f} / {s['between_dice']:.3f}",
            f"{100 * s['moved']:.1f} %",
            f"{s['confidence_auc']:.2f}",
            f"{s['seconds']:.2f}",
        ]
        print(f"| {k} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
