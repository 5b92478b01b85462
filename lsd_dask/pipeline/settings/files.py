"""Reading a pipeline file's values: keys checked against the known ones, numbers and
mappings checked by name, paths resolved against the file's folder, and the subjects
(listed, or found by globs) with their files."""

from __future__ import annotations

import difflib
import glob
import os
import re
from collections.abc import Callable
from dataclasses import MISSING, field, fields
from pathlib import Path
from typing import Any

from ...io.surface_files import READERS, SubjectFiles, file_keys, vertex_counts

__all__ = [
    "FILE_PART",
    "minimum_of",
    "setting",
    "check_keys",
    "cluster",
    "file_part",
    "int_setting",
    "mapping",
    "pair_of_surfaces",
    "resolve",
    "subjects",
    "work",
]


def setting(
    default: Any = MISSING,
    *,
    note: str,
    minimum: int | None = None,
    factory: Callable[[], Any] | None = None,
) -> Any:
    """A settings field: its default (or ``factory``), its note in the pipeline-file
    reference and, for an integer, the least value it takes (:func:`minimum_of`)."""
    metadata = {"note": note, **({"minimum": minimum} if minimum is not None else {})}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def minimum_of(cls: Any, name: str) -> int:
    """The least value of the integer setting ``name`` of the settings class ``cls``."""
    minimum: int = next(f for f in fields(cls) if f.name == name).metadata["minimum"]
    return minimum


#: what a name that becomes part of a file name may be: letters, digits, "_" and "-"
FILE_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


def file_part(name: str, what: str) -> str:
    """``name`` if it is safe as part of a file name (no separator, no ``..``), else a
    one-line error: checked wherever a split or method name becomes a path, so the Python
    API is as safe as the pipeline file."""
    if not FILE_PART.match(str(name)):
        raise ValueError(
            f"{what} name {name!r}: use letters, digits, '_' and '-' only (it names files in "
            "the work folder)."
        )
    return str(name)


#: a subject entry's keys besides its files' (io's readers name those: ``file_keys()``)
_SUBJECT_KEYS = {"id", "time_slice"}
#: what ``os.path.expandvars`` leaves of a variable that is not set
_UNSET_VAR = re.compile(r"\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)")


def check_keys(d: dict[str, Any], allowed: set[str], where: str) -> None:
    """Reject unknown keys, suggesting the closest known one."""
    for key in d:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), sorted(allowed), n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"{where}: unknown key {key!r}{hint} (known keys: {', '.join(sorted(allowed))})"
            )


def mapping(v: Any, key: str) -> dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ValueError(f"{key}: expected a mapping, got {v!r}.")
    return dict(v)


def int_setting(v: Any, key: str, minimum: int) -> int:
    """An integer setting (not a bool, a float with a fraction or a word), at least minimum."""
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise ValueError(f"{key}: {v!r} is not an integer.")
    try:
        f = float(v)
    except ValueError:
        raise ValueError(f"{key}: {v!r} is not an integer.") from None
    if not f.is_integer():
        raise ValueError(f"{key}: {v!r} is not an integer.")
    if f < minimum:
        raise ValueError(f"{key}: {v!r} must be at least {minimum}.")
    return int(f)


def pair_of_surfaces(v: Any, base: Path, key: str) -> dict[str, str] | None:
    if v is None:
        return None
    pair = mapping(v, key)
    if set(pair) != {"left", "right"}:
        raise ValueError(f"{key}: a 'left' and a 'right' GIFTI surface, got keys {sorted(pair)}.")
    return {h: str(resolve(p, base)) for h, p in pair.items()}


def work(v: Any, base: Path) -> str | None:
    """The work location: a URL as given, a local path resolved like the other paths."""
    if v is None:
        return None
    if not isinstance(v, str | os.PathLike) or not str(v):
        raise ValueError(f"work: a folder or a URL such as s3://bucket/run, got {v!r}.")
    text = str(v)
    return text if "://" in text and not text.startswith("file://") else str(resolve(text, base))


def cluster(v: Any, base: Path) -> str | dict[str, Any] | None:
    """A scheduler address, a cluster config file (relative to the pipeline file's folder),
    or an inline cluster config limited to the documented settings."""
    if v is None:
        return None
    if isinstance(v, dict):
        from ...distributed import check_cluster_config

        return check_cluster_config(v, "cluster")
    text = str(v)
    if text.endswith((".yaml", ".yml")):
        path = resolve(text, base)
        if not path.is_file():
            raise FileNotFoundError(f"cluster: the cluster config file {path} does not exist.")
        return str(path)
    return text


