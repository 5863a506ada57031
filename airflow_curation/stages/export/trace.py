"""Lineage from a training sequence back to its source documents (``curation trace``).

A written sequence is found by its index in the export's global order (the same index in every format:
Megatron's prefixes, MDS's ``index.json`` and the Parquet files all list the buckets in order), or by its
bucket and its index within that bucket's files. The chain, one lookup per step:

1. ``order/<bucket>.parquet`` gives the packed shard (position in the tokenize manifest) and row;
2. that packed row gives the documents in the sequence: ids, where each segment starts in the sequence
   and at which token of its document (tokenize's ``doc_starts``/``doc_offsets``);
3. the tokenize unit's source shard gives each document's input file and meta, and the ingest run's
   config turns its id into a line, row or record of that file (:func:`..ingest.locate.locate`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_curation.core import storage
from airflow_curation.core.integrity import read_verified
from airflow_curation.core.manifest import ManifestError, ManifestHead, UnitEntry
from airflow_curation.core.schema import ID, META, SOURCE, string_ids
from airflow_curation.stages.export.phases import bucket_stem
from airflow_curation.stages.ingest.locate import locate
from airflow_curation.stages.tokenize import packing


@dataclass
class TracedSequence:
    """One written sequence and the documents its tokens come from."""

    sequence: int  # index in the global order
    bucket: int
    index_in_bucket: int
    packed_shard: str  # tokenize unit id
    packed_row: int
    n_tokens: int
    documents: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def bucket_sizes(export: dict[str, Any]) -> list[int]:
    """Sequences per bucket, in order: from the export summary, or the order files' footers (older runs)."""
    if export.get("bucket_sequences"):
        return [int(n) for n in export["bucket_sequences"]]
    out = export["output_dir"]
    sizes = []
    for b in range(int(export["buckets"])):
        with storage.open_read(storage.join(out, "order", bucket_stem(b) + ".parquet")) as f:
            sizes.append(pq.ParquetFile(f).metadata.num_rows)
    return sizes


def _export_summary(manifest: ManifestHead) -> dict[str, Any]:
    export = manifest.config.get("export")
    if manifest.stage != "export" or manifest.status != "complete" or not export:
        raise ManifestError(f"trace needs a complete export manifest, not a {manifest.stage} run ({manifest.status})")
    return export


def _position(sizes: list[int], sequence: int | None, bucket: int | None, index: int | None) -> tuple[int, int, int]:
    """(global index, bucket, index in bucket) from either spelling, range-checked."""
    starts = [0]
    for n in sizes:
        starts.append(starts[-1] + n)
    if sequence is not None:
        if not 0 <= sequence < starts[-1]:
            raise IndexError(f"sequence {sequence} is outside the export's {starts[-1]} sequences")
        bucket = bisect.bisect_right(starts, sequence) - 1
        return sequence, bucket, sequence - starts[bucket]
    if bucket is None or index is None:
        raise ValueError("give a sequence index, or a bucket and an index within it")
    if not 0 <= bucket < len(sizes):
        raise IndexError(f"bucket {bucket} is outside the export's {len(sizes)} buckets")
    if not 0 <= index < sizes[bucket]:
        raise IndexError(f"index {index} is outside bucket {bucket}'s {sizes[bucket]} sequences")
    return starts[bucket] + index, bucket, index


def _ingest_config(manifest_uri: str | None) -> dict[str, Any] | None:
    """The config of the ingest run at the head of a manifest chain (None for plain Parquet inputs)."""
    seen = set()
    while manifest_uri and manifest_uri not in seen:
        seen.add(manifest_uri)
        m = ManifestHead.read(manifest_uri)  # its config: no unit or shard page is read
        if m.stage == "ingest":
            return m.config
        manifest_uri = m.config.get("input_manifest")
    return None


