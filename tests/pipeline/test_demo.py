"""``run_demo`` (the README's main job), called directly on a small study and real workers."""

from __future__ import annotations

from lsd_dask.pipeline import run_demo


def test_run_demo_recovers_the_planted_parcels_and_resumes(tmp_path, scheduler_address):
    kw = dict(
        frequency=6,
        n_parcels=8,
        n_timepoints=60,
        ks=(4, 8),
        methods=("directional", "spherical_kmeans"),
        rank=30,
        cluster=scheduler_address,
    )
    logs: list[str] = []
    report = run_demo(tmp_path / "demo", log=logs.append, **kw)
    assert (tmp_path / "demo" / "input" / "pipeline.yaml").exists()
    assert (tmp_path / "demo" / "results" / "report.json").exists()
    rows = {(r["method"], r["k"]): r for r in report["scores"]}
    assert set(rows) == {(m, k) for m in kw["methods"] for k in kw["ks"]}
    for method in kw["methods"]:
        r = rows[(method, 8)]  # the planted K reproduces far above its null
        assert r["dice"] > r["null_dice_mean"] + 3 * r["null_dice_sd"]
        assert r["nmi"] > r["null_nmi_mean"]
    assert any(line.startswith("  directional") for line in logs)  # the summary table

    # a second call reuses the written study and every finished stage
    study = tmp_path / "demo" / "input" / "sub-001.L.func.gii"
    before = study.stat().st_mtime_ns
    logs.clear()
    again = run_demo(tmp_path / "demo", log=logs.append, **kw)
    assert study.stat().st_mtime_ns == before
    assert any("[svd] split1 done earlier, skipped" in line for line in logs)
    assert [r["dice"] for r in again["scores"]] == [r["dice"] for r in report["scores"]]
