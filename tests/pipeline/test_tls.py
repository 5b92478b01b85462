"""``lsd-dask run --scheduler tls://...`` with certificate files, against a real TLS
scheduler and worker started as separate processes with the same certificates."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from lsd_dask import cli
from lsd_dask.testing.processes import ProcessCluster, temporary_tls_files

pytest.importorskip("cryptography")


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    files = temporary_tls_files(tmp_path_factory.mktemp("certs"))
    c = ProcessCluster(tmp_path_factory.mktemp("dask"), n_workers=1, tls=files)
    yield c.address, files
    c.close()


def test_run_against_a_tls_scheduler(tmp_path, write_tiny_study, tls_cluster):
    address, files = tls_cluster
    assert address.startswith("tls://")
    write_tiny_study(tmp_path, 0)
    raw = yaml.safe_load((tmp_path / "pipeline.yaml").read_text())
    raw.update(ks=[4], min_region_size=3, null_repeats=2, spins=0)
    raw["svd"]["rank"] = 20
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(raw))
    args = ["run", str(tmp_path / "pipeline.yaml"), "--out", str(tmp_path / "o")]
    args += ["--scheduler", address]
    certs = ["--tls-ca-file", files["ca"], "--tls-cert", files["cert"], "--tls-key", files["key"]]
    res = CliRunner().invoke(cli.main, args + certs, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "o" / "report.json").read_text())["scores"]

    # without the certificates: one line saying which options are needed
    res = CliRunner().invoke(cli.main, args)
    assert res.exit_code != 0
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--tls-ca-file, --tls-cert and --tls-key" in lines[0]
