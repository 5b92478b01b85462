"""The feature blur's choice against the power iterations of the halves' SVDs.

For each split, each half's features come from ``lsd_dask.linalg.randomized_svd`` (seed 0,
the sparse test matrix) at 2 power iterations with no final pass (the pipeline's SVD
setting), at one power iteration fewer (with and without the final pass), started from
the split's own U (the whole split's SVD at the pipeline's setting) with one and with two
power iterations and no sketch, and from the halves' exact SVDs (LAPACK, float64). Every
blur of the grid is scored (``early_stop=None``) by
``lsd_dask.selection.choose_feature_blur``, and the line gives each blur's mean held-out
error, how much worse than the best it is, and the choice with and without the early
stop.

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

#: (power iterations, final pass, start): the pipeline's SVD setting first; start
#: "sketch" is X Ω, "split" the split's own U, and "exact" LAPACK's SVD of each half
SETTINGS = (
    (2, False, "sketch"),
    (1, True, "sketch"),
    (1, False, "sketch"),
    (1, False, "split"),
    (2, False, "split"),
    (0, False, "exact"),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", choices=("realistic", "real"), default="real")
    ap.add_argument("--atlas", default="vosdewael", help="the realistic study's truth")
    ap.add_argument("--rank", type=int, default=100)
    ap.add_argument("--split", nargs="*", help="the splits to run (default: both)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    if args.data == "real":
        data, k = real_data(args), 50
    else:
        data, k = realistic_data(argparse.Namespace(atlas=args.atlas, scale=400, snr=0.5)), 100
    print(data["title"], flush=True)
    for split, X in data["columns"].items():
        if args.split and split not in args.split:
            continue
        cols = half_columns(data["widths"][split])
        halves = [np.ascontiguousarray(X[:, c], np.float32) for c in cols]
        whole = np.ascontiguousarray(X, np.float32)
        U_split = randomized_svd(
            whole, min(args.rank, whole.shape[1]), n_power_iter=2, final_pass=False,
            random_state=0, return_vt=False,
        )[0]  # fmt: skip
        for q, final, start in SETTINGS:
            t0 = time.perf_counter()
            feats = []
            for h in halves:
                rank = min(args.rank, h.shape[1])
                if start == "exact":
                    U, s = np.linalg.svd(h.astype(np.float64), full_matrices=False)[:2]
                    U, s = U[:, :rank], s[:rank]
                else:
                    U, s, _ = randomized_svd(
                        h, rank, n_power_iter=q, final_pass=final, random_state=0,
                        return_vt=False, start=U_split[:, :rank] if start == "split" else None,
                    )  # fmt: skip
                F = U * s
                feats.append(F / np.linalg.norm(F, axis=1, keepdims=True))
            seconds = time.perf_counter() - t0
            every = choose_feature_blur(*feats, data["V"], data["A"], k, early_stop=None)
            stopped = choose_feature_blur(*feats, data["V"], data["A"], k)
            m = every.mean
            cells = " ".join(f"{x:.5f} ({100 * (x / m.min() - 1):+.1f} %)" for x in m)
            how = "exact SVD" if start == "exact" else (
                f"{q} power iteration(s), final pass {final}, from the {start}"
            )  # fmt: skip
            print(
                f"{split}, {how}: SVDs {seconds:.1f} s | "
                f"{cells} | chosen {every.fwhm_mm:g} mm; with the stop {stopped.fwhm_mm:g} mm, "
                f"{stopped.tried} blurs tried",
                flush=True,
            )


if __name__ == "__main__":
    main()
