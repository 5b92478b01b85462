"""Pipeline orchestration: configuration, the split-half stages, synthetic studies, the demo."""

from ..datasets.studies import synthesize, synthesize_realistic, write_study
from .demo import run_demo
from .run import preflight, run_pipeline
from .settings.config import PipelineConfig
from .settings.load import load_config

__all__ = [
    "PipelineConfig",
    "load_config",
    "run_pipeline",
    "preflight",
    "run_demo",
    "synthesize",
    "synthesize_realistic",
    "write_study",
]
