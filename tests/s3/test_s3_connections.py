"""Two lakes on two S3 servers (two moto servers on loopback) with different credentials, used in one
process at once, as the triggerer does: each must read its own lake with its own connection's options.

With storage options kept per protocol (``s3``), the second connection overwrote the first, and the
first lake was then read from the second server (its bucket is not there: the gate never opened)."""

from __future__ import annotations

import asyncio
import json
import uuid

import boto3
import pytest

from airflow_curation.core import storage
from airflow_curation.core.checkpoint import CheckpointRecord, CheckpointStore
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest, UnitEntry

from .conftest import REGION

pytestmark = pytest.mark.s3
FP = "fp0123456789abcd"


@pytest.fixture
def two_lakes(s3_endpoint, second_s3_endpoint, monkeypatch):
    """``{name: (lake root, fsspec options)}`` for lakes a and b, each bucket on its own server only."""
    for var in ("CURATION_STORAGE_OPTIONS_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var, raising=False)  # only the connections' options may be used
    lakes = {}
    for name, url in (("a", s3_endpoint["endpoint_url"]), ("b", second_s3_endpoint)):
        bucket = f"lake-{name}-{uuid.uuid4().hex[:8]}"
        key, secret = f"key-{name}", f"secret-{name}"
        boto3.client(
            "s3", endpoint_url=url, aws_access_key_id=key, aws_secret_access_key=secret, region_name=REGION
        ).create_bucket(Bucket=bucket)
        lakes[name] = (
            f"s3://{bucket}/lake",
            {"key": key, "secret": secret, "endpoint_url": url, "client_kwargs": {"region_name": REGION}},
        )
    return lakes


def test_two_lakes_interleaved_in_one_process(two_lakes):
    (root_a, opts_a), (root_b, opts_b) = two_lakes["a"], two_lakes["b"]
    smap = storage.StorageMap({root_a: opts_a, root_b: opts_b})
    with storage.using(smap):
        _interleave(root_a, root_b)


def _interleave(root_a: str, root_b: str) -> None:
    for i in range(3):  # interleaved: a, b, a, b...
        storage.write_json(f"{root_a}/x/{i}.json", {"lake": "a", "i": i})
        storage.write_json(f"{root_b}/x/{i}.json", {"lake": "b", "i": i})
        assert storage.read_json(f"{root_a}/x/{i}.json") == {"lake": "a", "i": i}
        assert storage.read_json(f"{root_b}/x/{i}.json") == {"lake": "b", "i": i}
    assert storage.listdir(f"{root_a}/x") == [f"{root_a}/x/{i}.json" for i in range(3)]
    assert storage.listdir(f"{root_b}/x") == [f"{root_b}/x/{i}.json" for i in range(3)]
    assert storage.options_for(f"{root_a}/x/0.json")["key"] == "key-a"
    assert storage.options_for(f"{root_b}/x/0.json")["key"] == "key-b"


def _plan(root: str, opts: dict, rows: int) -> tuple[str, CheckpointStore, list[UnitEntry]]:
    """A planned two-unit run in the lake at ``root``, one unit checkpointed (written with ``opts``)."""
    lake = Lake(root, "web", "2026-11-30")
    units = [UnitEntry(unit_id=f"part-{i:05d}", inputs=[f"in-{i}"], input_checksum=f"c{i}") for i in range(2)]
    manifest = Manifest(
        dataset="web",
        stage="preprocess",
        run_id="r1",
        fingerprint=FP,
        lake=lake.to_dict(),
        units=units,
        config={"max_failed_fraction": 0.0},
    )
    with storage.using(storage.StorageMap({root: opts})):
        uri = manifest.write(lake.manifest_uri("r1", "preprocess"))
        store = CheckpointStore(lake.checkpoint_dir("preprocess", FP))
        _commit(store, units[0], rows)
    return uri, store, units


def _commit(store: CheckpointStore, unit: UnitEntry, rows: int) -> None:
    out = {
        "shard_id": unit.unit_id,
        "uri": f"/x/{unit.unit_id}.parquet",
        "rows": rows,
        "bytes": rows * 100,
        "checksum": "s",
        "unit_id": unit.unit_id,
    }
    store.commit(
        CheckpointRecord(
            unit_id=unit.unit_id, stage="preprocess", fingerprint=FP, input_checksum=unit.input_checksum, outputs=[out]
        )
    )


def _finish(uri: str, store: CheckpointStore, unit: UnitEntry, root: str, opts: dict, rows: int) -> None:
    """What the job does last: its second checkpoint, then the complete manifest."""
    with storage.using(storage.StorageMap({root: opts})):
        _commit(store, unit, rows)
        manifest = Manifest.read(uri)
        manifest.status = "complete"
        manifest.write(uri)


@pytest.mark.airflow
def test_two_curation_connections_gate_their_own_lakes_in_one_triggerer(two_lakes, monkeypatch):
    from airflow_curation.triggers.shard_checkpoint import ShardCheckpointTrigger

    rows = {"a": 10, "b": 7}
    plans = {}
    for name, (root, opts) in two_lakes.items():
        # The connection: lake, key/secret in the encrypted fields, the endpoint in the extra.
        monkeypatch.setenv(
            f"AIRFLOW_CONN_CURATION_{name.upper()}",
            json.dumps(
                {
                    "conn_type": "curation",
                    "host": root,
                    "login": opts["key"],
                    "password": opts["secret"],
                    "extra": {
                        "storage_options": {
                            "s3": {"endpoint_url": opts["endpoint_url"], "client_kwargs": opts["client_kwargs"]}
                        }
                    },
                }
            ),
        )
        plans[name] = _plan(root, opts, rows[name])
    assert "key" not in storage.options_for(two_lakes["a"][0])  # nothing in effect here: the triggers must resolve

    triggers = {}
    for name, (uri, _, _) in plans.items():
        kwargs = ShardCheckpointTrigger(
            manifest_uri=uri, curation_conn_id=f"curation_{name}", poll_interval=0.05
        ).serialize()[1]
        assert "secret" not in json.dumps(kwargs)  # only the connection id travels
        triggers[name] = ShardCheckpointTrigger(**kwargs)

    async def first_event(trigger):
        async for event in trigger.run():
            return event.payload

    async def scenario():
        tasks = {name: asyncio.create_task(first_event(t)) for name, t in triggers.items()}
        await asyncio.sleep(0.5)  # both triggers resolved their connections and looked a few times
        assert not any(t.done() for t in tasks.values())
        for name in ("b", "a"):
            uri, store, units = plans[name]
            root, opts = two_lakes[name]
            await asyncio.to_thread(_finish, uri, store, units[1], root, opts, rows[name])
        done, _ = await asyncio.wait(tasks.values(), timeout=30)
        assert len(done) == 2, "a gate did not open: its lake was read with the other connection's options"
        return {name: t.result() for name, t in tasks.items()}

    events = asyncio.run(scenario())
    for name, event in events.items():
        assert event["status"] == "done", event
        assert event["summary"]["manifest_uri"] == plans[name][0]
        assert event["summary"]["rows"] == 2 * rows[name]
    # Each gate's options were its own and did not outlive it (a long-lived triggerer keeps nothing).
    assert storage.options_for(plans["a"][0]) == {} and storage.options_for(plans["b"][0]) == {}
