import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.optimize import minimize

from lsd_dask.linalg.rotations import procrustes_about_axis, rotate_givens
from lsd_dask.linalg.simplex import project_rows_simplex, project_simplex
from lsd_dask.testing.strategies import vectors


@given(st.integers(1, 8).flatmap(vectors))
def test_projection_on_simplex_and_idempotent(v):
    p = project_simplex(v)
    assert p.min() >= 0
    assert p.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(project_simplex(p), p, atol=1e-12)


@given(st.integers(2, 5).flatmap(lambda k: vectors(k, min_value=-3, max_value=3)))
def test_projection_is_nearest_point(v):
    p = project_simplex(v)
    k = v.size
    # brute force: minimise |x - v|^2 on the simplex with SLSQP from several starts
    best = np.inf
    for x0 in np.eye(k).tolist() + [np.full(k, 1 / k).tolist()]:
        r = minimize(
            lambda x: np.sum((x - v) ** 2),
            x0,
            jac=lambda x: 2 * (x - v),
            bounds=[(0, 1)] * k,
            constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1}],
            method="SLSQP",
            options={"ftol": 1e-12, "maxiter": 500},
        )
        best = min(best, r.fun)
    assert np.sum((p - v) ** 2) <= best + 1e-7


def test_project_rows_numpy_and_dask_agree(rng):
    import dask.array as da

    Y = rng.standard_normal((50, 4))
    a = project_rows_simplex(Y)
    b = project_rows_simplex(da.from_array(Y, chunks=(13, 2))).compute()
    np.testing.assert_allclose(a, b)
    np.testing.assert_allclose(a[7], project_simplex(Y[7]))


def test_project_rows_wide_rows_match_bisection(rng):
    """Rows wider than the partial sort (k = 80): supports from 1 to all 80 entries."""
    from scipy.optimize import brentq

    k = 80
    Y = rng.standard_normal((300, k)) * np.geomspace(1e-4, 10.0, 300)[:, None]
    P = project_rows_simplex(Y)
    support = (P > 0).sum(axis=1)
    assert support.min() <= 2 and support.max() == k  # both paths are exercised
    for y, p in zip(Y, P, strict=True):
        # the projection is max(y - theta, 0) with theta the root of sum(...) = 1
        theta = brentq(lambda t, y=y: np.maximum(y - t, 0).sum() - 1, y.min() - 1, y.max())
        np.testing.assert_allclose(p, np.maximum(y - theta, 0), atol=1e-10)


@given(st.integers(2, 7).flatmap(lambda k: st.tuples(vectors(k), vectors(k))))
def test_rotate_givens_maps_m_onto_u(mu):
    m, u = mu
    if np.linalg.norm(m) < 1e-3 or np.linalg.norm(u) < 1e-3:
        return
    R = rotate_givens(m, u)
    # 1e-8: for nearly parallel m and u (angle ~1e-7) the Givens angles lose ~1e-9
    np.testing.assert_allclose(R @ (m / np.linalg.norm(m)), u / np.linalg.norm(u), atol=1e-8)
    np.testing.assert_allclose(R.T @ R, np.eye(m.size), atol=1e-9)
    assert np.linalg.det(R) == pytest.approx(1.0)


def test_rotate_givens_antiparallel():
    u = np.ones(4)
    R = rotate_givens(-u, u)
    np.testing.assert_allclose(R @ -u, u, atol=1e-12)
    assert np.linalg.det(R) == pytest.approx(1.0)


@pytest.mark.parametrize("k", [3, 4, 6])
def test_procrustes_about_axis_recovers_rotation(k, rng):
    u = np.ones(k) / np.sqrt(k)
    e = np.zeros(k)
    e[-1] = 1
    R_ue = rotate_givens(u, e)
    # a random rotation about u
    g, _ = np.linalg.qr(rng.standard_normal((k - 1, k - 1)))
    if np.linalg.det(g) < 0:
        g[:, 0] *= -1
    G = np.eye(k)
    G[:-1, :-1] = g
    R_true = R_ue.T @ G @ R_ue
    np.testing.assert_allclose(R_true @ u, u, atol=1e-12)
    A = rng.standard_normal((k, 30))
    R = procrustes_about_axis(A, R_true @ A, R_ue)
    np.testing.assert_allclose(R, R_true, atol=1e-9)
