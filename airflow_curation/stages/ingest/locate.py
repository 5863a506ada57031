"""Where in its input file an ingested document came from, read back from its id and meta.

Ingest's default id is ``<source key>-<position>`` (``IngestStage._doc_id``), and ``position`` means what
the reader made of the file: the 1-based line of a JSONL file or of a text file read one document per
line, the 0-based row of a Parquet file, the record index of a WARC/ARC file (its ``meta`` carries the
byte offset too), 0 for a whole-file document (text or HTML). With ``id_field`` the id is the user's and the
position is not kept: only a WARC record's offset is, in ``meta``.
"""

from __future__ import annotations

import json
from typing import Any

from airflow_curation.stages.ingest.readers import detect

# What a reader's position counts, by input format (text files depend on text_mode).
_UNIT = {"jsonl": "line", "parquet": "row", "warc": "record", "arc": "record", "html": "file"}


def locate(doc_id: str, source: str, meta: str | None, ingest_config: dict[str, Any]) -> dict[str, Any]:
    """The document's place in its input file: ``{"file", "unit", "position"[, "byte_offset", "url"]}``;
    ``unit``/``position`` are None when the id does not carry the position (``id_field`` was set).

    :param doc_id: the document's ``id`` column.
    :param source: its ``source`` column (the input file, relative to the input root).
    :param meta: its ``meta`` column (JSON).
    :param ingest_config: the config of the ingest run that wrote it (its manifest's ``config``).
    """
    fmt, _ = detect(source, ingest_config.get("format") or "auto")
    unit = _UNIT.get(fmt or "")
    if fmt == "text":
        unit = "line" if ingest_config.get("text_mode") == "line" else "file"
    position: int | None = None
    if not ingest_config.get("id_field"):
        tail = doc_id.rsplit("-", 1)[-1]
        position = int(tail) if tail.isdigit() else None
    if position is None:
        unit = None
    where: dict[str, Any] = {"file": source, "unit": unit, "position": position}
    fields = json.loads(meta) if meta else {}
    if isinstance(fields, dict) and "warc_record_id" in fields and "offset" in fields:  # a WARC/ARC record
        where["byte_offset"] = fields["offset"]
        where["url"] = fields.get("url")
    return where
