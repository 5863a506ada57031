"""Lake layout: where things live, and names that cannot escape their folder."""

from datetime import datetime, timezone

import pytest

from airflow_curation.core.layout import Lake, curation_run_id, safe_name, sanitize_run_id


@pytest.mark.parametrize("bad", ["", ".", "..", "../etc", "a/b", "a b", "a\\b", "x\n", "é"])
def test_unsafe_names_are_refused(bad):
    with pytest.raises(ValueError, match="invalid dataset name"):
        Lake("/lake", bad)
    with pytest.raises(ValueError, match="invalid snapshot"):
        Lake("/lake", "web", snapshot=bad or "a/b")


@pytest.mark.parametrize("good", ["web", "web-2026", "a.b_c", "snapshot=2026-11-30", "x:y+z@1"])
def test_safe_names_pass(good):
    assert safe_name(good, "x") == good


def test_paths_local():
    lake = Lake("/lake", "web")
    assert lake.base == "/lake/web"
    assert lake.shard_uri("part-00001") == "/lake/web/shards/part-00001.parquet"
    assert lake.attrs_uri("preprocess", "part-00001") == "/lake/web/attrs/preprocess/part-00001.parquet"
    assert lake.checkpoint_dir("ingest", "abc") == "/lake/web/_checkpoints/ingest/abc"
    assert lake.manifest_uri("run1", "ingest") == "/lake/web/_manifests/run1/ingest.json"
    assert lake.quarantine_uri("ingest", "u1") == "/lake/web/_quarantine/ingest/u1.parquet"
    assert lake.jobs_dir("run1", "ingest") == "/lake/web/_jobs/run1/ingest"


def test_snapshot_partition_and_s3_root():
    lake = Lake("s3://bucket/lake", "web", snapshot="2026-11-30")
    assert lake.base == "s3://bucket/lake/web/snapshot=2026-11-30"
    assert lake.shard_uri("p") == "s3://bucket/lake/web/snapshot=2026-11-30/shards/p.parquet"
    assert Lake.from_dict(lake.to_dict()) == lake


def test_run_ids():
    rid = "manual__2026-11-30T05:00:00+00:00"
    assert sanitize_run_id(rid) == rid  # already safe: stays readable
    assert sanitize_run_id("scheduled run/1 ü") == "scheduled_run_1__"
    with pytest.raises(ValueError, match="invalid run id"):
        Lake("/lake", "web").manifest_uri("../other", "ingest")


def test_curation_run_ids_carry_the_snapshot_not_the_trigger_time():
    # A daily scheduled or backfilled date: the snapshot and the run's kind (Airflow's id has the due time).
    midnight = datetime(2026, 11, 30, tzinfo=timezone.utc)
    scheduled = curation_run_id(
        "scheduled__2026-12-01T00:00:00+00:00", "2026-11-30", run_type="scheduled", logical_date=midnight
    )
    assert scheduled == "2026-11-30__scheduled"
    backfill = curation_run_id("backfill__2026-12-01T00:00:00+00:00", "2026-11-30", logical_date="2026-11-30T00:00:00Z")
    assert backfill == "2026-11-30__backfill"  # the kind read from the id, the date from ISO text (the REST API)
    # Other runs of the snapshot: the kind and a digest of the Airflow run id, never its time.
    manual = curation_run_id("manual__2026-12-03T06:12:25.123+00:00", "2026-11-30", logical_date=midnight)
    assert manual.startswith("2026-11-30__manual-") and "06" not in manual.split("__", 1)[1]
    hourly = {
        curation_run_id(
            f"scheduled__2026-11-30T{h:02d}:00:00+00:00", "2026-11-30", logical_date=midnight.replace(hour=h)
        )
        for h in range(24)
    }
    # Unique per Airflow run (no two runs share a manifest folder) and the same on every retry or clear.
    assert len({manual, backfill, *hourly}) == 26 and scheduled in hourly
    assert curation_run_id("manual__2026-12-03T06:12:25.123+00:00", "2026-11-30") == manual
    named = curation_run_id("scheduled__2026-12-01T00:00:00+00:00", "v2", logical_date=midnight)
    assert named.startswith("v2__scheduled-")  # a snapshot that is not the logical date: a digest
    assert curation_run_id("my own id", "v2").startswith("v2__run-")  # an id Airflow did not make
    assert curation_run_id("manual__2026-12-03T06:12:25+00:00", None) == "manual__2026-12-03T06:12:25+00:00"
    for rid in (manual, backfill, named, *hourly):
        Lake("/lake", "web", "2026-11-30").manifest_uri(rid, "ingest")  # path-safe
