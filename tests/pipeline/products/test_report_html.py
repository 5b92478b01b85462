"""The report page's tables (lsd_dask.pipeline.products.report_html)."""

from html.parser import HTMLParser

import numpy as np

from lsd_dask.pipeline.products.report_html import _blur_table
from lsd_dask.selection import BlurChoice


class _Cells(HTMLParser):
    """The text of every table cell, row by row."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._in_cell = False

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        self._in_cell = tag in ("td", "th")
        if self._in_cell:
            self.rows[-1].append("")

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._in_cell = False

    def handle_data(self, data):
        if self._in_cell:
            self.rows[-1][-1] += data


def test_blur_table_marks_the_blurs_past_the_stop_not_tried():
    """A split whose grid stopped early: its tried blurs' errors ± standard errors, "not
    tried" for the rest, under the whole grid's header, beside a split that tried all."""
    rng = np.random.default_rng(0)
    stopped = np.full((4, 6), np.nan)
    stopped[:2] = [[0.77] * 6, [0.79] * 6] + 0.001 * rng.standard_normal((2, 6))
    whole = np.array([[0.73], [0.72], [0.70], [0.69]]) + 0.001 * rng.standard_normal((4, 6))
    choices = {
        split: BlurChoice(mm, [0.0, 5.0, 10.0, 20.0], e, [0, 2, 9, 38], 50, 0.01).to_dict()
        for split, mm, e in (("split1", 0.0, stopped), ("split2", 20.0, whole))
    }
    assert choices["split1"]["mean_error"][2:] == [None, None]
    parser = _Cells()
    parser.feed(_blur_table(choices))
    header, first, second = parser.rows
    assert header == ["split", "K", "0 mm", "5 mm", "10 mm", "20 mm", "chosen"]
    assert first[:2] == ["split1", "50"] and first[4:] == ["not tried", "not tried", "0 mm"]
    mean, se = (float(v) for v in first[3].split(" ± "))
    assert abs(mean - stopped[1].mean()) <= 1e-4 and se > 0
    assert "not tried" not in second and second[-1] == "20 mm"


class _Headings(HTMLParser):
    """Each table heading's text and its hover title; the legends' text."""

    def __init__(self) -> None:
        super().__init__()
        self.headings: list[tuple[str, str | None]] = []
        self.legend = ""
        self._where: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "th":
            self.headings.append(("", dict(attrs).get("title")))
            self._where = "th"
        elif tag == "p" and dict(attrs).get("class") == "legend":
            self._where = "legend"

    def handle_endtag(self, tag):
        if tag in ("th", "p"):
            self._where = None

    def handle_data(self, data):
        if self._where == "th":
            self.headings[-1] = (self.headings[-1][0] + data, self.headings[-1][1])
        elif self._where == "legend":
            self.legend += data


def test_every_compared_column_is_explained_where_it_stands():
    """The comparison tables' and the score table's headings carry what each column is,
    and the line under them says it, "Gordon homogeneity" included."""
    from lsd_dask.pipeline.products.report_html import _comparison_tables, _score_table
    from lsd_dask.pipeline.products.scores import compared_columns, table_columns

    row = {"method": "ward", "k": 10, "n_regions": [10, 11], "dice": 0.5}
    row |= {c.name: 0.1 for c in table_columns() + compared_columns() if c.name != "n_regions"}
    page = "".join(_comparison_tables([row])) + _score_table([row])
    parser = _Headings()
    parser.feed(page)
    titled = {text: title for text, title in parser.headings}
    for c in compared_columns() + [c for c in table_columns() if c.help]:
        assert titled.get(c.title) == c.help, c.title
        assert f"{c.title}: {c.help}" in parser.legend, c.title
    assert "Gordon homogeneity: the share of a parcel's variance" in parser.legend
    assert titled["method"] is None  # nothing to explain
