"""A strict configuration: unknown keys and bad values fail at load time, naming the key."""

from __future__ import annotations

from dataclasses import asdict

import pytest
import yaml
from click.testing import CliRunner

from lsd_dask import cli
from lsd_dask.distributed import check_cluster_config
from lsd_dask.pipeline import load_config
from lsd_dask.pipeline.settings.config import SVD_DEFAULTS
from lsd_dask.pipeline.settings.svd import SvdSettings


@pytest.fixture
def folder(tmp_path):
    """A pipeline file over four tiny (empty) inputs: loading never reads them."""
    for i in range(4):
        for h in "LR":
            (tmp_path / f"sub-{i}.{h}.func.gii").write_text("")
    raw = {
        "subjects": [
            {"id": f"sub-{i}", "left": f"sub-{i}.L.func.gii", "right": f"sub-{i}.R.func.gii"}
            for i in range(4)
        ],
        "mesh": {"left": "lh.surf.gii", "right": "rh.surf.gii"},
        "ks": [5],
        "svd": {"method": "randomized", "rank": 40, "n_power_iter": 3},
    }
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(raw))
    return tmp_path


def _write(folder, **change):
    raw = yaml.safe_load((folder / "pipeline.yaml").read_text())
    raw.update(change)
    path = folder / "changed.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize(
    "key, value, suggestion",
    [("k", [10], "ks"), ("method", ["lsd"], "methods"), ("outptu", "x", "output")],
)
def test_misspelled_top_level_key_fails_with_a_suggestion(folder, key, value, suggestion):
    with pytest.raises(ValueError, match=f"unknown key '{key}'; did you mean '{suggestion}'"):
        load_config(_write(folder, **{key: value}))


def test_misspelled_nested_keys_fail_with_a_suggestion(folder):
    with pytest.raises(ValueError, match="svd: unknown key 'n_power_iters'; did you mean"):
        load_config(_write(folder, svd={"n_power_iters": 3}))
    raw = yaml.safe_load((folder / "pipeline.yaml").read_text())
    raw["subjects"][1]["lefft"] = raw["subjects"][1].pop("left")
    (folder / "p.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match=r"subjects\[1\] \(sub-1\): unknown key 'lefft'"):
        load_config(folder / "p.yaml")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"ks": ["ten"]}, "ks: 'ten' is not an integer"),
        ({"ks": [1]}, "ks: 1 must be at least 2"),
        ({"ks": [7.5]}, "ks: 7.5 is not an integer"),
        ({"svd": {"rank": 0}}, r"svd.rank: 0 must be at least 1"),
        ({"svd": {"rank": True}}, "svd.rank: True is not an integer"),
        ({"svd": {"final_pass": "no"}}, "svd.final_pass: true or false, got 'no'"),
        (
            {"svd": {"test_matrix": "normal"}},
            "svd.test_matrix must be one of sparse, gaussian, got 'normal'",
        ),
        (
            {"svd": {"final_pass": False, "n_power_iter": 0}},
            "svd.final_pass: false needs svd.fuse_passes: true and svd.n_power_iter >= 1",
        ),
        ({"svd": {"sketch_width": -1}}, "svd.sketch_width: a number of ranks' worth"),
        (
            {"svd": {"blur_halves_start": "u"}},
            "svd.blur_halves_start must be one of split, sketch, got 'u'",
        ),
        ({"svd": {"sketch_width": "all"}}, "svd.sketch_width: a number of ranks' worth"),
        ({"svd": {"sketch_width": True}}, "svd.sketch_width: a number of ranks' worth"),
        (
            {"svd": {"sketch_width": 4, "n_power_iter": 0, "final_pass": True}},
            "svd.sketch_width 4 needs svd.n_power_iter >= 1",
        ),
        ({"random_state": "seed"}, "random_state: 'seed' is not an integer"),
        ({"methods": ["lsd", "wrad"]}, r"methods\[1\]: unknown method 'wrad'"),
        (
            {"methods": [{"method": "ward", "spatial_weight": 1}]},
            r"methods\[0\]\.spatial_weight: MeshWard has no Potts term",
        ),
        ({"methods": [{"method": "ward", "smooth": 1}]}, r"unknown key\(s\) \['smooth'\]"),
        ({"methods": ["ward", {"method": "ward"}]}, r"name\(s\) \['ward'\] used twice"),
        ({"methods": [{"method": "lsd", "name": "a/b"}]}, "name 'a/b': use letters"),
        (
            {"methods": [{"method": "lsd", "spatial_weight": -1}]},
            r"methods\[0\]\.spatial_weight: -1; allowed: a number >= 0",
        ),
        ({"splits": {"../../x": ["sub-0"], "b": ["sub-1"]}}, "split name '../../x'"),
        ({"mesh": ["lh.surf.gii"]}, "mesh: expected a mapping"),
        ({"features": "US"}, "features must be 'us'"),
        ({"oversegment": 0.5}, "^oversegment: 0.5; allowed: a number >= 1"),
        (
            {"methods": [{"method": "lsd", "oversegment": "2"}]},
            r"methods\[0\].oversegment: '2'; allowed: a num",
        ),
        (
            {"feature_smoothing_mm": "automatic"},
            "^feature_smoothing_mm: 'automatic'; allowed: a number >= 0 or 'auto'",
        ),
        (
            {"feature_smoothing_mm": -5},
            r"^feature_smoothing_mm: -5; allowed: a number >= 0 or 'auto'",
        ),
        (
            {"methods": [{"method": "lsd", "feature_smoothing_mm": "Auto"}]},
            r"methods\[0\].feature_smoothing_mm: 'Auto'; allowed: a number >= 0 or 'auto'",
        ),
        # two names, one file label: one output would overwrite the other's
        (
            {"methods": [{"method": "ward", "name": "dir_a"}, {"method": "lsd", "name": "dira"}]},
            "^methods: 'dir_a' and 'dira' are both 'dira' as a file label",
        ),
        (
            {"splits": {"s-1": ["sub-0", "sub-1"], "s_1": ["sub-2", "sub-3"]}},
            "^splits: 's-1' and 's_1' are both 's1' as a file label",
        ),
        (
            {"ks": [20, 120], "methods": ["ward", {"method": "lsd", "name": "ward1"}]},
            "^methods: 'ward' at K = 120 in split1 and 'ward1' at K = 20 in split1 are both "
            "atlas-ward120split1",
        ),
    ],
)
def test_bad_values_name_their_key(folder, change, message):
    with pytest.raises(ValueError, match=message):
        load_config(_write(folder, **change))


