"""The ``svd:`` section of a pipeline file, typed: how each split's group SVD is computed."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from ...linalg.sketch import TEST_MATRICES
from . import files
from .files import minimum_of, setting

__all__ = ["HALVES_STARTS", "SvdSettings"]

#: how the blur choice's half SVDs begin (``svd.blur_halves_start``)
HALVES_STARTS = ("split", "sketch")


@dataclass(frozen=True)
class SvdSettings:
    """The ``svd:`` section, typed; its defaults are stated here only.

    Attributes
    ----------
    method : {"randomized", "streaming"}
        Halko's range finder over the Zarr store, or a MIGP-style streaming group SVD.
    rank : int
        Features kept per vertex (the paper keeps 1,000).
    n_power_iter : int
        Power iterations of the randomized SVD.
    fuse_passes : bool
        One read of the data per power iteration (see :func:`~lsd_dask.linalg.randomized_svd`).
    final_pass : bool
        False (the default): no last read of the data; the last power iteration's row
        basis stands in for it (one read and one product fewer, at an accuracy between
        ``n_power_iter - 1`` and ``n_power_iter`` iterations). Needs ``fuse_passes`` and
        ``n_power_iter >= 1``; a pipeline file that sets either otherwise and leaves this
        key out gets True. On the full-scale synthetic study (59,784 × 33,000, rank
        1,000) it kept 0.983 of the variance of 4 power iterations against 0.989 with
        the last read, the same subspace capture (0.963 / 0.964) and labels as close to
        the truth (NMI 0.994 / 0.996), in 0.82× the time; on the realistic study (8
        subjects × 1,200 TRs a split, rank 400) 0.978 / 0.988, capture 0.961 / 0.964,
        NMI 0.984 / 0.985 (``docs/benchmarks.md``, power iterations).
    test_matrix : {"sparse", "gaussian"}
        The randomized SVD's test matrix: sparse signs (8 entries ±1 a row), whose
        product costs a quarter of a Gaussian one's, or Gaussian. On the realistic study
        against its exact SVD (rank 400, 2 power iterations, no final pass) both keep
        0.970 of the variance with the same subspace capture (0.775) and Gram error
        (2.8e-2); on the full-scale study the sketch pass went from 27–30 s to 15–22 s a
        split (``docs/benchmarks.md``, power iterations).
    sketch_width : float
        The randomized SVD's first sketch reads whole subjects, drawn with the run's
        ``random_state``, until they hold ``sketch_width × (rank + 10)`` time points (every
        subject of a smaller split); 0 reads them all. The power iterations that follow
        read every subject. On split 1 of the full-scale synthetic study (33 subjects ×
        1,000 TRs, rank 1,000: 9 subjects) it kept the same variance as every subject's
        sketch (0.98284 against 0.98285 of a 4-iteration reference; labels as near the
        truth, NMI 0.9945 against 0.9938) in 114.8 against 125.4 s; on the realistic study
        (8 subjects × 1,200 TRs, rank 400: 3 subjects) 0.9553–0.9554 of the exact SVD's
        variance against 0.9561–0.9564, labels as near the truth (NMI 0.911–0.913 against
        0.910–0.912) (``docs/benchmarks.md``, power iterations).
        Needs ``n_power_iter >= 1``; a pipeline file with ``n_power_iter: 0`` that leaves
        this key out gets 0.
    n_keep : int or None
        Streaming SVD: rows kept between blocks (None: its default).
    blur_halves_start : {"split", "sketch"}
        How the blur choice's (``feature_smoothing_mm: auto``) SVDs of a split's two time
        halves begin. ``split``: from the split's own U, with one power iteration and no
        final pass, so each half is read once; ``sketch``: from their own sketch, with
        the settings above, as the split's SVD (``n_power_iter + 1`` reads each). At full
        scale (2 × 33 subjects × 1,000 time points, 2 workers) the blur stage took 165 s
        against 305 s, 0.8× the SVD stage; on the realistic study no blur came out 0.4 /
        0.5 % worse than 5 mm (splits 1 / 2; the choice's tolerance is 1 %) against 0.3
        / 0.5 % from the halves' exact SVDs and 0.6 / 0.7 % from their own sketches (Vos
        de Wael 400 truth, ``docs/benchmarks.md``). The time-halves evaluation keeps the
        halves apart (``sketch``) whatever this says: its scores are the held-out half's,
        which the split's U has seen.
    """

    method: str = setting(
        "randomized", note=("randomized (passes over the data) or streaming (one pass)")
    )
    rank: int = setting(
        1000,
        note=("singular vectors kept; a split keeps at most half its time points (the log says)"),
        minimum=1,
    )
    n_power_iter: int = setting(2, note="power iterations of the randomized SVD", minimum=0)
    fuse_passes: bool = setting(
        True, note=("one read of the data per power iteration (q + 2 reads in all)")
    )
    final_pass: bool = setting(
        False,
        note=(
            "false: the last power iteration's row basis stands in for the last read (q + 1 "
            "reads; accuracy between q - 1 and q iterations); true where fuse_passes is false or "
            "n_power_iter 0"
        ),
    )
    test_matrix: str = setting(
        "sparse",
        note=(
            "sparse (8 entries ±1 a row; its product a quarter of a Gaussian one's) or gaussian: "
            "the randomized SVD's test matrix"
        ),
    )
    sketch_width: float = setting(
        8.0,
        note=(
            "the first sketch reads whole subjects, drawn at random, until they hold sketch_width"
            " × (rank + 10) time points (the power iterations read them all); 0: every subject, "
            "the default where n_power_iter is 0"
        ),
    )
    n_keep: int | None = setting(
        None, note=("streaming SVD: rows kept between blocks (null: its default)"), minimum=1
    )
    blur_halves_start: str = setting(
        "split",
        note=(
            "split: the blur choice's half SVDs start from the split's U (one read of each half);"
            " sketch: from their own sketch, as the split's SVD"
        ),
    )

    @classmethod
    def from_mapping(cls, raw: dict[str, Any], where: str) -> SvdSettings:
        """Checked settings from a YAML mapping; an error names the key."""
        files.check_keys(raw, {f.name for f in fields(cls)}, f"{where}: svd")
        method = raw.get("method", cls.method)
        if method not in ("randomized", "streaming"):
            raise ValueError(f"svd.method must be 'randomized' or 'streaming', got {method!r}.")
        flags = {}
        for key in ("fuse_passes", "final_pass"):
            flags[key] = raw.get(key, getattr(cls, key))
            if not isinstance(flags[key], bool):
                raise ValueError(f"svd.{key}: true or false, got {flags[key]!r}.")
        test_matrix = raw.get("test_matrix", cls.test_matrix)
        if test_matrix not in TEST_MATRICES:
            raise ValueError(
                f"svd.test_matrix must be one of {', '.join(TEST_MATRICES)}, got {test_matrix!r}."
            )
        n_keep = raw.get("n_keep")
        n_power_iter = files.int_setting(
            raw.get("n_power_iter", cls.n_power_iter),
            "svd.n_power_iter",
            minimum_of(cls, "n_power_iter"),
        )
        if "final_pass" not in raw and not _row_basis_possible(flags["fuse_passes"], n_power_iter):
            flags["final_pass"] = True  # the default where the other settings rule it out
        sketch_width = raw.get("sketch_width", cls.sketch_width if n_power_iter else 0.0)
        if (
            isinstance(sketch_width, bool)
            or not isinstance(sketch_width, int | float)
            or not 0 <= sketch_width < float("inf")
        ):
            raise ValueError(
                f"svd.sketch_width: a number of ranks' worth of time points, 0 or more "
                f"(0: every subject), got {sketch_width!r}."
            )
        blur_halves_start = raw.get("blur_halves_start", cls.blur_halves_start)
        if blur_halves_start not in HALVES_STARTS:
            raise ValueError(
                f"svd.blur_halves_start must be one of {', '.join(HALVES_STARTS)}, got "
                f"{blur_halves_start!r}."
            )
        return cls(
            method=method,
            blur_halves_start=blur_halves_start,
            rank=files.int_setting(raw.get("rank", cls.rank), "svd.rank", minimum_of(cls, "rank")),
            n_power_iter=n_power_iter,
            test_matrix=test_matrix,
            sketch_width=float(sketch_width),
            n_keep=(
                None
                if n_keep is None
                else files.int_setting(n_keep, "svd.n_keep", minimum_of(cls, "n_keep"))
            ),
            **flags,
        )

    def split_key(self) -> dict[str, Any]:
        """The settings a split's own SVD depends on: all but ``blur_halves_start``, so
        that changing how the blur choice starts does not redo the split's SVD."""
        return {k: v for k, v in asdict(self).items() if k != "blur_halves_start"}

    def __post_init__(self) -> None:
        if not self.final_pass and not _row_basis_possible(self.fuse_passes, self.n_power_iter):
            raise ValueError(
                "svd.final_pass: false needs svd.fuse_passes: true and svd.n_power_iter >= 1, "
                f"got fuse_passes {self.fuse_passes} and n_power_iter {self.n_power_iter}."
            )
        if self.sketch_width > 0 and self.n_power_iter < 1:
            raise ValueError(
                f"svd.sketch_width {self.sketch_width:g} needs svd.n_power_iter >= 1 (the "
                "power iterations read every subject); set it to 0."
            )


def _row_basis_possible(fuse_passes: bool, n_power_iter: int) -> bool:
    """Whether the last power iteration can stand in for the final pass."""
    return fuse_passes and n_power_iter >= 1
