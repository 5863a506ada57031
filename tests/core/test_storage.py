"""Local storage: atomic writes, listings, JSON helpers and options scoped by URL prefix."""

import json
import os

import pytest

from airflow_curation.core import storage


def test_atomic_open_leaves_no_partial_file_on_error(tmp_path):
    uri = str(tmp_path / "sub" / "out.bin")
    with pytest.raises(RuntimeError):
        with storage.atomic_open(uri) as f:
            f.write(b"half of it")
            raise RuntimeError("writer died")
    assert not os.path.exists(uri)
    assert os.listdir(tmp_path / "sub") == []  # the temporary file went too


def test_atomic_open_keeps_the_old_version_until_the_new_one_is_complete(tmp_path):
    uri = str(tmp_path / "out.json")
    storage.write_json(uri, {"v": 1})
    with pytest.raises(KeyboardInterrupt):
        with storage.atomic_open(uri) as f:
            f.write(b'{"v": 2')
            raise KeyboardInterrupt
    assert storage.read_json(uri) == {"v": 1}
    storage.write_json(uri, {"v": 2})
    assert storage.read_json(uri) == {"v": 2}
    assert os.listdir(tmp_path) == ["out.json"]


def test_atomic_open_text_mode(tmp_path):
    uri = str(tmp_path / "a.txt")
    with storage.atomic_open(uri, "w") as f:
        f.write("héllo")
    assert storage.read_bytes(uri) == "héllo".encode()


def test_listdir_files_only_sorted_full_paths(tmp_path):
    for name in ("b.json", "a.json", "c.parquet"):
        (tmp_path / name).write_text("{}")
    (tmp_path / "subdir").mkdir()
    assert storage.listdir(str(tmp_path)) == [str(tmp_path / n) for n in ("a.json", "b.json", "c.parquet")]
    assert storage.listdir(str(tmp_path / "missing")) == []


def test_exists_size_remove_glob(tmp_path):
    uri = str(tmp_path / "x.bin")
    assert not storage.exists(uri)
    storage.write_bytes(uri, b"12345")
    assert storage.exists(uri) and storage.size(uri) == 5
    assert storage.glob(str(tmp_path / "*.bin")) == [uri]
    storage.remove(uri)
    storage.remove(uri)  # removing twice is fine: reruns clean up idempotently
    assert not storage.exists(uri)


def test_write_json_is_canonical(tmp_path):
    uri = str(tmp_path / "j.json")
    storage.write_json(uri, {"b": 1, "a": [1, 2]})
    assert json.loads(storage.read_bytes(uri)) == {"a": [1, 2], "b": 1}
    assert storage.read_bytes(uri).decode().index('"a"') < storage.read_bytes(uri).decode().index('"b"')


def test_join_and_protocol():
    assert storage.join("s3://bucket/lake", "web", "shards") == "s3://bucket/lake/web/shards"
    assert storage.join("/lake", "web") == "/lake/web"
    assert storage.protocol_of("s3://b/k") == "s3" and storage.protocol_of("/x") == "file"
    assert storage.is_local("file:///x") and not storage.is_local("s3://b/k")


def test_memory_filesystem_round_trip():
    uri = "memory://curation-test/a/b.json"
    storage.write_json(uri, {"ok": True})
    assert storage.exists(uri) and storage.read_json(uri) == {"ok": True}
    storage.remove(uri)
    assert not storage.exists(uri)


def test_options_resolve_by_protocol_and_prefix_longest_wins(monkeypatch):
    monkeypatch.setenv("CURATION_STORAGE_OPTIONS_S3", json.dumps({"key": "env-key", "region": "env"}))
    smap = storage.StorageMap(
        {
            "s3://bucket/lake-a/": {"key": "a"},
            "s3://bucket/lake-a/web": {"key": "a-web"},
            "s3://bucket/lake-b": {"key": "b"},
        }
    )
    with storage.using(smap):
        assert storage.options_for("s3://bucket/lake-a/web/_manifests/r/ingest.json") == {
            "key": "a-web",
            "region": "env",
        }
        assert storage.options_for("s3://bucket/lake-a/other/x") == {"key": "a", "region": "env"}
        assert storage.options_for("s3://bucket/lake-a") == {"key": "a", "region": "env"}
        assert storage.options_for("s3://bucket/lake-b/x") == {"key": "b", "region": "env"}
        # Prefixes match whole path segments: lake-bb is not under lake-b.
        assert storage.options_for("s3://bucket/lake-bb/x") == {"key": "env-key", "region": "env"}
        assert storage.options_for("gs://bucket/lake-a/x") == {}
    # Nothing outlives the block: the environment's options only.
    assert storage.options_for("s3://bucket/lake-b/x") == {"key": "env-key", "region": "env"}