def test_auto_feature_smoothing_at_the_top_or_per_variant(folder):
    cfg = load_config(_write(folder, feature_smoothing_mm="auto", methods=["lsd", "ward"]))
    assert [m.options["feature_smoothing_mm"] for m in cfg.methods] == ["auto", "auto"]
    assert all(m.needs_mesh for m in cfg.methods)
    variant = {"method": "lsd", "name": "lsd_fixed", "feature_smoothing_mm": 10}
    cfg = load_config(_write(folder, feature_smoothing_mm="auto", methods=["lsd", variant]))
    assert [m.options["feature_smoothing_mm"] for m in cfg.methods] == ["auto", 10.0]


def test_a_file_without_methods_runs_the_merged_directional_default(folder):
    (spec,) = load_config(folder / "pipeline.yaml").methods
    assert (spec.name, spec.method) == ("directional_merged", "directional")
    assert (spec.options["spatial_weight"], spec.options["oversegment"]) == (1.0, 2.0)
    assert spec.fine_fit == "shared"  # one fine fit per split serves every K
    est = spec.estimator(10, 0)
    assert (est.spatial_weight, est.oversegment) == (1.0, 2.0)
    # a top-level spatial setting wins over the default method's own
    (spec,) = load_config(_write(folder, spatial_weight=4, contiguous=True)).methods
    assert spec.options["spatial_weight"] == 4.0 and spec.options["contiguous"] is True
    assert spec.options["oversegment"] == 2.0
    # a method named in the file runs plain
    (spec,) = load_config(_write(folder, methods=["directional"])).methods
    assert spec.options["spatial_weight"] == 0.0 and spec.options["oversegment"] == 1.0
    assert spec.fine_fit == "per_k"


