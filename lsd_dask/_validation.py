"""Input checks shared by every public entry point.

Validation happens once, at the boundary (``fit`` or a public function); the private
kernels behind it assume clean input.
"""

from __future__ import annotations

import numbers
import warnings
from typing import Any, TypeAlias

import dask.array as da
import numpy as np
import sklearn.exceptions
from typing_extensions import TypeIs

__all__ = [
    "Array",
    "RandomState",
    "LSDDaskWarning",
    "ClippedEigenvalueWarning",
    "ConvergenceWarning",
    "is_dask",
    "as_array",
    "check_array",
    "check_labels",
    "check_n_clusters",
    "check_random_state",
    "compute",
    "float_type",
    "persisted",
    "to_numpy",
]


#: a numpy or a dask array: what the estimators and the linear algebra take, and return
#: lazily for lazy input (``labels_`` excepted: always numpy)
Array: TypeAlias = np.ndarray | da.Array
#: what ``random_state`` takes (scikit-learn's convention, numpy Generators included)
RandomState: TypeAlias = int | np.random.Generator | np.random.RandomState | None


class LSDDaskWarning(UserWarning):
    """Base class of the warnings this package issues."""


class ClippedEigenvalueWarning(LSDDaskWarning):
    """Leading eigenvalues of a similarity were negative or tiny and were clipped."""


class ConvergenceWarning(sklearn.exceptions.ConvergenceWarning, LSDDaskWarning):
    """An estimator stopped at ``max_iter`` before it converged. A scikit-learn
    ``ConvergenceWarning`` too, so that filters written for scikit-learn's estimators
    catch it."""


def is_dask(x: object) -> TypeIs[da.Array]:
    """Return True when ``x`` is a dask array."""
    return isinstance(x, da.Array)


def compute(*arrays: Any) -> tuple[Any, ...]:
    """Compute any dask arrays among ``arrays`` in one graph; pass the rest through.

    All the small (K-sized) results of one iteration come from one ``dask.compute`` call,
    so shared inputs are read once.
    """
    import dask

    lazy = [i for i, a in enumerate(arrays) if is_dask(a)]
    if not lazy:
        return tuple(arrays)
    done = dask.compute(*[arrays[i] for i in lazy])
    out = list(arrays)
    for i, v in zip(lazy, done, strict=True):
        out[i] = v
    return tuple(out)


def to_numpy(x: Any, dtype: Any = None) -> np.ndarray:
    """``x`` as a numpy array, computing it if it is a dask array (for small results)."""
    return np.asarray(x.compute() if is_dask(x) else x, dtype=dtype)


def float_type(x: Any) -> np.dtype[Any]:
    """The float type products with ``x`` are made in: its own if it is floating, float64
    otherwise (a float32 X is not upcast: half the GEMM rate and a copy of X)."""
    dtype = np.dtype(x.dtype)
    return dtype if np.issubdtype(dtype, np.floating) else np.dtype(np.float64)


def persisted(x: Any) -> Any:
    """``x.persist()`` for a dask array (it is read again), ``x`` itself otherwise."""
    return x.persist() if is_dask(x) else x


