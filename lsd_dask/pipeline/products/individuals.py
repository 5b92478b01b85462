"""Each participant's own parcels as products: the cohort's summary for the report
(:func:`cohort_summary`) and the per-participant BIDS files (:func:`write_individual_files`)."""

from __future__ import annotations

import html
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ... import evaluation as ev
from ...io.bids import bids_label, bids_name
from ...io.surface_files import write_dscalar, write_shape_gifti
from ...metrics import dice_same_ids
from ..engine.context import RunContext
from .dseg import matched_labels, write_dseg

__all__ = [
    "BETWEEN_SUBJECTS",
    "ParticipantMap",
    "cohort_summary",
    "individual_html",
    "participant_maps",
    "write_individual_files",
]

#: the participants each one's between-subject Dice is taken against (the next ones)
BETWEEN_SUBJECTS = 10


def cohort_summary(ctx: RunContext) -> dict[str, Any] | None:
    """Every participant's scores per prior, its between-subject Dice (its half-1 map
    against the half-2 maps of the next :data:`BETWEEN_SUBJECTS` participants with the same
    prior, whose ids are its own), and the cohort's means, spreads and the share of
    participants whose own parcels score above the prior; None without the stage."""
    results = ctx.results.get("individual")
    if not results:
        return None
    results = {u: r for u, r in results.items() if r is not None}
    kept = ctx.kept
    labels = {
        u: ctx.wd.load_npy(
            ctx.wd.folder.join("individual", f"{results[u]['participant']}_labels.npy"), mmap=True
        )
        for u in results
    }  # fmt: skip
    # the participants of each prior (a method prior: one split's), in the run's order
    sharing: dict[str, list[str]] = {}
    for u, result in results.items():
        for entry in result["priors"]:
            sharing.setdefault(entry["prior"], []).append(u)
    rows: list[dict[str, Any]] = []
    for u, result in results.items():
        for p, entry in enumerate(result["priors"]):
            peers = sharing[entry["prior"]]
            i = peers.index(u)
            others = [peers[(i + d) % len(peers)]
                      for d in range(1, min(BETWEEN_SUBJECTS, len(peers) - 1) + 1)]  # fmt: skip
            between = [
                dice_same_ids(labels[u][p, 1][kept], labels[o][p, 2][kept], background=0)
                for o in others
            ]
            row: dict[str, Any] = {
                "participant": result["participant"], "split": result["split"],
                "prior": entry["prior"], "k": entry["k"],
            }  # fmt: skip
            for who in ("own", "group"):
                for m in ev.MEASURES:
                    row[f"{who}_{m.name}"] = entry[who]["mean"][m.name]
                    row[f"{who}_{m.name}_z"] = entry[who]["mean"][f"{m.name}_z"]
            row.update(
                within_dice=entry["within_dice"],
                between_dice=float(np.mean(between)) if between else None,
                moved=entry["moved"],
                confidence_mean=entry["confidence_mean"],
                confidence_auc=entry.get("confidence_auc"),
                seconds=entry["seconds"]["all"],
            )
            rows.append(row)
    return {"rows": rows, "summary": _summarise(rows)}


def _summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per K: each measure's cohort mean and sd, own and group, and the share above."""
    out = []
    for k in sorted({r["k"] for r in rows}):
        mine = [r for r in rows if r["k"] == k]
        entry: dict[str, Any] = {
            "k": k, "prior": mine[0]["prior"].split(" (")[0], "participants": len(mine),
        }  # fmt: skip
        for m in ev.MEASURES:
            for who in ("own", "group"):
                vals = np.array([r[f"{who}_{m.name}"] for r in mine])
                entry[f"{who}_{m.name}"] = float(vals.mean())
                entry[f"{who}_{m.name}_sd"] = float(vals.std())
            sign = 1.0 if m.higher_is_better else -1.0
            better = [sign * (r[f"own_{m.name}"] - r[f"group_{m.name}"]) > 0 for r in mine]
            entry[f"share_own_better_{m.name}"] = float(np.mean(better))
        for name in ("within_dice", "between_dice", "moved", "confidence_mean", "confidence_auc",
                     "seconds"):  # fmt: skip
            vals = np.array([r[name] for r in mine if r[name] is not None], float)
            entry[name] = float(vals.mean()) if vals.size else None
            entry[f"{name}_sd"] = float(vals.std()) if vals.size else None
        out.append(entry)
    return out


