"""The pipeline's console lines: one per step, readable in a batch log."""

from __future__ import annotations

from collections.abc import Callable

#: where the stages write their lines (``print`` by default)
Log = Callable[[str], None]


def bar(i: int, n: int, width: int = 20) -> str:
    """A text progress bar, ``[#####.....] 3/6``, one line per step (works in logs too)."""
    done = int(round(width * i / max(n, 1)))
    return f"[{'#' * done}{'.' * (width - done)}] {i}/{n}"
