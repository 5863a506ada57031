"""Column names every stage agrees on, and the shard schema: ``id``, ``text``, ``source``, ``meta``.

Stages name columns through these constants, never as string literals, so that a column's meaning has
one definition. Attrs files (one per stage and shard) carry ``ID`` plus the stage's own columns; the
columns below with a meaning across stages (``KEEP``, ``IS_DUPLICATE``...) are what later stages and
validate's funnel look for.
"""

from __future__ import annotations

import pyarrow as pa

# -- shards ----------------------------------------------------------------------------------------
ID = "id"  # stable and unique across the dataset; every attrs file joins on it
TEXT = "text"
SOURCE = "source"  # input file, relative to the input root
META = "meta"  # the record's other fields, as JSON (schema-stable)

# -- attrs with a meaning across stages ---------------------------------------------------------------
KEEP = "keep"  # bool: the row survives this stage (a funnel step in validate)
DROP_REASON = "drop_reason"  # why a row was not kept (null when kept)
IS_DUPLICATE = "is_duplicate"  # bool: a duplicate of an earlier row (not kept; a funnel step)
CLUSTER_ID = "cluster_id"  # the keeper's node key, shared by a duplicate cluster
EXACT_DUPLICATE = "exact_duplicate"  # dedup: same normalised content as an earlier row
NEAR_DUPLICATE = "near_duplicate"  # dedup: near duplicate, not exact
PRIOR_SNAPSHOT = "prior_snapshot"  # dedup across snapshots: the earlier snapshot of the cluster's first document
PRIOR_ID = "prior_id"  # dedup across snapshots: that document's id
ENRICHED = "enriched"  # enrich: the model ran on this row
SKIP_REASON = "skip_reason"  # enrich: why it did not (not_kept, duplicate, empty)
CLEAN_TEXT = "clean_text"  # preprocess: the normalised, line-cleaned text; later stages read it for TEXT

# Older names, kept for imports elsewhere.
ID_COLUMN = ID
TEXT_COLUMN = TEXT

SHARD_SCHEMA = pa.schema(
    [
        pa.field(ID, pa.string(), nullable=False),
        pa.field(TEXT, pa.string(), nullable=False),
        pa.field(SOURCE, pa.string(), nullable=False),
        pa.field(META, pa.string()),
    ]
)


def check_id_text(schema: pa.Schema, where: str) -> None:
    """Parquet brought by users must carry string ``id`` and ``text`` columns."""
    for name in (ID, TEXT):
        if name not in schema.names:
            raise ValueError(
                f"{where}: missing column {name!r} (has {schema.names}); plain Parquet needs string 'id' and 'text'"
                " columns: rename yours, or make a lake of the files with `curation ingest` (--text-field, and"
                " --id-field or ids from each row's file and position)"
            )
        typ = schema.field(name).type
        if name == TEXT and not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
            raise ValueError(f"{where}: column 'text' must be a string column, found {typ}")
