"""The core storage layer on a real S3 API (moto server on loopback)."""

import json
import subprocess
import sys
import threading
import time

import pyarrow.parquet as pq
import pytest
import xxhash

from airflow_curation.core import storage
from airflow_curation.core.checkpoint import CheckpointRecord, CheckpointStore
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest, ShardEntry, UnitEntry
from airflow_curation.core.schema import SHARD_SCHEMA
from airflow_curation.core.shards import ShardWriter, read_shard

pytestmark = pytest.mark.s3


def _keys(client, bucket, prefix=""):
    resp = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for o in resp.get("Contents", []))


def test_write_read_exists_size_remove(s3_bucket, s3_client):
    uri = f"s3://{s3_bucket}/a/b.json"
    assert not storage.exists(uri)
    storage.write_json(uri, {"x": 1})
    assert storage.exists(uri) and storage.read_json(uri) == {"x": 1}
    assert storage.size(uri) == len(storage.read_bytes(uri))
    assert _keys(s3_client, s3_bucket) == ["a/b.json"]  # no temporary objects left behind
    with storage.atomic_open(f"s3://{s3_bucket}/t.txt", "w") as f:
        f.write("héllo")
    assert storage.read_bytes(f"s3://{s3_bucket}/t.txt") == "héllo".encode()
    storage.remove(uri)
    storage.remove(uri)
    assert not storage.exists(uri)


def test_atomic_open_publishes_nothing_on_error(s3_bucket, s3_client):
    uri = f"s3://{s3_bucket}/out/data.bin"
    with pytest.raises(RuntimeError):
        with storage.atomic_open(uri) as f:
            f.write(b"partial " * 1000)
            raise RuntimeError("writer died")
    assert _keys(s3_client, s3_bucket) == []
    assert not storage.exists(uri)


def test_atomic_open_keeps_the_old_object_on_error(s3_bucket):
    uri = f"s3://{s3_bucket}/m.json"
    storage.write_json(uri, {"v": 1})
    with pytest.raises(ValueError):
        with storage.atomic_open(uri) as f:
            f.write(b'{"v": 2, "trunc')
            raise ValueError("boom")
    assert storage.read_json(uri) == {"v": 1}


def test_large_multipart_write_and_abort(s3_bucket, s3_client):
    """Bigger than one upload part (5 MiB): completes whole, or leaves nothing when aborted."""
    uri = f"s3://{s3_bucket}/big.bin"
    block = bytes(range(256)) * 4096  # 1 MiB
    with storage.atomic_open(uri) as f:
        for _ in range(12):
            f.write(block)
    assert storage.size(uri) == 12 * len(block)
    assert storage.read_bytes(uri) == block * 12
    bad = f"s3://{s3_bucket}/big-bad.bin"
    with pytest.raises(RuntimeError):
        with storage.atomic_open(bad) as f:
            for _ in range(12):
                f.write(block)
            raise RuntimeError("killed mid-upload")
    assert not storage.exists(bad)
    assert s3_client.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", []) == []


def test_listdir_sorted_files_only(s3_bucket):
    base = f"s3://{s3_bucket}/dir"
    for name in ("b.json", "a.json", "sub/c.json"):
        storage.write_bytes(f"{base}/{name}", b"{}")
    assert storage.listdir(base) == [f"{base}/a.json", f"{base}/b.json"]
    assert storage.listdir(f"s3://{s3_bucket}/missing") == []
    assert storage.glob(f"{base}/*.json") == [f"{base}/a.json", f"{base}/b.json"]


def test_listdir_sees_objects_written_by_another_process(s3_bucket):
    """A sensor polls the checkpoint folder while a job process writes to it: no stale listing."""
    store = CheckpointStore(f"s3://{s3_bucket}/lake/_checkpoints/ingest/fp")
    assert store.scan() == (set(), set())
    store.commit(CheckpointRecord("u0", "ingest", "fp", "c"))
    assert store.scan() == ({"u0"}, set())  # this listing is what a cache would keep
    code = (
        "from airflow_curation.core.checkpoint import CheckpointRecord, CheckpointStore;"
        f"CheckpointStore('{store.directory}').commit(CheckpointRecord('u1', 'ingest', 'fp', 'c'))"
    )
    subprocess.run([sys.executable, "-c", code], check=True)  # options come from CURATION_STORAGE_OPTIONS_S3
    assert store.scan() == ({"u0", "u1"}, set())
    assert store.is_done("u1", "c", "fp") is not None


