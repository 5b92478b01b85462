"""Rank-k SVD side by side on one Zarr input: ours (randomized, streaming) against
dask's svd_compressed, scikit-learn's randomized_svd (in memory) and the exact SVD via the
Gram matrix.

Each method runs in its own subprocess on a LocalCluster of 2 single-threaded workers with
a per-worker memory limit (``--worker-memory``) below the data size at the large sizes, so
the input cannot be held. Peak memory is the largest resident set of the whole process tree
(client and workers), sampled every 0.2 s. The FLOP bound is the GEMM work at the float32
rate measured at the start of the same run: ``(2 q + 2) × 2 n m l`` for the randomized
methods (q = 2 power iterations), however many reads of X they make.

Run: ``python benchmarks/svd.py --sizes small medium full --out /tmp/svd_bench``.
Prints a Markdown table; ``full`` is a full study's 64,984 × 33,000 at rank 1,000 (8.6 GB).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

SIZES = {
    # name: (n_vertices, n_subjects, T, rank k, latent components)
    "small": (8000, 4, 1000, 100, 200),
    "medium": (64984, 4, 1000, 500, 400),
    "medium16": (64984, 16, 1000, 500, 400),  # streaming memory against subject count
    "full": (64984, 33, 1000, 1000, 1200),
}
METHODS = (
    "ours-randomized",
    "ours-randomized-dask",
    "ours-randomized-unfused",
    "ours-streaming",
    "dask-svd_compressed",
    "dask-svd_compressed-QR",
    "sklearn-randomized",
    "exact-gram",
)


def make_store(path: Path, size: str) -> Path:
    from lsd_dask.io import write_split

    n, s, t, _, r = SIZES[size]
    if (path / "done").exists():
        return path / "split.zarr"
    rng = np.random.default_rng(0)
    L = (rng.standard_normal((n, r)) * np.geomspace(5, 0.5, r)).astype(np.float32)

    def subjects():
        for i in range(s):
            g = np.random.default_rng([1, i])
            x = L @ g.standard_normal((r, t), dtype=np.float32)
            x += g.standard_normal((n, t), dtype=np.float32)
            yield f"sub-{i:03d}", x

    write_split(path / "split.zarr", subjects(), n_vertices=n, timepoints=t, overwrite=True)
    (path / "done").touch()
    return path / "split.zarr"


def gemm_gflops() -> float:
    a = np.random.default_rng(0).standard_normal((4000, 4000), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((4000, 1000), dtype=np.float32)
    a @ b
    t0 = time.perf_counter()
    for _ in range(3):
        a @ b
    return 3 * 2 * 4000 * 4000 * 1000 / (time.perf_counter() - t0) / 1e9


def run_one(method: str, store: Path, k: int, worker_memory: str, out: Path) -> dict:
    """Child process: run one method, write U (n × k) to out/U_<method>.npy."""
    import dask
    import psutil
    from distributed import Client, LocalCluster

    from lsd_dask.io import open_split
    from lsd_dask.linalg import randomized_svd, streaming_svd

    peak = {"rss": 0}
    stop = threading.Event()
    me = psutil.Process()

    def sample():
        while not stop.is_set():
            try:
                procs = [me, *me.children(recursive=True)]
                peak["rss"] = max(peak["rss"], sum(p.memory_info().rss for p in procs))
            except psutil.Error:
                pass
            time.sleep(0.2)

    threading.Thread(target=sample, daemon=True).start()
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            memory_limit=worker_memory,
            host="127.0.0.1",
            dashboard_address=":0",
        ) as cluster,
        Client(cluster),
    ):
        X = open_split(store).data
        passes = None
        extra: dict = {}
        t0 = time.perf_counter()
        if method == "ours-randomized":  # column blocks read inside the tasks
            blocks = open_split(store).column_blocks
            U, s, _ = randomized_svd(blocks, k, n_power_iter=2, random_state=0)
            U = U.compute()
            passes = 4
        elif method in ("ours-randomized-dask", "ours-randomized-unfused"):  # dask input
            fuse = method == "ours-randomized-dask"
            U, s, _ = randomized_svd(X, k, n_power_iter=2, random_state=0, fuse_passes=fuse)
            U = U.compute()
            passes = 4 if fuse else 6
        elif method == "ours-streaming":
            st = open_split(store)
            cols = np.cumsum([0, *st.timepoints])
            blocks = (X[:, a:b] for a, b in zip(cols[:-1], cols[1:], strict=True))
            U, s, _ = streaming_svd(blocks, k, n_keep=2 * k)
            passes = 1
        elif method == "dask-svd_compressed":
            import dask.array as da

            U, s, _ = da.linalg.svd_compressed(X, k, n_power_iter=2, seed=0, compute=True)
            U, s = dask.compute(U, s)
            passes = 6
        elif method == "dask-svd_compressed-QR":
            import dask.array as da

            # QR re-orthonormalisation between power iterations, as ours does
            U, s, _ = da.linalg.svd_compressed(
                X, k, n_power_iter=2, iterator="QR", seed=0, compute=True
            )
            U, s = dask.compute(U, s)
            passes = 6
        elif method == "sklearn-randomized":
            from sklearn.utils.extmath import randomized_svd as sk_rsvd

            A = X.compute()  # in memory: the client process holds the whole matrix
            U, s, _ = sk_rsvd(A, k, n_iter=2, random_state=0)
            passes = 1  # read once, then in memory
        elif method == "exact-gram" and X.shape[1] > 8000:
            U, s, info = exact_gram_large(store, k)
            passes = 2
            extra.update(info)
        elif method == "exact-gram":
            G = (X.T @ X).compute().astype(np.float64)  # m × m
            w, V = np.linalg.eigh(G)
            V = V[:, ::-1][:, :k]
            s = np.sqrt(np.maximum(w[::-1][:k], 0))
            U = (X @ V.astype(np.float32)).compute() / s
            passes = 2
        wall = time.perf_counter() - t0
    stop.set()
    np.save(out / f"U_{method}.npy", np.asarray(U, np.float32))
    np.save(out / f"s_{method}.npy", np.asarray(s, np.float64))
    return {
        "method": method,
        "wall_s": wall,
        "peak_gb": peak["rss"] / 1e9,
        "passes": passes,
        **extra,
    }


def exact_gram_large(store: Path, k: int, *, block_rows: int = 2048) -> tuple:
    """Exact rank-k SVD through the float64 Gram matrix, for m too large for a full eigh.

    Runs in this process, not on the workers (the m × m Gram, 8.7 GB at m = 33,000, is
    larger than a worker). Pass 1 accumulates ``G = XᵀX`` in float64 (its upper
    block-triangle, over row blocks, each Zarr chunk row read once; about half the flops of
    XᵀX). The top k eigenpairs of G come from subspace iteration with Rayleigh–Ritz on a
    block of ``k + 400`` columns, in float64, until every residual ``‖G v − λ v‖`` is below
    ``1e-10 λ₁``: a certificate that the eigenpairs are exact to float64 working accuracy,
    at a fraction of a full 33,000² eigh (~35 min here). Pass 2 forms ``U = X V / s``.
    """
    rows_of, n, m, step = _row_reader(store)
    G = np.zeros((m, m))
    panel = 2048
    for r0 in range(0, n, step):
        rows = rows_of(r0)  # one chunk row: every chunk read once
        for b0 in range(0, rows.shape[0], block_rows):
            A = rows[b0 : b0 + block_rows].astype(np.float64)
            # upper block-triangle only (as syrk would), one column panel at a time
            for c0 in range(0, m, panel):
                c1 = min(m, c0 + panel)
                G[:c1, c0:c1] += A[:, :c1].T @ A[:, c0:c1]
        del rows
    for c0 in range(0, m, panel):  # mirror the upper block-triangle, in place
        G[c0 : c0 + panel, :c0] = G[:c0, c0 : c0 + panel].T
    rng = np.random.default_rng(0)
    width = min(m, k + 400)
    V = np.linalg.qr(rng.standard_normal((m, width)))[0]
    it = 0
    while it < 30:
        it += 1
        W = G @ V
        H = V.T @ W
        theta, S = np.linalg.eigh((H + H.T) / 2)
        order = np.argsort(theta)[::-1]
        theta, S = theta[order], S[:, order]
        V, W = V @ S, W @ S  # Ritz vectors and G times them
        res = np.linalg.norm(W[:, :k] - V[:, :k] * theta[:k], axis=0) / theta[0]
        if res.max() < 1e-10:
            break
        V = np.linalg.qr(W)[0]
    del G, W
    s = np.sqrt(np.maximum(theta[:k], 0))
    Vk = V[:, :k]
    U = np.empty((n, k), np.float64)
    for r0 in range(0, n, step):
        U[r0 : r0 + step] = rows_of(r0).astype(np.float64) @ Vk
    U /= s
    return U, s, {"iterations": it, "max_residual": float(res.max())}


def keep_sweep(sizes: list, factors: list, out: Path) -> None:
    """Streaming SVD accuracy against the exact SVD as a function of the kept dimension.

    In this process (the streaming SVD computes one subject at a time on the client),
    reading the stores that ``--methods exact-gram`` wrote with their references.
    """
    from lsd_dask.io import open_split
    from lsd_dask.linalg import streaming_svd

    print("| size | n_keep | wall s | max rel. err s (top 10 / all k) | capture mean / min |")
    print("|---|---|---|---|---|")
    for size in sizes:
        n, subj, t, k, _ = SIZES[size]
        root = out / size
        U_ref, s_ref = np.load(root / "U_exact-gram.npy"), np.load(root / "s_exact-gram.npy")
        st = open_split(root / "split.zarr")
        cols = np.cumsum([0, *st.timepoints])
        for f in factors:
            keep = int(round(f * k))
            t0 = time.perf_counter()
            blocks = (st.data[:, a:b] for a, b in zip(cols[:-1], cols[1:], strict=True))
            U, s, _ = streaming_svd(blocks, k, n_keep=keep)
            wall = time.perf_counter() - t0
            rel = np.abs(s / s_ref - 1)
            cm, cmin = capture(U, U_ref)
            print(
                f"| {size} {n}×{subj * t} k={k} | {keep} ({f:g} k) | {wall:.1f} | "
                f"{rel[:10].max():.1e} / {rel.max():.1e} | {cm:.4f} / {cmin:.4f} |",
                flush=True,
            )


def _row_reader(store: Path):
    """(rows_of(r0), n, m, step): a chunk row of the split (every subject side by side)."""
    from lsd_dask.io import open_split

    arrays = open_split(store).arrays
    step = arrays[0].chunks[0]

    def rows_of(r0: int) -> np.ndarray:
        return np.concatenate([np.asarray(a[r0 : r0 + step]) for a in arrays], axis=1)

    return rows_of, arrays[0].shape[0], sum(a.shape[1] for a in arrays), step


def check_reference(store: Path, U: np.ndarray, s: np.ndarray) -> float:
    """Largest ``‖X Xᵀ u − σ² u‖ / σ₁²`` over the reference's pairs, in float64 from X.

    Independent of how the reference was found (it touches X, not the Gram matrix): two
    float64 passes over the store, one chunk row at a time.
    """
    rows_of, n, m, step = _row_reader(store)
    U = U.astype(np.float64)
    W = np.zeros((m, U.shape[1]))
    for r0 in range(0, n, step):
        W += rows_of(r0).astype(np.float64).T @ U[r0 : r0 + step]
    worst = 0.0
    for r0 in range(0, n, step):
        R = rows_of(r0).astype(np.float64) @ W - U[r0 : r0 + step] * s**2
        worst = max(worst, float(np.abs(R).max()))
    return worst / float(s[0]) ** 2


def flops(method: str, n: int, subjects: int, t: int, k: int) -> float:
    """Multiply-add count of each method's GEMMs (the part that can run at the GEMM rate)."""
    m = subjects * t
    if method == "exact-gram":
        return 2.0 * n * m * m + 2.0 * n * m * k  # X^T X, then X V (the m×m eigh excluded)
    if method == "ours-streaming":
        w = 2 * k + t  # running width after appending a block
        return subjects * (2.0 * n * w * w + 2.0 * n * w * 2 * k)  # W^T W, then W V
    return 6 * 2.0 * n * m * (k + 10)  # 2 q + 2 products with X (q = 2), however many reads


