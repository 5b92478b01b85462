"""A work folder on object storage: a real S3-compatible server (moto's, as its own process
on 127.0.0.1) and real workers, against the same run with a local work folder."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from lsd_dask import cli

s3fs = pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

BUCKET = "lsd-test"


@contextmanager
def _moto_server() -> Iterator[tuple[subprocess.Popen, dict]]:
    """``moto_server`` on a free loopback port with the test bucket, and the fsspec
    options that reach it; the server never outlives the block."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("moto_server did not start")
                time.sleep(0.2)
        options = {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {
                "endpoint_url": f"http://127.0.0.1:{port}",
                "region_name": "us-east-1",
            },
        }
        import boto3

        request = boto3.client(
            "s3",
            endpoint_url=options["client_kwargs"]["endpoint_url"],
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        request.create_bucket(Bucket=BUCKET)
        yield proc, options
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def s3_options():
    """A moto server for the module: the fsspec options that reach it."""
    with _moto_server() as (_, options):
        yield options


def _run(folder, out, scheduler, *extra):
    res = CliRunner().invoke(
        cli.main,
        ["run", str(folder / "pipeline.yaml"), "--out", str(out), "--scheduler", scheduler, *extra],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    return json.loads((out / "report.json").read_text()), res.output


def test_s3_work_folder_gives_the_local_labels(
    tmp_path, write_tiny_study, s3_options, scheduler_address
):
    write_tiny_study(tmp_path, 3)
    raw = yaml.safe_load((tmp_path / "pipeline.yaml").read_text())
    raw.update(ks=[3, 6], methods=["directional", "spherical_kmeans"], min_region_size=3)
    raw.update(null_repeats=2, spins=0, storage_options=s3_options)
    raw["svd"]["rank"] = 20
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(raw))
    url = f"s3://{BUCKET}/run/work"

    local, _ = _run(tmp_path, tmp_path / "local", scheduler_address)
    remote, _ = _run(tmp_path, tmp_path / "remote", scheduler_address, "--work", url)
    assert remote["work"] == url and not (tmp_path / "remote" / "work").exists()
    fs = s3fs.S3FileSystem(**s3_options)
    assert fs.exists(f"{url}/split1.zarr/zarr.json") and fs.exists(f"{url}/stamps/mask.json")
    assert not fs.exists(f"{url}/lock.json")  # the run's lease, given back
    for split in ("split1", "split2"):
        for method in ("directional", "spherical_kmeans"):
            for k in (3, 6):
                name = f"labels/{split}_{method}_K{k}.npy"
                here = np.load(tmp_path / "local" / "work" / name)
                with fs.open(f"{url}/{name}", "rb") as f:
                    there = np.load(f)
                np.testing.assert_array_equal(here, there)
    assert remote["scores"] == local["scores"]
    # the credentials are not written to the report
    assert "secret" in json.dumps(remote["config"]) and "testing" not in json.dumps(remote)

    # a second run resumes from the stamps on S3
    again, log = _run(tmp_path, tmp_path / "remote", scheduler_address, "--work", url)
    assert "[svd] split1 done earlier, skipped" in log
    assert again["scores"] == remote["scores"]


def test_an_unreachable_bucket_fails_before_any_work(tmp_path, write_tiny_study, s3_options):
    write_tiny_study(tmp_path, 3)
    raw = yaml.safe_load((tmp_path / "pipeline.yaml").read_text())
    raw.update(storage_options=s3_options, work="s3://no-such-bucket/run")
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(raw))
    t0 = time.perf_counter()
    res = CliRunner().invoke(cli.main, ["run", str(tmp_path / "pipeline.yaml")])
    assert res.exit_code != 0
    assert "work folder s3://no-such-bucket/run is not writable" in res.output
    assert time.perf_counter() - t0 < 60


