"""The feature blur's choice against the power iterations of the halves' SVDs.

For each split, each half's features come from ``lsd_dask.linalg.randomized_svd`` (seed 0,
the sparse test matrix) at the pipeline's setting (2 power iterations, no final pass) and
at one power iteration fewer (with and without the final pass); every blur of the grid is
scored (``early_stop=None``) by ``lsd_dask.selection.choose_feature_blur``, and the line
gives each blur's mean held-out error, how much worse than the best it is, and the choice
with and without the early stop.

    python -m benchmarks.blur_power_iterations --data real
    python -m benchmarks.blur_power_iterations --data realistic --atlas vosdewael
    python -m benchmarks.blur_power_iterations --data realistic --atlas schaefer
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from benchmarks.realistic import real_data, realistic_data
from lsd_dask.linalg import randomized_svd
from lsd_dask.selection import choose_feature_blur, half_columns

#: (power iterations, final pass): the pipeline's default first
SETTINGS = ((2, False), (1, True), (1, False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", choices=("realistic", "real"), default="real")
    ap.add_argument("--atlas", default="vosdewael", help="the realistic study's truth")
    ap.add_argument("--rank", type=int, default=100)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    if args.data == "real":
        data, k = real_data(args), 50
    else:
        data, k = realistic_data(argparse.Namespace(atlas=args.atlas, scale=400, snr=0.5)), 100
    print(data["title"], flush=True)
    for split, X in data["columns"].items():
        cols = half_columns(data["widths"][split])
        halves = [np.ascontiguousarray(X[:, c], np.float32) for c in cols]
        for q, final in SETTINGS:
            t0 = time.perf_counter()
            feats = []
            for h in halves:
                U, s, _ = randomized_svd(
                    h, min(args.rank, h.shape[1]), n_power_iter=q, final_pass=final,
                    random_state=0, return_vt=False,
                )  # fmt: skip
                F = U * s
                feats.append(F / np.linalg.norm(F, axis=1, keepdims=True))
            seconds = time.perf_counter() - t0
            every = choose_feature_blur(*feats, data["V"], data["A"], k, early_stop=None)
            stopped = choose_feature_blur(*feats, data["V"], data["A"], k)
            m = every.mean
            cells = " ".join(f"{x:.5f} ({100 * (x / m.min() - 1):+.1f} %)" for x in m)
            print(
                f"{split}, {q} power iteration(s), final pass {final}: SVDs {seconds:.1f} s | "
                f"{cells} | chosen {every.fwhm_mm:g} mm; with the stop {stopped.fwhm_mm:g} mm, "
                f"{stopped.tried} blurs tried",
                flush=True,
            )


if __name__ == "__main__":
    main()
