"""The report's interactive cortex in a real browser: the demo's ``report.html`` opened
from disk in headless Chromium (Debian's, driven by Playwright) draws the parcels in their
look-up tables' colours, names the parcel under the pointer with its scores from
``report.json``, switches K and split through its selectors, and links the surface and the
per-parcel table both ways, with no console error and no network."""

from __future__ import annotations

import io

import matplotlib.image as mpimg
import nibabel as nib
import numpy as np
import pandas as pd
import pytest

from lsd_dask.io.bids import find_atlas_folder
from lsd_dask.pipeline.products.viewer import plotly_script
from lsd_dask.testing.browser import chromium_page, front_vertex, hover_vertex, require_chromium


def _labels(out, method, k, split):
    folder = find_atlas_folder(out)
    parts = [
        nib.load(next(folder.glob(f"*hemi-{h}_*atlas-{method}{k}{split}_*.label.gii")))
        for h in ("L", "R")
    ]
    return np.concatenate([np.asarray(p.darrays[0].data) for p in parts])


def _table_colours(out, method, k, split):
    folder = find_atlas_folder(out)
    table = pd.read_csv(next(folder.glob(f"*atlas-{method}{k}{split}_*dseg.tsv")), sep="\t")
    table = table[table["index"] > 0]
    return {
        int(i): tuple(int(c[j : j + 2], 16) for j in (1, 3, 5))
        for i, c in zip(table["index"], table["color"], strict=True)
    }


def _expected(report, method, k, split, parcel):
    """What the page must say of ``parcel``, from ``report.json``'s own numbers."""
    table = report["parcels"][method][str(k)][split]
    row = table["ids"].index(parcel)
    score = next(r for r in report["scores"] if r["method"] == method and r["k"] == k)
    return [
        f"parcel{parcel:04d} (id {parcel}, {split})",
        f"{table['sizes'][row]} vertices",
        f"held-out homogeneity {table['homogeneity'][row]:.3f}",
        f"DCBC {table['dcbc'][row]:.3f}" if table["dcbc"][row] is not None else "DCBC n/a",
        f": {table['dice'][row]:.3f}",
        f"held-out homogeneity {score['heldout_homogeneity']:.3f} (spin-null z "
        f"{score['heldout_homogeneity_z']:.1f})",
    ]


def test_the_page_draws_names_and_switches_the_parcels(demo):
    require_chromium()
    out, report = demo
    html = (out / "report.html").read_text()
    # one offline file: plotly.js inlined from the package, no script or style fetched
    script = plotly_script()[0]
    assert script in html
    rest = html.replace(script, "")
    assert "<script src" not in rest and "<link" not in rest
    with chromium_page() as (page, errors):
        requests = []
        page.on("request", lambda r: requests.append(r.url))
        page.goto((out / "report.html").as_uri())
        page.wait_for_function("window.lsdViewer && window.lsdViewer.ready", timeout=60_000)
        assert all(u.startswith(("file:", "data:", "blob:")) for u in requests), requests
        state = page.evaluate("({...window.lsdViewer.state})")
        method, k, split = state["method"], state["k"], state["split"]
        assert (method, k, split) == ("directional", 24, "split1")

        # the parcels' colours are their look-up table's: unlit, a pixel is its vertex's
        page.evaluate(
            "Plotly.restyle('lsd-cortex', {lighting: {ambient: 1, diffuse: 0, specular: 0,"
            " fresnel: 0, roughness: 1}})"
        )
        page.wait_for_timeout(300)
        shot = mpimg.imread(io.BytesIO(page.locator("#lsd-cortex").screenshot()), format="png")
        pixels = np.round(shot[..., :3].reshape(-1, 3) * 255).astype(int)
        drawn = pixels[(pixels < 250).any(axis=1)]  # the white page left out
        colours = _table_colours(out, method, k, split)
        near = {i: (np.abs(drawn - np.array(c)).max(axis=1) <= 2).sum() for i, c in colours.items()}
        assert sum(near.values()) > 0.6 * len(drawn)
        assert sum(n > 50 for n in near.values()) >= 8  # many parcels, each a patch

        # the pointer on a known vertex: its parcel and that parcel's scores
        page.locator("#lsd-cortex").scroll_into_view_if_needed()
        at = front_vertex(page)
        text = hover_vertex(page, at)
        parcel = int(_labels(out, method, k, split)[at["vertex"]])
        assert parcel > 0
        for want in _expected(report, method, k, split, parcel):
            assert want in text, (want, text)

        # a click on it finds its row in the per-parcel table
        page.mouse.down()
        page.wait_for_timeout(100)  # a person's click: plotly's picking runs per frame
        page.mouse.up()
        page.wait_for_selector(f"#lsd-parcels tr.sel[data-parcel='{parcel}']", timeout=10_000)
        assert page.locator("#lsd-parcels tr.sel").count() == 1
        again = front_vertex(page)  # the page did not move
        assert again["vertex"] == at["vertex"]
        assert again["x"] == pytest.approx(at["x"]) and again["y"] == pytest.approx(at["y"])

        # another K and split through the selectors: that parcellation's parcel and table
        page.select_option("#lsd-k", "12")
        page.select_option("#lsd-split", "split2")
        page.wait_for_function(
            "document.getElementById('lsd-caption').textContent.includes('K = 12, split2')"
        )
        table = report["parcels"][method]["12"]["split2"]
        assert page.locator("#lsd-parcels tbody tr").count() == len(table["ids"])
        text = hover_vertex(page, {**at, "x": at["x"] + 1})
        other = int(_labels(out, method, 12, "split2")[at["vertex"]])
        for want in _expected(report, method, 12, "split2", other):
            assert want in text, (want, text)

        # a row shows its parcel: the others fade, the row is marked
        row = page.locator(f"#lsd-parcels tbody tr[data-parcel='{table['ids'][0]}']")
        row.click()
        page.wait_for_function(f"window.lsdViewer.state.selected === {table['ids'][0]}")
        assert page.locator("#lsd-parcels tr.sel").count() == 1

        # where the splits disagree: red where the two files' ids differ, and only there
        page.select_option("#lsd-split", "disagreement")
        page.wait_for_function(
            "document.getElementById('lsd-caption').textContent.includes('differs')"
        )
        a, b = _labels(out, method, 12, "split1"), _labels(out, method, 12, "split2")
        red = page.evaluate(
            "window.lsdViewer.colours(0).filter(function (c) { return c === '#d62728'; }).length"
        )
        left = slice(0, page.evaluate("window.lsdViewer.data.hemispheres[1].offset"))
        assert red == int(((a[left] != b[left]) & (a[left] > 0)).sum()) > 0
    assert errors == []
