"""The run's log file: every line with its time stamp, and how the run ended."""

from __future__ import annotations

import re

import pytest

from lsd_dask.pipeline.engine.log import LOG_FILE, bar, duration, log_file


def test_log_file_stamps_every_line_and_records_a_failure(tmp_path):
    lines: list[str] = []
    with log_file(tmp_path / "out", lines.append, "[run] first") as log:
        log("[svd] done")
    with pytest.raises(ValueError, match="boom"):
        with log_file(tmp_path / "out", lines.append, "[run] second") as log:
            log("[ingest] 1/2")
            raise ValueError("boom\n  on two lines")
    assert lines == ["[run] first", "[svd] done", "[run] second", "[ingest] 1/2"]
    written = (tmp_path / "out" / LOG_FILE).read_text().splitlines()
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4} "
    assert all(re.match(stamp, line) for line in written)
    assert [line.split(" ", 1)[1] for line in written] == [
        *lines,
        "[failed] ValueError: boom on two lines",
    ]


def test_bar():
    assert bar(3, 6, width=10) == "[#####.....] 3/6"
    assert bar(0, 0, width=4) == "[....] 0/0"


def test_a_bar_says_the_time_left_at_the_pace_so_far():
    """3 of 6 steps in 90 s: about 90 s left; nothing to say before the first step or
    after the last."""
    import time

    started = time.monotonic() - 90
    assert bar(3, 6, width=10, started=started) == "[#####.....] 3/6 (about 1 min 30 s left)"
    assert bar(0, 6, width=10, started=started) == "[..........] 0/6"
    assert bar(6, 6, width=10, started=started) == "[##########] 6/6"
    assert [duration(s) for s in (8.4, 245, 7800)] == ["8 s", "4 min 05 s", "2 h 10 min"]
