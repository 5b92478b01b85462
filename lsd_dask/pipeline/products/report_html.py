"""``report.html``: one self-contained page beside ``report.json`` with the figures, the
score table, what each score means, the settings and the timings."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

import yaml

from ...io.atomic import atomic_write_text
from ..engine.contract import Column
from .individuals import individual_html
from .scores import compared_columns, table_columns

__all__ = ["write_report_html"]


def write_report_html(
    report: dict[str, Any], path: Path, figures: list[Path], *, viewer: str = ""
) -> Path:
    """Write the page; figures are embedded (the page opens anywhere on its own).
    ``viewer``: the interactive cortex's section (:mod:`.viewer`), after the comparisons."""
    e = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>lsd-dask report {e(report.get('run_id', ''))}</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;font-size:0.9em}td,th{border:1px solid #ccc;"
        "padding:3px 8px;text-align:right}th{background:#f3f3f3}td.l{text-align:left}"
        "img{max-width:100%}pre{background:#f7f7f7;padding:1em;overflow:auto}"
        "tr.sel td{background:#fff3b0}#lsd-parcels tbody tr{cursor:pointer}</style>",
        "</head><body>",
        "<h1>Split-half parcellation report</h1>",
        *_recommendation(report.get("recommendation")),
        f"<p>Run {e(str(report.get('run_id')))}, lsd-dask "
        f"{e(str(report.get('versions', {}).get('lsd_dask', '')))}. "
        f"Command: <code>{e(str(report.get('command_line') or 'run from Python'))}</code>. "
        f"Surface: {e(_surface(report.get('config', {})))}.</p>",
        *_comparison_tables(report.get("scores", []), report.get("atlases", [])),
        viewer,
        "<h2>Scores</h2>",
        _score_table(report.get("scores", [])),
        "<h3>What the scores are</h3><dl>",
    ]
    for key, text in report.get("scores_explained", {}).items():
        parts.append(f"<dt><b>{e(key)}</b></dt><dd>{e(text)}</dd>")
    parts.append("</dl>")
    if report.get("feature_blur"):
        parts.append(_blur_table(report["feature_blur"]))
    parts += _subjects(report)
    parts += individual_html(report.get("individual"))
    parts.append("<h2>Figures</h2>")
    for fig in figures:
        data = base64.b64encode(Path(fig).read_bytes()).decode("ascii")
        parts.append(
            f"<figure><img alt='{e(Path(fig).name)}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{e(Path(fig).name)}</figcaption></figure>"
        )
    timings = report.get("timings_s", {})
    parts += [
        "<h2>Timings (seconds)</h2><table><tr>",
        "".join(f"<th>{e(k)}</th>" for k in timings),
        "</tr><tr>",
        "".join(f"<td>{v:.1f}</td>" for v in timings.values()),
        "</tr></table>",
        *_methods(report.get("methods_text")),
        "<h2>Settings</h2>",
        f"<pre>{e(yaml.safe_dump(report.get('config', {}), sort_keys=False))}</pre>",
        "</body></html>",
    ]
    return atomic_write_text(path, "\n".join(parts))


def _recommendation(pick: dict[str, Any] | None) -> list[str]:
    """The page's first section: the parcellation to use, why, and the runners-up."""
    e = html.escape
    if not pick:
        return ["<p>No recommendation: the run has no held-out scores.</p>"]
    others = ", ".join(
        f"{e(str(r['method']))} at K = {r['k']} (mean rank {r['mean_rank']:g})"
        for r in pick["runners_up"]
    )
    return [
        "<h2>Recommendation</h2>",
        f"<p id='recommendation'><b>{e(str(pick['method']))}, K = {pick['k']}.</b> "
        f"{e(pick['reason'])}</p>",
        f"<p>Runners-up: {others or 'none'}.</p>" if pick["runners_up"] else "",
    ]


