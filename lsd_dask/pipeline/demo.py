"""The built-in demo: a synthetic two-split surface study, clustered and scored.

Until the full split-half pipeline lands this is the README's main job. It runs every
clustering method the package has on the same group features and prints split-half
reproducibility (Dice after contiguity splitting, NMI, ARI) and agreement with the planted
parcels.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import metrics
from ..surface import combine_meshes, split_connected, two_hemisphere_mesh
from ..testing.generators import SurfaceStudy, surface_study

__all__ = ["DemoResult", "run_demo", "group_features"]


@dataclass
class DemoResult:
    """Scores of the demo, one row per (method, K)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    n_vertices: int = 0
    n_subjects: tuple[int, int] = (0, 0)

    def table(self) -> str:
        head = (
            f"{'method':<22}{'K':>5}{'Dice':>8}{'NMI':>8}{'ARI':>8}{'NMI-truth':>11}{'time s':>8}"
        )
        lines = [head, "-" * len(head)]
        for r in self.rows:
            lines.append(
                f"{r['method']:<22}{r['k']:>5}{r['dice']:>8.3f}{r['nmi']:>8.3f}"
                f"{r['ari']:>8.3f}{r['nmi_truth']:>11.3f}{r['seconds']:>8.2f}"
            )
        return "\n".join(lines)


def group_features(study: SurfaceStudy, split: str, rank: int) -> np.ndarray:
    """Unit-normalised rows of the leading left singular vectors of a split.

    Each subject is demeaned and variance-normalised per vertex, subjects are concatenated
    in time, and the ``rank`` leading left singular vectors are kept (Blumensath's
    protocol). Constant vertices (the medial wall) get zero rows.
    """
    blocks = []
    for _, x in study.iter_subjects(split):
        x = x - x.mean(axis=1, keepdims=True)
        sd = x.std(axis=1, keepdims=True)
        blocks.append(np.divide(x, sd, out=np.zeros_like(x), where=sd > 0))
    X = np.concatenate(blocks, axis=1)
    U, _, _ = np.linalg.svd(X, full_matrices=False)
    U = U[:, :rank]
    norms = np.linalg.norm(U, axis=1, keepdims=True)
    return np.divide(U, norms, out=np.zeros_like(U), where=norms > 0)


def run_demo(
    *,
    n_parcels: int = 30,
    ks: tuple[int, ...] = (10, 30),
    frequency: int = 10,
    n_subjects: tuple[int, int] = (3, 3),
    n_timepoints: int = 120,
    rank: int = 40,
    random_state: int = 0,
    methods: dict[str, Callable[[int, int], Any]] | None = None,
    log: Callable[[str], None] = print,
) -> DemoResult:
    """Generate a small synthetic study, cluster each split, score the splits."""
    meshes = two_hemisphere_mesh(frequency, frequency + 1, radius=50.0)
    study = surface_study(
        meshes,
        n_parcels=n_parcels,
        n_subjects=n_subjects,
        n_timepoints=n_timepoints,
        medial_wall_fraction=0.08,
        random_state=random_state,
    )
    combined, _ = combine_meshes(meshes)
    A = combined.adjacency()
    cortex = study.labels > 0
    log(
        f"synthetic study: {study.n_vertices} vertices ({int((~cortex).sum())} medial wall), "
        f"{study.n_parcels} planted parcels, {sum(n_subjects)} subjects x {n_timepoints} TRs"
    )
    feats = {s: group_features(study, s, rank)[cortex] for s in study.splits}
    methods = methods or default_methods()
    result = DemoResult(n_vertices=study.n_vertices, n_subjects=n_subjects)
    for name, make in methods.items():
        for k in ks:
            t0 = time.perf_counter()
            parc = {}
            for split, F in feats.items():
                lab = np.zeros(study.n_vertices, np.int64)
                lab[cortex] = np.asarray(make(k, random_state).fit_predict(F)) + 1
                parc[split] = split_connected(lab, A, min_size=5)
            a, b = parc.values()
            result.rows.append(
                {
                    "method": name,
                    "k": k,
                    "dice": metrics.dice_matched(a, b, background=0).mean,
                    "nmi": metrics.nmi(a, b, background=0),
                    "ari": metrics.ari(a, b, background=0),
                    "nmi_truth": metrics.nmi(study.labels, a, background=0),
                    "seconds": time.perf_counter() - t0,
                }
            )
    log(result.table())
    return result


def default_methods() -> dict[str, Callable[[int, int], Any]]:
    """The methods the demo compares, keyed by a display name (directional first)."""
    from ..cluster import LSD, DirectionalClustering, HierarchicalLSD, SphericalKMeans

    return {
        "directional": lambda k, seed: DirectionalClustering(k, random_state=seed),
        "LSD (rotation)": lambda k, seed: LSD(k, random_state=seed),
        "hierarchical LSD": lambda k, seed: HierarchicalLSD(k, random_state=seed),
        "spherical k-means": lambda k, seed: SphericalKMeans(k, random_state=seed),
    }
