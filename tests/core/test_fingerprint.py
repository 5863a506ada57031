"""Fingerprints name a configuration: stable across runs and processes, sensitive to every setting."""

import subprocess
import sys

import pytest
import xxhash

from airflow_curation.core.fingerprint import StreamChecksum, canonical_json, checksum_url, config_fingerprint


def test_key_order_does_not_matter():
    a = config_fingerprint("dedup", {"bands": 20, "rows": 5, "nested": {"x": 1, "y": 2}})
    b = config_fingerprint("dedup", {"nested": {"y": 2, "x": 1}, "rows": 5, "bands": 20})
    assert a == b and len(a) == 16


def test_every_input_changes_it():
    base = config_fingerprint("dedup", {"bands": 20})
    assert config_fingerprint("dedup", {"bands": 21}) != base
    assert config_fingerprint("dedup", {"bands": 20, "extra": None}) != base
    assert config_fingerprint("preprocess", {"bands": 20}) != base
    assert config_fingerprint("dedup", {"bands": 20}, version="2") != base
    assert config_fingerprint("dedup", {"bands": "20"}) != base


def test_stable_across_processes_and_releases():
    # A changed value here would silently invalidate every checkpoint in every lake: keep it fixed.
    expected = config_fingerprint("ingest", {"target_shard_bytes": 1024, "text_field": "text"})
    code = (
        "from airflow_curation.core.fingerprint import config_fingerprint as f;"
        "print(f('ingest', {'text_field': 'text', 'target_shard_bytes': 1024}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": "12345"}
    ).stdout.strip()
    assert out == expected
    assert canonical_json({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'
    assert expected == "5cbf7b23427a45b6"


def test_stream_checksum_matches_a_file_checksum(tmp_path):
    data = bytes(range(256)) * 5000
    p = tmp_path / "f.bin"
    p.write_bytes(data)
    c = StreamChecksum()
    for i in range(0, len(data), 7777):
        c.update(memoryview(data)[i : i + 7777])
    assert c.nbytes == len(data)
    assert c.hexdigest() == checksum_url(str(p)) == f"xxh64:{xxhash.xxh64(data).hexdigest()}"


def test_checksum_folder_names_a_model_folder_by_its_content(tmp_path):
    from airflow_curation.core.fingerprint import checksum_folder

    a = tmp_path / "a"
    (a / "1_Pooling").mkdir(parents=True)
    (a / "config.json").write_text("{}")
    (a / "1_Pooling" / "config.json").write_text('{"mean": true}')
    (a / ".gitattributes").write_text("x")
    b = tmp_path / "b"
    (b / "1_Pooling").mkdir(parents=True)
    (b / "config.json").write_text("{}")
    (b / "1_Pooling" / "config.json").write_text('{"mean": true}')
    assert checksum_folder(str(a)) == checksum_folder(str(b))  # a copy elsewhere; dot-files left out
    (b / "1_Pooling" / "config.json").write_text('{"cls": true}')  # a nested file changed
    assert checksum_folder(str(a)) != checksum_folder(str(b))
    (b / "1_Pooling" / "config.json").write_text('{"mean": true}')
    (b / "config.json").rename(b / "other.json")  # same bytes, another name
    assert checksum_folder(str(a)) != checksum_folder(str(b))
    with pytest.raises(FileNotFoundError):
        checksum_folder(str(tmp_path / "nowhere"))
