"""The individual stage: each participant's own parcels from a group prior, with ``individual:``
in the pipeline file (:mod:`..settings.individual`; off by default).

``individual/<participant>``, one unit and one task per participant (its runs together),
after the group fits. Per prior (a method prior at each of its K's, or an atlas), the
participant's stored series (every kept vertex, its runs side by side) are fitted three
times with the chosen estimator (:mod:`lsd_dask.cluster.individual`):

- on all its time points: the labels and per-vertex confidence the outputs write;
- on the first half of each run's time points, and on the second half: each half's labels
  are scored on the other half (unit rows of that half's series) with the held-out measures
  and spin nulls of :mod:`.held_out`, **beside the prior scored on the same half**; the two
  halves' maps against each other are the within-subject Dice (same ids, no matching).

A method prior is the other split's group parcellation, fitted without the participant. The
unit's key holds the participant's own inputs (its files, the mask, the preprocessing), the
settings and each prior's fingerprint: nothing of the other participants, so adding
participants to a run with an atlas prior computes only theirs (with a method prior, adding
participants to the other split changes the prior, and the participants it is the prior of
are fitted again).

Results: ``work/individual/<label>.json`` (the scores), ``<label>_labels.npy`` (per prior:
all, half 1, half 2; ids on every surface vertex, 0 outside) and ``<label>_confidence.npy``.
:func:`lsd_dask.pipeline.products.individuals.cohort_summary` adds the between-subject Dice
and the cohort's means for the report.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ... import evaluation as ev
from ...distributed import active_client, finished
from ...io.bids import bids_label
from ...io.zarr_store import ColumnBlocks, open_split
from ...metrics import dice_same_ids
from ..engine import placement
from ..engine.context import RunContext
from ..engine.contract import StageBase, Unit
from ..engine.log import bar
from ..engine.workdir import WorkDir, content_digest
from ..settings.individual import IndividualSettings
from .held_out import (
    NullSettings,
    held_out_scores,
    load_result,
    mean_of,
    scoring_key,
    spin_nulls_from,
    vertex_pairs,
)

__all__ = [
    "FITS",
    "IndividualStage",
    "ParticipantJob",
    "Prior",
    "fit_participant",
    "participant_label",
    "priors_of",
]

#: the fits of each prior, in the labels file's order
FITS = ("all", "half1", "half2")


@dataclass(frozen=True)
class Prior:
    """One group parcellation a participant's parcels start from: its name, K (an atlas:
    its parcel count), its ids on every surface vertex (0: none) and its fingerprint."""

    name: str
    k: int
    labels: np.ndarray = field(repr=False)
    key: str


@dataclass(frozen=True)
class ParticipantJob:
    """One participant: its label, split, runs (the store's arrays), priors and outputs."""

    label: str
    split: str
    runs: list[str]
    blocks: ColumnBlocks = field(repr=False)
    priors: list[Prior] = field(repr=False)
    outputs: list[str]


class IndividualStage(StageBase):
    """``individual/<participant>``: a participant's own parcels per prior, scored on its
    held-out half beside the prior (no unit unless ``individual:`` asks)."""

    name = "individual"
    reads = ("ingest", "cluster")

    def plan(self, ctx: RunContext) -> list[Unit]:
        cfg, wd = ctx.cfg, ctx.wd
        settings = cfg.individual
        if settings is None:
            return []
        inputs = ctx.shared["subject_inputs"]
        common = {
            "settings": settings.to_dict(),
            "kept": content_digest(ctx.kept),
            "preprocess": cfg.preprocess.to_dict() if cfg.preprocess.active else None,
            **scoring_key(ctx),
        }
        units: list[Unit] = []
        seen: dict[str, str] = {}
        for split, ids in ctx.splits.items():
            st = open_split(wd.store(split), storage_options=wd.folder.storage_options)
            priors = priors_of(ctx, split)
            for participant, runs in _participants(cfg.participants, ids).items():
                label = participant_label(participant)
                if label in seen:
                    raise ValueError(
                        f"individual: participants {seen[label]!r} and {participant!r} are both "
                        f"sub-{label} in file names (letters and digits only); rename one."
                    )
                seen[label] = participant
                folder = wd.folder.join("individual", label)
                outputs = [f"{folder}.json", f"{folder}_labels.npy", f"{folder}_confidence.npy"]
                blocks = ColumnBlocks(
                    tuple(st.arrays[st.subjects.index(r)] for r in runs), st.rows,
                    path=st.path, storage_options=st.storage_options,
                )  # fmt: skip
                units.append(
                    Unit(
                        f"individual/{label}",
                        {
                            **common,
                            "runs": [inputs[r] for r in runs],
                            "priors": [[p.name, p.k, p.key] for p in priors],
                        },  # fmt: skip
                        outputs,
                        label=f"sub-{label}",
                        item=ParticipantJob(label, split, runs, blocks, priors, outputs),
                    )
                )
        return units

    load = staticmethod(load_result)

    def compute(self, ctx: RunContext, todo: list[Unit]) -> Iterator[tuple[Unit, Any]]:
        settings = ctx.cfg.individual
        assert settings is not None  # planned only with the section
        wd, kept, log = ctx.wd, ctx.kept, ctx.log
        _, A = ctx.kept_mesh()
        pairs = vertex_pairs(ctx)
        nulls = NullSettings.of(ctx)
        client = active_client()
        started = time.monotonic()
        by_job = {u.item.label: u for u in todo}
        largest = max(u.item.blocks.shape[1] for u in todo) * kept.sum() * 4
        if client is not None and not placement.individual_on_workers(
            client, largest, len(pairs), ctx.cfg.spins
        ):
            need = placement.individual_task_bytes(largest, len(pairs), ctx.cfg.spins)
            log(
                f"[individual] a participant's task needs about {need / 2**20:.0f} MB, more "
                "than a worker holds: the participants run here, one after the other"
            )
            client = None
        if client is not None:
            common = client.scatter([A, kept, pairs, nulls], broadcast=True, hash=False)
            futures = {
                client.submit(
                    fit_participant,
                    u.item,
                    settings,
                    *common,
                    wd.root,
                    wd.folder.storage_options,
                    pure=False,
                ): u.item  # fmt: skip
                for u in todo
            }
            log(f"[individual] {len(todo)} participant(s) as tasks on {len(client.nthreads())} "
                "workers")  # fmt: skip
            done: Iterator[tuple[ParticipantJob, Any]] = finished(client, futures)
        else:
            done = (
                (
                    u.item,
                    fit_participant(
                        u.item, settings, A, kept, pairs, nulls, wd.root, wd.folder.storage_options
                    ),
                )  # fmt: skip
                for u in todo
            )
        for i, (job, result) in enumerate(done, 1):
            log(f"[individual] {bar(i, len(todo), started=started)} {_summary(job, result)}")
            yield by_job[job.label], result


def fit_participant(
    job: ParticipantJob,
    settings: IndividualSettings,
    A: Any,
    kept: np.ndarray,
    pairs: ev.VertexPairs,
    nulls: NullSettings,
    root: str,
    storage_options: Any,
) -> dict[str, Any]:
    """One participant's fits and scores (in a task, or here); writes its outputs."""
    from threadpoolctl import threadpool_limits

    wd = WorkDir(root, lambda line: None, storage_options)
    blocks = job.blocks
    X = blocks.read_columns(0, blocks.shape[1], np.empty(blocks.shape, blocks.dtype))
    # each run cut in two, as the time-halves evaluation cuts them
    cuts = [(a, a + (b - a) // 2, b) for a, b in blocks.block_bounds]
    halves = {
        "half1": _columns(X, [(a, m) for a, m, _ in cuts]),
        "half2": _columns(X, [(m, b) for _, m, b in cuts]),
    }
    Z = {h: np.asarray(ev.unit_series(H), np.float32) for h, H in halves.items()}
    r = {h: ev.pair_correlations(Zh, pairs) for h, Zh in Z.items()}
    null = spin_nulls_from(nulls, kept, Z, pairs, r)
    n = kept.size
    labels = np.zeros((len(job.priors), len(FITS), n), np.int32)
    confidence = np.zeros((len(job.priors), n), np.float32)
    out: dict[str, Any] = {
        "participant": job.label, "split": job.split, "runs": job.runs,
        "timepoints": int(X.shape[1]), "priors": [],
    }  # fmt: skip
    for i, prior in enumerate(job.priors):
        group = np.where(kept & (prior.labels > 0), prior.labels, 0).astype(np.int32)
        start = np.where(group[kept] > 0, group[kept], -1)  # the estimators' "no parcel": -1
        seconds = {}
        for j, (fit, data) in enumerate((("all", X), *halves.items())):
            t0 = time.perf_counter()
            with threadpool_limits(1):  # a subject per worker thread
                est = settings.estimator(start, A).fit(data)
            seconds[fit] = time.perf_counter() - t0
            labels[i, j, kept] = np.maximum(est.labels_, 0)
            if fit == "all":
                confidence[i, kept] = est.confidence_
        own, grp = {}, {}
        for fitted, held in (("half1", "half2"), ("half2", "half1")):
            args = (Z[held], pairs, r[held], A, kept, null.get(held))
            own[f"{fitted}_on_{held}"] = held_out_scores(labels[i, FITS.index(fitted)], *args)
            grp[f"on_{held}"] = held_out_scores(group, *args)
        moved = labels[i, 0][kept] != group[kept]
        out["priors"].append({
            "prior": prior.name, "k": prior.k,
            "own": {**own, "mean": mean_of(own)}, "group": {**grp, "mean": mean_of(grp)},
            "within_dice": dice_same_ids(labels[i, 1][kept], labels[i, 2][kept], background=0),
            "moved": float(moved.mean()),
            "confidence_mean": float(confidence[i, kept].mean()),
            "confidence_auc": _disagreement_auc(
                confidence[i, kept], labels[i, 1][kept] != labels[i, 2][kept]
            ),
            "seconds": seconds,
        })  # fmt: skip
    wd.save_npy(job.outputs[1], labels)
    wd.save_npy(job.outputs[2], confidence)
    wd.write_text(job.outputs[0], json.dumps(out, indent=1))
    return out


def priors_of(ctx: RunContext, split: str) -> list[Prior]:
    """The priors of a split's participants: the prior method's parcellation of the other
    split at each K, or the atlas."""
    settings = ctx.cfg.individual
    assert settings is not None and settings.prior is not None
    names = [m.name for m in ctx.cfg.methods]
    if not settings.prior_is_method(names):
        labels = np.asarray(ctx.atlases[settings.prior], np.int32)
        n = int(np.unique(labels[ctx.kept & (labels > 0)]).size)
        return [Prior(settings.prior, n, labels, content_digest(labels))]
    other = next(s for s in ctx.splits if s != split)
    return [
        Prior(
            f"{settings.prior} K={k} ({other})",
            k,
            np.asarray(ctx.wd.load_npy(ctx.wd.labels(other, settings.prior, k)), np.int32),
            ctx.fingerprint(f"cluster/{other}/{settings.prior}/K{k}"),
        )  # fmt: skip
        for k in (settings.ks or ctx.cfg.ks)
    ]


def participant_label(participant: str) -> str:
    """A participant's BIDS label: its id without ``sub-``, letters and digits only."""
    return bids_label(participant.removeprefix("sub-"))


def _disagreement_auc(confidence: np.ndarray, disagree: np.ndarray) -> float | None:
    """How well low confidence marks the vertices the two halves' maps disagree on: the
    ROC AUC of ``-confidence`` for ``disagree`` (0.5: no better than chance; None when the
    halves agree everywhere or nowhere)."""
    from sklearn.metrics import roc_auc_score

    if disagree.all() or not disagree.any():
        return None
    return float(roc_auc_score(disagree, -confidence))


def _columns(X: np.ndarray, spans: list[tuple[int, int]]) -> np.ndarray:
    """The columns of ``spans``: a view for one run, a copy for several."""
    if len(spans) == 1:
        return X[:, spans[0][0] : spans[0][1]]
    return np.hstack([X[:, a:b] for a, b in spans])


def _participants(owners: dict[str, str], ids: list[str]) -> dict[str, list[str]]:
    """A split's participants, each with its runs (a subject id is its own participant
    unless it is a run of one)."""
    out: dict[str, list[str]] = {}
    for i in ids:
        out.setdefault(owners.get(i, i), []).append(i)
    return out


def _summary(job: ParticipantJob, result: dict[str, Any]) -> str:
    """One log line per participant: its first prior's held-out homogeneity, own/group."""
    first = result["priors"][0]
    own, grp = first["own"]["mean"]["homogeneity"], first["group"]["mean"]["homogeneity"]
    return (f"sub-{job.label} ({job.split}): {first['prior']}: held-out homogeneity "
            f"{own:.3f} against the prior's {grp:.3f}, {100 * first['moved']:.1f} % moved, "
            f"{first['seconds']['all']:.1f} s")  # fmt: skip
