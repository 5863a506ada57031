"""Decontaminate: documents that share a word n-gram with an evaluation set are marked, and dropped.

Two phases:

1. the index (once per run, whatever the shard count or the tasks of an array): every ``ngram``-word
   window of every row of the evaluation files, normalised as datatrove normalises (``core/ngram_match``),
   hashed to 64 bits and partitioned by hash (:mod:`.index`); done by whoever holds
   ``_locks/decontaminate.index.lease`` first, and shared by runs with the same evaluation files;
2. per shard (checkpointed units, :class:`AttrsStage`): each document's windows probe the index;
   ``attrs/decontaminate/<fingerprint>/<shard>.parquet`` gets ``id``, ``contaminated``, the first match's
   benchmark, n-gram and code-point span in ``text``, the number of matching windows, every benchmark
   matched, and (``drop``, the default) ``keep`` / ``drop_reason`` = ``decontaminated:<benchmark>``.

Cost: the index is built once (O(evaluation text)); a shard costs its own text plus one read of the index
per worker process (one per shard only when the index exceeds ``memory_budget``): nothing grows with
shards x shards. See docs/decontaminate.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa

from airflow_curation.core.fingerprint import checksum_url, config_fingerprint
from airflow_curation.core.layout import safe_name
from airflow_curation.core.lease import Lease
from airflow_curation.core.manifest import ShardEntry, UnitEntry
from airflow_curation.core.ngram_match import ngram_hashes, normalize, word_spans
from airflow_curation.core.schema import DROP_REASON, KEEP, TEXT
from airflow_curation.stages.attrs import AttrsFile, AttrsStage, write_attrs
from airflow_curation.stages.decontaminate import index as eval_index
from airflow_curation.stages.settings import Setting, size

log = logging.getLogger(__name__)

COUNTS_KEY = "counts"  # checkpoint extra: {"contaminated_docs": n, "matched:<benchmark>": n}
CONTAMINATED = "contaminated"
COLUMNS = pa.schema(
    [
        (CONTAMINATED, pa.bool_()),
        ("contamination_benchmark", pa.string()),
        ("contamination_ngram", pa.string()),
        ("contamination_start", pa.int64()),
        ("contamination_end", pa.int64()),
        ("contamination_matches", pa.int32()),
        ("contamination_benchmarks", pa.list_(pa.string())),
    ]
)


def eval_sets(value) -> dict[str, list[str]]:
    """Benchmark -> its files, from ``{"mmlu": "mmlu.jsonl" | [...]}``, ``["mmlu=a.jsonl", ...]`` or
    ``"mmlu=a.jsonl,gsm8k=b.parquet"`` (a benchmark named twice gets both files)."""
    if isinstance(value, str):
        value = json.loads(value) if value.strip().startswith("{") else [v for v in value.split(",") if v.strip()]
    pairs: list[tuple[str, str]] = []
    if isinstance(value, dict):
        pairs = [(k, f) for k, v in value.items() for f in ([v] if isinstance(v, str) else v)]
    else:
        for item in value or []:
            name, sep, path = str(item).partition("=")
            if not sep or not path.strip():
                raise ValueError(f"eval set {item!r}: expected BENCHMARK=FILE")
            pairs.append((name, path))
    out: dict[str, list[str]] = {}
    for name, path in pairs:
        out.setdefault(safe_name(name.strip(), "benchmark name"), []).append(str(path).strip())
    return {k: sorted(set(v)) for k, v in sorted(out.items())}


class DecontaminateStage(AttrsStage):
    """Mark (and by default drop) documents that share an n-gram with an evaluation set.

    Evaluation sets are files (JSONL, .jsonl.gz/.zst, or Parquet; the text in text_column), one or more per
    benchmark: --eval-sets mmlu=mmlu_test.jsonl,gsm8k=gsm8k_test.parquet. Words are normalised as datatrove's
    decontamination normalises them (lowercase, numbers to 0, punctuation stripped, diacritics removed,
    whitespace split). Writes attrs/decontaminate/ per shard (checkpointed; reruns skip done shards), or
    DIR/<file>.parquet for plain Parquet files: id, contaminated, contamination_benchmark, contamination_ngram,
    contamination_start/end (the matched span in text), contamination_matches, contamination_benchmarks,
    and keep/drop_reason (decontaminated:<benchmark>). See docs/decontaminate.md.
    """

    name = "decontaminate"
    version = "1"
    UPSTREAM = ("quality", "dedup", "boilerplate", "preprocess", "ingest")
    OPTIONAL_WITHOUT = "eval_sets"
    FUNNEL_LABEL = "decontaminated"
    SETTINGS = AttrsStage.SETTINGS.extend(
        Setting(
            "eval_sets",
            eval_sets,
            {},
            "evaluation files by benchmark: name=file[,name=file...] (JSONL or Parquet; a name may repeat)",
        ),
        Setting("text_column", str, "text", "the evaluation files' text column"),
        Setting("ngram", int, 13, "words per n-gram", minimum=1),
        Setting("drop", bool, True, "drop the documents that match (else only mark them)"),
        Setting(
            "bad_eval_rows",
            str,
            "fail",
            "an evaluation row that cannot be read (not JSON, no text): fail the run, or skip it (quarantined "
            "beside the index, counted in the report)",
            choices=("fail", "skip"),
        ),
        Setting(
            "memory_budget",
            size,
            1 << 30,
            "memory for the index (build and probe), e.g. 512MiB",
            runtime=True,
            minimum=1,
        ),
        Setting("batch_rows", int, 4096, "rows per batch and per output row group", runtime=True, minimum=1),
    )

    @classmethod
    def check_config(cls, config: dict[str, Any]) -> None:
        super().check_config(config)
        if not config["eval_sets"]:
            raise ValueError("decontaminate: no eval_sets given (name=file of a benchmark's test split)")

    def __init__(self, lake, config, run_id) -> None:
        super().__init__(lake, config, run_id)
        c = self.config
        # The evaluation files' content enters the fingerprint (and the index key): an edited test split
        # redoes every shard, a rerun with the same files skips them.
        self.eval_checksums = {b: [_eval_checksum(b, f) for f in files] for b, files in c["eval_sets"].items()}

    @property
    def fingerprint(self) -> str:
        base = super().fingerprint
        return config_fingerprint(self.name, {"settings": base, "eval": self.eval_checksums}, self.version)

    @property
    def index_key(self) -> str:
        c = self.config
        key = json.dumps([self.version, c["ngram"], c["text_column"], c["bad_eval_rows"], self.eval_checksums])
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    @property
    def index_dir(self) -> str:
        return self.lake.path("decontaminate", self.index_key)

    # -- phase 1 -------------------------------------------------------------------------------------
    def _plan(self, group: tuple[int, int] | None) -> list[UnitEntry]:
        self._index_doc = self._build_index()
        return super()._plan(group)

    def _build_index(self) -> dict:
        done = eval_index.read_done(self.index_dir)
        if done is not None:
            return done
        lease = Lease(
            self.lake.path("_locks", "decontaminate.index.lease"), f"the eval index of {self.lake.base}", math.inf
        )
        with lease:
            done = eval_index.read_done(self.index_dir)  # another task built it while this one waited
            if done is not None:
                return done
            c = self.config
            return eval_index.build_index(
                self.index_dir,
                c["eval_sets"],
                c["text_column"],
                int(c["ngram"]),
                int(c["memory_budget"]),
                c["bad_eval_rows"],
            )

    def __getstate__(self) -> dict:
        # Units travel to workers with the stage; loaded index partitions do not.
        return {k: v for k, v in self.__dict__.items() if k != "_probe"}

    @property
    def probe(self) -> eval_index.EvalIndex:
        if getattr(self, "_probe", None) is None:
            self._probe = eval_index.EvalIndex(self._index_doc, int(self.config["memory_budget"]))
        return self._probe

    # -- phase 2 -------------------------------------------------------------------------------------
    def compute(self, table: pa.Table) -> pa.Table:
        n = int(self.config["ngram"])
        texts = [t or "" for t in table.column(TEXT).to_pylist()]
        norm = [normalize(t) for t in texts]
        hashes, doc, pos = ngram_hashes(norm, n)
        qi, qb, hit = self.probe.probe(hashes)
        rows = len(texts)
        matches = np.bincount(doc[hit], minlength=rows).astype(np.int32)
        names = self.probe.benchmarks
        first_bench: list[str | None] = [None] * rows
        all_bench: list[list[str] | None] = [None] * rows
        ngram: list[str | None] = [None] * rows
        start: list[int | None] = [None] * rows
        end: list[int | None] = [None] * rows
        if len(qi):
            qdoc = doc[qi]
            cuts = np.nonzero(np.diff(qdoc))[0] + 1
            for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(qi)]):
                d, q = int(qdoc[lo]), int(qi[lo])  # the document's first matching window, its lowest benchmark
                first_bench[d] = names[int(qb[lo])]
                all_bench[d] = [names[b] for b in np.unique(qb[lo:hi])]
                words = norm[d].split()
                spans = word_spans(texts[d])
                if len(spans) != len(words):
                    raise ValueError(f"decontaminate: {len(spans)} spans for {len(words)} words in row {d}")
                p = int(pos[q])
                ngram[d] = " ".join(words[p : p + n])
                start[d], end[d] = spans[p][0], spans[p + n - 1][1]
        contaminated = matches > 0
        cols = [contaminated, first_bench, ngram, start, end, matches, all_bench]
        out = pa.Table.from_arrays([pa.array(v, f.type) for v, f in zip(cols, COLUMNS)], schema=COLUMNS)
        if self.config["drop"]:
            reasons = [None if b is None else f"decontaminated:{b}" for b in first_bench]
            out = out.append_column(KEEP, pa.array(~contaminated)).append_column(
                DROP_REASON, pa.array(reasons, pa.string())
            )
        return out

    def write_unit(self, unit: UnitEntry, entry: ShardEntry, uri: str) -> AttrsFile:
        counts: Counter[str] = Counter()

        def compute(table: pa.Table) -> pa.Table:
            result = self._computed(table)
            for benches in result.column("contamination_benchmarks").to_pylist():
                if benches:
                    counts["contaminated_docs"] += 1
                    counts.update(f"matched:{b}" for b in benches)
            return result

        batch = int(self.config.get("batch_rows") or 0) or None
        out = write_attrs(entry.uri, uri, compute, self.account, self.columns, batch, user_file=self.user_files)
        out.extra[COUNTS_KEY] = {"contaminated_docs": 0, **dict(counts)}
        return out


def _eval_checksum(benchmark: str, uri: str) -> str:
    try:
        return checksum_url(uri)
    except FileNotFoundError:  # (the bare error named the file, not which of the --eval-sets it was)
        raise eval_index.EvalSetError(f"eval set {benchmark}: {uri} does not exist") from None
