"""Every estimator's docstring has an Examples section, and it runs as written."""

import doctest
import warnings

import pytest

import lsd_dask.cluster as cluster
from lsd_dask._validation import ClippedEigenvalueWarning

ESTIMATORS = [obj for name in cluster.__all__ if isinstance(obj := getattr(cluster, name), type)]


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda c: c.__name__)
def test_docstring_example_runs(estimator):
    tests = [t for t in doctest.DocTestFinder(recurse=False).find(estimator) if t.examples]
    assert tests, f"{estimator.__name__} has no Examples section"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    with warnings.catch_warnings():
        # noiseless toy data is rank-deficient on purpose: its small eigenvalues are clipped
        warnings.simplefilter("ignore", ClippedEigenvalueWarning)
        for t in tests:
            runner.run(t)
    result = runner.summarize(verbose=False)
    assert result.attempted >= 3 and result.failed == 0
