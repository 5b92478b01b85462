"""Atomic writes: a file or folder appears under its final name complete, or not at all.

Every writer in the package writes to a temporary name in the destination's folder and
renames it into place (``os.replace`` is atomic on one file system). A failure or an
interrupt removes the temporary; a process killed outright leaves it behind under a name
that starts with ``.`` and holds ``.partial-``, which :func:`remove_partials` sweeps.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "PARTIAL",
    "atomic_copy",
    "atomic_path",
    "atomic_save_npy",
    "atomic_write_bytes",
    "atomic_write_text",
    "remove_partials",
    "remove_path",
]

#: marks every temporary name
PARTIAL = ".partial-"


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it into place when the block ends.

    The temporary keeps ``path``'s suffixes (nibabel and numpy choose the format by them).
    On success an existing ``path`` (file or folder) is replaced; on any exception the
    temporary is removed and ``path`` is left as it was.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    suffix = "".join(final.suffixes)
    stem = final.name.removesuffix(suffix) if suffix else final.name
    tmp = final.with_name(f".{stem}{PARTIAL}{uuid.uuid4().hex[:8]}{suffix}")
    try:
        yield tmp
        if final.is_dir() and not final.is_symlink():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException as err:
        remove_path(tmp)
        if isinstance(err, OSError) and err.filename in (None, str(tmp), tmp):
            # a full disk names no file, or the temporary: name the file being written
            raise OSError(err.errno, err.strerror or str(err), str(final)) from err
        raise


def atomic_save_npy(path: str | os.PathLike[str], arr: Any) -> Path:
    """``np.save`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        np.save(tmp, np.asarray(arr))
    return Path(path)


def atomic_copy(source: str | os.PathLike[str], path: str | os.PathLike[str]) -> Path:
    """Copy the file ``source`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        shutil.copyfile(source, tmp)
    return Path(path)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def remove_partials(folder: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporaries that killed writers left anywhere under ``folder``."""
    root = Path(folder)
    if not root.is_dir():
        return []
    found = sorted(p for p in root.rglob(f".*{PARTIAL}*") if PARTIAL in p.name)
    removed = []
    for p in found:
        if p.exists():
            remove_path(p)
            removed.append(p)
    return removed


def remove_path(p: Path) -> None:
    """Remove a file or a folder tree; nothing when it does not exist."""
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    elif p.exists() or p.is_symlink():
        p.unlink(missing_ok=True)
