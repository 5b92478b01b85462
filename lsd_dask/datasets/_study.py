"""What every two-split study generator shares: subjects, splits and the truth's size."""

from __future__ import annotations

import numpy as np

__all__ = ["SplitStudy"]


class SplitStudy:
    """Mixin for study dataclasses with ``labels`` (0 = background) and ``splits``."""

    labels: np.ndarray
    splits: dict[str, list[str]]

    @property
    def n_vertices(self) -> int:
        return int(self.labels.size)

    @property
    def n_parcels(self) -> int:
        return int(self.labels.max())

    @property
    def subjects(self) -> list[str]:
        return [s for ids in self.splits.values() for s in ids]

    def _locate(self, subject: str) -> tuple[int, int]:
        """(split index, index within the split) of a subject; KeyError names the known ids."""
        for g, ids in enumerate(self.splits.values()):
            if subject in ids:
                return g, ids.index(subject)
        raise KeyError(f"unknown subject {subject!r}; known: {self.subjects}.")
