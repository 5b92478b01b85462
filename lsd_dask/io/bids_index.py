"""Find the BOLD files of a BIDS derivatives tree (fMRIPrep's outputs) by their entities.

A light reader: it lists ``sub-*/[ses-*/]func/`` with ``os.scandir`` and parses each name
with the BIDS schema's entity order (:func:`lsd_dask.io.bids.parse_bids_name`), so that
indexing a 1,000-subject tree takes a fraction of a second (pybids builds a database of
every file and its metadata first: see ``benchmarks/bids_index.py``).

Surface BOLD files are found as fMRIPrep names them::

    sub-01/func/sub-01_task-rest_space-fsLR_den-91k_bold.dtseries.nii       (CIFTI)
    sub-01/func/sub-01_task-rest_hemi-L_space-fsaverage5_bold.func.gii      (GIFTI, and hemi-R)
    sub-01/func/sub-01_task-rest_desc-confounds_timeseries.tsv              (the confounds)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .bids import parse_bids_name

__all__ = [
    "BoldRun",
    "FILTERS",
    "confounds_file",
    "confounds_files",
    "find_bold",
    "index_func_files",
]

#: the entities a search may filter on (``participant_label`` filters ``sub``), in BIDS
#: order; any of them may tell one participant's runs apart (``dir-AP`` and ``dir-PA``)
FILTERS = ("ses", "task", "acq", "rec", "dir", "run", "echo", "space", "res", "den", "desc")

#: surface BOLD extensions, CIFTI first (preferred when a run has both)
_EXTENSIONS = (".dtseries.nii", ".func.gii")


@dataclass(frozen=True)
class BoldRun:
    """One BOLD run on the surface: its entities and files.

    Attributes
    ----------
    entities : dict
        The run's entities (``sub``, ``ses``, ``task``, ``run``...), ``hemi`` left out.
    kind : {"cifti", "gifti"}
    paths : tuple of Path
        The ``.dtseries.nii``, or the left and right ``.func.gii``.
    """

    entities: Mapping[str, str]
    kind: str
    paths: tuple[Path, ...]

    @property
    def participant(self) -> str:
        return f"sub-{self.entities['sub']}"


def index_func_files(root: str | os.PathLike[str]) -> list[tuple[Path, dict[str, str], str]]:
    """Every BIDS-named ``_bold`` surface file under ``root``'s ``sub-*/[ses-*/]func/``:
    ``(path, entities, extension)``, in sorted order. Names that are not BIDS are skipped."""
    top = Path(root)
    if not top.is_dir():
        raise NotADirectoryError(f"BIDS folder {top} does not exist or is not a folder.")
    found = []
    for sub in _entries(top, "sub-"):
        folders = [sub / "func", *(ses / "func" for ses in _entries(sub, "ses-"))]
        for folder in folders:
            if not folder.is_dir():
                continue
            for entry in sorted(os.scandir(folder), key=lambda e: e.name):
                if not entry.name.endswith(_EXTENSIONS) or "_bold." not in entry.name:
                    continue
                try:
                    ent, suffix, ext = parse_bids_name(entry.name)
                except ValueError:
                    continue
                if suffix == "bold" and ext in _EXTENSIONS:
                    found.append((Path(entry.path), ent, ext))
    return found


def find_bold(
    root: str | os.PathLike[str],
    *,
    participant_label: Iterable[str] = (),
    **filters: str | None,
) -> list[BoldRun]:
    """The surface BOLD runs of a derivatives tree that match the filters.

    Parameters
    ----------
    root : path
        The derivatives folder (fMRIPrep's output), holding ``sub-*`` folders.
    participant_label : iterable of str
        Subjects to keep, with or without ``sub-`` (BIDS-Apps' ``--participant-label``);
        empty: all.
    **filters : str or None
        Entity values to match, among :data:`FILTERS` (None: any).

    Returns
    -------
    list of BoldRun
        CIFTI runs when any match, otherwise GIFTI pairs; sorted by entities. A ValueError
        names what matched nothing, a left file without its right, or the tasks found when
        the files hold more than one and no ``task`` is given (a task run must not join a
        resting-state parcellation unasked).
    """
    unknown = sorted(set(filters) - set(FILTERS))
    if unknown:
        raise ValueError(f"bids: unknown filter(s) {unknown}; known: {list(FILTERS)}.")
    wanted = {k: str(v) for k, v in filters.items() if v is not None}
    labels = {str(p).removeprefix("sub-") for p in participant_label}
    files = index_func_files(root)
    if not files:
        raise FileNotFoundError(
            f"{root}: no surface BOLD file (sub-*/func/*_bold.dtseries.nii or *_bold.func.gii)."
        )
    present = {e["sub"] for _, e, _ in files}
    missing = sorted(labels - present)
    if missing:
        raise ValueError(
            f"{root}: participant label(s) {missing} have no surface BOLD file; "
            f"found {len(present)} subjects ({', '.join(sorted(present)[:5])}...)."
        )
    chosen = [
        (p, e, ext)
        for p, e, ext in files
        if (not labels or e["sub"] in labels)
        and all(_same(k, e.get(k), v) for k, v in wanted.items())
    ]
    if not chosen:
        spaces = sorted({e.get("space", "none") for _, e, _ in files})
        raise ValueError(
            f"{root}: no BOLD file matches {wanted or 'the participants'}; the files' "
            f"spaces are {spaces}."
        )
    tasks = sorted({e.get("task", "none") for _, e, _ in chosen})
    if len(tasks) > 1:
        raise ValueError(
            f"{root}: the BOLD files hold {len(tasks)} tasks ({', '.join(tasks)}); choose one "
            f"with --task (bids.task), e.g. --task {'rest' if 'rest' in tasks else tasks[0]}."
        )
    cifti = [(p, e) for p, e, ext in chosen if ext == ".dtseries.nii"]
    if cifti:
        return [BoldRun(e, "cifti", (p,)) for p, e in cifti]
    pairs: dict[tuple[tuple[str, str], ...], dict[str, Path]] = {}
    for p, e, _ in chosen:
        key = tuple(sorted((k, v) for k, v in e.items() if k != "hemi"))
        pairs.setdefault(key, {})[e.get("hemi", "?")] = p
    runs = []
    for key, hemis in pairs.items():
        if set(hemis) != {"L", "R"}:
            one = next(iter(hemis.values()))
            raise ValueError(f"{one}: a GIFTI BOLD file needs its hemi-L and hemi-R pair.")
        runs.append(BoldRun(dict(key), "gifti", (hemis["L"], hemis["R"])))
    return runs


#: the entities fMRIPrep keeps in a run's confounds file name (the BOLD file's, up to its
#: space): ``sub-01_ses-1_task-rest_dir-AP_run-1_desc-confounds_timeseries.tsv``
_RUN_ENTITIES = ("sub", "ses", "task", "acq", "ce", "rec", "dir", "run", "echo", "part")


def confounds_file(bold: str | os.PathLike[str]) -> Path | None:
    """fMRIPrep's confounds TSV of a BOLD file (its folder, the run's entities, then
    ``desc-confounds_timeseries.tsv``, or ``_regressors.tsv`` before fMRIPrep 20.2; a
    multi-echo run's without its ``echo``), or None when there is none."""
    path = Path(bold)
    try:
        entities, _, _ = parse_bids_name(path.name)
    except ValueError:
        return None
    run = [(k, v) for k, v in entities.items() if k in _RUN_ENTITIES]
    for keep in (run, [(k, v) for k, v in run if k != "echo"]):
        stem = "_".join(f"{k}-{v}" for k, v in keep)
        for suffix in ("timeseries", "regressors"):
            candidate = path.parent / f"{stem}_desc-confounds_{suffix}.tsv"
            if candidate.is_file():
                return candidate
    return None


def confounds_files(bold: str | os.PathLike[str]) -> list[Path]:
    """The files nilearn's ``load_confounds`` reads beside a BOLD file: the confounds TSV
    (:func:`confounds_file`) and its JSON sidecar (compcor's components), where present."""
    tsv = confounds_file(bold)
    if tsv is None:
        return []
    sidecar = tsv.with_suffix(".json")
    return [tsv, sidecar] if sidecar.is_file() else [tsv]


def _same(key: str, label: str | None, wanted: str) -> bool:
    """Whether an entity's label is the one asked for; ``run`` and ``echo`` are indices, so
    ``run-01`` is run 1 (pybids and fMRIPrep's filter files read them as integers)."""
    if label is None:
        return False
    if key in ("run", "echo") and label.isdigit() and wanted.isdigit():
        return int(label) == int(wanted)
    return label == wanted


def _entries(folder: Path, prefix: str) -> list[Path]:
    return sorted(
        Path(e.path) for e in os.scandir(folder) if e.is_dir() and e.name.startswith(prefix)
    )
