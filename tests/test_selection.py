"""The feature blur chosen by held-out parcel homogeneity (lsd_dask.selection)."""

import warnings

import dask.array as da
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsd_dask import cluster, metrics
from lsd_dask.selection import (
    _least_within_tolerance,
    _rose_past_best,
    choose_feature_blur,
    half_columns,
    within_sum_of_squares,
)
from lsd_dask.similarity import unit_rows
from lsd_dask.surface import icosphere, smooth_on_mesh, smoothing_steps


def _parcels_on_sphere(noise: float, seed: int = 0):
    """Two halves' unit-row features of 6 sharp Voronoi parcels on a sphere (2,562
    vertices, radius 50 mm), each half with its own noise; and the truth."""
    mesh = icosphere(16, radius=50.0)
    V, A = mesh.vertices, mesh.adjacency()
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((6, 3))
    truth = np.argmax(V @ centres.T / np.linalg.norm(centres, axis=1), axis=1)
    signature = rng.standard_normal((6, 10))
    halves = []
    for _ in range(2):
        F = signature[truth] + noise * rng.standard_normal((V.shape[0], 10))
        halves.append(F / np.linalg.norm(F, axis=1, keepdims=True))
    return halves, V, A, truth


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(2, 40),
    d=st.integers(1, 5),
    k=st.integers(1, 6),
    seed=st.integers(0, 2**16),
)
def test_within_sum_of_squares_is_the_distance_to_the_cluster_means(n, d, k, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    labels = rng.integers(0, k, n)
    ref = (
        sum(np.sum((X[labels == c] - X[labels == c].mean(axis=0)) ** 2) for c in np.unique(labels))
        / n
    )
    assert within_sum_of_squares(X, labels) == pytest.approx(ref, rel=1e-9, abs=1e-12)
    lazy = within_sum_of_squares(da.from_array(X, chunks=(7, d)), labels)
    assert lazy == pytest.approx(ref, rel=1e-9, abs=1e-12)


def test_half_columns_halve_every_subject():
    first, second = half_columns([4, 5, 2])
    np.testing.assert_array_equal(first, [0, 1, 4, 5, 9])
    np.testing.assert_array_equal(second, [2, 3, 6, 7, 8, 10])
    with pytest.raises(ValueError, match="1 time point"):
        half_columns([4, 1])


def test_the_least_blur_within_the_tolerance_is_chosen():
    grid = [0.0, 5.0, 10.0]
    # 5 mm is best on average but by less than the spread of its paired differences
    tied = np.array([[1.00, 1.02, 0.99, 1.01], [0.99, 1.03, 0.97, 1.02], [1.2, 1.2, 1.2, 1.2]])
    assert _least_within_tolerance(grid, tied, rtol=0.0) == 0.0
    # 10 mm better in every seed and direction, by more than the spread and the tolerance
    clear = np.array([[1.0, 1.0, 1.0, 1.0], [0.9, 0.91, 0.9, 0.9], [0.8, 0.8, 0.81, 0.8]])
    assert _least_within_tolerance(grid, clear, rtol=0.01) == 10.0
    # 5 mm is 0.5 % worse than 10 mm in every seed: chosen at 1 %, not at 0.1 %
    close = np.array([[1.0] * 4, [0.8040, 0.8041, 0.8040, 0.8041], [0.8, 0.8, 0.8, 0.8]])
    assert _least_within_tolerance(grid, close, rtol=0.01) == 5.0
    assert _least_within_tolerance(grid, close, rtol=0.001) == 10.0


def test_clean_sharp_parcels_get_no_blur():
    (Fa, Fb), V, A, _ = _parcels_on_sphere(noise=0.3)
    lines: list[str] = []
    choice = choose_feature_blur(Fa, Fb, V, A, 6, random_state=0, progress=lines.append)
    assert choice.fwhm_mm == 0.0
    assert choice.errors.shape == (4, 6)
    assert choice.steps == [smoothing_steps(V, A, h) for h in choice.grid_mm]
    again = choose_feature_blur(Fa, Fb, V, A, 6, random_state=0)
    np.testing.assert_array_equal(again.errors, choice.errors)  # seeded
    # the error rises with the blur here: the larger blurs are not tried, and the blurs
    # that were have the errors, and give the choice, of the whole grid
    whole = choose_feature_blur(Fa, Fb, V, A, 6, random_state=0, early_stop=None)
    assert whole.tried == 4 and np.all(np.diff(whole.mean) > 0)
    t = choice.tried
    assert t < 4 and np.isnan(choice.errors[t:]).all()
    np.testing.assert_array_equal(choice.errors[:t], whole.errors[:t])
    assert choice.fwhm_mm == whole.fwhm_mm
    assert lines[-1].startswith(", ".join(f"{h:g}" for h in choice.grid_mm[t:]) + " mm not tried")
    summary = choice.to_dict()
    assert summary["mean_error"][t:] == [None] * (4 - t) == summary["standard_error"][t:]


@settings(max_examples=200, deadline=None)
@given(
    means=st.lists(st.floats(0.1, 10.0), min_size=2, max_size=6, unique=True),
    low=st.integers(0, 5),
    spread=st.floats(0.0, 0.5),
    rtol=st.floats(0.0, 0.2),
    margin=st.floats(0.0, 4.0),
    seed=st.integers(0, 2**16),
)
def test_stopping_where_the_error_rose_keeps_the_choice_of_a_unimodal_grid(
    means, low, spread, rtol, margin, seed
):
    """If the mean error falls to its least and then rises (a blur past its best only
    merges more), the blurs tried up to any stop give the choice of the whole grid."""
    low = min(low, len(means) - 1)
    falling = sorted(means[: low + 1], reverse=True)
    rising = sorted(means[low + 1 :])
    shape = np.array(falling + [falling[-1] + 1 + m for m in rising])
    rng = np.random.default_rng(seed)
    noise = spread * rng.standard_normal((shape.size, 6))
    errors = shape[:, None] + noise - noise.mean(axis=1, keepdims=True)  # the means exact
    grid = [5.0 * g for g in range(shape.size)]
    whole = _least_within_tolerance(grid, errors, rtol)
    for t in range(1, shape.size + 1):
        if _rose_past_best(errors[:t], rtol, margin):
            assert _least_within_tolerance(grid[:t], errors[:t], rtol) == whole


def test_each_error_is_one_seeds_fit_on_one_half_scored_on_the_other():
    """The errors, built by hand: for each seed in turn, half a blurred and parcellated and
    scored on half b unblurred, then b on a (the pairing the standard error relies on)."""
    from sklearn.exceptions import ConvergenceWarning

    (Fa, Fb), V, A, _ = _parcels_on_sphere(noise=2.0)
    choice = choose_feature_blur(Fa, Fb, V, A, 6, grid_mm=(0.0, 10.0), random_state=3)
    seeds = np.random.default_rng(3).integers(0, 2**31 - 1, size=3)
    for g, n in enumerate(choice.steps):
        blurred = [unit_rows(smooth_on_mesh(F, A, n_iter=n)) if n else F for F in (Fa, Fb)]
        expected = []
        for seed in seeds:
            for fit_on, score_on in ((blurred[0], Fb), (blurred[1], Fa)):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    est = cluster.SphericalKMeans(6, connectivity=A, random_state=int(seed))
                    labels = est.fit(fit_on).labels_
                expected.append(within_sum_of_squares(score_on, labels))
        np.testing.assert_array_equal(choice.errors[g], expected)


@pytest.mark.filterwarnings(
    "ignore:SphericalKMeans did not converge:lsd_dask._validation.ConvergenceWarning"
)  # the reference fits on noisy parcels may stop at max_iter
def test_noisy_parcels_get_the_blur_that_recovers_the_truth_better():
    (Fa, Fb), V, A, truth = _parcels_on_sphere(noise=4.0)
    choice = choose_feature_blur(Fa, Fb, V, A, 6, random_state=0)
    assert choice.fwhm_mm >= 10.0

    # the generator's truth agrees: parcels of the blurred features are closer to it
    def ari_at(mm: float) -> float:
        n = smoothing_steps(V, A, mm)
        F = smooth_on_mesh(Fa, A, n_iter=n) if n else Fa
        est = cluster.SphericalKMeans(6, random_state=0)
        return metrics.ari(truth, est.fit(F).labels_)

    assert ari_at(choice.fwhm_mm) > ari_at(0.0) + 0.1


@pytest.mark.parametrize("n_workers", [2, 4])
def test_blurs_scored_as_tasks_on_workers_match_a_run_here(tmp_path, n_workers):
    """With a client, each blur is scored as a task on real worker processes, from
    features scattered there or already computed there (futures): the same errors and
    choice, and the same stop, whether the workers take one blur at a time (2 workers) or
    two (4: a blur past the stop is scored beside the last one tried, and left out)."""
    from distributed import Client

    from lsd_dask.testing.processes import ProcessCluster

    (Fa, Fb), V, A, _ = _parcels_on_sphere(noise=0.3)
    here = choose_feature_blur(Fa, Fb, V, A, 6, random_state=0)
    assert here.tried == 3  # stopped at 10 mm: with 4 workers, 20 mm is scored beside it
    cluster = ProcessCluster(tmp_path, n_workers=n_workers)
    try:
        with Client(cluster.address) as client:
            lines: list[str] = []
            there = choose_feature_blur(
                Fa, Fb, V, A, 6, random_state=0, client=client, progress=lines.append
            )
            from_futures = choose_feature_blur(
                *client.scatter([Fa, Fb]), V, A, 6, random_state=0, client=client
            )
    finally:
        cluster.close()
    np.testing.assert_allclose(there.errors, here.errors, rtol=1e-9)  # NaN where not tried
    np.testing.assert_allclose(from_futures.errors, here.errors, rtol=1e-9)
    assert there.fwhm_mm == from_futures.fwhm_mm == here.fwhm_mm
    assert [line.split()[0] for line in lines] == ["0", "5", "10", "20"], lines
    assert lines[-1] == "20 mm not tried: the held-out error rose past its best"


def test_on_a_one_thread_worker_the_blurs_are_scored_from_the_least_up():
    """One worker of one thread: one blur at a time, from the least; without the stop, the
    whole grid, in order."""
    from distributed import Client, LocalCluster

    (Fa, Fb), V, A, _ = _parcels_on_sphere(noise=2.0)
    lines: list[str] = []
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        choice = choose_feature_blur(
            Fa, Fb, V, A, 6, random_state=0, client=client, progress=lines.append, early_stop=None
        )
    steps = [int(line.split("(")[1].split()[0]) for line in lines]
    assert len(steps) == len(choice.grid_mm) == choice.tried and len(set(steps)) == len(steps) > 2
    assert steps == sorted(steps), lines


def test_bad_inputs_are_named():
    (Fa, Fb), V, A, _ = _parcels_on_sphere(noise=0.3)
    with pytest.raises(ValueError, match="rows but the mesh"):
        choose_feature_blur(Fa[:-1], Fb, V, A, 6)
    with pytest.raises(ValueError, match="grid_mm"):
        choose_feature_blur(Fa, Fb, V, A, 6, grid_mm=[-5, 0])
    with pytest.raises(ValueError, match="n_seeds"):
        choose_feature_blur(Fa, Fb, V, A, 6, n_seeds=1)
    with pytest.raises(ValueError, match="early_stop"):
        choose_feature_blur(Fa, Fb, V, A, 6, early_stop=-1.0)
    with pytest.raises(ValueError, match="rtol"):
        choose_feature_blur(Fa, Fb, V, A, 6, rtol=1.5)
