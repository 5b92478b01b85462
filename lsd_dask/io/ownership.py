"""What a run owns in its folders: the files lsd-dask wrote there, and nothing else.

The output folder holds a record, :data:`RECORD`, of every file a run wrote there and its
content's SHA-256. A run

- refuses a folder that holds anything no run recorded, or a recorded file changed since
  (the user's own), listing a few, unless the user adopts the folder: the run then writes
  beside those files and never removes one;
- removes, once its outputs are written, only files an earlier run recorded, unchanged,
  that it did not write again (a K or method dropped from the settings);
- refuses any symbolic link inside its folders: the log is appended to, and a write
  through a link would land outside.

A work folder carries a mark, :data:`WORK_MARK`, from the first run that used it; a work
folder of files without it (and without the stamps of an older lsd-dask) is the user's,
and refused in the same way.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .atomic import PARTIAL, atomic_write_text, remove_path
from .storage import Folder

__all__ = [
    "LOCK_NAMES",
    "OUTPUT_PATTERNS",
    "RECORD",
    "WORK_MARK",
    "FolderNotOwnedError",
    "OutputRecord",
    "check_work_folder",
    "links_inside",
    "mark_work_folder",
]

#: the output folder's record of what lsd-dask wrote there
RECORD = ".lsd-dask-outputs.json"
#: the mark of a work folder lsd-dask made (or adopted)
WORK_MARK = ".lsd-dask-work"
#: lock files of the output and work folders (local ``.lock``, object storage ``lock.json``)
LOCK_NAMES = (".lsd-dask-output.lock", ".lock", "lock.json")

#: where a run's outputs lie in its output folder (``fnmatch`` patterns, relative to it):
#: the user's own files there are refused even in an adopted folder, as a run may write
#: over them (a test checks that every output of a run matches one)
OUTPUT_PATTERNS = (
    "dataset_description.json",
    ".bidsignore",
    "README.md",
    "CITATION.cff",
    "report.json",
    "report.html",
    "lsd-dask.log",
    "*.png",
    "atlas-*_description.json",
    "tpl-*/anat/*",
    "surfaces/*",
)

#: files named in a refusal
_SHOWN = 5


class FolderNotOwnedError(FileExistsError):
    """A folder holds files no lsd-dask run wrote, or a link."""


@dataclass
class OutputRecord:
    """The record of an output folder: each file a run wrote, by its path relative to the
    folder, with its SHA-256 (None for a file that is only appended to: the log).

    Attributes
    ----------
    folder : Path
    files : dict
        Relative path -> SHA-256 hex digest, or None.
    """

    folder: Path
    files: dict[str, str | None] = field(default_factory=dict)

    @classmethod
    def read(cls, folder: str | os.PathLike[str]) -> OutputRecord:
        """The folder's record; empty when it has none (a record that cannot be read
        vouches for nothing: the folder's files then count as the user's)."""
        root = Path(folder)
        try:
            raw = json.loads((root / RECORD).read_text(encoding="utf-8"))
            files = raw["files"]
            if not isinstance(files, dict):
                raise TypeError
        except (OSError, ValueError, KeyError, TypeError):
            return cls(root)
        return cls(root, {str(k): (None if v is None else str(v)) for k, v in files.items()})

    def owns(self, rel: str) -> bool:
        """Whether the file at ``rel`` is one a run wrote and nobody changed since."""
        if rel not in self.files:
            return False
        want = self.files[rel]
        path = self.folder / rel
        return path.is_file() and not path.is_symlink() and (want is None or _sha(path) == want)

    def foreign(self, skip: Iterable[Path] = ()) -> list[Path]:
        """Every file or link under the folder that no run recorded (or that changed
        since), but the record, the locks, killed writers' temporaries and the folders in
        ``skip`` (the work folder inside the output folder)."""
        skipped = {Path(p).resolve() for p in skip}
        found = []
        for top, dirs, names in os.walk(self.folder):
            here = Path(top)
            dirs[:] = sorted(d for d in dirs if (here / d).resolve() not in skipped)
            for name in sorted(names) + [d for d in dirs if (here / d).is_symlink()]:
                path = here / name
                rel = path.relative_to(self.folder).as_posix()
                if rel in (RECORD, *LOCK_NAMES) or PARTIAL in name:
                    continue
                if path.is_symlink() or not self.owns(rel):
                    found.append(path)
        return found

    def refuse_foreign(self, skip: Iterable[Path] = (), *, adopt: bool = False) -> list[Path]:
        """Raise :class:`FolderNotOwnedError` when the folder holds a link, or files no run
        recorded: unless ``adopt``, any; adopted, those where outputs lie
        (:data:`OUTPUT_PATTERNS`). Return the files an adopted folder keeps (never
        removed, never written over)."""
        links = links_inside(self.folder)  # the work folder's within it too
        if links:
            raise FolderNotOwnedError(_links_message(self.folder, "output", links))
        found = self.foreign(skip)
        clash = [p for p in found if _output_name(p.relative_to(self.folder).as_posix())]
        if adopt and clash:
            raise FolderNotOwnedError(
                f"output folder {self.folder} holds {len(clash)} file(s) no lsd-dask run "
                f"wrote under names its outputs take ({_names(clash, self.folder)}); move "
                "them out of the folder (an atlas to compare with too), or give the run "
                "another folder (--out)."
            )
        if found and not adopt:
            raise FolderNotOwnedError(
                f"output folder {self.folder} holds {len(found)} file(s) no lsd-dask run "
                f"wrote ({_names(found, self.folder)}); give the run an empty or new folder "
                "(--out), or adopt this one (--adopt-folders: the run writes beside them and "
                "removes none of them)."
            )
        return found

    def claim(self, *rels: str) -> None:
        """Record files a run is about to append to (the log): None, no digest."""
        self.files.update({rel: None for rel in rels})
        self._save()

    def commit(
        self, written: Iterable[Path], *, complete: bool, keep: Iterable[Path] = ()
    ) -> list[Path]:
        """Record the files a run wrote. A ``complete`` run's record is then what it
        wrote (and the appended files): files an earlier run recorded, unchanged, that it
        did not write again are removed, with folders they leave empty, but those in
        ``keep`` (the run's inputs: an earlier run's atlas read for comparison); returns
        the removed. An incomplete run's files join the record, and nothing is removed."""
        now = {Path(p).resolve().relative_to(self.folder.resolve()).as_posix() for p in written}
        kept = {Path(p).resolve() for p in keep}
        stale: list[Path] = []
        if complete:
            for rel in sorted(set(self.files) - now):
                path = self.folder / rel
                if self.files[rel] is not None and self.owns(rel) and path.resolve() not in kept:
                    stale.append(path)
            for path in stale:
                remove_path(path)
            _remove_empty_parents(stale, self.folder)
            # an input kept stays recorded: removed by the first run that no longer reads it
            held = {rel: sha for rel, sha in self.files.items() if (self.folder / rel).resolve()
                    in kept and self.owns(rel)}  # fmt: skip
            appended = {rel: None for rel, sha in self.files.items() if sha is None}
            now_sha = {rel: _sha(self.folder / rel) for rel in sorted(now)}
            self.files = {**appended, **held, **now_sha}
        else:
            self.files.update({rel: _sha(self.folder / rel) for rel in sorted(now)})
        self._save()
        return stale

    def _save(self) -> None:
        atomic_write_text(self.folder / RECORD, json.dumps({"files": self.files}, indent=1))