def _subjects(report: dict[str, Any]) -> list[str]:
    """Each subject's quality figures: volumes, those kept after scrubbing, framewise
    displacement; a summary line, then the table (folded: a cohort has a thousand rows)."""
    e = html.escape
    rows = report.get("subjects") or []
    if not rows:
        return []
    kept = [r["kept"] for r in rows]
    fd = [r["mean_fd"] for r in rows if "mean_fd" in r]
    scrubbed = sum(r["kept"] < r["volumes"] for r in rows)
    summary = (
        f"{len(rows)} subjects; preprocessing: {report.get('preprocessing', 'none')}. Volumes "
        f"kept: {min(kept)} to {max(kept)}; {scrubbed} subject(s) lost volumes to scrubbing."
    )
    if fd:
        worst = max((r for r in rows if "mean_fd" in r), key=lambda r: r["mean_fd"])
        summary += (
            f" Mean framewise displacement: median {sorted(fd)[len(fd) // 2]:.3f} mm, "
            f"highest {worst['mean_fd']:.3f} mm ({worst['subject']})."
        )
    head = "".join(
        f"<th>{t}</th>" for t in ("subject", "split", "volumes", "kept", "mean FD (mm)", "max FD")
    )
    body = "".join(
        f"<tr><td class='l'>{e(r['subject'])}</td><td class='l'>{e(r['split'])}</td>"
        f"<td>{r['volumes']}</td><td>{r['kept']}</td>"
        + "".join(f"<td>{r[k]:.3f}</td>" if k in r else "<td></td>" for k in ("mean_fd", "max_fd"))
        + "</tr>"
        for r in rows
    )
    return [
        "<h2>Subjects</h2>",
        f"<p id='subjects'>{e(summary)}</p>",
        "<details><summary>Each subject</summary>",
        f"<table><tr>{head}</tr>{body}</table>",
        "<p class='legend'><b>volumes</b>: time points in the subject's files; <b>kept</b>: "
        "those left after scrubbing (all, without it); <b>FD</b>: fMRIPrep's framewise "
        "displacement, from the subject's confounds file (blank: none).</p></details>",
    ]


def _methods(text: str | None) -> list[str]:
    """The methods paragraph and its references, to paste into a paper."""
    if not text:
        return []
    paragraph, _, refs = text.partition("\n\nReferences\n")
    items = "".join(f"<li>{html.escape(r.split('. ', 1)[1])}</li>" for r in refs.splitlines())
    return [
        "<h2>Methods paragraph</h2>",
        "<p>For a paper's methods section, as the run was made:</p>",
        f"<blockquote id='methods'>{html.escape(paragraph)}</blockquote>",
        f"<ol>{items}</ol>" if items else "",
    ]


def _surface(config: dict[str, Any]) -> str:
    """What the mesh is: the standard one chosen for the data, or the files given."""
    source = str(config.get("mesh_source") or "given")
    if source != "given":
        return source
    mesh = config.get("mesh") or {}
    return "the given meshes " + ", ".join(str(v) for v in mesh.values())


def _blur_table(blur: dict[str, dict[str, Any]]) -> str:
    """The blur each split chose (``feature_smoothing_mm: auto``): every blur's held-out
    error, ± its standard error against the best."""
    e = html.escape
    rows = ["<h2>Feature blur chosen by the data</h2><table><tr><th>split</th><th>K</th>"]
    grid = next(iter(blur.values()))["grid_mm"]
    rows.append("".join(f"<th>{g:g} mm</th>" for g in grid) + "<th>chosen</th></tr>")
    for split, c in blur.items():
        cells = "".join(
            "<td>not tried</td>" if m is None else f"<td>{m:.4f} ± {se:.4f}</td>"
            for m, se in zip(c["mean_error"], c["standard_error"], strict=True)
        )
        rows.append(
            f"<tr><td class='l'>{e(split)}</td><td>{c['k']}</td>{cells}"
            f"<td>{c['fwhm_mm']:g} mm</td></tr>"
        )
    rows.append(
        "</table><p>Held-out within-parcel sum of squares per vertex (lower is better): "
        "parcels of one half of the split's time points, blurred, scored on the other half; "
        f"the least blur within {100 * next(iter(blur.values()))['rtol']:g} % (or one "
        "standard error) of the best is chosen. The blurs are tried from the least up, "
        "until one is worse than the best by twice that.</p>"
    )
    return "".join(rows)


