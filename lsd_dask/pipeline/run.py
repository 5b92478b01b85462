"""The split-half parcellation pipeline: its stages in order, then the outputs and the
report.

Each stage is one module of :mod:`.stages` with a
:class:`~lsd_dask.pipeline.engine.contract.Stage` (the contract and the runner that skips,
computes and records are :mod:`.engine.contract`); every stage writes under
``<output>/work`` and is skipped on a re-run when its stamps record the same inputs and
settings (:mod:`.engine.workdir`). The stage list, :data:`.stages.STAGES`:

1. ``ingest`` (:mod:`.stages.ingest`): the mask and each split's store, in one pass that
   reads every subject once, as a task per subject on the workers.
2. ``svd`` (:mod:`.stages.svd`): per split, the leading left singular vectors.
3. ``blur`` (:mod:`.stages.blur`): the feature blur each split's data choose, for
   ``feature_smoothing_mm: auto``.
4. ``cluster`` (:mod:`.stages.cluster`): every (split, method, K) fit, each method one
   :class:`~lsd_dask.cluster.MeshParcellation`.
5. ``evaluate`` (:mod:`.stages.evaluation`): each split's parcels, and each comparison
   atlas, scored on data they were not fitted on, with spin nulls.
6. ``evaluate_halves`` (:mod:`.stages.time_halves`): with ``held_out: [...,
   time_halves]``, each method fitted on one time half of a split and scored on the other.
7. ``scores`` (:mod:`.stages.split_half`): the split-half scores beside their nulls.

Then the outputs (:mod:`.products.label_files`) and ``report.json`` / ``report.html``
(:mod:`.products.report_json`), assembled from the stages' score columns. Every line goes
to the log file ``lsd-dask.log`` in the output folder too, with its time stamp.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .._version import __version__
from ..distributed import PausedWorkers, active_client, one_blas_thread_beside_workers
from ..io.lock import LockSet
from ..io.ownership import OutputRecord
from ..io.zarr_store import DamagedStoreError
from . import stages as plan
from .engine.context import RunContext, input_paths, work_lock
from .engine.contract import run_stage
from .engine.log import Log, get_log, log_file
from .preflight import preflight
from .products.label_files import write_outputs
from .products.report_json import write_report
from .products.scores import score_rows
from .settings.config import PipelineConfig

__all__ = ["run_pipeline", "preflight"]


def run_pipeline(
    cfg: PipelineConfig,
    *,
    log: Log | None = None,
    command: str | None = None,
    lock: LockSet | None = None,
    adopt: bool = False,
) -> dict[str, Any]:
    """Run every stage (skipping completed ones) and write the outputs; return the report.

    Progress lines go to the ``lsd_dask.pipeline`` logger, or to ``log`` when given.

    The Dask scheduler is whatever is active: call inside ``with connect(...)`` to use a
    cluster (the CLI does). ``command`` (the command line, when there is one) goes into
    ``report.json`` and ``dataset_description.json``. The run holds its work folder's lock
    (:func:`~lsd_dask.pipeline.engine.context.work_lock`; pass ``lock`` when already taken): a
    second run into the same folder fails at once, naming this one. Workers too small for
    one task fail the run before ingest
    (:func:`~lsd_dask.pipeline.engine.placement.check_worker_memory`);
    workers that stay paused over their memory for
    :data:`~lsd_dask.distributed.PAUSED_LIMIT_S` end it with :class:`MemoryError`.

    The output and work folders must be lsd-dask's (new, empty, or written by earlier
    runs), or the run fails before writing anything, listing a few of the user's files;
    ``adopt=True`` writes beside them instead (the CLI's ``--adopt-folders``), and the run
    never removes one (:mod:`lsd_dask.io.ownership`).
    """
    t_start = time.perf_counter()
    # bad settings or inputs fail here, before the output folder or its log file exist
    meshes = preflight(cfg)[0]
    header = f"[run] {command or 'run_pipeline'} (lsd-dask {__version__})"
    owns = lock is None
    # the folders checked and locked before the log file is made in one
    locks = work_lock(cfg, command, adopt=adopt) if lock is None else lock
    try:
        with log_file(cfg.output, get_log("lsd_dask.pipeline", log), header) as logged:
            ctx = RunContext.open(cfg, logged, meshes, command, locks)
            return _run(ctx, command, t_start)
    finally:
        if owns:
            locks.release()


def _run(ctx: RunContext, command: str | None, t_start: float) -> dict[str, Any]:
    """:func:`run_pipeline`'s stages, scores and outputs."""
    cfg, log = ctx.cfg, ctx.log
    timings: dict[str, float] = {}
    try:
        # workers paused over their memory for a minute end the run (they never resume);
        # workers on this machine own its cores: the client's linear algebra on one thread
        client = active_client()
        with PausedWorkers(client), one_blas_thread_beside_workers(client):
            for attempt in (1, 2):
                try:
                    for stage in plan.STAGES:
                        t0 = time.perf_counter()
                        if run_stage(stage, ctx):
                            name = _TIMING_NAMES.get(stage.name, stage.name)
                            timings[name] = time.perf_counter() - t0
                    break
                except DamagedStoreError as err:
                    # the store is marked incomplete: its ingest unit is no longer current,
                    # and the stages run again from there in this run
                    if attempt == 2:
                        raise
                    log(f"[work] {err} Ingesting its split again in this run.")
        t0 = time.perf_counter()
        log(f"[outputs] label files, figures and the report into {cfg.output}")
        rows = score_rows(ctx)  # assembled once, for the label files and the report
        record = OutputRecord.read(cfg.output)
        files: list[Path] = []  # what is written, as it is: recorded even if a write fails
        try:
            write_outputs(ctx, rows, command, files)
            timings["outputs"] = time.perf_counter() - t0
            timings["total"] = time.perf_counter() - t_start
            report = write_report(ctx, rows, files, timings, command)
        except BaseException:
            record.commit(files, complete=False)
            raise
        stale = record.commit(files, complete=True, keep=input_paths(cfg))
        if stale:
            log(
                f"[outputs] removed {len(stale)} file(s) an earlier run wrote for other "
                f"methods, K or splits (first: {stale[0].relative_to(cfg.output)})"
            )
        log(
            f"[done] outputs in {cfg.output} ({timings['total']:.1f} s); open "
            f"{cfg.output / 'report.html'} (the scores as data: report.json)"
        )
        return report
    finally:
        ctx.close()


#: the report's name of a stage's time, where it is not the stage's name
_TIMING_NAMES = {"ingest": "mask_ingest"}
