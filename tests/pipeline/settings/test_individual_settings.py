"""The ``individual:`` section: off unless given, its defaults, a built-in atlas prior
scored beside the run, and one-line errors naming the key."""

from __future__ import annotations

import pytest
import yaml

from lsd_dask.pipeline import load_config, write_study
from lsd_dask.pipeline.settings.individual import IndividualSettings


def _file(tmp_path, study, **extra):
    path = write_study(study, tmp_path, fmt="gifti")
    raw = yaml.safe_load(path.read_text())
    raw.update(extra)
    path.write_text(yaml.safe_dump(raw))
    return path


def test_off_unless_asked_and_true_takes_every_default(tmp_path, study):
    path = _file(tmp_path, study)
    assert load_config(path).individual is None
    cfg = load_config(path, individual=True)
    assert cfg.individual == IndividualSettings("prior_potts", "directional", None)
    assert cfg.to_dict()["individual"] == {"method": "prior_potts", "prior": "directional",
                                           "ks": None}  # fmt: skip


def test_a_built_in_atlas_prior_is_also_compared(tmp_path, study):
    cfg = load_config(_file(tmp_path, study), individual={"prior": "schaefer_100"})
    assert [a.name for a in cfg.compare_atlases] == ["schaefer_100"]
    assert cfg.individual is not None and not cfg.individual.prior_is_method(["directional"])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"method": "mshbm"}, "individual.method must be one of prior_potts, iterative"),
        ({"prior": "kmeans"}, "individual.prior: 'kmeans' is neither a method of the run"),
        (
            {"prior": "schaefer_100", "ks": [5]},
            "individual.ks: the atlas prior 'schaefer_100' has its own",
        ),
        ({"ks": [7]}, "individual.ks: each of the run's K's (5, 10) at most once"),
        ({"ks": [5, 5]}, "individual.ks: each of the run's K's"),
        ({"kappa": 3}, "individual"),
        ("yes", "individual: true, or a mapping"),
    ],
)
def test_bad_values_fail_in_one_line_naming_the_key(tmp_path, study, value, message):
    path = _file(tmp_path, study, ks=[5, 10], individual=value)
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        load_config(path)