def _documents(shard_uri: str, ids: list[str]) -> dict[str, dict[str, Any]]:
    """``id -> {source, meta, row}`` of the given ids in one source shard (its id column read whole, the rest
    of the columns for the matching rows only; a user's integer ids read as the strings tokenize wrote)."""
    with storage.open_read(shard_uri) as f:
        pf = pq.ParquetFile(f)
        names = pf.schema_arrow.names
        wanted = [c for c in (ID, SOURCE, META) if c in names]
        table = pf.read(columns=wanted, use_threads=False)
    table = table.set_column(table.column_names.index(ID), ID, string_ids(table.column(ID)))
    rows = pc.indices_nonzero(pc.is_in(table.column(ID), value_set=pa.array(ids, pa.string())))
    hits = table.take(rows).to_pylist()
    return {r[ID]: {"source": r.get(SOURCE), "meta": r.get(META), "row": k} for r, k in zip(hits, rows.to_pylist())}


def trace(
    export_manifest_uri: str, sequence: int | None = None, bucket: int | None = None, index: int | None = None
) -> TracedSequence:
    """The documents of one written training sequence.

    :param export_manifest_uri: a complete export run's manifest.
    :param sequence: the sequence's index in the global order (all formats agree on it).
    :param bucket: or its bucket (output file number)...
    :param index: ...and its index within that bucket's files (Megatron's index in one prefix).
    """
    export_manifest = ManifestHead.read(export_manifest_uri)
    export = _export_summary(export_manifest)
    g, b, i = _position(bucket_sizes(export), sequence, bucket, index)
    order_uri = storage.join(export["output_dir"], "order", bucket_stem(b) + ".parquet")
    # Checked against what this export wrote (runs before it recorded none): a later export into the same
    # folder replaced its files, and their order would name other documents without a word.
    recorded = (export.get("order_checksums") or [None] * (b + 1))[b]
    data = read_verified(order_uri, recorded, f"order file of bucket {b} of export {export_manifest_uri}")
    order = pq.read_table(pa.BufferReader(data)).slice(i, 1).to_pylist()[0]
    # The shard's position in the tokenize manifest: its unit and packed file from the pages that hold it only.
    tokenize = ManifestHead.read(export_manifest.config["tokenize_manifest"])
    at = range(int(order["shard"]), int(order["shard"]) + 1)
    unit = UnitEntry(**tokenize.unit_dicts_at(at)[0])
    (_, packed), *_ = packing.packed_files(tokenize, at)
    if packed is None:
        raise ManifestError(f"shard {unit.unit_id} has no packed file in the tokenize manifest {tokenize.uri}")
    packed_uri = packed["uri"]
    cols = [packing.N_TOKENS, packing.DOC_IDS, packing.DOC_STARTS, packing.DOC_OFFSETS]
    row = storage.read_parquet(packed_uri, cols).slice(int(order["row"]), 1).to_pylist()[0]
    found = _documents(unit.inputs[0], list(dict.fromkeys(row[packing.DOC_IDS])))
    ingest_config = _ingest_config(tokenize.config.get("input_manifest"))
    n = int(row[packing.N_TOKENS])
    starts = list(row[packing.DOC_STARTS])
    docs = []
    for k, doc_id in enumerate(row[packing.DOC_IDS]):
        end = starts[k + 1] if k + 1 < len(starts) else n
        doc: dict[str, Any] = {
            "id": doc_id,
            "tokens": [starts[k], end],  # its segment of the sequence, [start, end)
            "document_token_offset": int(row[packing.DOC_OFFSETS][k]),
            "shard": unit.inputs[0],
        }
        src = found.get(doc_id)
        if src is None:
            doc["error"] = f"id not found in source shard {unit.inputs[0]}"
        elif ingest_config is not None and src["source"] is not None:
            doc.update(locate(doc_id, src["source"], src["meta"], ingest_config))
        elif src["source"] is None:  # a user's own Parquet file (plain-file tokenize): that file, and its row
            doc.update({"file": unit.inputs[0], "unit": "row", "position": src["row"]})
        else:
            doc["file"] = src["source"]
        docs.append(doc)
    return TracedSequence(g, b, i, unit.unit_id, int(order["row"]), n, docs)
