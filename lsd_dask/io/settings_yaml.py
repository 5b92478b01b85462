"""Settings files (pipeline and cluster YAML), read safely.

``yaml.safe_load`` builds no objects, but it still expands aliases: a file of nested
aliases (a "billion laughs") grows without bound in memory. Settings files have no use for
anchors and aliases, so an alias is refused with the line it is on, and a file over
:data:`MAX_BYTES` is refused before it is parsed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

__all__ = ["MAX_BYTES", "read_settings"]

#: the largest settings file read (a pipeline file listing 10,000 subjects is about 1 MB)
MAX_BYTES = 16 * 2**20


class _NoAliasLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no types
    """``SafeLoader`` that refuses aliases (``*name``)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.YAMLError(
                f"line {event.start_mark.line + 1}: aliases (*{event.anchor}) are not allowed "
                "in a settings file; write the value out."
            )
        return super().compose_node(parent, index)


def read_settings(path: str | os.PathLike[str], what: str) -> Any:
    """The parsed YAML of a settings file (``what`` names it in errors: "pipeline file",
    "cluster config"); every failure is one ``ValueError`` or ``FileNotFoundError`` line
    naming the file."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{what} {p} does not exist.")
    size = p.stat().st_size
    if size > MAX_BYTES:
        raise ValueError(f"{p}: {size} bytes is too large for a {what} (at most {MAX_BYTES}).")
    try:
        return yaml.load(p.read_text(), Loader=_NoAliasLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as err:
        raise ValueError(f"{p} is not valid YAML: {' '.join(str(err).split())}") from None
