"""Figures of a run: Dice against K (Blumensath Fig. 8) and parcellations on the surface.

Parcellations are drawn with nilearn's ``plot_surf_roi``: lateral and medial views of both
hemispheres. On fsaverage5 meshes (10,242 vertices per hemisphere) they are drawn on
nilearn's inflated fsaverage5 with sulcal depth as shading; on other meshes, on the mesh
itself with its convexity as shading. Colours come from a qualitative palette, chosen so
that neighbouring parcels differ, and every later panel's labels are matched to the first
panel's by the Hungarian method, so that the same region has the same colour across splits
and methods.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linear_sum_assignment

from .surface import Mesh, mesh_adjacency

__all__ = [
    "display_surfaces",
    "dseg_colormap",
    "match_labels",
    "parcel_colours",
    "plot_dice_vs_k",
    "plot_parcellation",
    "plot_parcellations",
]

#: (hemisphere, view) of each column of a parcellation figure
VIEWS = (("left", "lateral"), ("left", "medial"), ("right", "medial"), ("right", "lateral"))


def plot_dice_vs_k(
    scores: list[dict[str, Any]], path: str | os.PathLike[str], *, title: str | None = None
) -> Path:
    """One line per method (Dice between splits against K), each with its own null's
    mean ± sd as a band in the method's colour.

    ``scores`` rows need ``method``, ``k``, ``dice``, ``null_dice_mean``, ``null_dice_sd``.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    methods = list(dict.fromkeys(r["method"] for r in scores))
    for i, m in enumerate(methods):
        colour = plt.get_cmap("tab10")(i % 10)
        rows = sorted((r for r in scores if r["method"] == m), key=lambda r: r["k"])
        ks = [r["k"] for r in rows]
        ax.plot(ks, [r["dice"] for r in rows], marker="o", color=colour, label=m)
        mean = np.array([r["null_dice_mean"] for r in rows])
        sd = np.array([r["null_dice_sd"] for r in rows])
        ax.plot(ks, mean, color=colour, linestyle="--", linewidth=1)
        ax.fill_between(ks, mean - sd, mean + sd, color=colour, alpha=0.15)
    ax.plot([], [], color="grey", linestyle="--", label="its null (region sizes at random)")
    ax.set_xlabel("number of clusters K")
    ax.set_ylabel("Dice between splits")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False, fontsize=8)
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
    display: dict[str, Mesh] | None = None,
) -> Path:
    """One parcellation (0 = background), lateral and medial views of both hemispheres."""
    return plot_parcellations(meshes, {title: labels}, path, display=display)


