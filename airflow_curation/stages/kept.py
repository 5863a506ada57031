"""Which rows of a shard the upstream stages kept: what enrich and tokenize read before their work.

Every upstream attrs file with a ``keep`` or ``is_duplicate`` column votes: a row any of them drops is
skipped, with the reason of the earliest stage in pipeline order (``not_kept`` before ``duplicate``:
a row preprocess dropped is ``not_kept`` even if dedup also saw it as a duplicate).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_curation.core import storage
from airflow_curation.core.manifest import ShardEntry
from airflow_curation.core.schema import ID, IS_DUPLICATE, KEEP
from airflow_curation.core.shards import attrs_columns

NOT_KEPT = "not_kept"
DUPLICATE = "duplicate"


def decision_attrs(entry: ShardEntry, skip: Callable[[str], bool] = lambda key: False) -> list[str]:
    """The keys of ``entry``'s attrs whose files hold ``keep`` or ``is_duplicate`` (sorted), but those
    ``skip`` refuses."""
    found = []
    for key in sorted(entry.attrs):
        if skip(key):
            continue
        names = attrs_columns(entry, key)  # recorded in the entry: no footer read
        if KEEP in names or IS_DUPLICATE in names:
            found.append(key)
    return found


def skip_reasons(shard_id: str, ids: pa.ChunkedArray | pa.Array, attrs_uris: list[str]) -> np.ndarray:
    """Per row of the shard (whose ``id`` column is ``ids``): None to keep it, else why it is skipped.

    The attrs files must have the shard's ids in the shard's order (the attrs contract); a file that does
    not is refused rather than joined wrongly. Each file is opened once: its footer says which of the
    decision columns it has and the same open reads them (on object storage a second open would be a
    second round of requests per file and unit).
    """
    n = len(ids)
    reasons = np.full(n, None, dtype=object)
    tables = [_decision_columns(uri, shard_id, ids) for uri in attrs_uris]
    unset = np.ones(n, dtype=bool)
    for col, drop_when, reason in ((KEEP, False, NOT_KEPT), (IS_DUPLICATE, True, DUPLICATE)):
        for attrs in tables:
            if col in attrs.column_names:
                values = attrs.column(col)
                valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
                flags = np.asarray(values.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
                hit = valid & (flags == drop_when) & unset
                reasons[hit] = reason
                unset &= ~hit
    return reasons


def _decision_columns(uri: str, shard_id: str, ids: pa.ChunkedArray | pa.Array) -> pa.Table:
    """``id`` and those of ``keep`` / ``is_duplicate`` that the attrs file ``uri`` has, from one open of it;
    refused unless its ids are ``ids``, in that order."""
    with storage.open_read(uri) as f:
        pf = pq.ParquetFile(f)
        names = pf.schema_arrow.names
        if ID not in names:
            raise ValueError(f"attrs {uri} of shard {shard_id} have no {ID!r} column (columns {names})")
        attrs = pf.read(columns=[c for c in (ID, KEEP, IS_DUPLICATE) if c in names])
    if attrs.num_rows != len(ids) or not attrs.column(ID).equals(_chunked(ids)):
        raise ValueError(
            f"attrs {uri} do not match shard {shard_id} row for row "
            f"(attrs must have the shard's ids in the shard's order)"
        )
    return attrs


def _chunked(ids: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray:
    return ids if isinstance(ids, pa.ChunkedArray) else pa.chunked_array([ids])
