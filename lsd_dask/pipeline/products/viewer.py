"""The report's interactive cortex (:func:`viewer_html`): both hemispheres on the run's
display surface, every method, K and split's parcels in their label files' ids and colours,
the parcel under the pointer with its scores, a per-parcel table linked both ways with the
surface, where the splits disagree, and the scores against K.

Drawn by plotly.js (``mesh3d``), whose built script ships in the ``plotly`` Python package:
it is read from the installed package and inlined with the data, so that the page opens
from a disk or an e-mail attachment with no network. The geometry is written once and the
labels as 16-bit ids; both gzip-compressed and base64-encoded, unpacked in the browser by
its own ``DecompressionStream`` (Chromium 80, Firefox 113, Safari 16.4 and later).
"""

from __future__ import annotations

import base64
import gzip
import html
import json
import re
from importlib import metadata, resources
from typing import Any

import numpy as np

from ...io.bids import hex_colour
from ...io.surface_files import HEMISPHERES, load_mesh
from ...plotting import display_surfaces
from ...surface import Mesh
from ..engine.context import RunContext
from .dseg import matched_labels
from .individuals import participant_maps

__all__ = ["display_meshes", "plotly_script", "viewer_html", "viewer_payload"]

#: the metrics the scores-against-K figure offers: (report column, its name)
METRICS = [
    ("dice", "split-half Dice"),
    ("nmi", "split-half NMI"),
    ("heldout_homogeneity", "held-out homogeneity"),
    ("heldout_dcbc", "DCBC"),
    ("heldout_silhouette", "neighbour silhouette"),
]
#: the methods' line colours in that figure (matplotlib's tab10)
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"]
#: the colour of vertices in no parcel (the medial wall)
BACKGROUND = "#b4b4b4"
#: the bytes of participants' maps the page holds, whole participants in the run's order
#: (a map of 64,984 vertices took about 35 kB, labels and confidence, on the realistic
#: study at K = 400: some 60 maps, beside plotly.js's 4.8 MB and a full-scale run's own)
PARTICIPANT_BYTES = 2_000_000


def viewer_html(ctx: RunContext, report: dict[str, Any]) -> str:
    """The page's interactive section: its controls, the inlined plotly.js, the data and
    the script that draws them (``report``'s scores and per-parcel tables)."""
    script, version = plotly_script()
    payload = json.dumps(viewer_payload(ctx, report), separators=(",", ":"))
    code = resources.files(__package__).joinpath("viewer.js").read_text(encoding="utf-8")
    e = html.escape
    return "\n".join(
        [
            "<h2>The parcels on the cortex</h2>",
            "<p>Drag to turn a hemisphere, scroll to zoom; the pointer on a vertex names its "
            "parcel and gives its scores; a click on a parcel finds its row below, a click on "
            "a row shows its parcel. Held-out scores of a split's parcels are on the other "
            "split's data; Dice is with the other split's parcel of the same id.</p>",
            "<div class='lsd-controls'><select id='lsd-method'></select> "
            "<select id='lsd-k'></select> <select id='lsd-split'></select> "
            "<select id='lsd-subject'></select> "
            "<button id='lsd-lateral'>lateral</button> <button id='lsd-medial'>medial"
            "</button></div>",
            "<p id='lsd-caption'></p>",
            "<div id='lsd-cortex' style='width:100%;height:420px'></div>",
            "<pre id='lsd-hover'>Point at the cortex.</pre>",
            "<p>Scores against K: <select id='lsd-metric'></select> (a click on a point "
            "shows that K; bands: the split-half nulls' mean ± 2 sd)</p>",
            "<div id='lsd-scores'></div>",
            "<div style='max-height:320px;overflow:auto;position:relative'>"
            "<table id='lsd-parcels'><thead><tr>"
            "<th>parcel</th><th>id</th><th>vertices</th><th>held-out homogeneity</th>"
            "<th>DCBC</th><th>Dice</th></tr></thead><tbody></tbody></table></div>",
            f"<p class='lsd-credit'>Drawn by plotly.js {e(version)} (MIT licence), inlined "
            "from the plotly Python package.</p>",
            f"<script>{script}</script>",
            "<script type='application/json' id='lsd-viewer-data'>"
            f"{_script_safe(payload)}</script>",
            f"<script>{code}</script>",
        ]
    )