def plot_parcellations(
    meshes: dict[str, Mesh],
    panels: dict[str, np.ndarray],
    path: str | os.PathLike[str],
    *,
    title: str = "",
    display: dict[str, Mesh] | None = None,
) -> Path:
    """Several parcellations of the same vertices, one row each, in matched colours.

    Parameters
    ----------
    meshes : {"left": Mesh, "right": Mesh}
        The meshes the labels are on (left hemisphere's vertices first in ``labels``).
    panels : dict of row title -> labels of shape (n_vertices,)
        Labels from 1, 0 = background (drawn as the shading only). Every row after the first
        is relabelled to match the first row by the Hungarian method.
    path : where the PNG goes
    title : figure title
    display : {"left": Mesh, "right": Mesh}, optional
        Inflated (or very inflated) meshes to draw on, vertex for vertex with ``meshes``;
        shaded by the convexity of ``meshes``. Default: see :func:`display_surfaces`.
    """
    plt = _pyplot()
    from nilearn import plotting

    surfaces, shading = display_surfaces(meshes, display)
    sizes = [meshes[h].n_vertices for h in ("left", "right")]
    A = mesh_adjacency([meshes[h].faces for h in ("left", "right")], sizes)
    rows = list(panels.items())
    reference = np.asarray(rows[0][1], np.int64)
    matched = [reference] + [match_labels(reference, np.asarray(v)) for _, v in rows[1:]]
    n_lab = int(max(int(m.max(initial=0)) for m in matched))
    colour_map = _id_colormap(list(parcel_colours(matched, A, n_lab)))
    fig, axes = plt.subplots(
        len(rows),
        len(VIEWS),
        subplot_kw={"projection": "3d"},
        figsize=(3.2 * len(VIEWS), 2.6 * len(rows) + (0.4 if title else 0.0)),
        dpi=110,
        squeeze=False,
    )
    for r, ((name, _), lab) in enumerate(zip(rows, matched, strict=True)):
        parts = {"left": lab[: sizes[0]], "right": lab[sizes[0] :]}
        for c, (hemi, view) in enumerate(VIEWS):
            mesh = surfaces[hemi]
            plotting.plot_surf_roi(
                (mesh.vertices, mesh.faces),
                roi_map=parts[hemi].astype(np.float64),
                hemi=hemi,
                view=view,
                bg_map=shading[hemi],
                **colour_map,
                threshold=1e-14,  # label 0 shows the shading only
                colorbar=False,
                axes=axes[r, c],
                figure=fig,
            )
        axes[r, 0].text2D(0.0, 0.95, name, transform=axes[r, 0].transAxes, fontsize=10, va="top")
    if title:
        fig.suptitle(title, fontsize=12)
    fig.subplots_adjust(left=0, right=1, bottom=0, top=0.93 if title else 1.0, wspace=0, hspace=0)
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out


def dseg_colormap(table: str | os.PathLike[str]) -> dict[str, Any]:
    """``cmap``, ``vmin`` and ``vmax`` for nilearn's ``plot_surf_roi`` that draw each id
    of a ``_dseg`` label file in its own colour of the look-up table ``table`` (a BIDS
    ``.tsv``: index, name, color).

    nilearn takes the table itself as ``cmap``, but then drops the ``Background`` row and
    interpolates the others over the range of the data, so that the medial wall takes
    parcel 1's colour and most parcels another parcel's. Here the colour map lists one
    colour per id from 0 to the largest (ids missing from the table in black), and the
    range puts each id at the middle of its own colour.

    Examples
    --------
    >>> from nilearn import plotting                                  # doctest: +SKIP
    >>> plotting.plot_surf_roi(mesh, roi_map="..._dseg.label.gii",    # doctest: +SKIP
    ...                        hemi="left", **dseg_colormap("..._dseg.tsv"))
    """
    import pandas as pd

    lut = pd.read_csv(table, sep="\t").set_index("index")
    colours = lut["color"].reindex(range(int(lut.index.max()) + 1), fill_value="#000000")
    return _id_colormap(list(colours))


def _id_colormap(colours: list[Any]) -> dict[str, Any]:
    """nilearn's ``cmap``, ``vmin`` and ``vmax`` that draw id i in ``colours[i]``: each id
    at the middle of its own bin, so that no rounding moves it into a neighbour's."""
    from matplotlib.colors import ListedColormap

    return {"cmap": ListedColormap(colours), "vmin": -0.5, "vmax": len(colours) - 0.5}


def display_surfaces(
    meshes: dict[str, Mesh], display: dict[str, Mesh] | None = None
) -> tuple[dict[str, Mesh], dict[str, np.ndarray]]:
    """Meshes to draw on and their shading: the given ``display`` meshes (e.g. inflated)
    shaded by the convexity of ``meshes``; else nilearn's inflated fsaverage5 and sulcal
    depth for fsaverage5 meshes (FreeSurfer's vertex order, 10,242 per hemisphere); else
    the meshes themselves shaded by their convexity."""
    if display is not None:
        for h in ("left", "right"):
            if display[h].n_vertices != meshes[h].n_vertices:
                raise ValueError(
                    f"display mesh {h} has {display[h].n_vertices} vertices, the {h} mesh "
                    f"{meshes[h].n_vertices}."
                )
        return dict(display), {h: convexity(meshes[h]) for h in ("left", "right")}
    if all(meshes[h].n_vertices == 10242 for h in ("left", "right")):
        from nilearn import datasets

        infl = datasets.load_fsaverage("fsaverage5")["inflated"]
        sulc = datasets.load_fsaverage_data("fsaverage5", data_type="sulcal")
        surf = {
            h: Mesh(np.asarray(infl.parts[h].coordinates), np.asarray(infl.parts[h].faces))
            for h in ("left", "right")
        }
        return surf, {h: np.asarray(sulc.data.parts[h], np.float64) for h in ("left", "right")}
    return dict(meshes), {h: convexity(meshes[h]) for h in ("left", "right")}


