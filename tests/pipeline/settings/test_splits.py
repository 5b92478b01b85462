"""The default halves of a study's participants, balanced by time points."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lsd_dask.pipeline.settings.splits import halve


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(1, 500), min_size=1, max_size=3), min_size=2, max_size=12))
def test_balanced_halves_keep_participants_whole_and_are_never_less_balanced(runs):
    """Each participant (a list of runs' time points) stays in one split; the splits keep
    the sorted halves' participant counts, and their time points differ by no more than
    the sorted halves' do, and by no more than any single swap could still improve."""
    ids, participants, timepoints = [], {}, {}
    for p, lengths in enumerate(runs):
        for r, n in enumerate(lengths):
            sid = f"sub-{p:02d}_run-{r}"
            ids.append(sid)
            participants[sid] = f"sub-{p:02d}"
            timepoints[sid] = n
    plain = halve(ids, participants)
    got = halve(ids, participants, timepoints=timepoints)

    def owners(split):
        return {participants[i] for i in split}

    def total(split):
        return sum(timepoints[i] for i in split)

    assert sorted(got["split1"] + got["split2"]) == sorted(ids)
    assert not owners(got["split1"]) & owners(got["split2"])
    for name in got:
        assert len(owners(got[name])) == len(owners(plain[name]))
    gap = abs(total(got["split1"]) - total(got["split2"]))
    assert gap <= abs(total(plain["split1"]) - total(plain["split2"]))
    # no single swap of two participants would bring the splits closer
    weight = {
        p: sum(timepoints[i] for i in ids if participants[i] == p)
        for p in set(participants.values())
    }
    diff = total(got["split1"]) - total(got["split2"])
    for a in owners(got["split1"]):
        for b in owners(got["split2"]):
            assert abs(diff - 2 * (weight[a] - weight[b])) >= gap


def test_equal_participants_keep_their_sorted_halves():
    ids = [f"sub-{i}" for i in range(1, 8)]
    got = halve(ids, {}, timepoints=dict.fromkeys(ids, 100))
    assert got == {"split1": ids[:3], "split2": ids[3:]}
