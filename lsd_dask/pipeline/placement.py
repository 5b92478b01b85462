"""Where features live: the one memory rule that the cluster and blur stages share.

Features (rows of U·Σ, n_vertices × rank float32) are clustered in this process when they
are small, and on the workers, one task per fit or per blur scored, when they are large and
every worker holds them comfortably; otherwise as Dask graphs over row blocks.
"""

from __future__ import annotations

from typing import Any

__all__ = ["IN_MEMORY_FEATURES_BYTES", "FIT_TASK_MEMORY_FACTOR", "features_on_workers"]

#: features smaller than this are clustered in memory when no cluster is active: a round
#: trip per iteration costs more than the arithmetic (a full-size study's 64,984 x 1,000
#: float32 is 260 MB)
IN_MEMORY_FEATURES_BYTES = 64 * 2**20
#: a fit runs as one task when every worker's memory limit is at least this many times the
#: features' bytes (the features, their float64 products with K <= 400 centres, copies)
FIT_TASK_MEMORY_FACTOR = 8


def features_on_workers(client: Any, nbytes: int) -> bool:
    """Whether features of ``nbytes`` go to the workers (a task per fit, or per blur
    scored): too large to cluster in memory here (:data:`IN_MEMORY_FEATURES_BYTES`), and
    every worker's memory limit holds them :data:`FIT_TASK_MEMORY_FACTOR` times."""
    if nbytes <= IN_MEMORY_FEATURES_BYTES:
        return False
    need = FIT_TASK_MEMORY_FACTOR * nbytes
    info = client.scheduler_info(n_workers=-1)["workers"].values()
    limits = [int(w.get("memory_limit") or 0) for w in info]
    return bool(limits) and all(m == 0 or m >= need for m in limits)
