"""The shard schema every stage reads: ``id``, ``text``, ``source`` and everything else in ``meta``."""

from __future__ import annotations

import pyarrow as pa

SHARD_SCHEMA = pa.schema([
    pa.field("id", pa.string(), nullable=False),      # stable and unique across the dataset
    pa.field("text", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),  # input file, relative to the input root
    pa.field("meta", pa.string()),                    # the record's other fields, as JSON (schema-stable)
])

ID_COLUMN = "id"
TEXT_COLUMN = "text"


def check_id_text(schema: pa.Schema, where: str) -> None:
    """Parquet brought by users must carry string ``id`` and ``text`` columns."""
    for name in (ID_COLUMN, TEXT_COLUMN):
        if name not in schema.names:
            raise ValueError(f"{where}: missing column {name!r} (has {schema.names})")
        typ = schema.field(name).type
        if name == TEXT_COLUMN and not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
            raise ValueError(f"{where}: column 'text' must be a string column, found {typ}")