def test_manifest_and_checkpoint_round_trip(s3_bucket):
    lake = Lake(f"s3://{s3_bucket}/lake", "web", snapshot="2026-11-30")
    muri = lake.manifest_uri("run1", "ingest")
    m = Manifest(
        dataset="web",
        stage="ingest",
        run_id="run1",
        fingerprint="f" * 16,
        lake=lake.to_dict(),
        units=[UnitEntry("u1", ["s3://in/a.jsonl"], "xxh64:1")],
        shards=[ShardEntry("part-0", lake.shard_uri("part-0"), 3, 100, "xxh64:2", "u1")],
        status="complete",
    )
    m.write(muri)
    assert muri.startswith(f"s3://{s3_bucket}/lake/web/snapshot=2026-11-30/_manifests/run1/")
    assert Manifest.read(muri) == m

    store = CheckpointStore(lake.checkpoint_dir("ingest", "f" * 16))
    store.commit(CheckpointRecord("u1", "ingest", "f" * 16, "xxh64:1", outputs=[{"shard_id": "part-0"}]))
    store.mark_failed("u2", "boom", 2)
    assert store.is_done("u1", "xxh64:1", "f" * 16).outputs == [{"shard_id": "part-0"}]
    assert store.is_done("u1", "xxh64:other", "f" * 16) is None
    assert store.scan() == ({"u1"}, {"u2"})
    store.commit(CheckpointRecord("u2", "ingest", "f" * 16, "xxh64:3"))
    assert store.scan() == ({"u1", "u2"}, set())
    assert store.failure("u2") is None


def test_shard_writer_to_s3(s3_bucket, s3_client):
    directory = f"s3://{s3_bucket}/lake/web/shards"
    w = ShardWriter(directory, lambda k: f"part-{k:05d}", SHARD_SCHEMA, target_bytes=8_000, row_group_rows=50)
    for i in range(600):
        text = " ".join(f"t{(i * 31 + j * 17) % 9973}" for j in range(30))
        w.write({"id": f"d{i:05d}", "text": text, "source": "a.jsonl", "meta": None}, nbytes=len(text))
    shards = w.close()
    assert len(shards) > 1 and sum(s.rows for s in shards) == 600
    assert _keys(s3_client, s3_bucket, "lake/web/shards/") == [f"lake/web/shards/{s.shard_id}.parquet" for s in shards]
    ids = []
    for s in shards:
        data = storage.read_bytes(s.uri)
        assert s.bytes == len(data) and s.checksum == f"xxh64:{xxhash.xxh64(data).hexdigest()}"
        t = read_shard(s.uri)
        assert t.num_rows == s.rows
        ids += t.column("id").to_pylist()
        with storage.open_read(s.uri) as f:
            assert pq.ParquetFile(f).metadata.row_group(0).column(1).compression == "ZSTD"
    assert ids == [f"d{i:05d}" for i in range(600)]


def test_shard_writer_abort_leaves_nothing_on_s3(s3_bucket, s3_client):
    w = ShardWriter(f"s3://{s3_bucket}/shards", lambda k: f"part-{k:05d}", SHARD_SCHEMA, row_group_rows=10)
    for i in range(35):
        w.write({"id": str(i), "text": "x" * 50, "source": "s", "meta": None})
    w.abort()
    assert _keys(s3_client, s3_bucket) == []


def test_missing_manifest_and_checkpoint_on_s3(s3_bucket):
    from airflow_curation.core.manifest import ManifestError

    with pytest.raises(ManifestError, match="not found"):
        Manifest.read(f"s3://{s3_bucket}/lake/_manifests/r/ingest.json")
    store = CheckpointStore(f"s3://{s3_bucket}/lake/_checkpoints/ingest/fp")
    assert store.load("u1") is None and store.failure("u1") is None
    storage.write_bytes(f"{store.directory}/u1.json", b'{"unit_id": "u1", "sta')  # torn by a foreign writer
    assert store.load("u1") is None


def test_reads_race_a_writer_and_see_whole_versions(s3_bucket):
    # A trigger polls a manifest while its stage rewrites it. An S3 PUT replaces the object whole, so a
    # read must be one GET: a file handle's HEAD-then-ranged-GET fails when the object changes between them.
    uri = f"s3://{s3_bucket}/_manifests/r1/preprocess.json"
    storage.write_json(uri, {"version": 0, "pad": "x" * 700})
    stop, rewriting = threading.Event(), threading.Event()

    def rewrite():
        version = 0
        while not stop.is_set():
            version += 1
            storage.write_json(uri, {"version": version, "pad": "x" * 700})
            rewriting.set()

    writer = threading.Thread(target=rewrite)
    writer.start()
    try:
        assert rewriting.wait(60)
        seen = [storage.read_json(uri)["version"] for _ in range(300)]
    finally:
        stop.set()
        writer.join()
    assert seen == sorted(seen) and seen[-1] > 0  # whole versions, never going back


def test_create_new_creates_once_whoever_races(s3_bucket):
    """A conditional PUT: of writers that all found no file, one creates it and the others are told."""
    from process_helpers import create_new_race

    uri = f"s3://{s3_bucket}/locks/one.json"
    won = create_new_race(uri, [f"{k}".encode() for k in range(6)])
    assert len(won) == 1 and storage.read_bytes(uri) == f"{won[0]}".encode()
    assert storage.create_new(uri, b"late") is False and storage.read_bytes(uri) == f"{won[0]}".encode()


