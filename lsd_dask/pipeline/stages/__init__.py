"""The stages of a run, in the order they run: adding a stage is its module (a
:class:`~lsd_dask.pipeline.engine.contract.Stage`) and one line here."""

from __future__ import annotations

from ..engine.contract import Stage
from .blur import BlurStage
from .cluster import ClusterStage
from .evaluation import EvaluationStage
from .individual import IndividualStage
from .ingest import IngestStage
from .split_half import SplitHalfStage
from .svd import SvdStage
from .time_halves import TimeHalvesStage

__all__ = ["STAGES"]

STAGES: list[Stage] = [
    IngestStage(),
    SvdStage(),
    BlurStage(),
    ClusterStage(),
    EvaluationStage(),
    TimeHalvesStage(),
    SplitHalfStage(),
    IndividualStage(),
]
