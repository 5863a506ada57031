"""Column names every stage agrees on, and the shard schema: ``id``, ``text``, ``source``, ``meta``.

Stages name columns through these constants, never as string literals, so that a column's meaning has
one definition. Attrs files (one per stage and shard) carry ``ID`` plus the stage's own columns; the
columns below with a meaning across stages (``KEEP``, ``IS_DUPLICATE``...) are what later stages and
validate's funnel look for.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

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
        if name == TEXT and not is_text_type(typ):
            raise ValueError(f"{where}: column 'text' must be a string column, found {typ}")
        if name == ID and not (is_text_type(typ) or pa.types.is_integer(typ)):
            raise ValueError(f"{where}: column 'id' must be a string or integer column, found {typ}")


def string_ids(ids: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """``ids`` as strings, the attrs' id type whatever the input's (a user's integer ids: every stage's
    results join on one type)."""
    return ids if pa.types.is_string(ids.type) else ids.cast(pa.string())


def blank_texts(texts: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Whether each text is null or whitespace only (an empty document to every stage)."""
    return pc.equal(pc.utf8_trim_whitespace(pc.fill_null(texts, "")), "")


def is_text_type(typ: pa.DataType) -> bool:
    """Strings in any Arrow layout: plain, large, view, or dictionary-encoded (a pandas categorical)."""
    if pa.types.is_dictionary(typ):
        typ = typ.value_type
    return pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_string_view(typ)


class BadRows(ValueError):
    """A user's Parquet file holds rows no stage can read as they are (a second attempt cannot fix it)."""


def checked_user_rows(table: pa.Table, where: str, first_row: int = 0) -> pa.Table:
    """A batch of a user's Parquet file (plain-file mode) as every stage reads a lake shard: ``text`` as a plain
    string column (dictionary and view layouts decoded), after checking what ingest guarantees for shards: no
    null ``id``, and valid UTF-8 in ``id`` and ``text`` (Parquet readers do not check it; a stage would compute
    on garbage or fail without saying where). Raises :class:`BadRows` naming the rows.

    :param first_row: the file's row number of the batch's first row (for the message).
    """
    if TEXT in table.column_names:
        text = table.column(TEXT)
        value_type = text.type.value_type if pa.types.is_dictionary(text.type) else text.type
        if text.type != value_type or pa.types.is_string_view(value_type):
            plain = pa.large_string() if pa.types.is_large_string(value_type) else pa.string()
            table = table.set_column(table.column_names.index(TEXT), TEXT, text.cast(plain))
    if ID in table.column_names and not pa.types.is_string(table.column(ID).type):
        table = table.set_column(table.column_names.index(ID), ID, string_ids(table.column(ID)))
    if ID in table.column_names and table.column(ID).null_count:
        rows = [i for i, v in enumerate(table.column(ID).is_null().to_pylist()) if v]
        raise BadRows(f"{where}: {_rows_text(rows, first_row)} no id; every row needs one (attrs join on it)")
    for name in (ID, TEXT):
        if name in table.column_names and _is_utf8(table.column(name).type):
            _check_utf8(table.column(name), name, where, first_row)
    return table


def _is_utf8(typ: pa.DataType) -> bool:
    return pa.types.is_string(typ) or pa.types.is_large_string(typ)


def _check_utf8(column: pa.ChunkedArray, name: str, where: str, first_row: int) -> None:
    try:
        column.validate(full=True)
        return
    except pa.ArrowInvalid:
        pass
    bad: list[int] = []
    detail = ""
    binary = pa.binary() if pa.types.is_string(column.type) else pa.large_binary()
    for i, value in enumerate(column.cast(binary).to_pylist()):
        try:
            if value is not None:
                value.decode("utf-8")
        except UnicodeDecodeError as e:
            detail = detail or f" (row {first_row + i}: byte {e.start}, {e.reason})"
            bad.append(i)
    if bad:
        raise BadRows(
            f"{where}: {_rows_text(bad, first_row)} invalid UTF-8 in {name!r}{detail}; `curation ingest` makes a"
            " lake of the file, quarantining such rows (invalid_utf8) and keeping the rest"
        )
    column.validate(full=True)  # not the UTF-8: let Arrow say what


def _rows_text(rows: list[int], first_row: int) -> str:
    shown = ", ".join(str(first_row + r) for r in rows[:5])
    more = f" and {len(rows) - 5} more" if len(rows) > 5 else ""
    return f"row{'s' if len(rows) > 1 else ''} {shown}{more} {'have' if len(rows) > 1 else 'has'}"
