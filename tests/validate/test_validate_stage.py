"""The validate stage on real Parquet files with real DuckDB and Daft: checks gate, the report shows what exists."""

from __future__ import annotations

import json
import os

import pyarrow.parquet as pq
import pytest

from airflow_curation.core import storage
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.jobs import run_spec
from airflow_curation.jobs.spec import JobSpec
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.validate import ValidateStage, ValidationFailed
from airflow_curation.stages.validate.checks import CheckSpecError

from .synth import build_run, record_checksums


def _validate(root, input_manifest, run_id="run1", **config):
    stage = ValidateStage(Lake(root, "demo"), {"input_manifest": input_manifest, **config}, run_id)
    return stage, StageRunner(stage).run()


def _report(root, run_id="run1"):
    base = os.path.join(root, "demo", "_manifests", run_id)
    with open(os.path.join(base, "report.json")) as f:
        return json.load(f), open(os.path.join(base, "report.html")).read()


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("lake"))
    return root, build_run(root)


def test_passing_run_writes_report_with_funnel_signals_and_clusters(full_run):
    root, uris = full_run
    stage, manifest = _validate(root, uris["dedup"], max_duplicate_rate=0.9, min_rows=10)
    assert manifest.status == "complete"
    # The validate manifest passes the upstream shards through, attrs included.
    assert manifest.rows == 360 and all(set(s.attrs) == {"preprocess", "dedup"} for s in manifest.shards)
    report, page = _report(root)
    assert report["status"] == "passed", report["summary"]
    funnel = report["metrics"]["funnel"]
    assert [f["label"] for f in funnel] == ["ingested", "preprocess", "dedup"]
    assert funnel[0]["rows"] == 360 and funnel[0]["rows"] > funnel[1]["rows"] > funnel[2]["rows"] > 0
    assert all(f["bytes"] > 0 for f in funnel)
    # The summary speaks in curated rows (the funnel's last step, by the stage's name), then the checks.
    assert report["summary"].startswith(f"{funnel[2]['rows']:,} curated rows of 360 ingested (after dedup); ")
    # The funnel agrees with the rows the stages themselves kept.
    pre = Manifest.read(uris["preprocess"])
    assert funnel[1]["rows"] == pre.accounting["kept"]
    assert report["metrics"]["drop_reasons"]["preprocess"] == {"too_short": pre.accounting["dropped"]["too_short"]}
    sig = report["metrics"]["signals"]
    assert set(sig) == {"word_count", "alpha_ratio"}
    assert sum(sig["word_count"]["hist"]["counts"]) == 360
    assert 0.6 <= sig["alpha_ratio"]["min"] <= sig["alpha_ratio"]["p50"] <= sig["alpha_ratio"]["max"] <= 0.95
    clusters = report["metrics"]["clusters"]
    assert sum(int(k) * v for k, v in clusters["sizes"].items()) == 360
    dup = report["metrics"]["duplicates"]
    assert dup["duplicates"] == 360 - clusters["clusters"]
    assert set(report["stages"]) == {"ingest", "preprocess", "dedup"}
    assert report["stages"]["preprocess"]["units"] == {"total": 3, "done": 3, "failed": 0}
    assert all(t["seconds"] > 0 for t in report["stages"]["ingest"]["timings"])
    # One self-contained page: inline SVG plots, nothing fetched from elsewhere.
    assert "PASSED" in page and page.count("<svg") >= 5
    assert "http://" not in page and "https://" not in page and "<script" not in page
    assert "clusters by size" in page and "word_count" in page


