"""``report.json`` and ``report.html``: what a run did, on what, with which versions, how
its parcellations scored, and how long each stage took."""

from __future__ import annotations

import json
import os
import platform
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from ..._version import __version__
from ...io.atomic import atomic_write_text
from ...io.zarr_store import open_split
from ..engine.context import RunContext
from ..stages.evaluation import atlas_rows
from ..stages.preprocess import subject_qc
from .citations import methods_text
from .individuals import cohort_summary
from .parcels import parcel_tables
from .recommend import recommend
from .report_html import write_report_html
from .scores import scores_explained
from .viewer import viewer_html

__all__ = ["write_report"]


def write_report(
    ctx: RunContext,
    rows: list[dict[str, Any]],
    files: list[Path],
    timings: dict[str, float],
    command: str | None,
) -> dict[str, Any]:
    """Write ``report.json`` and ``report.html`` into the output folder; return the report.

    ``rows``: the score rows (:func:`.scores.score_rows`; their explanation comes from the
    stage list too); ``files``: the outputs written; ``command``: the command line, when
    there is one.
    """
    cfg, wd, out = ctx.cfg, ctx.wd, ctx.cfg.output
    blur = _by_split(ctx.results.get("blur", {}))
    report = {
        "run_id": f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}",
        "command_line": command,
        # paths relative to the output folder: the report travels with the outputs
        "config": cfg.to_dict(relative_to=out),
        "work": cfg.work_url if "://" in cfg.work_url else os.path.relpath(cfg.work_url, out),
        "versions": _versions(),
        "mask": ctx.results["ingest"]["mask"],
        "preprocessing": cfg.preprocess.describe(),
        "subjects": _subjects(ctx),
        "svd": _by_split(ctx.results["svd"]),
        **({"feature_blur": blur} if blur else {}),
        "fingerprints": wd.fingerprints(),
        "recommendation": recommend(rows),
        "scores": rows,
        "parcels": parcel_tables(ctx),
        "atlases": atlas_rows(ctx),
        **({"individual": individual} if (individual := cohort_summary(ctx)) else {}),
        "scores_explained": scores_explained(ctx),
        "timings_s": timings,
        "outputs": [str(p.relative_to(out)) for p in files],
    }
    report["methods_text"] = methods_text(report, ctx.cfg.methods)
    atomic_write_text(out / "report.json", json.dumps(report, indent=2))
    files.append(out / "report.json")
    figures = [p for p in files if p.suffix == ".png"]
    viewer = viewer_html(ctx, report)
    files.append(write_report_html(report, out / "report.html", figures, viewer=viewer))
    return report


def _subjects(ctx: RunContext) -> list[dict[str, Any]]:
    """Each subject's quality figures (:func:`~..stages.preprocess.subject_qc`), its split
    first; the volumes kept are those its split's store holds."""
    by_id = {s.subject: s for s in ctx.cfg.subjects}
    rows = []
    for split in ctx.splits:
        st = open_split(ctx.wd.store(split), storage_options=ctx.wd.folder.storage_options)
        for sid, kept in zip(st.subjects, st.timepoints, strict=True):
            rows.append({"split": split, **subject_qc(by_id[sid], ctx.cfg.preprocess, kept)})
    return rows


def _by_split(results: dict[str, Any]) -> dict[str, Any]:
    """A stage's results keyed by split (``svd/split1`` -> ``split1``)."""
    return {name.split("/", 1)[1]: value for name, value in results.items()}


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    import nibabel
    import scipy
    import sklearn
    import zarr

    return {
        "lsd_dask": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "dask": version("dask"),
        "distributed": version("distributed"),
        "zarr": zarr.__version__,
        "nibabel": nibabel.__version__,
        "scikit-learn": sklearn.__version__,
    }