def _score_table(rows: list[dict[str, Any]]) -> str:
    shown = [c for c in table_columns() if any(c.name in r for r in rows)]
    cols = [("method", "method"), ("k", "K")] + [(c.name, c.title) for c in shown]
    helps = {c.name: c.help for c in shown}
    head = "".join(_th(title, helps.get(key, "")) for key, title in cols)
    body = []
    for r in rows:
        cells = []
        for key, _ in cols:
            v = r.get(key)
            if isinstance(v, float):
                text = f"{v:.3f}" if not key.endswith("_z") else f"{v:.1f}"
            elif isinstance(v, list):
                text = "/".join(str(x) for x in v)
            else:
                text = "" if v is None else str(v)
            cls = " class='l'" if key == "method" else ""
            cells.append(f"<td{cls}>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>" + _legend(shown)


def _th(title: str, help: str) -> str:
    """A column heading, its meaning shown on hover."""
    e = html.escape
    return f"<th title='{e(help)}'>{e(title)}</th>" if help else f"<th>{e(title)}</th>"


def _legend(columns: list[Column]) -> str:
    """What each column of a table is, in a line under it (a z column once per title)."""
    e = html.escape
    seen: set[str] = set()
    items = []
    for c in columns:
        if c.help and c.title not in seen:
            seen.add(c.title)
            items.append(f"<b>{e(c.title)}</b>: {e(c.help)}")
    return f"<p class='legend'>{'. '.join(items)}.</p>" if items else ""


def _compared() -> list[tuple[str, str, bool]]:
    """The comparison's columns (row key, title, higher is better), as the stages state
    them: the held-out measures first, split-half Dice last."""
    return [(c.name, c.title, bool(c.higher_is_better)) for c in compared_columns()]


def _comparison_tables(
    rows: list[dict[str, Any]], atlases: list[dict[str, Any]] | None = None
) -> list[str]:
    """One table per K: every method, and every comparison atlas at its nearest K, on
    every measure, the best of each column in bold (held-out measures first: they read
    the parcels against data the fit never saw)."""
    held_out = [key for key, _, _ in _compared() if key != "dice"]
    if not any(key in r for r in rows for key in held_out):
        return []
    e = html.escape
    parts = [
        "<h2>Which parcellation is better</h2>",
        "<p>Each split's parcels scored on the other split's data (z against spins of the "
        "parcellation in brackets), beside split-half Dice; a published atlas, fitted on "
        "neither split, is scored on both and sits at the K nearest its parcel count. The "
        "best of each column is in bold. Dice rewards parcels that are smooth alike in both "
        "splits, which any blur gives; held-out homogeneity and DCBC compare the parcels "
        "with data the fit never saw, and DCBC compares vertex pairs only at equal distance, "
        "so smoothness alone cannot raise them. Smaller parcels are more homogeneous: a "
        "method whose parcels fall into over 10 % more connected regions than K (marked "
        "&dagger;) is not compared like for like at this K.</p>",
    ]
    if any("timehalves_homogeneity" in r for r in rows):
        parts.append(
            "<p>The time-halves columns: each method fitted on one half of every subject's "
            "time points within a split and scored on the other half, averaged over the "
            "splits and both directions.</p>"
        )
    helps = {c.name: c.help for c in table_columns() + compared_columns()}
    shown: list[Column] = []
    for k in sorted({r["k"] for r in rows}):
        at_k = [r for r in rows if r["k"] == k] + [
            {**a, "method": f"atlas: {a['atlas']}", "n_regions": [a["n_parcels"]]}
            for a in atlases or []
            if a["k"] == k
        ]
        best = {
            key: (max if higher else min)(r[key] for r in at_k if r.get(key) is not None)
            for key, _, higher in _compared()
            if any(r.get(key) is not None for r in at_k)
        }
        # the time-halves columns only where that option ran
        compared = [(key, t) for key, t, _ in _compared() if any(key in r for r in at_k)]
        head = (
            "<th>method</th>"
            + _th("regions", helps["n_regions"])
            + "".join(_th(t, helps.get(key, "")) for key, t in compared)
        )
        body = []
        for r in at_k:
            regions = r.get("n_regions", [])
            mark = " &dagger;" if regions and max(regions) > 1.1 * k else ""
            cells = [f"<td class='l'>{e(str(r['method']))}{mark}</td>",
                     f"<td>{e('/'.join(str(x) for x in regions))}</td>"]  # fmt: skip
            for key, _ in compared:
                v = r.get(key)
                z = r.get(f"{key}_z")
                text = "" if v is None else f"{v:.3f}" + (f" ({z:.1f})" if z is not None else "")
                if v is not None and v == best.get(key):
                    text = f"<b>{e(text)}</b>"
                else:
                    text = e(text)
                cells.append(f"<td>{text}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        parts.append(f"<h3>K = {k}</h3><table><tr>{head}</tr>{''.join(body)}</table>")
        shown += [c for c in compared_columns() if any(c.name == key for key, _ in compared)]
    regions = [c for c in table_columns() if c.name == "n_regions"]
    parts.append(_legend(regions + shown))
    return parts
