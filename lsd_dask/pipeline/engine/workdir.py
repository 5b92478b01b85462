"""The work folder: every path under ``<output>/work`` (or the ``work`` URL), and what
produced each file.

The folder may be any fsspec URL (see :class:`lsd_dask.io.storage.Folder`); paths are
returned as strings, local paths or URLs alike.

A stage's output counts as done only when a stamp next to it records the *key* it was
computed from, and that key equals the current one. A key holds the stage's inputs and
every setting the stage reads; a stage's key includes its upstream stage's fingerprint, so a
change anywhere recomputes exactly that stage and everything downstream of it:

- ``mask``: every subject's files (path, size and modification time of each file), the
  hemisphere sizes, the ``nonfinite`` rule and the package version;
- ``ingest/<split>``: the mask's fingerprint and the split's subjects, in order;
- ``svd/<split>``: the split's ingest fingerprint, the SVD settings and ``random_state``;
- ``cluster/<split>/<method>/K<k>``: the split's SVD fingerprint, the method, K,
  ``random_state`` and the estimator's parameters.

On a mismatch the stale outputs are deleted before the stage runs, and the log says which
part of the key changed. Temporaries left by killed writers are swept when a run starts.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..._logging import get_log
from ...io.atomic import remove_partials
from ...io.storage import Folder
from ..settings.files import file_part

__all__ = [
    "WorkDir",
    "content_digest",
    "file_content_identity",
    "file_identity",
    "fingerprint",
    "mesh_digest",
]


class WorkDir:
    """Paths under ``<output>/work`` and the stamps that say what produced them.

    Parameters
    ----------
    root : path or URL
        The work folder (created when missing and local).
    log : callable, optional
        Receives one line per stale output found (default: the ``lsd_dask.pipeline``
        logger).
    storage_options : dict, optional
        fsspec options for a URL (credentials, endpoint).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        log: Callable[[str], None] | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        self.folder = Folder(root, storage_options)
        self.folder.makedirs()
        self.root = self.folder.url
        self.log = get_log("lsd_dask.pipeline", log)

    # paths ------------------------------------------------------------------
    @property
    def mask(self) -> str:
        return self.folder.join("mask.npy")

    @property
    def mask_info(self) -> str:
        return self.folder.join("mask.json")

    def store(self, split: str) -> str:
        return self.folder.join(f"{file_part(split, 'split')}.zarr")

    def u(self, split: str) -> str:
        return self.folder.join(f"{file_part(split, 'split')}_U.npy")

    def s(self, split: str) -> str:
        return self.folder.join(f"{file_part(split, 'split')}_s.npy")

    def blur(self, split: str) -> str:
        return self.folder.join("blur", f"{file_part(split, 'split')}.json")

    def labels(self, split: str, method: str, k: int) -> str:
        name = f"{file_part(split, 'split')}_{file_part(method, 'method')}_K{int(k)}.npy"
        return self.folder.join("labels", name)

    # files ------------------------------------------------------------------
    def load_npy(self, path: str, *, mmap: bool = False) -> Any:
        return self.folder.load_npy(path, mmap=mmap)

    def save_npy(self, path: str, arr: Any) -> str:
        self.folder.makedirs(os.path.dirname(path))
        return self.folder.save_npy(path, arr)

    def read_text(self, path: str) -> str:
        return self.folder.read_text(path)

    def write_text(self, path: str, text: str) -> str:
        self.folder.makedirs(os.path.dirname(path))
        return self.folder.write_text(path, text)

    # stamps -----------------------------------------------------------------
    def is_current(self, name: str, key: dict[str, Any], outputs: Iterable[str]) -> bool:
        """True when every output exists and its stamp records ``key``.

        Otherwise the outputs and the stamp are deleted (a stage must not find half of an
        old result) and, when something was there, the log says why it is recomputed.
        """
        outputs = list(outputs)
        stamp = self._read_stamp(name)
        present = [p for p in outputs if self.folder.exists(p)]
        if stamp is not None and stamp["fingerprint"] == fingerprint(key):
            changed = [
                p
                for p in present
                if _rel(self.root, p) in stamp.get("outputs", {})
                and stamp["outputs"][_rel(self.root, p)] != self._digest(p)
            ]
            damaged = [(p, why) for p in present if (why := self._store_damage(p))]
            if len(present) == len(outputs) and not changed and not damaged:
                return True
            if damaged:  # the cause, when a store says what is wrong with it
                reason = f"{_rel(self.root, damaged[0][0])} is damaged: {damaged[0][1]}"
            elif changed:
                reason = f"{_rel(self.root, changed[0])} changed since it was written"
            else:
                reason = "an output is missing"
        elif stamp is not None:
            reason = "changed: " + "; ".join(_differences(stamp.get("key", {}), key))
        elif present:
            reason = "no record of what produced the existing output"
        else:
            reason = ""
        if reason:
            self.log(f"[{name.split('/')[0]}] {name}: recomputing ({reason})")
        for p in present:
            self.folder.remove(p)
        self.folder.remove(self._stamp_path(name))
        return False

    def record(self, name: str, key: dict[str, Any], outputs: Iterable[str] = ()) -> str:
        """Stamp ``name`` as produced from ``key`` (after its outputs are in place), with a
        digest of each output file's content: an output edited, truncated or replaced
        later is recomputed, not reused (folders, the Zarr stores, are verified on their
        own: :func:`lsd_dask.io.verify_split`)."""
        fp = fingerprint(key)
        digests = {_rel(self.root, p): d for p in outputs if (d := self._digest(p)) is not None}
        stamp = {
            "name": name,
            "fingerprint": fp,
            # what later stages key on: the outputs as written, so that an output another
            # writer or an edit replaced under the same settings is not taken as current
            "output_fingerprint": fingerprint({"key": fp, "outputs": digests}),
            "key": key,
            "outputs": digests,
        }
        self.write_text(self._stamp_path(name), json.dumps(stamp, default=str))
        return fp

    def _store_damage(self, path: str) -> str | None:
        """What is wrong with a split store as this process sees it, or None; other
        outputs are checked by their digests."""
        if not path.endswith(".zarr"):
            return None
        from ...io.zarr_store import store_problem

        return store_problem(path, storage_options=self.folder.storage_options)

    def _digest(self, path: str) -> str | None:
        """A file's content digest (blake2b, read in 16 MiB blocks); None for a folder (a
        split store: its chunks carry their own checksums, and a resumed ingest stores the
        same data in another row layout than a fresh one)."""
        fs = self.folder.fs
        if not fs.isfile(path):
            return None
        h = hashlib.blake2b(digest_size=16)
        with fs.open(path, "rb") as f:
            while block := f.read(1 << 24):
                h.update(block)
        return h.hexdigest()

    def fingerprints(self) -> dict[str, str]:
        """Every recorded stage and its fingerprint (for the report)."""
        out = {}
        for path in self.folder.glob("stamps/*.json"):
            stem = path.rsplit("/", 1)[-1].removesuffix(".json")
            stamp = self._read_stamp(stem.replace("__", "/"))
            if stamp is not None:
                out[str(stamp.get("name", stem))] = _output_fingerprint(stamp)
        return out

    def fingerprint_of(self, name: str) -> str:
        """A finished stage's output fingerprint, for its downstream keys: its settings and
        the digests of what it wrote."""
        stamp = self._read_stamp(name)
        if stamp is None:
            raise RuntimeError(f"stage {name} has no record in {self.root}; it has not run.")
        return _output_fingerprint(stamp)

    def remove_partials(self) -> list[Path]:
        """Sweep what killed writers left; log each removal (object storage has none: its
        writes are single PUTs)."""
        if not self.folder.local:
            return []
        removed = remove_partials(self.root)
        for p in removed:
            self.log(f"[work] removed {p.name}, left by an interrupted write")
        return removed

    # helpers ----------------------------------------------------------------
    def _stamp_path(self, name: str) -> str:
        return self.folder.join("stamps", name.replace("/", "__") + ".json")

    def _read_stamp(self, name: str) -> dict[str, Any] | None:
        """A unit's stamp, or None when it has none or one that cannot be read (bytes that
        are not UTF-8 JSON, or JSON of another shape): such a unit is recomputed."""
        try:
            stamp = json.loads(self.read_text(self._stamp_path(name)))
        except (FileNotFoundError, ValueError):  # UnicodeDecodeError and JSONDecodeError
            return None
        shape = {"fingerprint": str, "outputs": dict, "key": dict}
        ok = isinstance(stamp, dict) and "fingerprint" in stamp
        ok = ok and all(isinstance(stamp.get(k, t()), t) for k, t in shape.items())
        return stamp if ok else None


