"""The package's log lines: ``logging`` loggers under ``lsd_dask``, printed by default.

Every line a run writes (stage progress, skips, timings) goes to a logger under
``lsd_dask`` at level INFO. As distributed does for its own loggers, the package gives
``lsd_dask`` one handler that prints the bare message on standard output (the terminal, a
batch log, a notebook cell), so a run shows its progress without any set-up. A library user
silences or redirects it the usual way::

    import logging
    logging.getLogger("lsd_dask").setLevel(logging.WARNING)      # quiet
    logging.getLogger("lsd_dask").handlers.clear()               # or their own handlers
    logging.getLogger("lsd_dask").propagate = True               # and the root's

Functions that take ``log=`` (a callable given each line) send the lines there instead.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

__all__ = ["Log", "get_log"]

#: a receiver of log lines
Log = Callable[[str], None]


def get_log(name: str, log: Log | None = None) -> Log:
    """``log`` when given, else the INFO method of the logger ``name`` (under lsd_dask)."""
    return log if log is not None else logging.getLogger(name).info


class _Stdout(logging.StreamHandler):  # type: ignore[type-arg]
    """Prints on whatever ``sys.stdout`` is at the time (pytest, Jupyter and click swap
    it after import)."""

    def __init__(self) -> None:
        super().__init__(sys.stdout)

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stdout
        super().emit(record)


def _install_default_handler() -> None:
    logger = logging.getLogger("lsd_dask")
    if not logger.handlers:
        handler = _Stdout()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


_install_default_handler()
