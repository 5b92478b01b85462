"""Bases of a tall n × l product for the range finder: the two-level tall-skinny QR
(:func:`tsqr`, exact or by ``Y R⁻¹``, formed or kept as factors), the LU basis of one row
block (:func:`lu_basis`), and the row basis of the last power iteration."""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
import scipy.linalg as sla
from dask.base import compute as dask_compute
from dask.base import persist as dask_persist
from dask.delayed import delayed

from .placement import Placement, SchedulerChoice, persisted

__all__ = ["FactoredBasis", "economic_qr", "lu_basis", "row_basis_bt", "tsqr"]


def row_basis_bt(
    Z: np.ndarray, C: np.ndarray, row_basis: bool = True
) -> tuple[np.ndarray | None, np.ndarray]:
    """``P, M`` with ``P M = P (C R⁻¹)ᵀ`` and ``P R = qr(Z)``, in float64: the transpose of
    ``Qᵀ X P Pᵀ`` when ``C = Qᵀ X Z`` (so that ``C R⁻¹ = Qᵀ X P``); P is None without
    ``row_basis``, and R then comes from Zᵀ Z (:func:`_gram_r`). R's rows may differ in
    sign from the QR's: that flips the signs of M's rows, and so of its left singular
    vectors, which are taken back through P only; its singular values and right vectors
    stay.

    Where Z is ill-conditioned (R's reciprocal condition number below ``sqrt(ε)`` of Z's
    dtype, the passes'), the directions of Z below ``sqrt(ε)`` times its largest singular
    value are left out: C (from products in ``dtype``) holds them only to about
    ``ε ‖X‖ ‖Z‖``, which ``R⁻¹`` would blow up past ‖X‖ itself. With ``R = W₁ S W₂ᵀ``,
    ``P W₁`` is Z's left singular basis, and M's rows along the kept directions are
    ``(C W₂ S⁻¹)ᵀ``, the others zero: singular values of X there come out 0. Z is that
    ill-conditioned where X is rank-deficient, or has directions far below its largest
    that the start of the power iteration holds (a split's U for one half of it).
    """
    tol = float(np.sqrt(np.finfo(np.asarray(Z).dtype).eps))
    Z = np.asarray(Z, np.float64)
    P, R = economic_qr(Z, with_q=True) if row_basis else (None, _gram_r(Z))
    C = np.asarray(C, np.float64)
    rcond, info = sla.lapack.dtrcon(R, norm="1", uplo="U")
    if info == 0 and rcond >= tol:
        # C R⁻¹ = Mᵀ with Rᵀ M = Cᵀ: a triangular solve, no inverse
        return P, sla.solve_triangular(R, C.T, trans="T", check_finite=False)
    W1, S, W2t = np.linalg.svd(R)
    r = int(np.count_nonzero(S > tol * S[0]))
    M = np.zeros_like(C)
    M[:r] = (C @ W2t[:r].T / S[:r]).T
    return (None if P is None else P @ W1), M


def _gram_r(z: np.ndarray) -> np.ndarray:
    """R of a tall float64 ``z``'s economic QR, up to the signs of its rows: the Cholesky
    factor of ``zᵀ z``, or the QR's own R where z is near rank-deficient.

    For the 33,000 × 1,010 row basis of a split this takes 0.6 s against 2.8 s for the QR
    (this process, 2 threads; the workers wait meanwhile). The Gram squares z's
    condition number, so at ``κ(z)`` above about 10⁶ (R's diagonal spread; or where the
    Cholesky factorisation fails) the QR is used: below it R is accurate to about
    ``ε κ(z)²``, 10⁻⁴ at worst in float64, against float32 data.
    """
    # the upper triangle of zᵀ z from z as it lies: a C-ordered z as its (F-ordered)
    # transpose, which BLAS would otherwise copy whole into F order first (0.77 s
    # against 0.50 s for a 33,000 × 1,010 z on one thread)
    c_ordered = z.flags.c_contiguous
    gram = sla.blas.dsyrk(1.0, z.T if c_ordered else z, trans=0 if c_ordered else 1)
    try:
        r = np.asarray(sla.cholesky(gram, lower=False, check_finite=False))
    except np.linalg.LinAlgError:
        return economic_qr(z, with_q=False)[1]
    d = np.abs(np.diag(r))
    if d.min() <= _GRAM_MIN_SPREAD * d.max():
        return economic_qr(z, with_q=False)[1]
    return r


#: the smallest ratio of R's diagonal entries at which :func:`_gram_r` trusts zᵀ z
_GRAM_MIN_SPREAD = 1e-6


