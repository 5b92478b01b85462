"""The two splits of a run's subjects: made by halving the participants
(:func:`halve`), and checked so that no subject, participant or time point of one file is
in both (:func:`check_splits`): anything shared would leak data between the splits."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import numpy as np

from ...io.surface_files import SubjectFiles
from .files import file_part

__all__ = ["check_splits", "halve"]


def halve(
    ids: list[str],
    participants: dict[str, str],
    *,
    random_state: int | None = None,
    timepoints: dict[str, int] | None = None,
) -> dict[str, list[str]]:
    """Two splits of the subject ids: the participants sorted (or shuffled with
    ``random_state``) and halved, each participant's ids in one split.

    With ``timepoints`` (each id's), participants are then swapped between the halves while
    a swap brings the two splits' time points closer (the best swap first): the splits keep
    their numbers of participants, and a study whose participants have equal time points
    keeps its sorted halves. Four participants of 1, 1, 2 and 2 runs split 3 : 3 runs, not
    2 : 4.
    """
    groups: dict[str, list[str]] = {}
    for i in sorted(ids):
        groups.setdefault(participants.get(i, i), []).append(i)
    order = sorted(groups)
    if random_state is not None:
        order = [order[j] for j in np.random.default_rng(random_state).permutation(len(order))]
    half = len(order) // 2
    first, second = order[:half], order[half:]
    if timepoints is not None:
        weight = {p: sum(int(timepoints[i]) for i in groups[p]) for p in order}
        first, second = _balanced(first, second, weight)
    return {
        "split1": sorted(i for p in first for i in groups[p]),
        "split2": sorted(i for p in second for i in groups[p]),
    }


def check_splits(
    subjects: list[SubjectFiles], splits: dict[str, list[str]], participants: dict[str, str]
) -> None:
    """The subjects and their two splits, checked: ids distinct, two non-empty splits that
    share no subject, no participant and no time point of one file (one line names what
    is wrong)."""
    ids = [s.subject for s in subjects]
    # an id goes into log lines and file names: a line break or an escape would forge a
    # log line or colour the console
    odd = next((i for i in ids if not i.isprintable() or not i.strip()), None)
    if odd is not None:
        raise ValueError(
            f"subject id {odd!r}: printable characters only (no line breaks, tabs or "
            "escape codes, not blank)."
        )
    if len(ids) < 2:
        raise ValueError(f"a split-half run needs at least 2 subjects, got {len(ids)}.")
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ValueError(f"subject id(s) listed twice: {dup}.")
    if len(splits) != 2:
        raise ValueError(f"exactly two splits are needed, got {list(splits)}.")
    a, b = (set(v) for v in splits.values())
    both = sorted(a & b)
    if both:
        raise ValueError(f"subject(s) in both splits: {both}.")
    unknown = sorted((a | b) - set(ids))
    if unknown:
        raise ValueError(f"split(s) name unknown subject(s): {unknown}.")
    owner = participants
    shared = sorted({owner[i] for i in a if i in owner} & {owner[i] for i in b if i in owner})
    if shared:
        raise ValueError(
            f"participant(s) {shared} have runs in both splits; a participant's runs "
            "must stay in one split."
        )
    empty = [name for name, v in splits.items() if len(v) == 0]
    if empty:
        raise ValueError(f"split {empty[0]!r} has no subjects; each split needs at least one.")
    for name in splits:
        file_part(name, "split")
    # one file under two ids (a link, a hard link or a copy) leaks data between the
    # splits, unless the ids take disjoint time slices of it (two halves of one run)
    owners: dict[Any, list[Any]] = {}
    for s in subjects:
        for p in s.paths:
            real = _content_identity(p)
            for other in owners.get(real, []):
                if other.subject != s.subject and _overlap(other.time_slice, s.time_slice):
                    raise ValueError(
                        f"{p} is listed for subjects {other.subject!r} and {s.subject!r} "
                        "with overlapping time points; one file under two ids would leak "
                        "data between the splits."
                    )
            owners.setdefault(real, []).append(s)


def _balanced(
    first: list[str], second: list[str], weight: dict[str, int]
) -> tuple[list[str], list[str]]:
    """The two halves after the swaps that most reduce their difference in weight, one at a
    time until none does (the first of equal swaps in sorted order: deterministic)."""
    first, second = list(first), list(second)
    while first and second:
        diff = sum(weight[p] for p in first) - sum(weight[p] for p in second)
        w2 = np.array([weight[p] for p in second])
        order2 = np.argsort(w2, kind="stable")
        best: tuple[int, int, int] | None = None  # (new |diff|, index in first, in second)
        for a, p in enumerate(first):
            # swapping p for q changes the difference by 2 (w_q - w_p): q near w_p - diff/2
            at = int(np.searchsorted(w2[order2], weight[p] - diff / 2))
            for j in {max(at - 1, 0), min(at, len(second) - 1)}:
                b = int(order2[j])
                gap = abs(diff - 2 * (weight[p] - int(w2[b])))
                if gap < abs(diff) and (best is None or (gap, a, b) < best):
                    best = (gap, a, b)
        if best is None:
            break
        _, a, b = best
        first[a], second[b] = second[b], first[a]
    return sorted(first), sorted(second)


def _content_identity(path: str | os.PathLike[str]) -> Any:
    """What makes two input files the same data: a file's size and a hash of its first and
    last 64 KiB (links, hard links and copies alike; 128 KiB read per file); a folder (a
    Zarr store), a missing or an empty file, its resolved path."""
    real = os.path.realpath(path)
    size = os.path.getsize(real) if os.path.isfile(real) else 0
    if size == 0:  # no data to leak (an empty file fails later, when read)
        return real
    block = 1 << 16
    with open(real, "rb") as f:
        head = f.read(block)
        f.seek(max(size - block, 0))
        tail = f.read(block)
    return (size, hashlib.blake2b(head + tail, digest_size=16).hexdigest())


def _overlap(a: tuple[int, int] | None, b: tuple[int, int] | None) -> bool:
    """Whether two time slices share a time point (None: the whole run)."""
    if a is None or b is None:
        return True
    return max(a[0], b[0]) < min(a[1], b[1])
