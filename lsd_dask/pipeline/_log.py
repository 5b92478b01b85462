"""The pipeline's console lines: one per step, readable in a batch log."""

from __future__ import annotations

from .._logging import Log, get_log

__all__ = ["Log", "bar", "get_log"]


def bar(i: int, n: int, width: int = 20) -> str:
    """A text progress bar, ``[#####.....] 3/6``, one line per step (works in logs too)."""
    done = int(round(width * i / max(n, 1)))
    return f"[{'#' * done}{'.' * (width - done)}] {i}/{n}"
