"""Figures of a run: Dice against K (Blumensath Fig. 8) and parcellations on the surface."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from .surface import Mesh

__all__ = ["plot_dice_vs_k", "plot_parcellation"]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def plot_dice_vs_k(
    scores: list[dict[str, Any]], path: str | os.PathLike[str], *, title: str | None = None
) -> Path:
    """One line per method (mean Dice between splits against K) plus the null's mean ± sd.

    ``scores`` rows need ``method``, ``k``, ``dice``, ``null_dice_mean``, ``null_dice_sd``.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    methods = sorted({r["method"] for r in scores})
    for m in methods:
        rows = sorted((r for r in scores if r["method"] == m), key=lambda r: r["k"])
        ax.plot([r["k"] for r in rows], [r["dice"] for r in rows], marker="o", label=m)
    null = {}
    for r in scores:
        null.setdefault(r["k"], (r["null_dice_mean"], r["null_dice_sd"]))
    ks = sorted(null)
    mean = np.array([null[k][0] for k in ks])
    sd = np.array([null[k][1] for k in ks])
    ax.plot(ks, mean, color="grey", linestyle="--", label="null (region sizes placed at random)")
    ax.fill_between(ks, mean - sd, mean + sd, color="grey", alpha=0.2)
    ax.set_xlabel("number of clusters K")
    ax.set_ylabel("Dice between splits")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False)
    ax.set_title(title or "Split-half reproducibility")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out


def plot_parcellation(
    meshes: dict[str, Mesh],
    labels: np.ndarray,
    path: str | os.PathLike[str],
    *,
    title: str = "",
    seed: int = 0,
) -> Path:
    """Lateral views of each hemisphere, faces coloured by label (0 = grey background)."""
    plt = _pyplot()
    from matplotlib.colors import ListedColormap

    n_lab = int(labels.max(initial=0))
    rng = np.random.default_rng(seed)
    colours = np.vstack(
        [
            [0.8, 0.8, 0.8, 1.0],
            np.c_[rng.uniform(0.1, 0.95, (max(n_lab, 1), 3)), np.ones(max(n_lab, 1))],
        ]
    )
    cmap = ListedColormap(colours)
    fig = plt.figure(figsize=(4 * len(meshes), 4), dpi=120)
    start = 0
    for i, (hemi, mesh) in enumerate(meshes.items()):
        lab = labels[start : start + mesh.n_vertices]
        start += mesh.n_vertices
        ax = fig.add_subplot(1, len(meshes), i + 1, projection="3d")
        v = mesh.vertices
        face_lab = lab[mesh.faces[:, 0]]
        surf = ax.plot_trisurf(
            v[:, 0],
            v[:, 1],
            v[:, 2],
            triangles=mesh.faces,
            linewidth=0,
            antialiased=False,
            shade=False,
        )
        surf.set_facecolor(cmap(face_lab / max(n_lab, 1)))
        ax.view_init(elev=0, azim=180 if hemi == "left" else 0)
        ax.set_box_aspect(None, zoom=1.5)
        ax.set_axis_off()
        ax.set_title(hemi)
    fig.suptitle(title)
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out
