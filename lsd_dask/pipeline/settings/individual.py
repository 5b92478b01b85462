"""The ``individual:`` section of a pipeline file, typed: each subject's own parcels from a
group prior (off unless the section is there)::

    individual: true                   # every default: prior_potts, the run's first method
    individual:
      method: iterative                # or prior_potts
      prior: schaefer_400              # a method of the run, or an atlas
      ks: [200]                        # a method prior's K (default: every K of the run)

A method prior is that method's group parcellation of the **other** split, fitted without
the subject (with more than two splits, the next one), so nothing of the subject's data is
in its prior or in the group parcellation it is scored beside. An atlas prior is a
``compare_atlases`` atlas or a built-in one (which is then also scored beside the run's
parcellations): the same for every subject, so adding subjects to the run computes only
theirs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ...cluster import IterativeIndividualParcellation, PriorPottsIndividualParcellation
from . import files
from .atlases import BUILTIN_ATLASES
from .files import setting

__all__ = ["INDIVIDUAL_METHODS", "IndividualSettings"]

#: the estimators by name (:mod:`lsd_dask.cluster.individual`)
INDIVIDUAL_METHODS: dict[str, Any] = {
    "prior_potts": PriorPottsIndividualParcellation,
    "iterative": IterativeIndividualParcellation,
}


@dataclass(frozen=True)
class IndividualSettings:
    """The ``individual:`` section, typed; its defaults are stated here only.

    Attributes
    ----------
    method : {"prior_potts", "iterative"}
        :class:`~lsd_dask.cluster.PriorPottsIndividualParcellation` (von Mises–Fisher
        parcels, the group prior smoothed on the mesh, a Potts term) or
        :class:`~lsd_dask.cluster.IterativeIndividualParcellation` (Wang et al. 2015).
    prior : str or None
        A method of the run (its group parcellation of the other split) or an atlas
        (``compare_atlases``, or a built-in name); None: the run's first method.
    ks : list of int or None
        A method prior's K's (each one of the run's); None: every K of the run. An atlas
        prior has its own parcel count.
    """

    method: str = setting(
        "prior_potts",
        note=(
            "prior_potts (von Mises-Fisher parcels, the group prior, a Potts term on the mesh)"
            " or iterative (Wang et al. 2015)"
        ),
    )
    prior: str | None = setting(
        None,
        note=(
            "a method of the run (its other split's parcels) or an atlas (compare_atlases or "
            "built in); null: the run's first method"
        ),
    )
    ks: list[int] | None = setting(
        None, note="a method prior's K's (null: every K of the run)", minimum=2
    )

    @classmethod
    def from_raw(
        cls,
        raw: Any,
        *,
        methods: list[str],
        atlases: list[str],
        ks: list[int],
    ) -> IndividualSettings | None:
        """Checked settings from the file's value (``true``, a mapping, or null/false for
        none), against the run's method names, atlas names and K's; an error names the
        key."""
        if raw is None or raw is False:
            return None
        if raw is True:
            raw = {}
        if not isinstance(raw, dict):
            raise ValueError(f"individual: true, or a mapping of method, prior, ks; got {raw!r}.")
        files.check_keys(raw, {f.name for f in fields(cls)}, "individual")
        method = raw.get("method", cls.method)
        if method not in INDIVIDUAL_METHODS:
            raise ValueError(
                f"individual.method must be one of {', '.join(INDIVIDUAL_METHODS)}, got {method!r}."
            )
        prior = raw.get("prior", methods[0])
        known = [*methods, *atlases, *(a for a in BUILTIN_ATLASES if a not in atlases)]
        if prior not in known:
            raise ValueError(
                f"individual.prior: {prior!r} is neither a method of the run ({', '.join(methods)})"
                f" nor an atlas (compare_atlases, or one of {', '.join(BUILTIN_ATLASES)})."
            )
        chosen = raw.get("ks")
        if chosen is not None:
            if prior not in methods:
                raise ValueError(
                    f"individual.ks: the atlas prior {prior!r} has its own parcel count; "
                    "leave ks out."
                )
            chosen = [chosen] if isinstance(chosen, int) else chosen
            if not isinstance(chosen, list) or not chosen:
                raise ValueError(f"individual.ks: a list of the run's K's, got {chosen!r}.")
            chosen = [files.int_setting(k, "individual.ks", 2) for k in chosen]
            missing = [k for k in chosen if k not in ks]
            if missing or len(set(chosen)) != len(chosen):
                raise ValueError(
                    f"individual.ks: each of the run's K's ({', '.join(map(str, ks))}) at "
                    f"most once, got {chosen}."
                )
        return cls(method=str(method), prior=str(prior), ks=chosen)

    def prior_is_method(self, methods: list[str]) -> bool:
        """Whether the prior is one of the run's methods (else an atlas)."""
        return self.prior in methods

    def estimator(self, group_labels: Any, adjacency: Any) -> Any:
        """The unfitted estimator for one subject: ``group_labels`` on the kept vertices
        (``< 0`` outside every parcel), ``adjacency`` the kept vertices' mesh. Both
        estimators are deterministic: a subject's map is its data's and the prior's alone."""
        if self.method == "prior_potts":
            return PriorPottsIndividualParcellation(group_labels, adjacency)
        return IterativeIndividualParcellation(group_labels)

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "prior": self.prior, "ks": self.ks}