def economic_qr(a: np.ndarray, *, with_q: bool) -> tuple[np.ndarray | None, np.ndarray]:
    """The economic QR of a tall ``a`` (m ≥ l); without ``with_q`` Q is None and never
    formed (scipy's ``"r"`` mode gives the full m × l upper-trapezoidal R, whose first l
    rows are the economic R)."""
    if with_q:
        q, r = sla.qr(a, mode="economic", check_finite=False)
        return q, r
    return None, np.asarray(sla.qr(a, mode="r", check_finite=False)[0][: a.shape[1]])


def tsqr(
    Y: Any,
    row_chunks: tuple[int, ...],
    *,
    persist: bool = True,
    with_r: bool = False,
    exact: bool = True,
    formed: bool = True,
    placement: Placement | None = None,
) -> Any:
    """Orthonormal basis of the columns of a tall dask Y: two-level tall-skinny QR.

    Each row block is factored on its own (``Y_i = Q_i R_i``), the stacked R's once more
    (``[R_1; …] = Q' R``), and ``Q = diag(Q_i) Q'``, each ``Q_i`` applied by its
    reflectors to its rows of Q' and never formed (:func:`_qr_reflectors`). Written here
    rather than with ``dask.array.linalg.tsqr`` because that calls ``numpy.linalg.qr``,
    2.7–3.5 times slower than LAPACK's geqrf/orgqr on 32,492 × 1,010 float32 blocks, which
    geqrt/gemqrt beat again (measured on the 2-core AVX2 development machine of
    ``docs/benchmarks.md``). Householder QR: a rank-deficient Y still gives orthonormal
    columns.

    Parameters
    ----------
    Y : dask array of shape (n, l)
    row_chunks : tuple of int
        Row blocks of the result; each at least l rows.
    persist : bool, default=True
        Compute Q now (in worker memory) rather than leave it lazy.
    with_r : bool, default=False
        Also return R (``Y = Q R``, float64, computed with Q).
    exact : bool, default=True
        ``False`` (with ``persist``): ``Q = Y R⁻¹``, a triangular solve of each row block
        (0.45 s for a 29,892 × 1,010 float32 block on a single-threaded worker, against
        1.3 s to apply its reflectors), where R's diagonal puts κ(Y) below about
        ``1 / (1000 ε)``: the same span, orthonormal to about ``ε κ(Y)``, which is all a
        power iteration needs of the basis it starts from (Y's own rounding already
        limits its span that far). Else, and for an ill-conditioned Y, the reflectors' Q.
    formed : bool, default=True
        ``False`` (with ``persist``): Q is returned as a :class:`FactoredBasis`, not
        formed: its ``times(W)`` forms ``Q W`` in one step on the workers (for the final
        ``U = Q Ub`` of an SVD: 0.65 s a row block less than Q and then the product).
    placement : Placement, optional
        How R reaches the row blocks' tasks and how persisting waits
        (:mod:`~lsd_dask.linalg.placement`; default: the scheduler's choice).

    Returns
    -------
    Q : dask array of shape (n, l), chunked by ``row_chunks`` (or its factors)
    R : ndarray of shape (l, l)
        With ``with_r`` only.
    """
    placement = SchedulerChoice() if placement is None else placement
    Y = Y.rechunk({0: row_chunks, 1: -1})
    l = Y.shape[1]
    # the graph as it is: optimised, it lost the annotations of its tasks (the group
    # tasks' worker restrictions, :class:`BlockPasses`)
    ys = list(Y.to_delayed(optimize_graph=False).ravel())
    exact = exact or not persist or with_r
    if not exact:
        ys = list(dask_persist(*ys))  # read again by Y R⁻¹
    factored = [delayed(_qr_reflectors, pure=True)(b) for b in ys]
    if persist:
        # the stacked QR here, between the two steps on the workers: LAPACK's geqrt and
        # gemqrt hold the GIL, so a worker that made Q' and went on to apply it kept the
        # other waiting for its copy of Q' (1.2 s, the two applications one after the other)
        factored = list(dask_persist(*factored))
        placement.wait(factored)
        (rs,) = dask_compute([f[2] for f in factored])
        small: Any = _qr_of_stacked_r(rs)
        if not exact and _well_conditioned(small[1], Y.dtype):
            r = placement.broadcast(np.asarray(small[1], Y.dtype))
            del factored  # their reflectors are not needed
            blocks = [
                da.from_delayed(
                    delayed(_times_r_inverse, pure=True)(y, r), (rows, l), dtype=Y.dtype
                )
                for y, rows in zip(ys, Y.chunks[0], strict=True)
            ]
            return persisted(da.concatenate(blocks, axis=0), placement)
        basis = FactoredBasis(factored, small[0], Y.chunks[0], Y.dtype, placement)
        if not formed:
            return (basis, np.asarray(small[1])) if with_r else basis
        Q = basis.times()
        return (Q, np.asarray(small[1])) if with_r else Q
    small = delayed(_qr_of_stacked_r, pure=True)([f[2] for f in factored])
    blocks = [
        da.from_delayed(delayed(_times_q_part, pure=True)(f, small[0], i), (rows, l), dtype=Y.dtype)
        for i, (f, rows) in enumerate(zip(factored, Y.chunks[0], strict=True))
    ]
    Q = da.concatenate(blocks, axis=0)
    if not with_r:
        return Q
    (R,) = dask_compute(small[1])
    return Q, np.asarray(R)