def capture(U: np.ndarray, U_ref: np.ndarray) -> tuple[float, float]:
    """Subspace capture: mean and minimum cosine of the principal angles."""
    c = np.linalg.svd(U.astype(np.float64).T @ U_ref.astype(np.float64), compute_uv=False)
    return float(c.mean()), float(c.min())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", nargs="+", default=["small", "medium"], choices=list(SIZES))
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--out", default="/tmp/lsd_svd_bench")
    ap.add_argument("--worker-memory", default="3GB")
    ap.add_argument(
        "--keep-sweep",
        nargs="+",
        type=float,
        metavar="FACTOR",
        help="only run the streaming SVD with n_keep = FACTOR × k against the exact reference",
    )
    ap.add_argument(
        "--check-reference",
        action="store_true",
        help="only check the saved exact reference of each size against X (float64)",
    )
    ap.add_argument(
        "--one", nargs=4, metavar=("METHOD", "STORE", "K", "OUT"), help=argparse.SUPPRESS
    )
    args = ap.parse_args()
    if args.one:
        m, store, k, out = args.one
        print(json.dumps(run_one(m, Path(store), int(k), args.worker_memory, Path(out))))
        return
    if args.keep_sweep:
        keep_sweep(args.sizes, args.keep_sweep, Path(args.out))
        return
    if args.check_reference:
        for size in args.sizes:
            root = Path(args.out) / size
            U, s = np.load(root / "U_exact-gram.npy"), np.load(root / "s_exact-gram.npy")
            res = check_reference(root / "split.zarr", U, s)
            orth = np.abs(U.T.astype(np.float64) @ U - np.eye(U.shape[1])).max()
            print(f"{size}: max |X Xᵀu - σ²u| / σ₁² = {res:.1e}; max |UᵀU - I| = {orth:.1e}")
        return
    gf = gemm_gflops()
    print(
        f"float32 GEMM: {gf:.0f} GFLOP/s (2 threads); worker memory limit {args.worker_memory} x 2"
    )
    print(
        "\n| size | method | wall s | reads of X | FLOP-bound s | ratio | peak GB "
        "| max rel. err s (top 10 / all k) | subspace capture mean / min |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for size in args.sizes:
        n, subj, t, k, _ = SIZES[size]
        m = subj * t
        root = Path(args.out) / size
        root.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        store = make_store(root, size)
        print(f"<!-- {size}: store written in {time.perf_counter() - t0:.0f} s -->", flush=True)
        results = {}
        for method in args.methods:
            if method == "sklearn-randomized" and n * m * 4 > 6e9:  # would need ~2x in RAM
                continue
            cmd = [
                sys.executable,
                __file__,
                "--worker-memory",
                args.worker_memory,
                "--one",
                method,
                str(store),
                str(k),
                str(root),
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"<!-- {method} failed: {proc.stderr[-500:]} -->", flush=True)
                continue
            results[method] = json.loads(proc.stdout.strip().splitlines()[-1])
            more = {
                key: v
                for key, v in results[method].items()
                if key not in ("method", "wall_s", "peak_gb", "passes")
            }
            if more:
                print(f"<!-- {size} {method}: {more} -->", flush=True)
        # the exact SVD when it was run (now or by an earlier invocation), else ours
        ref = "exact-gram" if (root / "U_exact-gram.npy").exists() else "ours-randomized"
        U_ref = np.load(root / f"U_{ref}.npy")
        s_ref = np.load(root / f"s_{ref}.npy")
        for method, r in results.items():
            U = np.load(root / f"U_{method}.npy")
            s = np.load(root / f"s_{method}.npy")
            err10 = np.max(np.abs(s[:10] / s_ref[:10] - 1))
            errk = np.max(np.abs(s / s_ref - 1))
            cm, cmin = capture(U, U_ref)
            bound = flops(method, n, subj, t, k) / (gf * 1e9)
            print(
                f"| {size} {n}×{m} k={k} | {method} | {r['wall_s']:.1f} | {r['passes']} | "
                f"{bound:.1f} | "
                f"{r['wall_s'] / bound:.1f} | {r['peak_gb']:.2f} | {err10:.1e} / {errk:.1e} | "
                f"{cm:.4f} / {cmin:.4f} |",
                flush=True,
            )
        print(f"<!-- reference for {size}: {ref} -->", flush=True)


if __name__ == "__main__":
    main()
