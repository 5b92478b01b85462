"""The pipeline's settings, data only: the pipeline file read and checked
(:func:`load_config` into a :class:`PipelineConfig`), every section's settings type, the
methods table and the pipeline-file reference generated from them. Nothing here runs a
stage; the engine, the stages and the products import these."""

from .config import PipelineConfig
from .load import load_config

__all__ = ["PipelineConfig", "load_config"]
