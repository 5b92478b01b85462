"""Pipeline orchestration: configuration, the split-half stages, synthetic studies, the demo."""

from .config import PipelineConfig, load_config
from .demo import run_demo
from .run import preflight, run_pipeline
from .synth import synthesize, synthesize_realistic, write_study

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
