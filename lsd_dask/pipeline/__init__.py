"""Pipeline orchestration: configuration, the split-half stages, synthetic studies, the demo.

The names below are imported on first use: a worker that runs one of the pipeline's tasks
(reading a subject, say) imports only that task's module, not the estimators and
scikit-learn (3 s of a fresh worker's first task).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# eager: the submodule of the same name would otherwise shadow the function once loaded
from .preflight import preflight

if TYPE_CHECKING:
    from .config import PipelineConfig, load_config
    from .demo import run_demo
    from .run import run_pipeline
    from .synth import synthesize, synthesize_realistic, write_study

#: public name -> the module that defines it
_WHERE = {
    "PipelineConfig": "config",
    "load_config": "config",
    "run_pipeline": "run",
    "run_demo": "demo",
    "synthesize": "synth",
    "synthesize_realistic": "synth",
    "write_study": "synth",
}

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


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