def _refused_after_seeing(uri: str, first, looks: list) -> None:
    """A late run whose first looks at the lease saw ``looks`` (then what is there) is refused, and the lease
    stays ``first``'s."""
    from airflow_curation.core.lease import Lease, LeaseBusy

    late = Lease(uri, "dedup", ttl_s=first.ttl_s)
    seen = iter(looks)
    late._holder = lambda: next(seen, Lease._holder(late))
    with pytest.raises(LeaseBusy, match="dedup is already running"):
        late.acquire()
    assert json.loads(storage.read_bytes(uri))["token"] == first.token


def test_a_lease_is_held_by_one_run_when_two_find_it_free(s3_bucket):
    """Two runs both looked and found no lease; the second wrote after the first had read its own write back.
    Before, it wrote over the first's lease, read back its own, and both ran; now its create is refused."""
    from airflow_curation.core.lease import Lease

    uri = f"s3://{s3_bucket}/_locks/dedup.lease"
    first = Lease(uri, "dedup").acquire()
    try:
        _refused_after_seeing(uri, first, [None])  # its first look, just before the first one wrote: no lease
    finally:
        first.release()
    assert not storage.exists(uri)


def test_create_new_on_a_store_without_conditional_writes_looks_then_writes(s3_bucket, monkeypatch):
    """A store that answers the conditional PUT with 501 NotImplemented (s3fs: ENOSYS) still gets its file,
    created once: the lease and the owner file work there as they did before conditional writes."""
    import errno

    uri = f"s3://{s3_bucket}/locks/plain.json"
    fs, _ = storage.filesystem(uri)
    real = type(fs).pipe_file

    def no_conditional(self, path, value, mode="overwrite", **kwargs):
        if mode == "create":
            raise OSError(errno.ENOSYS, "NotImplemented")
        return real(self, path, value, **kwargs)

    monkeypatch.setattr(type(fs), "pipe_file", no_conditional)
    assert storage.create_new(uri, b"first") is True
    assert storage.create_new(uri, b"second") is False and storage.read_bytes(uri) == b"first"


def test_of_two_runs_that_find_a_dead_holder_one_takes_the_lease_over(s3_bucket):
    """A crashed run's lease, seen dead by two runs: the first took it over; the second, still looking at the
    dead holder's record, removed the first's new lease and created its own, and both ran. Now only the run
    that creates the claim named after the dead holder removes its lease; the other finds the new holder."""
    from airflow_curation.core.lease import Lease

    uri = f"s3://{s3_bucket}/_locks/dedup.lease"
    dead = {"token": "crashed", "host": "elsewhere", "pid": 1, "what": "dedup", "heartbeat": time.time() - 3600}
    storage.write_bytes(uri, json.dumps(dead).encode())
    first = Lease(uri, "dedup", ttl_s=60).acquire()
    try:
        assert json.loads(storage.read_bytes(uri))["token"] == first.token
        _refused_after_seeing(uri, first, [dead, dead])  # what it saw before the first run's takeover
    finally:
        first.release()
    assert storage.listdir(f"s3://{s3_bucket}/_locks") == []  # the lease and the takeover claim


def test_a_takeover_claim_of_a_run_that_crashed_after_taking_over_is_removed_by_the_next_holder(s3_bucket):
    """A run took a dead holder's lease over (its claim named after that holder) and crashed before its release:
    its claim stayed in ``_locks`` for good. The next run to hold the lease removes the claims it did not make."""
    from airflow_curation.core.lease import Lease

    uri = f"s3://{s3_bucket}/_locks/dedup.lease"
    dead = {"token": "crashed", "host": "elsewhere", "pid": 1, "what": "dedup", "heartbeat": time.time() - 3600}
    storage.write_bytes(uri, json.dumps(dead).encode())
    crashing = Lease(uri, "dedup", ttl_s=60).acquire()
    crashing._stop.set()  # it dies: no heartbeat, no release; its lease goes stale
    stale = {**json.loads(storage.read_bytes(uri)), "heartbeat": time.time() - 3600}
    storage.write_bytes(uri, json.dumps(stale).encode())
    assert any(".takeover-crashed-" in p for p in storage.listdir(f"s3://{s3_bucket}/_locks"))
    nxt = Lease(uri, "dedup", ttl_s=60).acquire()
    try:
        assert json.loads(storage.read_bytes(uri))["token"] == nxt.token
        claims = [p for p in storage.listdir(f"s3://{s3_bucket}/_locks") if ".takeover-" in p]
        assert claims == [f"{uri}.takeover-{crashing.token}-{int(stale['heartbeat'])}"] == nxt._claims  # its own
    finally:
        nxt.release()
    assert storage.listdir(f"s3://{s3_bucket}/_locks") == []