def test_failed_check_fails_with_readable_summary_and_report(full_run, tmp_path):
    root, uris = full_run
    with pytest.raises(ValidationFailed) as e:
        _validate(
            root,
            uris["dedup"],
            run_id="strict",
            max_duplicate_rate=0.01,
            signal_bounds={"preprocess.alpha_ratio": {"stat": "mean", "min": 0.99}},
        )
    msg = str(e.value)
    assert "[FAIL] duplicate_rate" in msg and "[FAIL] mean of preprocess.alpha_ratio" in msg
    assert "report.html" in msg
    report, page = _report(root, "strict")
    assert report["status"] == "failed" and "FAILED" in page
    assert Manifest.read(os.path.join(root, "demo", "_manifests", "strict", "validate.json")).status == "failed"
    # The verdict is checkpointed: a rerun with the same data and checks gives the same answer at once.
    with pytest.raises(ValidationFailed):
        _validate(
            root,
            uris["dedup"],
            run_id="strict2",
            max_duplicate_rate=0.01,
            signal_bounds={"preprocess.alpha_ratio": {"stat": "mean", "min": 0.99}},
        )
    assert _report(root, "strict2")[0]["status"] == "failed"


def test_checks_file_with_sql_bounds_on_curated_rows_and_warnings(full_run, tmp_path):
    root, uris = full_run
    checks = tmp_path / "checks.yaml"
    checks.write_text(
        "checks:\n"
        "  - type: sql\n    name: no short curated docs\n"
        "    query: SELECT count(*) FROM curated WHERE word_count < 8\n    max: 0\n"
        "  - type: bounds\n    column: word_count\n    stat: min\n    scope: curated\n    min: 8\n"
        "  - type: kept_fraction\n    min: 0.99\n    severity: warn\n"
        "  - type: schema\n    columns: {word_count: int, keep: bool, cluster_id: string}\n"
    )
    _, manifest = _validate(root, uris["dedup"], run_id="yaml", checks_file=str(checks))
    report, page = _report(root, "yaml")
    by_name = {c["name"]: c for c in report["checks"]}
    assert by_name["no short curated docs"]["status"] == "pass"
    assert by_name["min of word_count"]["observed"] >= 8
    assert by_name["kept_fraction"]["status"] == "warn"  # reported, not fatal
    assert by_name["schema"]["status"] == "pass"
    assert report["status"] == "passed" and "1 warned" in report["summary"]


def test_malformed_check_is_refused_before_any_work(full_run, tmp_path):
    root, uris = full_run
    with pytest.raises(CheckSpecError, match="unknown type 'median_vibes'"):  # the settings alone: at once
        ValidateStage(
            Lake(root, "demo"), {"input_manifest": uris["dedup"], "checks": [{"type": "median_vibes"}]}, "bad"
        )
    file = tmp_path / "bad-checks.yaml"
    file.write_text("- type: median_vibes\n")
    stage = ValidateStage(Lake(root, "demo"), {"input_manifest": uris["dedup"], "checks_file": str(file)}, "bad")
    with pytest.raises(CheckSpecError, match="unknown type 'median_vibes'"):  # a file's: when the job plans
        StageRunner(stage).run()


def test_ingest_only_run_reports_what_exists(tmp_path):
    root = str(tmp_path)
    uris = build_run(root, stages=())
    _validate(root, uris["ingest"])
    report, page = _report(root)
    assert [f["label"] for f in report["metrics"]["funnel"]] == ["ingested"]
    assert report["metrics"]["signals"] == {} and report["metrics"]["duplicates"] is None
    assert "No signal columns yet" in page and "No dedup attrs" in page


def test_lost_attrs_rows_and_null_text_break_the_books(tmp_path):
    root = str(tmp_path)
    uris = build_run(root, shards=2, rows=50, stages=("preprocess",), null_text_rows=3)  # 3 per shard: 6 of 100 rows
    # Lose 5 rows of one attrs file: the join leaves them without attrs, the accounting check must see it.
    attrs = Manifest.read(uris["preprocess"]).shards[1].attrs["preprocess"]
    t = pq.read_table(attrs)
    pq.write_table(t.slice(0, 45), attrs)
    record_checksums(uris)  # as if preprocess had written it so: the books, not the checksum, must catch it
    with pytest.raises(ValidationFailed) as e:
        _validate(root, uris["preprocess"])
    msg = str(e.value)
    assert "preprocess: 5 rows have no attrs" in msg
    assert "preprocess: its attrs files hold 95 rows for 100 shard rows" in msg
    assert "too many nulls in text (6.0000%)" in msg


