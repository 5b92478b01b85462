"""The pipeline's console lines: one per step, readable in a batch log; and the run's log
file, the same lines with time stamps, in the output folder."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from ..._logging import Log, get_log

__all__ = ["LOG_FILE", "Log", "bar", "duration", "get_log", "heartbeat", "log_file", "prefixed"]

#: the run's log file in the output folder (appended to by every run into it)
LOG_FILE = "lsd-dask.log"


def bar(i: int, n: int, width: int = 20, *, started: float | None = None) -> str:
    """A text progress bar, ``[#####.....] 3/6``, one line per step (works in logs too).

    ``started`` (a :func:`time.monotonic` reading when step 1 began) adds the time left at
    the pace so far, ``[#####.....] 3/6 (about 12 s left)``, once a step is done."""
    done = int(round(width * i / max(n, 1)))
    text = f"[{'#' * done}{'.' * (width - done)}] {i}/{n}"
    if started is not None and 0 < i < n:
        left = (time.monotonic() - started) / i * (n - i)
        text += f" (about {duration(left)} left)"
    return text


def duration(seconds: float) -> str:
    """A time span as a person reads it: ``8 s``, ``4 min 05 s``, ``2 h 10 min``."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


@contextmanager
def heartbeat(log: Log, prefix: str, every: float) -> Iterator[Log]:
    """``log``, with a line of its own whenever ``every`` seconds pass without one:
    ``[evaluate] still working, 1 min 30 s in``, so that a long step never looks hung in a
    console or a batch log. No lock is held around ``log``: a stage's threads log as they
    did (one may wait in its line for another's), and the timer thread is one more."""
    start = time.monotonic()
    last = [start]
    stop = threading.Event()

    def line(text: str) -> None:
        last[0] = time.monotonic()
        log(text)

    def beat() -> None:
        while not stop.wait(min(1.0, every)):
            now = time.monotonic()
            if now - last[0] >= every:
                line(f"{prefix} still working, {duration(now - start)} in")

    timer = threading.Thread(target=beat, name="lsd-dask-heartbeat", daemon=True)
    timer.start()
    try:
        yield line
    finally:
        stop.set()
        timer.join()


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
    # not through a link: the lines would land in the link's target
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "a", encoding="utf-8", buffering=1) as f:

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