def convexity(mesh: Mesh) -> np.ndarray:
    """How far each vertex lies inside (sulcus, > 0) or outside (gyrus, < 0) the mean of
    its neighbours, along the vertex normal: a sulcal-depth-like shading."""
    A = sp.csr_matrix(mesh.adjacency(), dtype=np.float64)
    V = np.asarray(mesh.vertices, np.float64)
    deg = np.asarray(A.sum(axis=1)).ravel()
    mean = (A @ V) / np.maximum(deg, 1)[:, None]
    tri = V[mesh.faces]
    face_n = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    normal = np.zeros_like(V)
    for j in range(3):
        np.add.at(normal, mesh.faces[:, j], face_n)
    normal /= np.maximum(np.linalg.norm(normal, axis=1, keepdims=True), 1e-12)
    return np.einsum("ij,ij->i", mean - V, normal)


def match_labels(reference: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Relabel ``labels`` so that each of its parcels takes the id of the reference parcel
    it overlaps most, one to one (Hungarian method on the overlap counts).

    0 stays background; parcels left without a partner get ids above the reference's.
    """
    ref = np.asarray(reference, np.int64)
    lab = np.asarray(labels, np.int64)
    both = (ref > 0) & (lab > 0)
    ids = np.unique(lab[lab > 0])
    if ids.size == 0:
        return lab.copy()
    ref_ids = np.unique(ref[ref > 0])
    overlap = sp.coo_matrix(
        (
            np.ones(int(both.sum())),
            (np.searchsorted(ids, lab[both]), np.searchsorted(ref_ids, ref[both])),
        ),
        shape=(ids.size, max(ref_ids.size, 1)),
    ).toarray()
    rows, cols = linear_sum_assignment(-overlap)
    new_id = np.zeros(ids.size, np.int64)
    keep = overlap[rows, cols] > 0
    new_id[rows[keep]] = ref_ids[cols[keep]]
    free = np.flatnonzero(new_id == 0)
    new_id[free] = int(ref.max(initial=0)) + 1 + np.arange(free.size)
    out = np.zeros_like(lab)
    out[lab > 0] = new_id[np.searchsorted(ids, lab[lab > 0])]
    return out


def parcel_colours(
    labellings: list[np.ndarray], adjacency: sp.spmatrix, n_labels: int
) -> np.ndarray:
    """RGBA colours for ids 0..n_labels (0: grey) from a qualitative palette, chosen so that
    parcels that touch on the mesh in any of the labellings get far-apart colours.

    Greedy: parcels in decreasing size each take the palette colour furthest (in RGB) from
    the colours of their neighbours coloured so far, the least used one on ties. Parcels
    that share a palette colour get shades of it (lighter and darker in turn), so that
    every parcel's colour is its own in 8-bit RGB: in a viewer or a legend a colour names
    one parcel.
    """
    palette = _palette()
    A = sp.coo_matrix(adjacency)
    touch = sp.csr_matrix((n_labels + 1, n_labels + 1))
    size = np.zeros(n_labels + 1)
    for lab in labellings:
        lab = np.asarray(lab, np.int64)
        size += np.bincount(lab, minlength=n_labels + 1)[: n_labels + 1]
        a, b = lab[A.row], lab[A.col]
        cut = (a != b) & (a > 0) & (b > 0)
        touch = touch + sp.csr_matrix(
            (np.ones(int(cut.sum())), (a[cut], b[cut])), shape=(n_labels + 1, n_labels + 1)
        )
    touch = touch.tocsr()
    colour = np.full(n_labels + 1, -1, np.int64)
    used = np.zeros(len(palette))
    for p in np.argsort(-size[1:], kind="stable") + 1:
        nbrs = colour[touch.indices[touch.indptr[p] : touch.indptr[p + 1]]]
        nbrs = nbrs[nbrs >= 0]
        if nbrs.size:
            d = np.linalg.norm(palette[:, None, :3] - palette[nbrs][None, :, :3], axis=2).min(1)
        else:
            d = np.ones(len(palette))
        best = np.flatnonzero(d >= d.max() - 1e-9)
        colour[p] = best[np.argmin(used[best])]
        used[colour[p]] += 1
    out = np.empty((n_labels + 1, 4))
    out[0] = BACKGROUND_RGBA
    out[1:] = palette[colour[1:]]
    return _distinct(out, colour)


#: the colour of id 0 (unlabelled: the medial wall) wherever a run writes it
BACKGROUND_RGBA = (0.8, 0.8, 0.8, 1.0)


# --------------------------------------------------------------------------- helpers


def _distinct(rgba: np.ndarray, family: np.ndarray) -> np.ndarray:
    """Each row 1.. its own 8-bit RGB: the j-th parcel of a palette colour (j = 1, 2, ...)
    shaded by a step of 0.6 / (its count) toward white (odd j) or black (even j), less
    where the shade would turn grey (channel spread under 0.16); then
    any 8-bit collision left (with another family or the background) nudged one level
    at a time."""
    out = rgba.copy()
    counts = np.bincount(family[1:], minlength=int(family.max(initial=0)) + 1)
    seen = np.zeros_like(counts)
    for p in range(1, len(out)):
        c = family[p]
        j = seen[c]
        seen[c] += 1
        if j == 0:
            continue
        step = 0.6 * ((j + 1) // 2) / counts[c]
        # shades keep their colourfulness: never as grey as the background reads
        step = min(step, max(0.0, 1.0 - 0.16 / max(float(np.ptp(out[p, :3])), 1e-9)))
        target = 1.0 if j % 2 else 0.0
        out[p, :3] = out[p, :3] + step * (target - out[p, :3])
    taken: set[tuple[int, ...]] = {_rgb8(out[0])}
    for p in range(1, len(out)):
        key = _rgb8(out[p])
        k = 0
        while key in taken:  # rare: a shade that lands on another colour
            k += 1
            channel = k % 3
            level = round(255 * out[p, channel])
            out[p, channel] = (level + (1 if level < 128 else -1)) / 255
            key = _rgb8(out[p])
        taken.add(key)
    return out


def _rgb8(row: np.ndarray) -> tuple[int, ...]:
    return tuple(int(round(255 * float(v))) for v in row[:3])


def _palette() -> np.ndarray:
    """About 60 qualitative colours (matplotlib's tab20, tab20b, tab20c, Set1 and Dark2),
    greys left out."""
    import matplotlib

    cols = []
    for name in ("tab20", "tab20b", "tab20c", "Set1", "Dark2"):
        cmap = matplotlib.colormaps[name]
        cols.extend(cmap(i) for i in range(cmap.N))
    pal = np.unique(np.round(np.asarray(cols), 4), axis=0)
    # no greys: they read as the background or the shading
    return pal[np.ptp(pal[:, :3], axis=1) > 0.15]


def _pyplot() -> Any:
    # no matplotlib.use(): without a display matplotlib picks Agg itself, and switching the
    # backend here would turn off a notebook's inline figures for the rest of its session
    import matplotlib.pyplot as plt

    return plt
