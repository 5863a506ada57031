"""A unit GETs each input object once on S3 (issue 20: GET bytes per row at 50 TB): the shard and attrs
objects whose checksums its manifest recorded are fetched whole in one GET, verified, and parsed from those
bytes (before: a streaming hash of the object, then the parser's footer and column-chunk ranged GETs)."""

from __future__ import annotations

import pytest
from opened_files import by_unit, record_gets
from read_once_lake import UNIT_READERS, UNIT_STAGES, checked, ingest, stages

from airflow_curation.core.layout import Lake
from airflow_curation.stages.base import StageRunner

pytestmark = pytest.mark.s3


def test_each_unit_gets_each_checked_object_once(s3_bucket, tmp_path):
    lake = Lake(f"s3://{s3_bucket}/lake", "web")
    upstream, uri = ingest(tmp_path, lake)
    ran = set()
    for stage in stages(lake, uri):
        with pytest.MonkeyPatch.context() as mp:  # not the fixture's: undoing it would undo s3_bucket's options
            gets = record_gets(mp)
            units = by_unit(mp, gets, *UNIT_READERS)
            manifest = StageRunner(stage).run()
        sizes = {s.uri: s.bytes for s in upstream.shards}
        for (cls, unit_id), (inputs, got) in units.items():
            mine = [u for u in inputs if u in checked(upstream)]
            assert mine, (cls, unit_id, inputs)
            ran.add(cls)
            if cls == "DedupStage":  # its labels: one GET of phase 1's ids file; the shard and attrs not read
                assert not [u for u, _ in got if u in mine], (cls, unit_id, got)
                assert [u for u, _ in got if u.endswith(".ids.arrow")] == [stage._sig.ids_uri(unit_id)], got
                continue
            for uri in mine:
                requests = [n for u, n in got if u == uri]
                # one GET of the whole object: its bytes fetched once
                assert len(requests) == 1, (cls, unit_id, uri, got)
                assert requests[0] == sizes.get(uri, requests[0]), (cls, unit_id, uri, got)
        upstream = manifest
    assert ran == UNIT_STAGES
