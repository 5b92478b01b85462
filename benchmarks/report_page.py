"""The report page's size and load time: ``report.html`` opened from disk in headless
Chromium (the system's, driven by Playwright, as the tests open it), timed from the start of
navigation until the interactive cortex is drawn (``window.lsdViewer.ready``), the median
of ``--repeat`` fresh browsers; a screenshot of the cortex is written beside the page's
name in ``--shots``.

Run: ``python -m benchmarks.report_page <output>/report.html --shots /tmp``. Prints the
page's MB, what its parts take (plotly.js, the viewer's data, the figures), the load times
and the number of vertices, views and participants' maps it holds.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("page", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--shots", type=Path, help="folder for a screenshot of the cortex")
    args = ap.parse_args()
    from lsd_dask.pipeline.products.viewer import plotly_script
    from lsd_dask.testing.browser import chromium_page

    html = args.page.read_text()
    found = re.search(r"id='lsd-viewer-data'>(.*?)</script>", html, re.S)
    payload = json.loads(found.group(1).replace("<\\/", "</")) if found else {}
    figures = sum(len(m) for m in re.findall(r"data:image/png;base64,[A-Za-z0-9+/=]+", html))
    n_vertices = sum(
        len(h["vertices"]) for h in payload.get("hemispheres", [])
    )  # base64 of gzip: reported as bytes below
    print(f"page: {args.page.stat().st_size / 1e6:.2f} MB")
    print(f"  plotly.js {len(plotly_script()[0]) / 1e6:.2f} MB, viewer data "
          f"{len(found.group(1)) / 1e6 if found else 0:.2f} MB (geometry {n_vertices / 1e6:.2f}"
          f" MB), figures {figures / 1e6:.2f} MB")  # fmt: skip
    times = []
    for i in range(args.repeat):
        with chromium_page() as (page, errors):
            t0 = time.perf_counter()
            page.goto(args.page.resolve().as_uri())
            page.wait_for_function(
                "window.lsdViewer && window.lsdViewer.ready", timeout=120_000, polling=50
            )
            times.append(time.perf_counter() - t0)
            if i == 0:
                info = page.evaluate(
                    "({vertices: window.lsdViewer.data.hemispheres.length, views: "
                    "window.lsdViewer.data.views.length, participants: "
                    "(window.lsdViewer.data.participants || []).length})"
                )
                print(f"  views {info['views']}, participants' maps {info['participants']}")
                if args.shots:
                    page.locator("#lsd-cortex").screenshot(
                        path=str(args.shots / f"{args.page.parent.name}_cortex.png")
                    )
            if errors:
                print("  console errors:", errors)
    print(f"load (navigation to drawn): median {statistics.median(times):.2f} s, every run "
          + ", ".join(f"{t:.2f}" for t in times))  # fmt: skip


if __name__ == "__main__":
    main()