def test_daft_engine_agrees_with_duckdb(full_run):
    root, uris = full_run
    _validate(root, uris["dedup"], run_id="duck")
    _validate(root, uris["dedup"], run_id="daft", query_engine="daft")
    duck, _ = _report(root, "duck")
    daft, _ = _report(root, "daft")
    a, b = duck["metrics"], daft["metrics"]
    assert b["query_engine"] == "daft-native"
    for key in (
        "rows",
        "text_bytes",
        "distinct_ids",
        "null_counts",
        "missing_attrs",
        "attrs_rows",
        "funnel",
        "duplicates",
        "clusters",
        "drop_reasons",
    ):
        assert a[key] == b[key], key
    for col in ("word_count", "alpha_ratio"):
        for stat in ("count", "min", "max"):
            assert a["signals"][col][stat] == pytest.approx(b["signals"][col][stat]), (col, stat)
        assert a["signals"][col]["mean"] == b["signals"][col]["mean"]  # both the exact sum over the count
        assert a["signals"][col]["hist"]["counts"] == b["signals"][col]["hist"]["counts"]
        # both exact, DuckDB's quantile_cont (Daft's approx_percentiles differed by up to 14%)
        quantiles = ("p01", "p05", "p50", "p95", "p99")
        assert [a["signals"][col][p] for p in quantiles] == [b["signals"][col][p] for p in quantiles], col


def test_runs_from_a_job_spec_like_every_backend(full_run):
    root, uris = full_run
    spec = JobSpec(
        stage="validate",
        lake={"root": root, "dataset": "demo", "snapshot": None},
        run_id="job",
        config={"input_manifest": uris["dedup"]},
    )
    result = run_spec(spec)
    assert result["rows"] == 360 and result["manifest_uri"].endswith("_manifests/job/validate.json")
    assert storage.exists(os.path.join(root, "demo", "_manifests", "job", "report.html"))


def test_missing_input_manifest_is_a_clear_error(tmp_path):
    stage = ValidateStage(Lake(str(tmp_path), "demo"), {"input_manifest": str(tmp_path / "nope.json")}, "r")
    with pytest.raises(Exception, match="manifest not found"):
        StageRunner(stage).run()


def test_daft_on_ray_in_a_job_process(full_run, tmp_path, ray_head):
    """The distributed path: a job process (as every backend runs it) with Daft's Ray runner on a local Ray,
    its own even while another cluster runs and ``RAY_ADDRESS`` names it (a plain ``ray.init()`` would join
    that cluster, then refuse ``num_cpus``)."""
    import subprocess
    import sys

    root, uris = full_run
    spec = JobSpec(
        stage="validate",
        lake={"root": root, "dataset": "demo", "snapshot": None},
        run_id="ray",
        config={
            "input_manifest": uris["dedup"],
            "query_engine": "daft",
            "daft_runner": "ray",
            # run in a child process of the job, which joins the job's local Ray
            "checks": [{"type": "sql", "name": "rows on ray", "query": "SELECT count(*) FROM docs", "min": 1}],
        },
    )
    spec_path, result_path = tmp_path / "spec.json", tmp_path / "result.json"
    spec_path.write_text(spec.to_json())
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "CURATION_RAY_NUM_CPUS": "2", "RAY_ADDRESS": ray_head.gcs}
    drivers = ray_head.drivers()
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_curation.jobs", "run", str(spec_path), "--result", str(result_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ray_head.drivers() == drivers  # it did not join the cluster
    ray_report, _ = _report(root, "ray")
    assert ray_report["metrics"]["query_engine"] == "daft-ray" and ray_report["status"] == "passed"
    (sql,) = [c for c in ray_report["checks"] if c["name"] == "rows on ray"]
    assert sql["status"] == "pass" and sql["observed"] == ray_report["metrics"]["rows"]
    _validate(root, uris["dedup"], run_id="duck-for-ray")
    duck, _ = _report(root, "duck-for-ray")
    for key in ("rows", "text_bytes", "distinct_ids", "funnel", "duplicates", "clusters", "drop_reasons"):
        assert ray_report["metrics"][key] == duck["metrics"][key], key
