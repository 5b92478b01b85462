"""How many power iterations the group SVD needs: accuracy and time of ``n_power_iter``
and ``n_oversamples``.

On one split store of a finished run (its ``work`` folder), each ``q:p`` of ``--runs``
runs the pipeline's SVD call (``randomized_svd`` on the store's column blocks, at the
run's rank, ``q`` power iterations, ``p`` oversamples, seed 0) on a LocalCluster of 2
single-threaded workers, and is compared with ``--reference`` (``4:10`` by default: 6
reads of X). ``q:p:r`` runs without the final pass (``final_pass=False``: the last power
iteration's row basis stands in for it); a last ``:wW`` (``2:10:r:w8``) sketches whole
subjects drawn at random until they hold ``W × (k + p)`` time points
(``randomized_svd``'s ``sketch_columns``; the pipeline's ``svd.sketch_width``).

- seconds, reads of X (``q + 2``; ``q + 1`` without the final pass) and GEMM work
  (``(2 q + 2) · 2 n m (k + p)``; ``(2 q + 1) · …``);
- singular values: largest relative error of the top 10 and of all k;
- subspace capture: mean and 10th percentile of the cosines of the principal angles
  between the k-dimensional subspaces (the last few directions of a flat spectrum are
  interchangeable, so the minimum says little);
- energy: ``Σ s_q² / Σ s_ref²``, the share of the reference's captured variance;
- features: the relative Frobenius error of the vertex-by-vertex Gram ``U S² Uᵀ`` (what
  the clustering's distances are made of), from k × k products only;
- labels: spherical k-means at ``--k`` on the unit rows of ``U S`` (the pipeline's
  features), NMI (geometric, :func:`lsd_dask.metrics.nmi`) against the reference's
  labels and against the study's ``truth.npy``.

``--reference exact`` compares with the exact SVD instead (the eigenvectors of X's m × m
Gram matrix in float64; for stores of at most 20,000 columns): unlike a reference run, it
shares no test matrix with the runs. ``--test-matrix gaussian`` runs with a Gaussian test
matrix instead of the default sparse sign one (``randomized_svd``'s ``test_matrix``).

Run: ``python -m benchmarks.power_iterations --work /work/full/study/e2e-2w/work
--truth /work/full/study/truth.npy``. Prints a Markdown table. ``--reuse`` takes the
factors an earlier run saved under ``--out`` (same store, same settings) instead of
computing them again.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

# the checkout this file is in, whatever lsd_dask the interpreter has installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="a finished run's work folder")
    ap.add_argument("--split", default="split1")
    ap.add_argument("--runs", nargs="+", default=["0:10", "1:10", "2:10"], help="q:p each")
    ap.add_argument("--reference", default="4:10", help="q:p, or exact")
    ap.add_argument("--test-matrix", default="sparse", choices=["sparse", "gaussian"])
    ap.add_argument("--reuse", action="store_true", help="factors saved under --out")
    ap.add_argument("--rank", type=int, help="default: the run's (its saved singular values)")
    ap.add_argument("--k", type=int, default=200, help="parcels of the label comparison")
    ap.add_argument("--truth", type=Path, help="per-vertex truth labels (all vertices)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/lsd_power_bench"))
    ap.add_argument("--memory-limit", default="4GB", help="per worker")
    args = ap.parse_args()

    from distributed import Client, LocalCluster

    from lsd_dask.io import open_split

    args.out.mkdir(parents=True, exist_ok=True)
    rank = args.rank or int(np.load(args.work / f"{args.split}_s.npy").size)
    store = open_split(str(args.work / f"{args.split}.zarr"))
    n, m = store.data.shape
    print(f"<!-- {args.split}: {n} x {m}, rank {rank} -->", flush=True)
    exact = args.reference == "exact"
    configs = [_config(r) for r in [*([] if exact else [args.reference]), *args.runs]]
    runs: dict[tuple[int, int, bool, float], dict[str, object]] = {}
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, memory_limit=args.memory_limit,
            host="127.0.0.1", dashboard_address=":0",
        ) as cluster,
        Client(cluster),
    ):  # fmt: skip
        for qp in configs:
            if qp not in runs:
                runs[qp] = _svd(store, rank, qp, args.out, args.reuse, args.test_matrix)
                print(f"<!-- q:p={qp}: {runs[qp]['seconds']:.1f} s -->", flush=True)
    ref = _exact(store, rank, args.out, args.reuse) if exact else runs[configs[0]]

    mask = np.load(args.work / "mask.npy") if (args.work / "mask.npy").exists() else None
    truth = np.load(args.truth) if args.truth else None
    if truth is not None and mask is not None:
        truth = truth[mask]
    ref_labels = _labels(ref["U"], ref["s"], args.k)
    print(
        "| n_power_iter | n_oversamples | reads of X | GEMM TFLOP | seconds | max rel. err s "
        "(top 10 / all k) | capture mean / 10th pct | energy | Gram rel. err | NMI vs "
        f"reference (K = {args.k}) | NMI vs truth |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    if exact:
        nmi_truth = f"{_nmi(ref_labels, truth):.4f}" if truth is not None else "–"
        print(f"| exact (reference) | – | – | – | {ref['seconds']:.1f} | 0 / 0 | 1 / 1 | 1 | 0 | "
              f"1 | {nmi_truth} |")  # fmt: skip
    for q, p, final, width in sorted(runs):
        r = runs[q, p, final, width]
        U, s = np.asarray(r["U"]), np.asarray(r["s"])
        Ur, sr = np.asarray(ref["U"]), np.asarray(ref["s"])
        err = np.abs(s - sr) / sr
        cos = np.linalg.svd(Ur.T.astype(np.float64) @ U.astype(np.float64), compute_uv=False)
        is_ref = not exact and (q, p, final, width) == configs[0]
        labels = ref_labels if is_ref else _labels(U, s, args.k)
        nmi_ref = _nmi(labels, ref_labels)
        nmi_truth = f"{_nmi(labels, truth):.4f}" if truth is not None else "–"
        name = f"{q} (reference)" if is_ref else str(q)
        name += "" if final else " (no final pass)"
        name += f" (sketch {width:g} l)" if width else ""
        reads = q + 2 if final else q + 1
        tflop = (2 * q + (2 if final else 1)) * 2 * n * m * (rank + p) / 1e12
        print(
            f"| {name} | {p} | {reads} | {tflop:.1f} | {r['seconds']:.1f} | {err[:10].max():.1e} / "
            f"{err.max():.1e} | {cos.mean():.4f} / {np.percentile(cos, 10):.4f} | "
            f"{(s.astype(np.float64) ** 2).sum() / (sr.astype(np.float64) ** 2).sum():.5f} | "
            f"{_gram_error(U, s, Ur, sr):.1e} | {nmi_ref:.4f} | {nmi_truth} |",
            flush=True,
        )


def _config(text: str) -> tuple[int, int, bool, float]:
    """``q:p`` (with the final pass) or ``q:p:r`` (without it), each with an optional
    ``:wW`` (the sketch's width in ranks; 0, every subject, without it)."""
    q, p, *rest = text.split(":")
    width = 0.0
    if rest and rest[-1].startswith("w"):
        width = float(rest.pop()[1:])
    if rest not in ([], ["r"]):
        raise ValueError(f"a run is q:p or q:p:r, then optionally :wW, got {text!r}.")
    return int(q), int(p), not rest, width


def _svd(
    store: object,
    rank: int,
    qpf: tuple[int, int, bool, float],
    out: Path,
    reuse: bool,
    test_matrix: str,
) -> dict[str, object]:
    """The pipeline's call at ``q`` power iterations and ``p`` oversamples (with or without
    the final pass), timed; U, s and the seconds saved under ``out`` (and read back from
    there with ``reuse``)."""
    from lsd_dask.linalg import randomized_svd

    q, p, final, width = qpf
    tag = ("" if final else "_r") + ("_g" if test_matrix == "gaussian" else "")
    tag += f"_w{width:g}" if width else ""
    files = [out / f"{name}_q{q}_p{p}{tag}.npy" for name in ("U", "s", "seconds")]
    if reuse and all(f.exists() for f in files):
        return _load(files)
    t0 = time.perf_counter()
    U, s, _ = randomized_svd(
        store.column_blocks,  # type: ignore[attr-defined]
        rank,
        n_power_iter=q,
        n_oversamples=p,
        random_state=0,
        final_pass=final,
        test_matrix=test_matrix,
        sketch_columns=int(np.ceil(width * (rank + p))) if width else None,
    )
    U = np.asarray(U.compute() if hasattr(U, "compute") else U, np.float32)
    return _save(files, U, s, time.perf_counter() - t0)


def _exact(store: object, rank: int, out: Path, reuse: bool) -> dict[str, object]:
    """The exact rank-k SVD of the store's X from the eigenvectors of its m × m Gram matrix
    (``Xᵀ X`` in float32, its eigenproblem in float64; ``U = X V / s``), timed."""
    files = [out / f"{name}_exact.npy" for name in ("U", "s", "seconds")]
    if reuse and all(f.exists() for f in files):
        return _load(files)
    n, m = store.data.shape  # type: ignore[attr-defined]
    if m > 20_000:
        raise SystemExit(f"--reference exact: {m} columns; at most 20,000 (an m x m Gram).")
    t0 = time.perf_counter()
    X = np.asarray(store.data.compute(), np.float32)  # type: ignore[attr-defined]
    w, V = np.linalg.eigh((X.T @ X).astype(np.float64))
    w, V = w[::-1][:rank], V[:, ::-1][:, :rank]
    s = np.sqrt(np.maximum(w, 0.0))
    U = (X @ V.astype(np.float32)) / s.astype(np.float32)
    return _save(files, U, s, time.perf_counter() - t0)


def _save(files: list[Path], U: np.ndarray, s: object, seconds: float) -> dict[str, object]:
    for f, v in zip(files, (U, np.asarray(s, np.float64), np.float64(seconds)), strict=True):
        np.save(f, v)
    return {"U": U, "s": np.asarray(s, np.float64), "seconds": seconds}


def _load(files: list[Path]) -> dict[str, object]:
    U, s, sec = (np.load(f) for f in files)
    return {"U": U, "s": s, "seconds": float(sec)}


def _gram_error(U: np.ndarray, s: np.ndarray, Ur: np.ndarray, sr: np.ndarray) -> float:
    """``‖U S² Uᵀ − Ur Sr² Urᵀ‖_F / ‖Ur Sr² Urᵀ‖_F`` from k × k products (U, Ur orthonormal)."""
    M = U.T.astype(np.float64) @ Ur.astype(np.float64)
    a, b = s**2, sr**2
    cross = np.einsum("i,ij,j,ij->", a, M, b, M)  # tr(A M B Mᵀ)
    return float(np.sqrt(max((a**2).sum() + (b**2).sum() - 2 * cross, 0.0) / (b**2).sum()))


def _labels(U: object, s: object, k: int) -> np.ndarray:
    """Spherical k-means on the pipeline's features (unit rows of U·Σ), seed 0."""
    from lsd_dask.cluster import SphericalKMeans
    from lsd_dask.pipeline.stages.svd import svd_features

    X = svd_features(np.asarray(U, np.float32), np.asarray(s))
    return np.asarray(SphericalKMeans(k, random_state=0).fit(X).labels_)


def _nmi(a: np.ndarray, b: np.ndarray) -> float:
    """The package's NMI (geometric normalisation), as the pipeline's scores report it."""
    from lsd_dask.metrics import nmi

    return float(nmi(a, b))


if __name__ == "__main__":
    main()
