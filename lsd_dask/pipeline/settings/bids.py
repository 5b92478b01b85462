"""A BIDS derivatives tree (fMRIPrep's outputs) as a run's input: the ``bids:`` section of a
pipeline file, or ``lsd-dask run --bids DIR``.

The BOLD files are found by their entities (:func:`lsd_dask.io.bids_index.find_bold`); each
run's id is its participant (``sub-01``), or the participant with the entities that tell
its runs apart (``sub-01_ses-2_run-1``) when it has several. A participant's runs always
go into the same split. Confounds are found beside each BOLD file by nilearn's
``load_confounds`` (``preprocess.denoise``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...io.bids_index import FILTERS, BoldRun, find_bold
from ...io.surface_files import SubjectFiles
from .files import setting

__all__ = ["BidsSettings", "bids_subjects", "read_filter_file"]

#: pybids' names of the entities (fMRIPrep's ``--bids-filter-file`` uses them) and the
#: short ones of the ``bids:`` section
LONG_NAMES = {
    "session": "ses",
    "task": "task",
    "acquisition": "acq",
    "reconstruction": "rec",
    "direction": "dir",
    "run": "run",
    "echo": "echo",
    "space": "space",
    "resolution": "res",
    "density": "den",
    "desc": "desc",
}


@dataclass(frozen=True)
class BidsSettings:
    """The ``bids:`` section.

    Attributes
    ----------
    root : str
        The derivatives folder (holding ``sub-*/[ses-*/]func/``).
    participant_label : list of str
        Participants to keep, with or without ``sub-``; empty: all.
    ses, task, acq, rec, dir, run, echo, space, res, den, desc : str or None
        Entity values the BOLD files must have (None: any). ``space`` defaults to
        ``fsLR``, fMRIPrep's CIFTI output (``den-91k``). ``task`` is needed when the files
        hold more than one task.
    """

    root: str = setting(note="the derivatives folder, holding sub-*/[ses-*/]func/")
    participant_label: list[str] = setting(
        factory=list, note=("participants to keep, with or without sub- (empty: all)")
    )
    space: str | None = setting(
        "fsLR", note=("the BOLD files' space (fsLR: fMRIPrep's CIFTI; fsaverage5: GIFTI pairs)")
    )
    den: str | None = setting(None, note="their density, e.g. 91k (null: any)")
    res: str | None = setting(None, note="their resolution (null: any)")
    task: str | None = setting(
        None, note="their task, e.g. rest (null: the one task the files hold; two fail)"
    )
    ses: str | None = setting(None, note="their session (null: all, each a subject id of its own)")
    run: str | None = setting(None, note="their run (null: all, each a subject id of its own)")
    acq: str | None = setting(None, note="their acquisition (null: all, each an id of its own)")
    rec: str | None = setting(None, note="their reconstruction (null: all, each an id of its own)")
    dir: str | None = setting(
        None, note="their phase-encoding direction, e.g. AP (null: all, each an id of its own)"
    )
    echo: str | None = setting(None, note="their echo (null: all, each an id of its own)")
    desc: str | None = setting(None, note="their description (null: any)")

    @classmethod
    def from_mapping(cls, raw: Any, base: Path) -> BidsSettings:
        """Checked settings; an error names the key."""
        from . import files

        raw = files.mapping(raw, "bids")
        files.check_keys(raw, {"root", "participant_label", *FILTERS}, "bids")
        if not raw.get("root"):
            raise ValueError("bids.root: the derivatives folder (fMRIPrep's output) is needed.")
        labels = raw.get("participant_label") or []
        labels = [labels] if isinstance(labels, str | int) else labels
        if not isinstance(labels, list):
            raise ValueError(f"bids.participant_label: a list of labels, got {labels!r}.")
        values = {}
        for key in FILTERS:
            v = raw.get(key, getattr(cls, key, None))
            if v is not None and (not isinstance(v, str | int) or isinstance(v, bool)):
                raise ValueError(f"bids.{key}: an entity label, got {v!r}.")
            values[key] = None if v is None else str(v)
        root = str(files.resolve(raw["root"], base))
        return cls(root=root, participant_label=[str(x) for x in labels], **values)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


def bids_subjects(settings: BidsSettings) -> tuple[list[SubjectFiles], dict[str, str]]:
    """The runs the settings select, as subjects, and each subject id's participant."""
    runs = find_bold(
        settings.root,
        participant_label=settings.participant_label,
        **{k: getattr(settings, k) for k in FILTERS},
    )
    by_participant: dict[str, list[BoldRun]] = {}
    for r in runs:
        by_participant.setdefault(r.participant, []).append(r)
    subjects, participants = [], {}
    for participant, own in sorted(by_participant.items()):
        # the entities that tell this participant's runs apart name them
        varying = [k for k in FILTERS if len({r.entities.get(k) for r in own}) > 1]
        for r in own:
            sid = "_".join(
                [participant, *(f"{k}-{r.entities[k]}" for k in varying if k in r.entities)]
            )
            keys = ("cifti",) if r.kind == "cifti" else ("left", "right")
            given: dict[str, Any] = dict(zip(keys, r.paths, strict=True))
            subjects.append(SubjectFiles.from_keys(sid, **given))
            participants[sid] = participant
    return subjects, participants


def read_filter_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """The BOLD filters of an fMRIPrep ``--bids-filter-file``: its ``bold`` query, with
    pybids' entity names (``session``, ``direction``...) or the short ones, as ``bids:``
    keys. A one-line error names the file and the key."""
    import json

    p = Path(path)
    try:
        raw = json.loads(p.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"BIDS filter file {p} does not exist.") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"BIDS filter file {p}: not JSON ({err}).") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("bold", {}), dict):
        raise ValueError(f'BIDS filter file {p}: a mapping with a "bold" query is expected.')
    unknown = sorted(set(raw) - {"bold"})
    if unknown:  # fMRIPrep's other queries (t1w, fmap...) select nothing here
        raise ValueError(f'BIDS filter file {p}: only the "bold" query applies, got {unknown}.')
    out: dict[str, str] = {}
    for key, value in raw.get("bold", {}).items():
        short = LONG_NAMES.get(key, key if key in FILTERS else None)
        if short is None:
            raise ValueError(
                f"BIDS filter file {p}: bold.{key} is not an entity a run can be chosen "
                f"by; known: {sorted(LONG_NAMES)}."
            )
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise ValueError(f"BIDS filter file {p}: bold.{key} must be one label, got {value!r}.")
        out[short] = str(value)
    return out
