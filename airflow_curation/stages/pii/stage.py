"""PII stage: detection spans, counts per kind and the redacted text, as additive columns.

One unit per upstream shard (:class:`~airflow_curation.stages.attrs.AttrsStage`). A unit streams its shard
through :func:`airflow_curation.core.pii.pii_columns` and writes ``attrs/pii/<fingerprint>/<shard>.parquet``:
``id``, ``pii_spans`` (``[{start, end, kind}]``, code-point offsets into ``text``), ``pii_count``, one
``pii_<kind>`` count per kind, and ``redacted_text`` (the text with each span replaced by ``<EMAIL>``,
``<IP_ADDRESS>``, ``<PHONE>``, ``<KEY>`` or ``<PRIVATE_KEY>``; null where nothing was found, so that a
reader takes ``coalesce(redacted_text, text)``). The shard is never rewritten; every row is kept (PII is a
signal here, not a drop), and each unit's counts per kind go to its checkpoint, whence validate's report
sums them. See docs/pii.md.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc

from airflow_curation.core.manifest import ShardEntry, UnitEntry
from airflow_curation.core.pii import KINDS, pii_columns
from airflow_curation.core.schema import TEXT
from airflow_curation.stages.attrs import AttrsFile, AttrsStage, write_attrs
from airflow_curation.stages.settings import Setting

COUNTS_KEY = "counts"  # checkpoint extra: {"pii_<kind>": n, "docs_with_pii": n}


def _kinds(value) -> list[str]:
    kinds = [k.strip() for k in value.split(",")] if isinstance(value, str) else [str(k) for k in value]
    kinds = [k for k in kinds if k]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or not kinds:
        raise ValueError(f"unknown PII kinds {unknown or kinds}; known: {', '.join(KINDS)}")
    return [k for k in KINDS if k in kinds]  # one order, whatever the order given


class PiiStage(AttrsStage):
    """PII spans, counts per kind and the redacted text for every shard (emails, IPs, phones, keys).

    Writes attrs/pii/ per shard (checkpointed; reruns skip done shards), or DIR/<file>.parquet for plain
    Parquet files with id and text columns: id, pii_spans, pii_count, pii_<kind>, redacted_text. Rows are
    never dropped. See docs/pii.md.
    """

    name = "pii"
    version = "1"
    UPSTREAM = ("decontaminate", "quality", "dedup", "boilerplate", "preprocess", "ingest")
    FUNNEL_LABEL = "pii scanned"
    SETTINGS = AttrsStage.SETTINGS.extend(
        Setting("kinds", _kinds, list(KINDS), f"PII kinds to find, comma-separated: {', '.join(KINDS)}"),
        Setting("ip_public_only", bool, True, "report only global IP addresses (not 10.x, 192.168.x, 127.x...)"),
        Setting("redacted_text", bool, True, "write the redacted_text column (null on rows without PII)"),
        Setting("batch_rows", int, 4096, "rows per batch and per output row group", runtime=True, minimum=1),
    )

    def compute(self, table: pa.Table) -> pa.Table:
        c = self.config
        return pii_columns(table.column(TEXT), c["kinds"], c["ip_public_only"], c["redacted_text"])

    def write_unit(self, unit: UnitEntry, entry: ShardEntry, uri: str) -> AttrsFile:
        counts: Counter[str] = Counter()

        def compute(table: pa.Table) -> pa.Table:
            result = self._computed(table)
            for k in self.config["kinds"]:
                counts[f"pii_{k}"] += int(pc.sum(result.column(f"pii_{k}")).as_py() or 0)
            counts["docs_with_pii"] += int(pc.sum(pc.greater(result.column("pii_count"), 0)).as_py() or 0)
            return result

        batch = int(self.config.get("batch_rows") or 0) or None
        out = write_attrs(entry.uri, uri, compute, self.account, self.columns, batch, user_file=self.user_files)
        out.extra[COUNTS_KEY] = {
            k: counts.get(k, 0) for k in [*(f"pii_{k}" for k in self.config["kinds"]), "docs_with_pii"]
        }
        return out