def viewer_payload(ctx: RunContext, report: dict[str, Any]) -> dict[str, Any]:
    """What the page's script reads: the display surfaces, every view's labels, the
    colours by method and K, the per-parcel tables and the score rows."""
    cfg, meshes = ctx.cfg, ctx.meshes
    surfaces, _ = display_surfaces(meshes, display_meshes(ctx))
    hemispheres, offset = [], 0
    for hemi in HEMISPHERES:
        hemispheres.append(_hemisphere(hemi, surfaces[hemi], offset))
        offset += meshes[hemi].n_vertices
    views, colours = [], {}
    splits = list(ctx.splits)
    for spec in cfg.methods:
        for k in cfg.ks:
            labs, cols = matched_labels(ctx, spec.name, k)
            colours[f"{spec.name}|{k}"] = [hex_colour(c) for c in cols]
            views += [
                {"method": spec.name, "k": k, "split": s, "labels": _packed(labs[s], "<u2")}
                for s in splits
            ]
    participants, total = _participants(ctx, colours)
    return {
        "hemispheres": hemispheres,
        "participants": participants,
        "participants_total": total,
        "splits": splits,
        "methods": [m.name for m in cfg.methods],
        "ks": sorted(cfg.ks),
        "views": views,
        "colours": colours,
        "background": BACKGROUND,
        "parcels": report.get("parcels", {}),
        "scores": report.get("scores", []),
        "metrics": METRICS,
        "palette": PALETTE,
    }


def _participants(
    ctx: RunContext, colours: dict[str, list[str]]
) -> tuple[list[dict[str, Any]], int]:
    """Each shown participant's own parcels per prior (the run's first participants, while
    their maps take at most :data:`PARTICIPANT_BYTES`), their confidence as 16-bit
    fractions of its maximum, their scores beside the prior's; and how many participants
    the run has. The prior's colours join ``colours``."""
    out: list[dict[str, Any]] = []
    seen: list[str] = []
    settings = ctx.cfg.individual
    if settings is None:
        return out, 0
    name = str(settings.prior)
    is_method = settings.prior_is_method([spec.name for spec in ctx.cfg.methods])
    used, full = 0, False
    for m in participant_maps(ctx):
        label = m.result["participant"]
        if label not in seen:
            seen.append(label)
            full = full or used > PARTICIPANT_BYTES
        if full:
            continue
        k = int(m.entry["k"])
        key = f"{name}|{k}" if is_method else f"atlas:{name}"
        colours.setdefault(key, [hex_colour(c) for c in m.colours])
        top = float(np.max(m.confidence, initial=0.0)) or 1.0
        conf = np.round(np.clip(m.confidence, 0.0, top) / top * 65535)
        labels, confidence = _packed(m.labels, "<u2"), _packed(conf, "<u2")
        used += len(labels) + len(confidence)
        out.append(
            {
                "participant": label,
                "split": m.result["split"],
                "prior": str(m.entry["prior"]),  # e.g. "directional K=100 (split2)"
                # a method prior: its name (the page draws its parcels); an atlas: None
                "prior_method": name if is_method else None,
                "k": k,
                "colours": key,
                "labels": labels,
                "confidence": confidence,
                "confidence_max": top,
                "own": m.entry["own"]["mean"],
                "group": m.entry["group"]["mean"],
                "within_dice": m.entry["within_dice"],
                "moved": m.entry["moved"],
            }
        )
    return out, len(seen)


def display_meshes(ctx: RunContext) -> dict[str, Mesh] | None:
    """The run's ``display_mesh`` (inflated surfaces to draw on), loaded; None without."""
    paths = ctx.cfg.display_mesh
    return None if paths is None else {h: load_mesh(paths[h]) for h in HEMISPHERES}


def plotly_script() -> tuple[str, str]:
    """plotly.js as the installed ``plotly`` package ships it, and its version (from the
    script's own header)."""
    text = resources.files("plotly").joinpath("package_data", "plotly.min.js").read_text("utf-8")
    found = re.search(r"plotly\.js v(\S+)", text[:500])
    version = found.group(1) if found else f"(plotly {metadata.version('plotly')})"
    return text, version


def _hemisphere(name: str, surface: Mesh, offset: int) -> dict[str, Any]:
    """One hemisphere's display geometry, packed; ``offset``: its first vertex's place in
    the labels (the left hemisphere's vertices come first)."""
    return {
        "name": name,
        "offset": offset,
        "vertices": _packed(np.asarray(surface.vertices), "<f4"),
        "faces": _packed(np.asarray(surface.faces), "<u4"),
    }


def _packed(values: np.ndarray, dtype: str) -> str:
    """``values`` as little-endian ``dtype``, gzip-compressed (no timestamp: the same run
    writes the same page) and base64-encoded."""
    raw = np.ascontiguousarray(values, dtype=np.dtype(dtype)).tobytes()
    return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode("ascii")


def _script_safe(text: str) -> str:
    """JSON that cannot close its ``<script>`` element early."""
    return text.replace("</", "<\\/")