def fingerprint(key: dict[str, Any]) -> str:
    """A stable hash of a JSON-able key (sorted keys; non-JSON values by ``str``)."""
    text = json.dumps(key, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _output_fingerprint(stamp: dict[str, Any]) -> str:
    """A stamp's output fingerprint (a stamp from before they were recorded: its key's,
    which no current key matches, so what reads it is recomputed once)."""
    return str(stamp.get("output_fingerprint", stamp["fingerprint"]))


def _rel(root: str, path: str) -> str:
    """An output's path relative to the work folder (stamps stay valid if it moves)."""
    return path[len(root) :].lstrip("/") if path.startswith(root) else path


def content_digest(a: Any) -> str:
    """The content of a dense or sparse array (shape, values, sparsity pattern), for keys
    that must change when an array does (a mesh, an atlas)."""
    h = hashlib.sha1(str(a.shape).encode())
    if sp.issparse(a):
        a = sp.csr_matrix(a)
        for part in (a.indptr, a.indices, a.data):
            h.update(np.ascontiguousarray(part).tobytes())
    else:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def mesh_digest(V: np.ndarray, A: sp.csr_matrix) -> str:
    """A mesh's content (coordinates and edges), for keys of what depends on its shape:
    a blur, the distances along it."""
    return content_digest(np.asarray(V, np.float64)) + content_digest(A)


def file_identity(path: str | os.PathLike[str]) -> dict[str, Any]:
    """What identifies an input's content cheaply: path, total size, latest mtime, and for
    a file a SHA-1 of three :data:`SAMPLE_BYTES` blocks of it (its start, middle and
    end: new data of the same size written with the old mtime restored shows there).

    A folder (a Zarr store) counts every file under it, so rewriting one chunk shows.
    """
    p = Path(path)
    files = [p] if p.is_file() else [q for q in p.rglob("*") if q.is_file()]
    stats = [q.stat() for q in files]
    out: dict[str, Any] = {
        "path": str(p.resolve()),
        "bytes": int(sum(s.st_size for s in stats)),
        "mtime_ns": int(max((s.st_mtime_ns for s in stats), default=0)),
        "files": len(files),
    }
    if p.is_file():
        out["sample_sha1"] = _sampled_sha1(p, stats[0].st_size)
    return out


#: bytes read at each of a file's three sampled places (:func:`file_identity`)
SAMPLE_BYTES = 1 << 16


def _sampled_sha1(path: Path, size: int) -> str:
    h = hashlib.sha1()
    starts = {0, max(0, size // 2 - SAMPLE_BYTES // 2), max(0, size - SAMPLE_BYTES)}
    with open(path, "rb") as f:
        for start in sorted(starts):
            f.seek(start)
            h.update(f.read(SAMPLE_BYTES))
    return h.hexdigest()


def file_content_identity(path: str | os.PathLike[str]) -> dict[str, Any]:
    """What identifies an input by its content: path, total size and a SHA-1 of every byte
    (a folder's files in sorted order, each by its relative path). SHA-1 because it is the
    fastest of hashlib's here (1.3 GB/s on one core with the CPU's SHA instructions,
    against 0.35 GB/s for BLAKE2b), faster than a disk delivers; the inputs are not
    adversarial. Runs anywhere (on the workers, one task per subject)."""
    p = Path(path)
    files = [p] if p.is_file() else sorted(q for q in p.rglob("*") if q.is_file())
    h = hashlib.sha1()
    size = 0
    for q in files:
        if q != p:
            h.update(str(q.relative_to(p)).encode() + b"\0")
        with open(q, "rb") as f:
            while block := f.read(1 << 24):
                h.update(block)
                size += len(block)
    return {"path": str(p.resolve()), "bytes": size, "sha1": h.hexdigest()}


def _differences(old: Any, new: Any, prefix: str = "", limit: int = 3) -> list[str]:
    """Up to ``limit`` dotted keys whose values differ, e.g. ``svd.rank 100 -> 50``."""
    out: list[str] = []
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            out += _differences(old.get(key), new.get(key), f"{prefix}{key}.", limit)
            if len(out) >= limit:
                return out[:limit]
        return out
    old_j, new_j = (json.loads(json.dumps(v, default=str)) for v in (old, new))
    if old_j != new_j:
        out.append(f"{prefix.rstrip('.')} {_short(old_j)} -> {_short(new_j)}")
    return out


def _short(v: Any, width: int = 60) -> str:
    text = json.dumps(v, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."