def test_a_protocol_entry_covers_every_bucket_under_a_bucket_entry():
    smap = storage.StorageMap({"s3": {"endpoint_url": "http://e", "key": "k"}, "s3://raw": {"key": "raw-k"}})
    assert sorted(smap.entries) == ["s3://", "s3://raw"]
    assert smap.resolve("s3://raw/a.jsonl") == {"endpoint_url": "http://e", "key": "raw-k"}
    assert smap.resolve("s3://lake/x") == {"endpoint_url": "http://e", "key": "k"}
    assert smap.resolve("s3://rawer/x") == {"endpoint_url": "http://e", "key": "k"}
    # What a job process gets back from its environment is the same map.
    back = storage.StorageMap.from_env(smap.to_env())
    assert back.entries == smap.entries


def test_maps_in_effect_are_per_context_not_process_wide():
    """Two triggers in one triggerer (two asyncio tasks) each see their own connection's map, also in the
    threads they start; neither leaves anything behind."""
    import asyncio

    async def gate(name: str, started: asyncio.Event, other: asyncio.Event) -> str:
        with storage.using(storage.StorageMap({"memory://lake": {"marker": name}})):
            started.set()
            await other.wait()  # the other gate has its map in effect now too
            return await asyncio.to_thread(lambda: storage.options_for("memory://lake/x")["marker"])

    async def both():
        a, b = asyncio.Event(), asyncio.Event()
        return await asyncio.gather(gate("a", a, b), gate("b", b, a))

    assert asyncio.run(both()) == ["a", "b"]
    assert "marker" not in storage.options_for("memory://lake/x")


def test_explicit_options_are_used_as_given(monkeypatch):
    monkeypatch.setenv("CURATION_STORAGE_OPTIONS_S3", json.dumps({"key": "env-key"}))
    seen = []
    monkeypatch.setattr(storage, "url_to_fs", lambda url, **kw: seen.append(kw) or (None, url))
    with storage.using(storage.StorageMap({"s3://bucket/lake": {"key": "scoped"}})):
        storage.filesystem("s3://bucket/lake/x", {"key": "explicit"})
        storage.filesystem("s3://bucket/lake/x")
    assert seen == [{"key": "explicit", "use_listings_cache": False}, {"key": "scoped", "use_listings_cache": False}]


def test_open_arrow_reads_a_local_file_natively_by_path_or_file_url(tmp_path):
    import pyarrow as pa

    p = tmp_path / "x.bin"
    p.write_bytes(b"spill bytes")
    for url in (str(p), f"file://{p}", f"local://{p}"):
        with storage.open_arrow(url) as f:
            assert isinstance(f, pa.NativeFile)  # pyarrow reads it without a Python file object between
            assert f.read() == b"spill bytes"
    with pytest.raises(FileNotFoundError):
        storage.open_arrow(str(tmp_path / "missing.bin"))


def test_a_write_the_disk_refuses_names_the_file(tmp_path):
    """A full disk's ENOSPC names no file: a dedup on a full lake ended with ``OSError: [Errno 28] No space left
    on device`` and nothing about which file, or which disk (found on a 6 MB tmpfs lake). The error now names
    the file being written; the temp file is gone. The kernel refuses the write here by a file size limit
    (EFBIG, the same path as ENOSPC), in a child process so the limit stays there."""
    import subprocess
    import sys
    import textwrap

    target = tmp_path / "big.bin"
    code = textwrap.dedent(
        f"""
        import resource, signal
        from airflow_curation.core import storage
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        try:
            with storage.atomic_open({str(target)!r}) as f:
                f.write(b"x" * 100_000)
        except OSError as e:
            print(e)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"[Errno 27] File too large: '{target}'", out
    assert list(tmp_path.iterdir()) == []


def test_create_new_creates_once_whoever_races(tmp_path):
    """Of writers that all found no file, one creates it (whole: linked from a complete temp) and the others
    are told; no temp is left."""
    from process_helpers import create_new_race

    uri = str(tmp_path / "locks" / "one.json")
    won = create_new_race(uri, [f"{k}".encode() * 1000 for k in range(8)])
    assert len(won) == 1 and storage.read_bytes(uri) == f"{won[0]}".encode() * 1000
    assert storage.create_new(uri, b"late") is False and os.listdir(tmp_path / "locks") == ["one.json"]
