"""Lake layout: where things live, and names that cannot escape their folder."""

import pytest

from airflow_curation.core.layout import Lake, safe_name, sanitize_run_id


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
