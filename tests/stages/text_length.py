"""A toy attrs stage, as a plugin would write it: its module (this file), its operator
(``text_length_operator.py``) and a registration; nothing else in the project changes for it.

``text_length`` (characters per document) and ``keep`` (at least ``min_chars`` of them), per shard.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from airflow_curation.core.schema import DROP_REASON, KEEP, TEXT
from airflow_curation.stages.attrs import AttrsStage
from airflow_curation.stages.settings import Setting


class TextLengthStage(AttrsStage):
    """Characters per document; documents shorter than min_chars are not kept."""

    name = "text_length"
    # What it reads, nearest first: in a pipeline, dedup's shards (it streams on them, as an attrs stage);
    # on the command line, the newest complete manifest of any of these.
    UPSTREAM = ("dedup", "preprocess", "ingest")
    SETTINGS = AttrsStage.SETTINGS.extend(
        Setting("min_chars", int, 1, "shortest text kept, in characters"),
        Setting("batch_rows", int, 1000, "rows per batch", runtime=True),
    )

    def compute(self, table: pa.Table) -> pa.Table:
        length = pc.utf8_length(table.column(TEXT))
        keep = pc.greater_equal(length, self.config["min_chars"])
        reason = pc.if_else(keep, pa.scalar(None, pa.string()), "too_short")
        return pa.table({"text_length": length, KEEP: keep, DROP_REASON: reason})
