"""The run's recommendation: the method and K that the held-out measures favour, the reason
in one sentence, and the runners-up; ``report.json``'s ``recommendation`` and the first
lines of ``report.html``.

Two measures decide, because they compare parcellations across K: the distance-controlled
boundary coefficient (DCBC, Zhi et al. 2022) and the silhouette against neighbouring
parcels (Arslan et al. 2018), both on the split the parcels were not fitted on. Held-out
homogeneity does not decide: it rises with K whatever the parcels (smaller parcels hold
more alike vertices), so it only compares methods at one K. Split-half Dice does not decide
either: a blur of the features raises it without better parcels. Each parcellation gets its
rank on each deciding measure (1: the best); the least mean rank is recommended, the higher
DCBC breaking a tie. The time-halves scores stand in when a run has no split scores.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["DECIDING", "recommend"]

#: the measures that decide (names in a score row after the held-out prefix) and their
#: titles in the sentence
DECIDING = {"dcbc": "held-out DCBC", "silhouette": "neighbour silhouette"}

#: the held-out prefixes, in order of preference
_PREFIXES = ("heldout_", "timehalves_")


def recommend(rows: list[dict[str, Any]], runners_up: int = 2) -> dict[str, Any] | None:
    """The recommended parcellation of the score rows, or None when no row has the deciding
    measures (a run without held-out scores).

    Returns
    -------
    dict or None
        ``method``, ``k``, ``reason`` (one sentence), ``measures`` (the deciding columns),
        ``ranks`` (each deciding measure's rank of the pick, of ``n`` rows) and
        ``runners_up``: the next ``runners_up`` rows, each ``method``, ``k``, ``mean_rank``.
    """
    for prefix in _PREFIXES:
        columns = [prefix + name for name in DECIDING]
        scored = [r for r in rows if all(_finite(r.get(c)) for c in columns)]
        if scored:
            break
    else:
        return None
    n = len(scored)
    ranks = {c: _ranks([float(r[c]) for r in scored]) for c in columns}
    mean = [sum(ranks[c][i] for c in columns) / len(columns) for i in range(n)]
    order = sorted(range(n), key=lambda i: (mean[i], -float(scored[i][columns[0]]), i))
    best = scored[order[0]]
    parts = [
        f"{title} {float(best[c]):.3f} (rank {ranks[c][order[0]]} of {n})"
        for c, title in zip(columns, DECIDING.values(), strict=True)
    ]
    reason = (
        f"{best['method']} at K = {best['k']} has the best mean rank on the measures that "
        f"compare parcellations across K: {' and '.join(parts)}; homogeneity rises with K "
        "whatever the parcels and a blur raises Dice, so neither decides."
    )
    return {
        "method": best["method"],
        "k": best["k"],
        "reason": reason,
        "measures": columns,
        "ranks": {c: ranks[c][order[0]] for c in columns},
        "runners_up": [
            {"method": scored[i]["method"], "k": scored[i]["k"], "mean_rank": mean[i]}
            for i in order[1 : 1 + runners_up]
        ],
    }


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _ranks(values: list[float]) -> list[int]:
    """Competition ranks, 1 for the highest value (ties share the better rank)."""
    return [1 + sum(other > v for other in values) for v in values]
