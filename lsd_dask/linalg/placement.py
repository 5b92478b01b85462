"""Where the SVD's tasks run, as the caller says: the algorithms here compute, and leave
placement to whoever runs them, as dask's ``array/linalg.py`` does.

:class:`Placement` is what the randomized SVD and its bases ask of the scheduler: how many
worker threads to cut X's columns for, which worker each group task prefers, how a small
array reaches every task, how a large one is held in row blocks, and how to wait for a
persisted result. :class:`SchedulerChoice` (the default) decides nothing: every task goes
where the active scheduler puts it, small arrays travel in the graph, and persisting does
not wait. :func:`lsd_dask.distributed.placement` gives the distributed client's placement
(tasks pinned to worker threads, arrays scattered), which the pipeline passes in.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

import dask
import dask.array as da
import numpy as np
from dask.delayed import delayed

__all__ = ["Placement", "SchedulerChoice", "persisted"]


class Placement(Protocol):
    """Where a graph's tasks run and how arrays reach them."""

    def threads(self) -> int:
        """The worker threads the passes are cut for (one group task each): every thread
        of the cluster (or of this machine), whatever share runs them, so that the groups'
        sums are the same everywhere."""
        ...

    def slots(self) -> Sequence[str] | None:
        """One worker address per thread of the share the tasks run on (an address may
        repeat), the i-th group task preferring the i-th modulo their count; None: the
        scheduler places every task."""
        ...

    def pinned(self, slot: str) -> AbstractContextManager[Any]:
        """Tasks made inside the block prefer ``slot``'s worker (others may take them)."""
        ...

    def broadcast(self, x: np.ndarray) -> Any:
        """``x`` for every task of a graph (a key that all of them read)."""
        ...

    def row_blocks(self, a: np.ndarray, rows: tuple[int, ...]) -> da.Array:
        """``a`` as a dask array of row blocks ``rows``, held where the tasks run."""
        ...

    def wait(self, x: Any) -> None:
        """Return once a persisted collection is in memory."""
        ...


class SchedulerChoice:
    """No placement: the active scheduler's choice throughout.

    Threads: dask's ``num_workers`` setting, else this machine's cores; small arrays in
    the graph; large ones with :func:`dask.array.from_array`; persisting does not wait.
    """

    def threads(self) -> int:
        return int(dask.config.get("num_workers", None) or os.cpu_count() or 1)

    def slots(self) -> None:
        return None

    def pinned(self, slot: str) -> AbstractContextManager[Any]:
        return nullcontext()

    def broadcast(self, x: np.ndarray) -> Any:
        return delayed(x, pure=True, traverse=False)

    def row_blocks(self, a: np.ndarray, rows: tuple[int, ...]) -> da.Array:
        out: da.Array = da.from_array(a, chunks=(rows, a.shape[1]))
        return out

    def wait(self, x: Any) -> None:
        return None


def persisted(x: Any, placement: Placement) -> Any:
    """Persist and wait: on a distributed cluster ``persist`` returns at once, and a
    next pass submitted meanwhile would share X's chunk keys with this one, so the
    scheduler would hold those chunks in memory until the next pass reads them."""
    x = x.persist()
    placement.wait(x)
    return x