def lu_basis(Y: Any, placement: Placement | None = None) -> Any | None:
    """A basis of the span of a dask Y in one row block, for another power iteration:
    ``L = Y U⁻¹`` for the U of Y's LU factorisation with partial pivoting, persisted on
    the worker that holds Y (:func:`_lu_basis`); None where U's diagonal shows Y near
    rank-deficient (then :func:`tsqr`'s bases).

    The normaliser of Halko et al.'s power iterations as scikit-learn and fbpca take it
    (``power_iteration_normalizer="LU"``): not orthonormal, but well scaled (every entry
    at most 1 in magnitude, a unit lower triangle in the pivot rows), which is all a
    product by X Xᵀ needs. The range finder takes it for those bases only
    (``scaled_basis``): the one U is made from, and the one whose Xᵀ Q the row basis is
    made from, are :func:`tsqr`'s. At rank 1,000 on a split of the full study (59,784
    rows), 0.7 s on one thread against 2.4 s for ``tsqr(..., exact=False)``.
    """
    if len(Y.chunks[0]) != 1:
        raise ValueError(f"lu_basis takes Y in one row block, not {len(Y.chunks[0])}.")
    (y,) = Y.rechunk({1: -1}).to_delayed(optimize_graph=False).ravel()
    (b,) = dask_persist(delayed(_lu_basis, pure=True)(y))
    (made,) = dask_compute(delayed(_is_array, pure=True)(b))
    if not made:
        return None
    placement = SchedulerChoice() if placement is None else placement
    return persisted(da.from_delayed(b, Y.shape, dtype=Y.dtype), placement)


class FactoredBasis:
    """The Q of :func:`tsqr`, kept as its factors: each row block's reflectors (persisted
    on the workers) and the stacked QR's Q' (here); ``times(W)`` forms ``Q W``."""

    def __init__(
        self,
        factored: list[Any],
        q_small: np.ndarray,
        rows: tuple[int, ...],
        dtype: Any,
        placement: Placement,
    ) -> None:
        self.factored, self.q_small, self.rows, self.dtype = factored, q_small, rows, dtype
        self.placement = placement

    def times(self, W: np.ndarray | None = None) -> Any:
        """``Q W`` (Q without W), persisted: each row block's reflectors applied to its
        rows of ``Q' W``, one step, so Q itself is never formed when W is given."""
        q_small = self.q_small if W is None else self.q_small @ np.asarray(W, np.float64)
        shared = self.placement.broadcast(q_small)
        k = q_small.shape[1]
        blocks = [
            da.from_delayed(
                delayed(_times_q_part, pure=True)(f, shared, i), (rows, k), dtype=self.dtype
            )
            for i, (f, rows) in enumerate(zip(self.factored, self.rows, strict=True))
        ]
        return persisted(da.concatenate(blocks, axis=0), self.placement)


def _qr_reflectors(y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Householder QR of a tall block (rank-deficient blocks are fine), Q left as its
    reflectors: LAPACK geqrt's compact WY form (the reflectors below the diagonal of
    ``a``, their block factors ``t``) and R, in y's dtype.

    Q is applied once, to its rows of the stacked QR's Q' (:func:`_times_q_part`), never
    formed on its own: for a 29,892 × 1,010 float32 block (one thread) the factorisation
    and that application take 0.9 + 1.3 s against 2.5 s for scipy's economic QR (geqrf,
    then orgqr to form Q) and 0.6 s for the product with Q'.
    """
    geqrt = sla.get_lapack_funcs("geqrt", (y,))
    a, t, info = geqrt(min(_QR_BLOCK, *y.shape), y)
    if info != 0:
        raise np.linalg.LinAlgError(f"geqrt failed (info {info}).")
    l = y.shape[1]
    return a, t, np.triu(a[:l])


#: the block size of geqrt's compact WY reflectors: 0.9 s for a 29,892 × 1,010 float32
#: block at 128 (one thread), 0.91 at 64, 0.92 at 256, 1.0 at 32
_QR_BLOCK = 128


def _qr_of_stacked_r(rs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``Q', R`` of the stacked R factors, in float64 (small: blocks·l × l)."""
    q, r = sla.qr(np.vstack(rs).astype(np.float64), mode="economic", check_finite=False)
    return np.asarray(q), np.asarray(r)


