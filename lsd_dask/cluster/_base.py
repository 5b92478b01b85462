"""Shared pieces of the clustering estimators."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin

from .._validation import Array, check_array, check_n_clusters, check_random_state, to_numpy

__all__ = ["ClusterBase", "check_params", "constraint_error", "eager_labels"]


def eager_labels(labels: Any) -> np.ndarray:
    """Labels as numpy int64, computed if lazy.

    The package's array-kind policy: ``labels_`` (n integers) is always numpy, small and
    eager, whatever the input; arrays of n × k (probabilities, weights) stay lazy for dask
    input and each estimator's Attributes section says so.
    """
    return to_numpy(labels, np.int64)


def _n_features(X: Array) -> int:
    """Number of columns of an array-like (a precomputed similarity counts its columns)."""
    return int(X.shape[1]) if hasattr(X, "shape") else len(X[0])


class ClusterBase(ClusterMixin, BaseEstimator):  # type: ignore[misc]  # sklearn: untyped
    """scikit-learn estimator base: ``get_params``/``set_params``, ``fit_predict``.

    Subclasses declare ``_parameter_constraints`` (name -> tuple of allowed values, a type,
    or a ``(type, low, high)`` interval) for their own parameters; ``n_clusters`` and
    ``random_state``, which every estimator takes, are declared here. ``fit`` starts with
    :meth:`_validate_fit`, which checks them all once.
    """

    _shared_constraints: dict[str, Any] = {
        "n_clusters": [("int", 1, None)],
        "random_state": [None, numbers.Integral, np.random.Generator],
    }
    _parameter_constraints: dict[str, Any] = {}

    def _check_params(self) -> None:
        check_params(self, {**self._shared_constraints, **self._parameter_constraints})

    def _validate_fit(self, X: Array, *, name: str = "X") -> tuple[Any, int, np.random.Generator]:
        """Check the parameters and X; returns ``(X, k, rng)``: X as numpy or dask (zarr
        wrapped lazily), the number of clusters checked against the samples, and the
        estimator's generator."""
        self._check_params()
        X = check_array(X, name=name)
        k = check_n_clusters(self.n_clusters, X.shape[0])
        return X, k, check_random_state(self.random_state)

    def _check_fitted(self) -> None:
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "labels_")

    def _check_n_features(self, X: Array) -> None:
        if X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input."
            )


def check_params(est: Any, constraints: dict[str, Any]) -> None:
    """Validate the constructor parameters of ``est`` against ``constraints``.

    A constraint is a list of alternatives, each one of: a tuple/frozenset of allowed values,
    a type (isinstance), ``None``, or an interval ``("int"|"real", low, high)`` with
    ``None`` for an open end (bounds inclusive).
    """
    for name, alternatives in constraints.items():
        problem = constraint_error(getattr(est, name), alternatives)
        if problem:
            raise ValueError(f"{type(est).__name__}: invalid {name}={problem}")


def constraint_error(value: Any, alternatives: list[Any]) -> str | None:
    """None when ``value`` meets one of ``alternatives``; else ``"<value>; allowed: ..."``
    (the one wording of a broken constraint, see :func:`check_params`)."""
    if any(_matches(value, alt) for alt in alternatives):
        return None
    return f"{value!r}; allowed: " + ", ".join(_describe(a) for a in alternatives) + "."


def _matches(value: Any, alt: Any) -> bool:
    if alt is None:
        return value is None
    if isinstance(alt, frozenset | set):
        return isinstance(value, str) and value in alt
    if isinstance(alt, type):
        return isinstance(value, alt)
    if isinstance(alt, tuple) and len(alt) == 3 and alt[0] in ("int", "real"):
        kind, lo, hi = alt
        ok_type = (
            isinstance(value, numbers.Integral) and not isinstance(value, bool)
            if kind == "int"
            else isinstance(value, numbers.Real) and not isinstance(value, bool)
        )
        return bool(ok_type and (lo is None or value >= lo) and (hi is None or value <= hi))
    if callable(alt):
        return bool(alt(value))
    return False


def _describe(alt: Any) -> str:
    if alt is None:
        return "None"
    if isinstance(alt, frozenset | set):
        return "one of " + "/".join(sorted(map(repr, alt)))
    if isinstance(alt, type):
        return f"a {alt.__name__}"
    if isinstance(alt, tuple):
        kind, lo, hi = alt
        what = "an integer" if kind == "int" else "a number"
        if hi is None:
            return f"{what} >= {lo}"
        return f"{what} in [{lo}, {hi}]"
    return getattr(alt, "__doc__", None) or repr(alt)