def resolve(p: Any, base: Path) -> Path:
    """A path relative to the YAML's folder; ``pkg://NAME/rest`` is a file inside an installed
    package (found without importing it), e.g. data that a package ships."""
    text = os.path.expandvars(str(p))
    unset = _UNSET_VAR.search(text)
    if unset:
        raise ValueError(f"{p}: the environment variable {unset.group(0)} is not set.")
    if text.startswith("pkg://"):
        import importlib.util

        name, _, rest = text[len("pkg://") :].partition("/")
        if not name.isidentifier():
            # a dotted name would import its parent packages, running their code
            raise ValueError(f"{p}: pkg:// takes a top-level package name, got {name!r}.")
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(f"package {name!r} is not installed (needed for {text}).")
        return Path(list(spec.submodule_search_locations)[0]) / rest
    q = Path(text).expanduser()
    return q if q.is_absolute() else (base / q)


def subjects(raw: dict[str, Any], base: Path) -> list[SubjectFiles]:
    out: list[SubjectFiles] = []
    entries = raw.get("subjects") or []
    if not isinstance(entries, list):
        raise ValueError("subjects: a list of {id: ..., cifti|left+right|zarr: ...} entries.")
    for j, entry in enumerate(entries):
        if not isinstance(entry, dict) or "id" not in entry:
            raise ValueError(f"subjects[{j}]: a mapping with an 'id' key, got {entry!r}.")
        check_keys(entry, _SUBJECT_KEYS | file_keys(), f"subjects[{j}] ({entry['id']})")
        sid = str(entry["id"])
        ts = entry.get("time_slice")
        if ts is not None and (not isinstance(ts, list | tuple) or len(ts) != 2):
            raise ValueError(f"subjects[{j}] ({sid}).time_slice: [start, stop], got {ts!r}.")
        files = {k: resolve(entry[k], base) for k in file_keys() if entry.get(k)}
        where = f"subjects[{j}] ({sid}).time_slice"
        out.append(
            SubjectFiles.from_keys(
                sid,
                time_slice=(int_setting(ts[0], where, 0), int_setting(ts[1], where, 1))
                if ts
                else None,
                **files,
            )
        )
    globs = mapping(raw.get("globs"), "globs")
    check_keys(globs, file_keys(), "globs")
    if globs:
        # one format's keys: its first file drives, the others are matched by their stem
        keys = next(r.keys for r in READERS.values() if r.keys[0] in globs)
        missing = [k for k in keys if k not in globs]
        if missing:
            raise ValueError(f"globs: {keys[0]} needs {', '.join(missing)} as well.")
        for m in sorted(glob.glob(str(resolve(globs[keys[0]], base)))):
            stem = Path(m).name.split(".")[0]
            given: dict[str, Any] = {keys[0]: Path(m)}
            given.update({k: _match_stem(stem, str(resolve(globs[k], base)), k) for k in keys[1:]})
            out.append(SubjectFiles.from_keys(stem, **given))
    return out


def mesh(v: Any, base: Path, first: SubjectFiles) -> tuple[dict[str, str], str]:
    """The ``mesh`` setting as a pair of surface files and what it is: the files given, a
    standard mesh by name (``conte69``, ``fsaverage5``), or, when none is given, the
    standard mesh with the first subject's vertex count."""
    from ...datasets.templates import STANDARD_MESHES, standard_mesh

    if v is None or isinstance(v, str):
        if v is None:
            sizes = vertex_counts(first)
            name = next((k for k, n in STANDARD_MESHES.items() if sizes == [n, n]), None)
            if name is None:
                raise ValueError(
                    f"mesh: give the surfaces ({{left: lh.surf.gii, right: rh.surf.gii}}); "
                    f"subject {first.subject}'s {sizes} vertices per hemisphere match no "
                    f"standard mesh ({', '.join(STANDARD_MESHES)})."
                )
        else:
            name = v
        files, source = standard_mesh(name)
        return {h: str(p) for h, p in files.items()}, source
    return {h: str(resolve(p, base)) for h, p in mapping(v, "mesh").items()}, "given"


def _match_stem(stem: str, pattern: str, key: str) -> Path:
    for cand in sorted(glob.glob(pattern)):
        if Path(cand).name.split(".")[0] == stem:
            return Path(cand)
    raise FileNotFoundError(f"no {key} file matching {pattern} for {stem}.")
