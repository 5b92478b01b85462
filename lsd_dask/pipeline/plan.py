"""The stages of a run, in the order they run: adding a stage is its module (a
:class:`~lsd_dask.pipeline.stages.Stage`) and one line here."""

from __future__ import annotations

from .blur import BlurStage
from .evaluate import EvaluationStage
from .evaluate_halves import TimeHalvesStage
from .fits import ClusterStage
from .ingest import IngestStage
from .stages import Stage
from .svd import SvdStage

__all__ = ["STAGES"]

STAGES: list[Stage] = [
    IngestStage(),
    SvdStage(),
    BlurStage(),
    ClusterStage(),
    EvaluationStage(),
    TimeHalvesStage(),
]
