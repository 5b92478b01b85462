"""The run's log file: every line with its time stamp, and how the run ended."""

from __future__ import annotations

import re

import pytest

from lsd_dask.pipeline.engine.log import LOG_FILE, bar, log_file


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