def check_array(
    X: Array,
    *,
    name: str = "X",
    ndim: int = 2,
    dtype: tuple[type, ...] = (np.float64, np.float32),
    min_samples: int = 1,
    check_finite: bool = True,
) -> Any:
    """Validate a numpy, dask or zarr array and return numpy or dask.

    Zarr arrays are wrapped lazily with ``dask.array.from_zarr``. Integer input is cast to
    float64; float32 stays float32. A numpy array not in C order is copied into C order
    (one that is, memory-mapped or not, is not copied). Finiteness is checked eagerly for
    numpy and lazily for dask (the check is part of the graph and raises when computed).

    Raises
    ------
    ValueError
        Wrong number of dimensions, too few samples, or non-finite values.
    TypeError
        Input that is not array-like.
    """
    import scipy.sparse as sp

    if sp.issparse(X):
        raise TypeError(
            f"Sparse data was passed for {name}, but dense data is required: convert it with "
            ".toarray(), or pass a dask array for data larger than memory."
        )
    X = as_array(X)
    if np.iscomplexobj(X):
        raise ValueError(f"Complex data not supported in {name}.")
    if X.ndim != ndim:
        hint = (
            " Reshape your data with X.reshape(-1, 1) or X.reshape(1, -1)." if X.ndim == 1 else ""
        )
        raise ValueError(f"Expected {ndim}D array for {name}, got shape {X.shape}.{hint}")
    if X.shape[0] < min_samples:
        raise ValueError(
            f"Found array with {X.shape[0]} sample(s) (shape={X.shape}) while a minimum of "
            f"{min_samples} is required."
        )
    if ndim == 2 and X.shape[1] < 1:
        raise ValueError(
            f"Found array with 0 feature(s) (shape={X.shape}) while a minimum of 1 is required."
        )
    if X.dtype.kind == "O" and not is_dask(X):
        try:
            X = X.astype(np.float64)
        except (TypeError, ValueError) as err:
            raise TypeError(f"{name} must be numeric: {err}") from None
    if X.dtype.kind not in "fiub":
        raise ValueError(f"{name} must be numeric, got dtype {X.dtype}.")
    if X.dtype not in dtype:
        X = X.astype(np.float64)
    if isinstance(X, np.ndarray) and not X.flags.c_contiguous:
        # the fits' row blocks and row-wise products assume C order (scikit-learn's KMeans
        # asks for it too): on a Fortran-ordered U·Σ of 59,784 × 1,000, K = 200, one
        # thread, spherical k-means took 12.8 s against 5.7 s and directional clustering
        # 7.1 s against 5.1 s; the copy costs about 0.6 s
        X = np.ascontiguousarray(X)
    if check_finite:
        if is_dask(X):
            X = X.map_blocks(_raise_if_not_finite, name_of=name, dtype=X.dtype)
        else:
            _raise_if_not_finite(X, name_of=name)
    return X


def check_labels(labels: Any, *, name: str = "labels") -> np.ndarray:
    """Return ``labels`` as a 1-D integer numpy array (computing a dask array)."""
    if is_dask(labels):
        labels = labels.compute()
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {labels.shape}.")
    if labels.size and not np.issubdtype(labels.dtype, np.integer):
        if not np.all(np.isfinite(labels)) or not np.all(labels == np.round(labels)):
            raise ValueError(f"{name} must hold integer labels.")
        labels = labels.astype(np.int64)
    return labels.astype(np.int64, copy=False)


def check_n_clusters(n_clusters: Any, n_samples: int, *, name: str = "n_clusters") -> int:
    """Check that the number of clusters is an integer in [1, n_samples]."""
    if not isinstance(n_clusters, numbers.Integral) or isinstance(n_clusters, bool):
        raise TypeError(f"{name} must be an integer, got {n_clusters!r}.")
    if n_clusters < 1:
        raise ValueError(f"{name} must be >= 1, got {n_clusters}.")
    if n_clusters > n_samples:
        raise ValueError(
            f"{name}={n_clusters} is larger than the number of samples "
            f"(n_samples={n_samples}); choose at most {n_samples}."
        )
    return int(n_clusters)


def check_random_state(seed: RandomState | numbers.Integral) -> np.random.Generator:
    """Turn ``None``, an int, a ``Generator`` or a ``RandomState`` into a ``Generator``."""
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, np.random.RandomState):
        return np.random.default_rng(seed.randint(0, 2**31 - 1))
    if seed is None or isinstance(seed, numbers.Integral):
        return np.random.default_rng(seed)
    raise TypeError(f"random_state must be None, an int or a numpy Generator, got {seed!r}.")


def warn(message: str, category: type[Warning] = LSDDaskWarning) -> None:
    """Issue a package warning pointing at the caller's caller."""
    warnings.warn(message, category, stacklevel=3)


# --------------------------------------------------------------------------- helpers


def as_array(X: Array) -> Any:
    """numpy or dask as they are, a zarr array wrapped lazily, other array-likes as numpy."""
    if is_dask(X) or isinstance(X, np.ndarray):
        return X
    try:
        import zarr

        if isinstance(X, zarr.Array):
            return da.from_zarr(X)
    except ImportError:  # pragma: no cover - zarr is a hard dependency
        pass
    if hasattr(X, "__array__") or isinstance(X, list | tuple):
        return np.asarray(X)
    raise TypeError(f"expected a numpy, dask or zarr array, got {type(X).__name__}.")


def _raise_if_not_finite(block: np.ndarray, name_of: str = "X") -> np.ndarray:
    if not np.all(np.isfinite(block)):
        bad = int(np.size(block) - np.count_nonzero(np.isfinite(block)))
        raise ValueError(
            f"{name_of} contains {bad} non-finite value(s) (NaN or inf); "
            "mask or impute them before fitting."
        )
    return block
