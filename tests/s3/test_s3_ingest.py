"""Ingest with inputs and lake on S3 (moto server on loopback), run the way every backend runs it:
``python -m airflow_curation.jobs run SPEC.json`` in a subprocess that gets its S3 options from the
``CURATION_STORAGE_OPTIONS_S3`` environment variable (no secret in the job spec)."""

import gzip
import json
import subprocess
import sys

import pyarrow as pa
import pytest

from airflow_curation.core import storage
from airflow_curation.core.checkpoint import CheckpointStore
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.core.quarantine import read_quarantine
from airflow_curation.core.shards import read_shard
from airflow_curation.jobs.spec import JobSpec
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.ingest.stage import IngestStage

pytestmark = pytest.mark.s3


def _upload_inputs(bucket: str) -> tuple[str, list[str]]:
    base = f"s3://{bucket}/raw"
    texts = [f"document {i}: " + "the quick brown fox jumps over the lazy dog " * (i % 7 + 1) for i in range(120)]
    a = "".join(json.dumps({"text": t, "url": f"https://e.x/{i}"}) + "\n" for i, t in enumerate(texts[:70]))
    a += "{not json\n"  # line 71: quarantined, counted
    storage.write_bytes(f"{base}/a.jsonl", a.encode())
    b = "".join(json.dumps({"text": t}) + "\n" for t in texts[70:])
    storage.write_bytes(f"{base}/sub/b.jsonl.gz", gzip.compress(b.encode(), mtime=0))
    return base, texts


def _run_job(tmp_path, spec: JobSpec) -> dict:
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(spec.to_json())
    assert "secret" not in spec.to_json()  # credentials travel in the environment only
    result = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_curation.jobs", "run", str(spec_path), "--result", str(result)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(result.read_text())


def test_ingest_s3_to_s3_lake_then_rerun_skips(s3_bucket, tmp_path):
    inputs, texts = _upload_inputs(s3_bucket)
    lake = Lake(f"s3://{s3_bucket}/lake", "web", snapshot="2026-11-30")
    config = {"inputs": [inputs], "target_shard_bytes": 2_000, "row_group_rows": 16}
    result = _run_job(tmp_path, JobSpec(stage="ingest", lake=lake.to_dict(), run_id="run1", config=config))
    assert result["status"] == "succeeded"
    assert result["manifest_uri"] == lake.manifest_uri("run1", "ingest")
    assert result["rows"] == 120

    m = Manifest.read(result["manifest_uri"])
    assert m.status == "complete" and m.rows == 120 and len(m.shards) > 1
    assert m.accounting == {"read": 121, "kept": 120, "dropped": {}, "quarantined": {"invalid_json": 1}}
    got = []
    for s in m.shards:
        assert s.uri.startswith(lake.base + "/shards/")
        assert storage.size(s.uri) == s.bytes
        t = read_shard(s.uri)
        assert t.num_rows == s.rows
        got += t.column("text").to_pylist()
    assert sorted(got) == sorted(texts)  # every document arrived once, nothing invented

    q = pa.concat_tables(read_quarantine(u) for u in storage.listdir(lake.path("_quarantine", "ingest")))
    assert q.column("reason").to_pylist() == ["invalid_json"]
    assert q.column("source").to_pylist()[0].endswith("a.jsonl") and q.column("location")[0].as_py() == "line 71"

    stage = IngestStage(lake, config, "run2")
    done, failed = CheckpointStore(lake.checkpoint_dir("ingest", stage.fingerprint)).scan()
    assert done == {u.unit_id for u in m.units} and not failed

    # Rerun here (options registered for the bucket): same inputs, same config: nothing is redone.
    again = StageRunner(stage).run()
    assert {u.status for u in again.units} == {"skipped"}
    assert again.rows == 120 and [s.checksum for s in again.shards] == [s.checksum for s in m.shards]


def test_local_inputs_into_s3_lake_with_the_cli(s3_bucket, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_text("".join(json.dumps({"text": f"local doc {i} " * 10}) + "\n" for i in range(30)))
    (src / "notes.txt").write_text("a plain text document that is long enough to keep")
    lake_root = f"s3://{s3_bucket}/lake"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from airflow_curation.cli import main; sys.exit(main())",
            "ingest",
            str(src),
            "--lake",
            lake_root,
            "--dataset",
            "local",
            "--run-id",
            "cli1",
            "--target-shard-size",
            "4KB",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout[proc.stdout.index("{") :])
    assert summary["rows"] == 31
    m = Manifest.read(Lake(lake_root, "local").manifest_uri("cli1", "ingest"))
    assert m.rows == 31 and all(storage.exists(s.uri) for s in m.shards)


class _Spy:
    """A filesystem that records which method each call made on which path (then does it)."""

    def __init__(self, fs, calls: list[tuple[str, str]]) -> None:
        self._fs, self._calls = fs, calls

    def __getattr__(self, name):
        real = getattr(self._fs, name)
        if not callable(real):
            return real

        def call(*args, **kwargs):
            paths = args[0] if args and isinstance(args[0], list) else args[:1]
            self._calls.extend((name, str(p)) for p in paths)
            return real(*args, **kwargs)

        return call


def test_a_later_task_of_an_s3_array_lists_no_input_and_reads_only_its_block(s3_bucket, monkeypatch):
    """Issue 20, "a task reads only its slice": a task of an ingest array other than the first to plan makes no
    listing request under the inputs, and stats and opens the files of its own block only."""
    base = f"s3://{s3_bucket}/raw"
    for f in range(9):
        storage.write_bytes(f"{base}/{f // 3}/{f:02d}.jsonl", (json.dumps({"text": f"document {f}"}) + "\n").encode())
    lake = Lake(f"s3://{s3_bucket}/lake", "web")
    config = {"inputs": [base], "unit_bytes": 1, "min_units": 3}
    StageRunner(IngestStage(lake, config, "r1")).run(shard_group=(0, 3))  # the first task: it lists
    calls: list[tuple[str, str]] = []
    real = storage.filesystem
    monkeypatch.setattr(
        storage, "filesystem", lambda url, options=None: (lambda fs, p: (_Spy(fs, calls), p))(*real(url, options))
    )
    StageRunner(IngestStage(lake, config, "r1")).run(shard_group=(2, 3))
    raw = [(name, path) for name, path in calls if "/raw" in path]
    assert {name for name, _ in raw} - {"size", "info", "open"} == set(), raw  # no find, glob, ls, isdir
    mine = {f"{s3_bucket}/raw/2/{f:02d}.jsonl" for f in (6, 7, 8)}
    assert {p.removeprefix("s3://") for _, p in raw} == mine, raw


def test_local_and_s3_inputs_of_one_name_keep_their_own_ids(s3_bucket, tmp_path):
    """Inputs with no common root (a local file and an object of one name) took their file name alone as
    their source, and so one id prefix; the whole URL is their source now."""
    local = tmp_path / "x.jsonl"
    local.write_text(json.dumps({"text": "the local copy of the notes, with words"}) + "\n")
    remote = f"s3://{s3_bucket}/raw/x.jsonl"
    storage.write_bytes(remote, (json.dumps({"text": "the bucket's copy of the notes, other words"}) + "\n").encode())
    lake = Lake(str(tmp_path / "lake"), "mixed")
    m = StageRunner(IngestStage(lake, {"inputs": [str(local), remote]}, "r1")).run()
    rows = [r for s in m.shards for r in read_shard(s.uri).select(["id", "source"]).to_pylist()]
    assert sorted(r["source"] for r in rows) == sorted([str(local), remote])
    assert len({r["id"] for r in rows}) == 2