def test_a_work_folder_on_object_storage_is_leased_to_one_run(s3_options):
    """The lease object names its holder; a second run fails naming it; the lease is gone
    after release; a lease not renewed for LEASE_S seconds is a dead run's, taken over."""
    import json as _json
    import os

    from lsd_dask.io.lock import LEASE_S, FolderBusyError, WorkLock
    from lsd_dask.io.storage import Folder

    url = f"s3://{BUCKET}/leased/work"
    folder = Folder(url, s3_options)
    fs = s3fs.S3FileSystem(**s3_options)
    with WorkLock(folder, command="lsd-dask run a.yaml"):
        assert fs.exists(f"{url}/lock.json")
        with pytest.raises(FolderBusyError, match=rf"pid {os.getpid()} .*lsd-dask run a\.yaml"):
            WorkLock(Folder(url, s3_options)).acquire()
    assert not fs.exists(f"{url}/lock.json")
    stale = {"id": "gone", "pid": 1, "host": "elsewhere", "renewed": time.time() - LEASE_S - 1}
    fs.pipe(f"{url}/lock.json", _json.dumps(stale).encode())
    with WorkLock(folder) as lock:
        assert _json.loads(fs.cat(f"{url}/lock.json"))["id"] == lock.owner["id"]


def test_the_lease_heartbeat_outlives_a_lost_endpoint(monkeypatch):
    """The S3 server killed while a lease is held: each renewal fails (botocore's and
    aiohttp's connection errors, not OSError), and the heartbeat goes on without a
    traceback; giving the lease back then raises nothing either."""
    import threading

    from lsd_dask.io import lock as lock_module
    from lsd_dask.io.storage import Folder

    monkeypatch.setattr(lock_module, "LEASE_S", 0.4)  # a renewal every 0.1 s
    died = []
    monkeypatch.setattr(threading, "excepthook", died.append)
    with _moto_server() as (server, options):
        options = {**options, "config_kwargs": {"retries": {"max_attempts": 1},
                                                "connect_timeout": 1}}  # fmt: skip
        lease = lock_module.WorkLock(Folder(f"s3://{BUCKET}/lost-lease/work", options))
        lease.acquire()
        failed = []
        renew = lease._write_lease

        def counted() -> None:
            try:
                renew()
            except Exception as err:
                failed.append(err)
                raise

        lease._write_lease = counted  # the real renewal, its failures counted
        server.kill()
        server.wait(timeout=30)
        deadline = time.monotonic() + 60
        while len(failed) < 3:
            assert time.monotonic() < deadline, f"renewals stopped after {failed}: {died}"
            time.sleep(0.05)
        assert not isinstance(failed[0], OSError)  # what the heartbeat once let through
        assert lease._beat is not None and lease._beat.is_alive()
        lease.release()
    assert died == [] and not lease.held


def test_a_lost_object_store_ends_the_run_in_one_line(tmp_path, write_tiny_study):
    """The S3 server killed once the SVD starts: the run ends with one line saying the
    object store could not be reached, no traceback, well within a minute."""
    write_tiny_study(tmp_path, 3)
    with _moto_server() as (server, options):
        raw = yaml.safe_load((tmp_path / "pipeline.yaml").read_text())
        raw.update(storage_options=options, work=f"s3://{BUCKET}/lost/work", ks=[3])
        raw["svd"]["rank"] = 20
        (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(raw))
        log = tmp_path / "run.log"
        with open(log, "w") as f:
            run = subprocess.Popen(
                [sys.executable, "-m", "lsd_dask.cli", "run", str(tmp_path / "pipeline.yaml"),
                 "--out", str(tmp_path / "out"), "--cluster", str(_local_config(tmp_path))],
                stdout=f, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + 120
        while "[svd]" not in log.read_text() and run.poll() is None:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        server.kill()
        t0 = time.monotonic()
        rc = run.wait(timeout=120)
    text = log.read_text()
    assert rc != 0, text
    errors = [line for line in text.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "the object store could not be reached" in errors[0], text
    assert "Traceback" not in text, text
    assert time.monotonic() - t0 < 60


def _local_config(tmp_path):
    """A LocalCluster of two worker processes on loopback, without a dashboard."""
    path = tmp_path / "local.yaml"
    local = {"n_workers": 2, "threads_per_worker": 1, "processes": True, "host": "127.0.0.1",
             "dashboard_address": ":0"}  # fmt: skip
    path.write_text(yaml.safe_dump({"type": "local", "local": local}))
    return path
