"""The pipeline's console lines: one per step, readable in a batch log; and the run's log
file, the same lines with time stamps, in the output folder."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from ..._logging import Log, get_log

__all__ = ["LOG_FILE", "Log", "bar", "get_log", "log_file", "prefixed"]

#: the run's log file in the output folder (appended to by every run into it)
LOG_FILE = "lsd-dask.log"


def bar(i: int, n: int, width: int = 20) -> str:
    """A text progress bar, ``[#####.....] 3/6``, one line per step (works in logs too)."""
    done = int(round(width * i / max(n, 1)))
    return f"[{'#' * done}{'.' * (width - done)}] {i}/{n}"


def prefixed(log: Log, prefix: str) -> Log:
    """``log`` with every line under ``prefix`` (a progress callback's lines, e.g. a half
    SVD's passes under ``[blur] split1 half 1``)."""
    return partial(_prefixed, log, prefix)


@contextmanager
def log_file(output: str | os.PathLike[str], log: Log, header: str) -> Iterator[Log]:
    """``log``, with every line also appended to ``<output>/lsd-dask.log`` behind a time
    stamp (ISO 8601, local time with its offset); ``header`` opens the run's section and an
    error that ends the block closes it (``[failed] ...``)."""
    path = Path(output) / LOG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8", buffering=1) as f:

        def to_file(line: str) -> None:
            f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} {line}\n")

        def both(line: str) -> None:
            log(line)
            to_file(line)

        both(header)
        try:
            yield both
        except BaseException as err:
            # the file says how the run ended; the console shows the error itself
            to_file(f"[failed] {type(err).__name__}: {' '.join(str(err).split())}")
            raise


def _prefixed(log: Log, prefix: str, line: str) -> None:
    log(f"{prefix} {line}")