def _well_conditioned(r: np.ndarray, dtype: Any) -> bool:
    """Whether R's diagonal (a lower bound on its condition number) allows ``Y R⁻¹`` in
    ``dtype`` to within about a thousandth of orthonormality."""
    d = np.abs(np.diag(r))
    return bool(d.size and d.min() > 1e3 * np.finfo(dtype).eps * d.max())


def _lu_basis(y: np.ndarray) -> np.ndarray | None:
    """``y U⁻¹`` (F-ordered, y's dtype) for the U of ``y = P L U``, LAPACK getrf's LU
    with partial pivoting; None where U's diagonal puts y near rank-deficient
    (:func:`_well_conditioned`'s test), or getrf met an exact zero pivot.

    ``y U⁻¹ = P L``: getrf's L with its rows put back in y's order, made in place of the
    factorisation (getrf swaps at most l rows, so at most 2 l move). For a 59,784 ×
    1,010 float32 y on one thread: 0.13 s for the F-ordered copy getrf works in, 0.55 s
    for getrf, against 1.57 s for geqrt and 0.79 s for ``Y R⁻¹`` (:func:`tsqr`'s
    ``exact=False``) on the AVX-512 development machine.
    """
    n, l = y.shape
    a = _fortran_copy(y)
    getrf = sla.get_lapack_funcs("getrf", (a,))
    lu, piv, info = getrf(a, overwrite_a=True)
    top = lu[:l]
    if info != 0 or not np.isfinite(top).all() or not _well_conditioned(top, y.dtype):
        return None
    top[np.triu_indices(l)] = 0
    np.fill_diagonal(top, 1)
    order = np.arange(n)
    for i, p in enumerate(piv.tolist()):  # row i was swapped with row p, in turn
        order[i], order[p] = order[p], order[i]
    moved = np.flatnonzero(order != np.arange(n))
    lu[order[moved]] = lu[moved]
    return np.asarray(lu)


#: rows of a C-ordered array :func:`_fortran_copy` transposes at a time
_TRANSPOSE_ROWS = 512


def _fortran_copy(y: np.ndarray) -> np.ndarray:
    """An F-ordered copy of a 2-d ``y``, a block of rows at a time: 0.13 s for a 59,784 ×
    1,010 float32 C-ordered y (warm memory, one thread) against 0.4 s for
    ``np.asfortranarray`` and 0.9 s for the copy f2py makes."""
    out = np.empty(y.shape[::-1], y.dtype)
    for i in range(0, y.shape[0], _TRANSPOSE_ROWS):
        out[:, i : i + _TRANSPOSE_ROWS] = y[i : i + _TRANSPOSE_ROWS].T
    return out.T


def _is_array(x: Any) -> bool:
    return x is not None


def _times_r_inverse(y: np.ndarray, r: np.ndarray) -> np.ndarray:
    """``y R⁻¹`` for an upper triangular R, by one triangular solve (BLAS trsm on the
    transposes, into a copy of y)."""
    trsm = sla.get_blas_funcs("trsm", (r,))
    # yᵀ is F-ordered: Rᵀ (y R⁻¹)ᵀ = yᵀ solved in place of a copy, whose transpose is C-ordered
    out = trsm(1.0, r, np.array(y.T, order="F", copy=True), side=0, lower=0, trans_a=1,
               overwrite_b=1)  # fmt: skip
    return np.asarray(out.T)


def _times_q_part(
    factored: tuple[np.ndarray, np.ndarray, np.ndarray], q_small: np.ndarray, i: int
) -> np.ndarray:
    """Block i of ``Q W``: ``Q_i`` (by its reflectors) times its l rows of ``q_small``,
    the stacked QR's ``Q' W`` (W = I for Q itself)."""
    a, t, _ = factored
    m, l = a.shape
    c = np.zeros((m, q_small.shape[1]), a.dtype, order="F")
    c[:l] = q_small[i * l : (i + 1) * l]
    gemqrt = sla.get_lapack_funcs("gemqrt", (a,))
    q, info = gemqrt(a, t, c, side="L", trans="N", overwrite_c=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"gemqrt failed (info {info}).")
    return np.asarray(q)