@pytest.mark.parametrize(
    ("variant", "fine_fit", "error"),
    [
        ({"method": "directional", "oversegment": 3, "spatial_weight": 1}, "shared", None),
        ({"method": "directional", "oversegment": 3, "spatial_weight": 1,
          "fine_fit": "per_k"}, "per_k", None),
        ({"method": "directional", "oversegment": 3}, "per_k", None),  # no Potts term
        ({"method": "lsd", "oversegment": 3}, "per_k", None),  # no Potts refinement
        ({"method": "lsd", "oversegment": 3, "fine_fit": "shared"}, None,
         r"methods\[0\].fine_fit: 'shared' needs a method with a Potts refinement"),
        ({"method": "directional", "oversegment": 3, "fine_fit": "shared"}, None,
         r"methods\[0\].fine_fit: 'shared' needs spatial_weight > 0"),
        ({"method": "directional", "fine_fit": "shared"}, None,
         r"methods\[0\].fine_fit: 'shared' needs oversegment > 1"),
        ({"method": "directional", "fine_fit": "once"}, None,
         r"methods\[0\].fine_fit: one of \['shared', 'per_k'\], got 'once'"),
    ],
)  # fmt: skip
def test_a_variants_fine_fit_is_shared_where_it_can_be(folder, variant, fine_fit, error):
    if error:
        with pytest.raises(ValueError, match=error):
            load_config(_write(folder, methods=[variant]))
        return
    (spec,) = load_config(_write(folder, methods=[variant])).methods
    assert spec.fine_fit == fine_fit and spec.to_dict()["fine_fit"] == fine_fit