def individual_html(section: dict[str, Any] | None) -> list[str]:
    """The report's section: per K, each measure's cohort mean ± sd for the prior and for
    the participants' own parcels, the share of participants whose own score better, the
    within- and between-subject Dice; then every participant's row (folded)."""
    if not section:
        return []
    e = html.escape
    measures = [m for m in ev.MEASURES if m.spin_null]
    head = ("K", "prior", "participants", *(f"{m.title}: prior / own (better)" for m in measures),
            "Dice within / between", "moved", "confidence AUC", "s per fit")  # fmt: skip
    body = []
    for s in section["summary"]:
        cells = [str(s["k"]), e(s["prior"]), str(s["participants"])]
        cells += [
            f"{s[f'group_{m.name}']:.3f} ± {s[f'group_{m.name}_sd']:.3f} / "
            f"{s[f'own_{m.name}']:.3f} ± {s[f'own_{m.name}_sd']:.3f} "
            f"({100 * s[f'share_own_better_{m.name}']:.0f} %)"
            for m in measures
        ]
        between = s["between_dice"]
        cells += [
            f"{s['within_dice']:.3f} / " + ("–" if between is None else f"{between:.3f}"),
            f"{100 * s['moved']:.1f} %",
            "–" if s["confidence_auc"] is None else f"{s['confidence_auc']:.2f}",
            f"{s['seconds']:.1f}",
        ]
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    cols = ("participant", "split", "K", *(f"{m.title} prior / own" for m in measures),
            "Dice within", "Dice between", "confidence", "confidence AUC")  # fmt: skip
    rows = []
    for r in section["rows"]:
        cells = [e(f"sub-{r['participant']}"), e(r["split"]), str(r["k"])]
        cells += [f"{r[f'group_{m.name}']:.3f} / {r[f'own_{m.name}']:.3f}" for m in measures]
        cells += [f"{r['within_dice']:.3f}",
                  "–" if r["between_dice"] is None else f"{r['between_dice']:.3f}",
                  f"{r['confidence_mean']:.3f}",
                  "–" if r["confidence_auc"] is None else f"{r['confidence_auc']:.2f}"]  # fmt: skip
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return [
        "<h2>Each participant's own parcels</h2>",
        "<p id='individual'>Each participant's parcels fitted from the group prior on one half "
        "of its time points and scored on the other half (both ways), beside the prior scored "
        "on the same half; mean ± sd over the participants, and the share of participants "
        "whose own parcels score better. Dice within: the participant's two halves' maps; "
        "between: its first half's map against other participants' second halves (the same "
        "parcel ids, no matching). An individual map should be closer to itself than to "
        "other people's. Confidence AUC: how well low confidence marks the vertices where the "
        "two halves' maps disagree (0.5: chance).</p>",
        "<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>",
        *body,
        "</table>",
        "<details><summary>Each participant</summary><table><tr>"
        + "".join(f"<th>{e(h)}</th>" for h in cols)
        + "</tr>",
        *rows,
        "</table></details>",
    ]


@dataclass(frozen=True)
class ParticipantMap:
    """One participant's own parcels from one prior, as its files write them.

    Attributes
    ----------
    result : dict
        The participant's result (``participant``, ``split``, ``priors``...).
    entry : dict
        The prior's entry in it (``prior``, ``k``, the scores).
    labels : ndarray of shape (n_vertices,)
        The map fitted on all its time points, in the ids of the prior's label files.
    confidence : ndarray of shape (n_vertices,)
    colours : ndarray
        The prior's colours by id.
    atlas : str
        The participant's files' ``atlas-`` entity.
    """

    result: dict[str, Any]
    entry: dict[str, Any]
    labels: np.ndarray
    confidence: np.ndarray
    colours: np.ndarray
    atlas: str


def participant_maps(ctx: RunContext) -> Iterator[ParticipantMap]:
    """Each participant's own parcels per prior, in the run's order, under the ids and
    colours of the prior's own label files (nothing without the stage)."""
    results = ctx.results.get("individual") or {}
    settings = ctx.cfg.individual
    if settings is None:
        return
    wd = ctx.wd
    # per (split, K): the prior's ids as its label files write them, colours, atlas name
    written: dict[tuple[str, int], tuple[np.ndarray, np.ndarray, str]] = {}
    for result in results.values():
        if result is None:
            continue
        stem = wd.folder.join("individual", result["participant"])
        labels = wd.load_npy(f"{stem}_labels.npy")
        confidence = wd.load_npy(f"{stem}_confidence.npy")
        for p, entry in enumerate(result["priors"]):
            key = (result["split"], int(entry["k"]))
            if key not in written:
                written[key] = _prior_ids(ctx, settings, *key)
            ids, colours, atlas = written[key]
            yield ParticipantMap(result, entry, ids[labels[p, 0]], confidence[p], colours, atlas)


