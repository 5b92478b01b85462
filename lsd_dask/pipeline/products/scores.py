"""The run's score rows, assembled from the stage list: each stage's rows (its
:class:`~lsd_dask.pipeline.engine.contract.Column` values per method and K) merged into one
row per method and K, in the configuration's order; the columns the report compares and
tabulates; each label file's sidecar sections; and what every score was computed on. A
stage whose results are scores shows in ``report.json``, ``report.html`` and the sidecars
through these alone."""

from __future__ import annotations

from typing import Any

from .. import stages
from ..engine.context import RunContext
from ..engine.contract import Column

__all__ = [
    "compared_columns",
    "score_rows",
    "scores_explained",
    "sidecar_sections",
    "table_columns",
]


def score_rows(ctx: RunContext) -> list[dict[str, Any]]:
    """``report.json``'s ``scores``: per method and K, ``method``, ``k`` and every stage's
    columns, for the method-K pairs any stage scored."""
    merged: dict[tuple[str, int], dict[str, Any]] = {}
    for stage in stages.STAGES:
        for key, row in stage.rows(ctx).items():
            merged.setdefault(key, {"method": key[0], "k": key[1]}).update(row)
    order = [(m.name, k) for m in ctx.cfg.methods for k in ctx.cfg.ks]
    return [merged[key] for key in order if key in merged]


def scores_explained(ctx: RunContext) -> dict[str, str]:
    """``report.json``'s ``scores_explained``: every stage's words on its scores."""
    out: dict[str, str] = {}
    for stage in stages.STAGES:
        out.update(stage.explain(ctx))
    return out


def compared_columns() -> list[Column]:
    """The columns the report compares methods on (those with a direction), in the
    stages' order."""
    return [c for stage in stages.STAGES for c in stage.columns if c.higher_is_better is not None]


def table_columns() -> list[Column]:
    """The columns of the report's table of every score, in the stages' order."""
    return [c for stage in stages.STAGES for c in stage.columns if c.table]


def sidecar_sections(row: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """A label file's score sections (``HeldOutScores``, ``SplitHalfScores``...): each
    stage's sidecar columns present in its method and K's row, by their sidecar names."""
    sections: dict[str, dict[str, Any]] = {}
    if row is None:
        return sections
    for stage in stages.STAGES:
        if stage.sidecar_section is None:
            continue
        values = {
            c.sidecar_key: row[c.name]
            for c in stage.columns
            if c.sidecar_key is not None and c.name in row
        }
        if values:
            sections[stage.sidecar_section] = values
    return sections
