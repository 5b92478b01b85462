"""A BIDS derivatives tree (fMRIPrep's outputs) as a run's input: the ``bids:`` section of a
pipeline file, or ``lsd-dask run --bids DIR``.

The BOLD files are found by their entities (:func:`lsd_dask.io.bids_index.find_bold`); each
run's id is its participant (``sub-01``), or the participant with the entities that tell
its runs apart (``sub-01_ses-2_run-1``) when it has several. A participant's runs always
go into the same split. Confounds are found beside each BOLD file by nilearn's
``load_confounds`` (``preprocess.denoise``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...io.bids_index import FILTERS, BoldRun, find_bold
from ...io.surface_files import SubjectFiles
from .files import setting

__all__ = ["BidsSettings", "bids_subjects"]


@dataclass(frozen=True)
class BidsSettings:
    """The ``bids:`` section.

    Attributes
    ----------
    root : str
        The derivatives folder (holding ``sub-*/[ses-*/]func/``).
    participant_label : list of str
        Participants to keep, with or without ``sub-``; empty: all.
    space, den, res, task, ses, run, acq, desc : str or None
        Entity values the BOLD files must have (None: any). ``space`` defaults to
        ``fsLR``, fMRIPrep's CIFTI output (``den-91k``).
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
    task: str | None = setting(None, note="their task, e.g. rest (null: any)")
    ses: str | None = setting(None, note="their session (null: all, each a subject id of its own)")
    run: str | None = setting(None, note="their run (null: all, each a subject id of its own)")
    acq: str | None = setting(None, note="their acquisition (null: any)")
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
        varying = [
            k
            for k in ("ses", "task", "acq", "run", "desc", "den", "res", "space")
            if len({r.entities.get(k) for r in own}) > 1
        ]
        for r in own:
            sid = "_".join(
                [participant, *(f"{k}-{r.entities[k]}" for k in varying if k in r.entities)]
            )
            keys = ("cifti",) if r.kind == "cifti" else ("left", "right")
            given: dict[str, Any] = dict(zip(keys, r.paths, strict=True))
            subjects.append(SubjectFiles.from_keys(sid, **given))
            participants[sid] = participant
    return subjects, participants
