"""The system's Chromium (Debian ``chromium``), headless, driven by Playwright: how the
tests open a report page as a person would, from disk, with WebGL drawn in software."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = [
    "CHROMIUM_ARGS",
    "chromium_page",
    "chromium_path",
    "front_vertex",
    "hover_vertex",
    "require_chromium",
]

#: headless, no sandbox (CI runs as root), WebGL in software (SwiftShader: no GPU), and
#: none of Chromium's own network traffic (the machine has no network to give it)
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--use-angle=swiftshader",
    "--enable-unsafe-swiftshader",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    """The system's Chromium, or None when it is not installed."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def require_chromium() -> None:
    """Skip the calling test when Chromium is not installed; fail it in CI (``CI`` set),
    where ``.ci/run`` installs it."""
    import pytest

    if chromium_path() is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is not installed in CI (.ci/run installs Debian's chromium).")
        pytest.skip("Chromium is not installed (apt-get install chromium).")


@contextmanager
def chromium_page(width: int = 1200, height: int = 900) -> Iterator[tuple[Any, list[str]]]:
    """A page of a fresh headless Chromium, and the list its console errors and uncaught
    exceptions are appended to (``"error: ..."``, ``"pageerror: ..."``)."""
    from playwright.sync_api import sync_playwright

    path = chromium_path()
    if path is None:
        raise RuntimeError("Chromium is not installed (Debian: apt-get install chromium).")
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.on(
                "console",
                lambda m: errors.append(f"error: {m.text}") if m.type == "error" else None,
            )
            page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
            yield page, errors
        finally:
            browser.close()


#: the report page's left hemisphere: its vertex nearest the viewer (a parcel's, not the
#: medial wall's) and where it falls on the page (plotly's camera matrices, as its scene
#: projects the vertex)
_FRONT = """() => {
  var gd = document.getElementById('lsd-cortex'), v = window.lsdViewer;
  var sc = gd._fullLayout.scene._scene, cp = sc.glplot.cameraParams, ds = sc.dataScale;
  var tr = gd._fullData[0], lab = v.labels(), best = null;
  function mul(m, x) { var o = [0, 0, 0, 0];
    for (var r = 0; r < 4; r++) for (var c = 0; c < 4; c++) o[r] += m[c * 4 + r] * x[c];
    return o; }
  for (var i = 0; i < tr.x.length; i++) {
    if (lab[i] === 0) continue;
    var p = [tr.x[i] * ds[0], tr.y[i] * ds[1], tr.z[i] * ds[2], 1];
    var c = mul(cp.projection, mul(cp.view, mul(cp.model, p)));
    var depth = c[2] / c[3];
    if (best === null || depth < best.depth) best = {vertex: i, depth: depth, c: c};
  }
  var rect = sc.container.getBoundingClientRect();
  return {vertex: best.vertex,
          x: rect.left + (best.c[0] / best.c[3] + 1) / 2 * rect.width,
          y: rect.top + (1 - best.c[1] / best.c[3]) / 2 * rect.height};
}"""


def front_vertex(page: Any) -> dict[str, Any]:
    """On a report page, scrolled to its cortex: the left hemisphere's vertex nearest the
    viewer (``vertex``, its index in the labels) and its place on the page (``x``, ``y``):
    the pointer put there hovers that vertex."""
    page.locator("#lsd-cortex").scroll_into_view_if_needed()
    result: dict[str, Any] = page.evaluate(_FRONT)
    return result


def hover_vertex(page: Any, at: dict[str, Any]) -> str:
    """Move the pointer onto ``at`` (:func:`front_vertex`) as a person would, wait until
    the page describes that vertex, and return what it says."""
    page.mouse.move(at["x"] + 40, at["y"] + 40)
    page.mouse.move(at["x"], at["y"])
    page.wait_for_function(
        f"document.getElementById('lsd-hover').dataset.vertex === '{at['vertex']}'",
        timeout=10_000,
    )
    text: str = page.locator("#lsd-hover").inner_text()
    return text
