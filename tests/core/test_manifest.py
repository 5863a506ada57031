"""Manifest: round trip through storage, and clear errors for every kind of malformed document."""

import json

import pytest

from airflow_curation.core import storage
from airflow_curation.core.manifest import FORMAT_VERSION, Manifest, ManifestError, ShardEntry, UnitEntry


def _manifest() -> Manifest:
    return Manifest(
        dataset="web",
        stage="preprocess",
        run_id="r1",
        fingerprint="abcd" * 4,
        lake={"root": "/lake", "dataset": "web", "snapshot": None},
        units=[
            UnitEntry("part-00000", ["/lake/web/shards/part-00000.parquet"], "xxh64:1"),
            UnitEntry("part-00001", ["/lake/web/shards/part-00001.parquet"], "xxh64:2", status="failed", error="boom"),
        ],
        shards=[
            ShardEntry(
                "part-00000",
                "/lake/web/shards/part-00000.parquet",
                rows=10,
                bytes=1000,
                checksum="xxh64:1",
                unit_id="part-00000",
                attrs={"preprocess": "/lake/web/attrs/preprocess/part-00000.parquet"},
            )
        ],
        status="complete",
        config={"k": 1},
        accounting={"read": 10, "kept": 10},
    )


def test_round_trip(tmp_path):
    uri = str(tmp_path / "m" / "preprocess.json")
    m = _manifest()
    m.write(uri)
    back = Manifest.read(uri)
    assert back == m
    assert isinstance(back.units[0], UnitEntry) and isinstance(back.shards[0], ShardEntry)
    assert back.shards[0].attrs == {"preprocess": "/lake/web/attrs/preprocess/part-00000.parquet"}


def test_summary_carries_counts_not_shards():
    m = _manifest()
    m.shards.append(ShardEntry("part-00001", "u", rows=5, bytes=500, checksum="c"))
    s = m.summary("/lake/m.json")
    assert s == {"manifest_uri": "/lake/m.json", "shards": 2, "rows": 15, "bytes": 1500}


def test_summary_of_ten_thousand_shards_stays_small():
    m = _manifest()
    m.shards = [
        ShardEntry(f"part-{i:05d}", f"/lake/web/shards/part-{i:05d}.parquet", 1000, 10**6, "c") for i in range(10_000)
    ]
    assert len(json.dumps(m.summary("/lake/m.json"))) < 200


def _write_raw(tmp_path, d) -> str:
    uri = str(tmp_path / "bad.json")
    storage.write_json(uri, d)
    return uri


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(format_version=FORMAT_VERSION + 1), "format_version"),
        (lambda d: d.update(format="something/else"), "format is"),
        (lambda d: d.pop("dataset"), "'dataset'"),
        (lambda d: d.update(units="not a list"), "'units'"),
        (lambda d: d.update(status="running"), "status 'running'"),
        (lambda d: d["units"][0].update(status="weird"), "units[0].status"),
        (lambda d: d["units"][0].pop("input_checksum"), "units[0].input_checksum"),
        (lambda d: d["units"].append(dict(d["units"][0])), "duplicate unit id"),
        (lambda d: d["shards"][0].update(rows="10"), "shards[0].rows"),
        (lambda d: d["shards"][0].update(rows=True), "shards[0].rows"),
        (lambda d: d["shards"][0].update(bytes=-1), "negative"),
        (lambda d: d["shards"].append(dict(d["shards"][0])), "duplicate shard id"),
    ],
)
def test_invalid_manifest_is_refused_with_the_reason(tmp_path, mutate, message):
    d = {**_manifest().to_dict(), "format_version": 1}  # one document, both lists inline (format 1)
    mutate(d)
    uri = _write_raw(tmp_path, d)
    with pytest.raises(ManifestError, match="invalid manifest") as e:
        Manifest.read(uri)
    assert message in str(e.value)
    assert uri in str(e.value)


def test_write_refuses_an_invalid_manifest_and_leaves_nothing(tmp_path):
    m = _manifest()
    m.status = "bogus"
    uri = str(tmp_path / "m.json")
    with pytest.raises(ManifestError):
        m.write(uri)
    assert not storage.exists(uri)


def test_missing_and_torn_manifests(tmp_path):
    with pytest.raises(ManifestError, match="not found"):
        Manifest.read(str(tmp_path / "nope.json"))
    torn = tmp_path / "torn.json"
    torn.write_text('{"format": "airflow-curation/manifest", "form')
    with pytest.raises(ManifestError, match="not valid JSON"):
        Manifest.read(str(torn))
    arr = tmp_path / "arr.json"
    arr.write_text("[1, 2]")
    with pytest.raises(ManifestError, match="not a JSON object"):
        Manifest.read(str(arr))