def check_work_folder(folder: Folder, *, adopt: bool = False) -> None:
    """Refuse a work folder that is the user's (files, no lsd-dask mark, no stamps) unless
    ``adopt`` (its files may then be replaced), or that holds a link. Writes nothing:
    :func:`mark_work_folder` marks it once every check has passed."""
    if folder.local:
        root = Path(folder.url)
        if not root.exists():
            return
        links = links_inside(root)
        if links:
            raise FolderNotOwnedError(_links_message(root, "work", links))
        entries = sorted(p for p in root.iterdir() if p.name not in LOCK_NAMES)
    else:
        entries = [Path(u) for u in folder.glob("*") if Path(u).name not in LOCK_NAMES]
    names = {p.name for p in entries}
    if entries and WORK_MARK not in names and "stamps" not in names and not adopt:
        raise FolderNotOwnedError(
            f"work folder {folder.url} holds files no lsd-dask run made "
            f"({', '.join(p.name for p in entries[:_SHOWN])}"
            f"{', ...' if len(entries) > _SHOWN else ''}); give the run a new folder "
            "(--work), or adopt this one (--adopt-folders: its files may be replaced)."
        )


def mark_work_folder(folder: Folder) -> None:
    """Mark a work folder as lsd-dask's (made if missing)."""
    folder.makedirs()
    if not folder.exists(folder.join(WORK_MARK)):
        folder.write_text(folder.join(WORK_MARK), "a work folder of lsd-dask\n")


def links_inside(root: Path) -> list[Path]:
    """Symbolic links under ``root`` (files and folders), not followed."""
    found = []
    for top, dirs, names in os.walk(root):
        here = Path(top)
        found += [here / n for n in (*dirs, *names) if (here / n).is_symlink()]
    return sorted(found)


def _links_message(root: Path, what: str, links: list[Path]) -> str:
    first = links[0]
    return (
        f"{what} folder {root} holds {len(links)} symbolic link(s) ({first.relative_to(root)} "
        f"-> {os.readlink(first)}); a run writes no file through a link: remove them, or "
        f"give the run another {what} folder."
    )


def _output_name(rel: str) -> bool:
    return any(fnmatch.fnmatch(rel, pattern) for pattern in OUTPUT_PATTERNS)


def _names(paths: list[Path], root: Path) -> str:
    shown = ", ".join(p.relative_to(root).as_posix() for p in paths[:_SHOWN])
    return shown + (f" and {len(paths) - _SHOWN} more" if len(paths) > _SHOWN else "")


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _remove_empty_parents(removed: list[Path], root: Path) -> None:
    """Folders the removed files leave empty, up to (not including) ``root``."""
    for folder in sorted({p.parent for p in removed}, key=lambda p: -len(p.parts)):
        while folder != root and root in folder.parents:
            try:
                folder.rmdir()  # only when empty
            except OSError:
                break
            folder = folder.parent