def test_one_file_under_two_ids(folder):
    raw = yaml.safe_load((folder / "pipeline.yaml").read_text())
    raw["subjects"][3]["left"] = raw["subjects"][0]["left"]
    (folder / "dup.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match="listed for subjects 'sub-0' and 'sub-3'"):
        load_config(folder / "dup.yaml")
    # two disjoint time slices of one run are two subjects legitimately
    raw["subjects"][0]["time_slice"] = [0, 50]
    raw["subjects"][3]["time_slice"] = [50, 100]
    raw["subjects"][3]["right"] = raw["subjects"][0]["right"]
    (folder / "halves.yaml").write_text(yaml.safe_dump(raw))
    assert len(load_config(folder / "halves.yaml").subjects) == 4
    raw["subjects"][3]["time_slice"] = [40, 100]
    (folder / "overlap.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match="overlapping time points"):
        load_config(folder / "overlap.yaml")


def test_overrides_merge_into_the_svd_section(folder):
    cfg = load_config(folder / "pipeline.yaml", svd={"rank": 25})
    assert asdict(cfg.svd) == {**SVD_DEFAULTS, "rank": 25, "n_power_iter": 3}  # file's n_power_iter
    assert cfg.svd == SvdSettings(rank=25, n_power_iter=3)


def test_cluster_settings_are_limited_and_paths_relative_to_the_file(folder):
    with pytest.raises(ValueError, match="local.preload is not a documented local setting"):
        load_config(_write(folder, cluster={"type": "local", "local": {"preload": ["x.py"]}}))
    with pytest.raises(ValueError, match="did you mean 'n_workers'"):
        check_cluster_config({"type": "local", "local": {"n_worker": 2}})
    ok = load_config(_write(folder, cluster={"type": "local", "local": {"n-workers": 1}}))
    assert ok.cluster == {"type": "local", "local": {"n-workers": 1}}
    with pytest.raises(FileNotFoundError, match=r"cluster config file .*local\.yaml does not"):
        load_config(_write(folder, cluster="configs/local.yaml"))
    (folder / "configs").mkdir()
    (folder / "configs" / "local.yaml").write_text("type: local\n")
    rel = load_config(_write(folder, cluster="configs/local.yaml"))
    assert rel.cluster == str(folder / "configs" / "local.yaml")


def test_cli_prints_one_line(folder):
    path = _write(folder, k=[10])
    res = CliRunner().invoke(cli.main, ["run", str(path)])
    assert res.exit_code == 1
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ")
    assert "did you mean 'ks'" in lines[0]
    debug = CliRunner().invoke(cli.main, ["--debug", "run", str(path)])
    assert isinstance(debug.exception, ValueError)


def test_each_method_clusters_its_own_features_unless_told(folder):
    def features(**change):
        cfg = load_config(_write(folder, **change))
        return {m.name: m.features for m in cfg.methods}

    both = ["lsd", "directional", "hierarchical_lsd", "spherical_kmeans"]
    assert features(methods=both) == {
        "lsd": "u",
        "directional": "us",
        "hierarchical_lsd": "u",
        "spherical_kmeans": "us",
    }
    assert set(features(methods=both, features="us").values()) == {"us"}
    variant = {"name": "lsd_us", "method": "lsd", "features": "us"}
    assert features(methods=["lsd", variant], features=None) == {"lsd": "u", "lsd_us": "us"}


def test_every_spatial_option_of_the_estimator_is_a_pipeline_key(folder):
    """The pipeline names MeshParcellation's options without listing them: each one, at
    the top level or per variant, reaches the estimator and the report's config."""
    from lsd_dask.cluster import SPATIAL_OPTIONS, MeshParcellation

    for name, default in SPATIAL_OPTIONS.items():
        value = (not default) if isinstance(default, bool) else default + 1
        variant = {"method": "spherical_kmeans", "name": "v", name: value}
        for raw in ({name: value, "methods": ["spherical_kmeans"]}, {"methods": [variant]}):
            cfg = load_config(_write(folder, **raw))
            est = cfg.methods[0].estimator(5, 0)
            assert isinstance(est, MeshParcellation) and getattr(est, name) == value, name
            assert cfg.methods[0].needs_mesh, name  # an option away from its default
            assert cfg.to_dict()["methods"][0][name] == value, name


@pytest.mark.parametrize(
    ("svd", "final_pass"),
    [
        ({}, False),  # one read fewer by default
        ({"n_power_iter": 0}, True),  # nothing to stand in for the last read
        ({"fuse_passes": False}, True),
        ({"n_power_iter": 0, "final_pass": True}, True),
        ({"n_power_iter": 1, "final_pass": True}, True),
    ],
)
def test_the_final_pass_is_left_out_where_the_settings_allow_it(folder, svd, final_pass):
    cfg = load_config(_write(folder, svd={"rank": 40, **svd}))
    assert cfg.svd.final_pass is final_pass


@pytest.mark.parametrize(
    ("svd", "width"),
    [
        ({}, SvdSettings.sketch_width),
        ({"sketch_width": 0}, 0.0),  # every subject
        ({"sketch_width": 2.5}, 2.5),
        ({"n_power_iter": 0}, 0.0),  # no power iteration to read the rest
    ],
)
def test_the_sketch_reads_part_of_the_subjects_where_power_iterations_follow(folder, svd, width):
    cfg = load_config(_write(folder, svd={"rank": 40, **svd}))
    assert cfg.svd.sketch_width == width
    assert SvdSettings.sketch_width > 0  # the default reads part of them


def test_settings_made_in_code_that_need_the_final_pass_say_so():
    with pytest.raises(ValueError, match="svd.final_pass: false needs svd.fuse_passes: true"):
        SvdSettings(n_power_iter=0)
    with pytest.raises(ValueError, match="svd.sketch_width 8 needs svd.n_power_iter >= 1"):
        SvdSettings(n_power_iter=0, final_pass=True)
    assert SvdSettings(n_power_iter=0, final_pass=True, sketch_width=0).final_pass


@pytest.mark.parametrize("kind", ["sparse", "gaussian"])
def test_svd_test_matrix_is_the_one_the_svd_draws(kind):
    """``svd.test_matrix`` reaches the randomized SVD: the pipeline's call gives what
    ``randomized_svd`` gives with that test matrix, and not the other one's basis."""
    import numpy as np

    from lsd_dask.linalg import randomized_svd
    from lsd_dask.pipeline.stages.svd import group_svd

    rng = np.random.default_rng(0)
    X = (rng.standard_normal((80, 12)) @ rng.standard_normal((12, 60))).astype(np.float32)
    X += 0.5 * rng.standard_normal(X.shape).astype(np.float32)
    U, s = group_svd(X, SvdSettings(rank=6, n_power_iter=1, test_matrix=kind), 0)
    other = "gaussian" if kind == "sparse" else "sparse"
    runs = {
        t: randomized_svd(X, 6, n_power_iter=1, final_pass=False, random_state=0, test_matrix=t)
        for t in (kind, other)
    }
    np.testing.assert_array_equal(U, runs[kind][0])
    np.testing.assert_array_equal(s, runs[kind][1])
    assert not np.allclose(np.abs(U), np.abs(runs[other][0]), atol=1e-6)
