"""Plain Parquet files on an object store (``curation pii 's3://b/docs/*.parquet' --output s3://b/out/``): a glob or
a prefix lists as ingest's inputs do (no shell expands them there), each file is known by its ETag (a HEAD,
not a download at planning), and a rerun reads footers only and skips every file."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_curation.core import storage
from airflow_curation.core.layout import Lake
from airflow_curation.stages import stage_class
from airflow_curation.stages.base import StageRunner


def test_a_glob_and_a_prefix_of_plain_files_on_s3(s3_bucket, tmp_path, monkeypatch):
    base = f"s3://{s3_bucket}/docs"
    for name in ("a", "b", "c"):
        with storage.atomic_open(f"{base}/{name}.parquet") as f:
            pq.write_table(
                pa.table({"id": [f"{name}1"], "text": [f"write to jane.{name}@acme-corp.org about the {name} notes"]}),
                f,
            )

    def run(inputs, out):
        stage = stage_class("pii")(Lake(str(tmp_path / "lake"), "ds"), {"inputs": inputs, "output_dir": out}, "r1")
        return StageRunner(stage).run()

    m = run([f"{base}/[ab].parquet", base], f"s3://{s3_bucket}/out")  # c through the prefix; a, b once
    assert [s.shard_id for s in m.shards] == ["a", "b", "c"] and {u.status for u in m.units} == {"done"}
    assert all(s.checksum.startswith("stamp:") for s in m.shards)  # ETags, not the files' content hashed
    table = pq.read_table(storage.open_read(f"s3://{s3_bucket}/out/b.parquet"))
    assert table.column("pii_email").to_pylist() == [1]

    fetched = []
    real_fetch = storage.fetch
    monkeypatch.setattr(storage, "fetch", lambda url: fetched.append(url) or real_fetch(url))
    again = run([f"{base}/*.parquet"], f"s3://{s3_bucket}/out")
    assert {u.status for u in again.units} == {"skipped"} and not fetched
