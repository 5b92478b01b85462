"""The package's lines are logging records: printed by default, silenced or redirected
with the standard logging calls, and sent to a ``log=`` callable when one is given."""

from __future__ import annotations

import logging

import pytest

from lsd_dask.pipeline.engine.workdir import WorkDir


@pytest.fixture
def lsd_logger():
    logger = logging.getLogger("lsd_dask")
    level, handlers = logger.level, list(logger.handlers)
    yield logger
    logger.setLevel(level)
    logger.handlers[:] = handlers


def _changed_rank(wd, old, new):
    wd.record("svd/a", {"rank": old})
    wd.is_current("svd/a", {"rank": new}, [])


def test_lines_are_printed_by_default_and_silenced_or_redirected(tmp_path, capsys, lsd_logger):
    wd = WorkDir(tmp_path)
    _changed_rank(wd, 1, 2)
    assert "[svd] svd/a: recomputing (changed: rank 1 -> 2)" in capsys.readouterr().out
    lsd_logger.setLevel(logging.WARNING)
    _changed_rank(wd, 2, 3)
    assert capsys.readouterr().out == ""
    lsd_logger.setLevel(logging.INFO)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    lsd_logger.handlers[:] = [handler]
    _changed_rank(wd, 3, 4)
    assert capsys.readouterr().out == ""
    assert [r.name for r in records] == ["lsd_dask.pipeline"]
    assert records[0].getMessage().endswith("rank 3 -> 4)")


def test_a_log_callable_takes_the_lines_instead(tmp_path, capsys):
    lines: list[str] = []
    _changed_rank(WorkDir(tmp_path, lines.append), 1, 2)
    assert lines == ["[svd] svd/a: recomputing (changed: rank 1 -> 2)"]
    assert capsys.readouterr().out == ""
