"""The report's per-parcel tables against their dense definitions: each parcel's held-out
homogeneity (every pair's correlation on the other split's features), its DCBC (all-pairs
shortest paths on the mesh, binned), and its Dice with the other split's parcel of the same
id, read back from the label files."""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import shortest_path

from lsd_dask.io.bids import find_atlas_folder
from lsd_dask.io.surface_files import load_mesh
from lsd_dask.pipeline.stages.held_out import BIN_WIDTH_MM, MAX_DIST_MM
from lsd_dask.pipeline.stages.svd import svd_features
from lsd_dask.surface import combine_meshes


def _dense_parcel_dcbc(R, D, labels, parcel):
    """DCBC over the pairs with an end in ``parcel`` (both ends in some parcel), from the
    dense correlation and distance matrices."""
    iu = np.triu_indices(R.shape[0], k=1)
    a, b, d, r = labels[iu[0]], labels[iu[1]], D[iu], R[iu]
    use = (a > 0) & (b > 0) & ((a == parcel) | (b == parcel)) & (d > 0) & (d <= MAX_DIST_MM)
    a, b, d, r = a[use], b[use], d[use], r[use]
    total, weight = 0.0, 0.0
    for lo in np.arange(0.0, MAX_DIST_MM, BIN_WIDTH_MM):
        inb = (d > lo) & (d <= lo + BIN_WIDTH_MM)
        w_, b_ = inb & (a == b), inb & (a != b)
        if w_.any() and b_.any():
            w = 1.0 / (1.0 / w_.sum() + 1.0 / b_.sum())
            total += w * (r[w_].mean() - r[b_].mean())
            weight += w
    return total / weight if weight > 0 else None


def test_each_parcels_scores_equal_their_dense_definitions(demo):
    out, report = demo
    work = out / "work"
    kept = np.load(work / "mask.npy")
    meshes = {h: load_mesh(out.parent / "input" / f"{h[0]}h.surf.gii") for h in ("left", "right")}
    mesh, _ = combine_meshes([meshes["left"], meshes["right"]])
    V = mesh.vertices[kept]
    A = mesh.adjacency()[kept][:, kept].tocoo()
    lengths = np.linalg.norm(V[A.row] - V[A.col], axis=1)
    D = shortest_path(sp.csr_matrix((lengths, (A.row, A.col)), shape=A.shape), directed=False)
    features = {
        s: svd_features(np.load(work / f"{s}_U.npy"), np.load(work / f"{s}_s.npy"))
        for s in ("split1", "split2")
    }
    folder = find_atlas_folder(out)
    method, k = "directional", 24
    files = {}
    for split in ("split1", "split2"):
        parts = [
            nib.load(next(folder.glob(f"*hemi-{h}_*atlas-{method}{k}{split}_*.label.gii")))
            for h in ("L", "R")
        ]
        files[split] = np.concatenate([np.asarray(p.darrays[0].data) for p in parts])
    for split, other in (("split1", "split2"), ("split2", "split1")):
        table = report["parcels"][method][str(k)][split]
        labels = files[split][kept]
        Z = np.asarray(features[other], np.float64)
        R = Z @ Z.T  # unit rows: every pair's correlation on the other split's features
        ids = np.unique(labels[labels > 0])
        assert table["ids"] == ids.tolist()
        assert table["names"] == [f"parcel{i:04d}" for i in ids]
        for row, parcel in enumerate(ids):
            members = np.flatnonzero(labels == parcel)
            assert table["sizes"][row] == members.size
            C = R[np.ix_(members, members)]
            n = members.size
            want = (C.sum() - np.trace(C)) / (n * (n - 1)) if n > 1 else 0.0
            assert table["homogeneity"][row] == pytest.approx(want, abs=1e-5)
            dense = _dense_parcel_dcbc(R, D, labels, parcel)
            if dense is None:
                assert table["dcbc"][row] is None
            else:
                assert table["dcbc"][row] == pytest.approx(dense, abs=1e-5)
            mine, theirs = files[split] == parcel, files[other] == parcel
            dice = 2 * (mine & theirs).sum() / (mine.sum() + theirs.sum())
            assert table["dice"][row] == pytest.approx(dice, abs=1e-12)
    # the tables travel in report.json as the page reads them
    saved = json.loads((out / "report.json").read_text())
    assert saved["parcels"] == report["parcels"]
