"""The system's Chromium (Debian ``chromium``), headless, driven by Playwright: how the
tests open a report page as a person would, from disk, with WebGL drawn in software."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["CHROMIUM_ARGS", "chromium_path", "chromium_page"]

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
