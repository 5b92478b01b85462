"""The pipeline file's reference is generated from the configuration's definitions: every
key has a note, its printed default is the one a file without it gets, and the docs page
is the generated one."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import yaml
from click.testing import CliRunner

from lsd_dask import cli
from lsd_dask.cluster import SPATIAL_OPTIONS
from lsd_dask.pipeline import load_config, write_study
from lsd_dask.pipeline.settings.bids import BidsSettings
from lsd_dask.pipeline.settings.config import PipelineConfig
from lsd_dask.pipeline.settings.load import PIPELINE_KEYS
from lsd_dask.pipeline.settings.preprocess import PreprocessSettings
from lsd_dask.pipeline.settings.reference import (
    NOTES,
    commented_defaults,
    defaults,
    markdown_reference,
    note,
)
from lsd_dask.pipeline.settings.svd import SvdSettings

DOC = Path(__file__).resolve().parents[3] / "docs" / "pipeline_file.md"


def test_every_key_and_no_other_has_a_note():
    sections = {"svd": SvdSettings, "preprocess": PreprocessSettings, "bids": BidsSettings}
    keys = set(PIPELINE_KEYS) | {
        f"{name}.{f.name}" for name, cls in sections.items() for f in fields(cls)
    }
    # a note on every key, from its field (or the estimator's docstring); NOTES holds only
    # the keys that are no field of a settings class
    assert all(note(key) for key in keys)
    owners = [("", PipelineConfig), *sections.items()]
    named = {f"{s}.{f.name}" if s else f.name for s, cls in owners
             for f in fields(cls) if "note" in f.metadata}  # fmt: skip
    assert set(NOTES) == keys - named - set(SPATIAL_OPTIONS) == {"globs"}
    assert set(defaults()) == set(PIPELINE_KEYS)


def test_a_spatial_options_note_is_its_estimator_parameters_description():
    """A spatial option needs no note of its own: the reference reads its description from
    ``MeshParcellation``'s numpydoc Parameters section."""
    import inspect

    from lsd_dask.cluster import MeshParcellation

    doc = " ".join(inspect.getdoc(MeshParcellation).split())
    for key in SPATIAL_OPTIONS:
        assert note(key).split("; auto")[0] in doc, key


def test_the_printed_defaults_are_what_a_file_without_them_gets(tmp_path, study):
    """The commented file, given subjects and a mesh, loads to the same settings as a
    file that gives only those."""
    minimal = yaml.safe_load(write_study(study, tmp_path, fmt="gifti").read_text())
    inputs = {k: minimal[k] for k in ("subjects", "mesh")}
    printed = yaml.safe_load(commented_defaults())
    assert printed == {
        k: v for k, v in defaults().items() if k not in ("subjects", "globs", "bids", "individual")
    }
    full = tmp_path / "full.yaml"
    full.write_text(yaml.safe_dump({**printed, **inputs}))
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump(inputs))
    a, b = load_config(full).to_dict(), load_config(bare).to_dict()
    a.pop("output"), b.pop("output")
    assert a == b
    assert {k: a[k] for k in SPATIAL_OPTIONS} == SPATIAL_OPTIONS


def test_the_docs_page_is_the_generated_one():
    assert DOC.read_text() == markdown_reference(), (
        "docs/pipeline_file.md differs from the code: "
        "python -m lsd_dask.pipeline.settings.reference > docs/pipeline_file.md"
    )


def test_config_and_validate_commands(tmp_path, study):
    runner = CliRunner()
    res = runner.invoke(cli.main, ["config"])
    assert res.exit_code == 0 and res.output == commented_defaults()
    path = write_study(study, tmp_path, fmt="gifti")
    res = runner.invoke(cli.main, ["validate", str(path)])
    assert res.exit_code == 0, res.output
    assert "valid. 4 subjects (split1: 2, split2: 2)" in res.output
    # nothing computed or written (the output folder is made, to check it is writable)
    assert not [p for p in (tmp_path / "results").rglob("*") if p.is_file()]
    bad = tmp_path / "bad.yaml"
    bad.write_text(path.read_text().replace("ks:", "kz:"))
    res = runner.invoke(cli.main, ["validate", str(bad)])
    assert res.exit_code == 1 and "did you mean 'ks'" in res.output
    assert len(res.output.strip().splitlines()) == 1
