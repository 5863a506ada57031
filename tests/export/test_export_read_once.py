"""Export's scatter units read each packed shard once (issue 20: read bandwidth): fetched, checked against
the checksum tokenize recorded, and parsed from those bytes."""

from __future__ import annotations

import pytest
from opened_files import by_unit, held_of, opens_of, record_opens

from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.export.stage import ExportScatterStage, ExportStage


def test_each_scatter_unit_reads_its_packed_shard_once(packed):
    config = {"input_manifest": packed["manifest"], "seed": 9_301, "formats": "parquet"}
    with pytest.MonkeyPatch.context() as mp:
        opened = record_opens(mp)
        units = by_unit(mp, opened, ExportScatterStage)
        StageRunner(ExportStage(packed["lake"], config, "read-once")).run()
    packed_uris = {s.files["packed"]["uri"] for s in packed["tokenize"].shards}
    assert len(units) == len(packed_uris) >= 3
    for (_, unit_id), (inputs, ops) in units.items():
        assert len(inputs) == 1 and inputs[0] in packed_uris, (unit_id, inputs)
        # one read of the shard's bytes (the check's), parsed from them
        assert (opens_of(ops, inputs[0]), held_of(ops, inputs[0]) >= 1) == (1, True), (unit_id, ops)
