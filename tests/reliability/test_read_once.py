"""A unit reads each input file once (issue 20: read bandwidth at 50 TB): the shard and attrs files whose
checksums its manifest recorded are fetched once, verified, and parsed from those bytes, not hashed in one
pass and read again by the parser. Here on a local lake (opens counted); tests/s3/test_s3_read_once.py
counts the GET requests on S3."""

from __future__ import annotations

from pathlib import Path

import pytest
from opened_files import by_unit, held_of, opens_of, record_opens
from read_once_lake import UNIT_READERS, UNIT_STAGES, checked, ingest, stages

from airflow_curation.core import storage
from airflow_curation.core.integrity import IntegrityError, read_verified
from airflow_curation.core.layout import Lake
from airflow_curation.stages.base import StageRunner


def test_each_unit_reads_each_checked_input_once_on_a_local_lake(tmp_path):
    lake = Lake(str(tmp_path / "lake"), "web")
    upstream, uri = ingest(tmp_path, lake)
    parsed: dict[str, int] = {}  # stage -> parses of held bytes
    for stage in stages(lake, uri):
        with pytest.MonkeyPatch.context() as mp:
            opened = record_opens(mp)
            units = by_unit(mp, opened, *UNIT_READERS)
            manifest = StageRunner(stage).run()
        for (cls, unit_id), (inputs, ops) in units.items():
            mine = [u for u in inputs if u in checked(upstream)]
            assert mine, (cls, unit_id, inputs)  # each of these units reads files with recorded checksums
            if cls == "DedupStage":  # its labels: phase 1's ids file, once, and neither the shard nor its attrs
                assert [opens_of(ops, uri) for uri in mine] == [0] * len(mine), (cls, unit_id, ops)
                assert [op for op in ops if op.endswith(".ids.arrow")] == [stage._sig.ids_uri(unit_id)], ops
                parsed[cls] = 1
                continue
            # one read of each file's bytes (the check's); the stage's parses read those held bytes
            assert [opens_of(ops, uri) for uri in mine] == [1] * len(mine), (cls, unit_id, ops)
            parsed[cls] = parsed.get(cls, 0) + sum(held_of(ops, uri) for uri in mine)
        upstream = manifest
    # every stage's units parsed held bytes (dedup's labels read phase 1's ids file instead)
    assert set(parsed) == UNIT_STAGES and all(parsed.values()), parsed


def test_a_verified_read_of_a_flipped_byte_fails_with_the_integrity_message(tmp_path, flip_byte):
    lake = Lake(str(tmp_path / "lake"), "web")
    shard = ingest(tmp_path, lake)[0].shards[0]
    assert read_verified(shard.uri, shard.checksum, "shard s").to_pybytes() == Path(shard.uri).read_bytes()
    flip_byte(shard.uri)
    with pytest.raises(IntegrityError, match=r"shard s .* has checksum xxh64:\w+ but its manifest recorded"):
        read_verified(shard.uri, shard.checksum, "shard s")
    storage.remove(shard.uri)
    with pytest.raises(IntegrityError, match="is missing; its manifest lists it with checksum"):
        read_verified(shard.uri, shard.checksum, "shard s")