def write_individual_files(
    ctx: RunContext,
    files: list[Path],
    *,
    template: dict[str, str],
    vertices: dict[str, np.ndarray] | None,
    common: dict[str, Any],
) -> None:
    """Each participant's own parcels per prior as BIDS derivatives under
    ``sub-<label>/anat/``: a ``_dseg.label.gii`` per hemisphere (a ``.dlabel.nii`` too for
    CIFTI input), the ``.tsv`` look-up table and the ``.json`` sidecar (the settings, the
    prior, the held-out scores), and the confidence as a ``_confidence.shape.gii`` per
    hemisphere (a ``_confidence.dscalar.nii`` too for CIFTI input). Ids and colours are
    the prior's as its own label files write them, so parcel i names one area in the
    group's files and every participant's."""
    settings = ctx.cfg.individual
    if settings is None:
        return
    sizes, out = ctx.sizes, ctx.cfg.output
    for m in participant_maps(ctx):
        label, entry, lab = m.result["participant"], m.entry, m.labels
        folder = out / f"sub-{label}" / "anat"
        ent = {"sub": label, "space": template["tpl"], "den": template["den"],
               "atlas": m.atlas, "scale": str(int(entry["k"]))}  # fmt: skip
        title = f"sub-{label} {settings.method} from {entry['prior']}"
        for hemi, conf in (("left", m.confidence[: sizes[0]]),
                           ("right", m.confidence[sizes[0] :])):  # fmt: skip
            name = bids_name({"hemi": hemi[0].upper(), **ent}, "confidence", ".shape.gii")
            files.append(write_shape_gifti(folder / name, conf, hemisphere=hemi,
                                           name=f"{title}: confidence"))  # fmt: skip
        if vertices is not None:  # CIFTI input: the confidence as CIFTI too
            name = bids_name(ent, "confidence", ".dscalar.nii")
            files.append(write_dscalar(folder / name, m.confidence, sizes,
                                       name=f"{title}: confidence", vertices=vertices))  # fmt: skip
        sidecar = {**common, **_sidecar(ctx, m.result, entry, lab)}
        files += write_dseg(folder, ent, lab, sizes, colours=m.colours, title=title,
                            sidecar=sidecar, vertices=vertices)  # fmt: skip


def _prior_ids(
    ctx: RunContext, settings: Any, split: str, k: int
) -> tuple[np.ndarray, np.ndarray, str]:
    """For the participants of ``split`` at ``k``: their prior's stored ids mapped to the
    ids its label files write (a method prior: the other split's, matched to the first
    split's; an atlas: its own), the colours, and the participants' atlas name."""
    from ...plotting import parcel_colours

    prior = str(settings.prior)
    if settings.prior_is_method([m.name for m in ctx.cfg.methods]):
        other = next(s for s in ctx.splits if s != split)
        labs, colours = matched_labels(ctx, prior, k)
        raw = ctx.wd.load_npy(ctx.wd.labels(other, prior, k))
        ids = np.zeros(int(raw.max(initial=0)) + 1, np.int32)
        ids[raw] = labs[other]
        return ids, colours, f"{bids_label(prior)}{k}{bids_label(settings.method)}"
    atlas = ctx.atlases[prior]
    n = int(atlas.max(initial=0))
    colours = parcel_colours([atlas], ctx.adjacency, n)
    return (
        np.arange(n + 1, dtype=np.int32),
        colours,
        f"{bids_label(prior)}{bids_label(settings.method)}",
    )


def _sidecar(
    ctx: RunContext, result: dict[str, Any], entry: dict[str, Any], labels: np.ndarray
) -> dict[str, Any]:
    """What a participant's ``_dseg.json`` says: how its parcels were made and scored."""
    settings = ctx.cfg.individual
    assert settings is not None
    label = result["participant"]
    confidence = (
        "the posterior probability of the vertex's parcel given its neighbours' (0 to 1)"
        if settings.method == "prior_potts"
        else "the vertex's best correlation with a parcel's reference over its second best (>= 1)"
    )
    return {
        "Description": (
            f"sub-{label}'s own parcellation of the cortex: the group parcellation "
            f"{entry['prior']} adjusted to the participant's data ({result['timepoints']} time "
            f"points) by {settings.method}; ids and colours are the prior's; 0 is background."
        ),
        "Method": settings.method,
        "Prior": entry["prior"],
        "NumberOfParcels": int(np.unique(labels[labels > 0]).size),
        "Participant": label,
        "Runs": result["runs"],
        "TimePoints": result["timepoints"],
        "Confidence": f"the _confidence maps beside this file: {confidence}",
        "MovedFromPrior": entry["moved"],
        "HeldOutScores": {
            "Description": (
                "fitted on one half of each run's time points, scored on the other half, "
                "both ways; the prior scored on the same halves"
            ),
            "Own": entry["own"]["mean"],
            "Prior": entry["group"]["mean"],
            "WithinSubjectDice": entry["within_dice"],
        },
        "RandomState": ctx.cfg.random_state,
    }
