"""Boilerplate: lines repeated across many documents of the snapshot removed, as a ``clean_text`` column.

Three steps, each resumable (``core/boilerplate.py`` holds the array functions):

1. counts, per shard (parallel, checkpointed as the ``boilerplate_counts`` sub-stage): the shard's distinct
   line keys and how many of its documents hold each, spilled to ``boilerplate/<fingerprint>/spill/`` by
   key partition (the layout of dedup's spills, ``core/lsh.py``);
2. global (the barrier): in units of contiguous partition ranges, every shard's counts of a partition
   summed and the keys held by at least ``min_documents`` documents written to
   ``boilerplate/<run key>/frequent/``, marked done by ``_SUCCESS.json``;
3. per shard (the stage's own checkpointed units): ``id``, ``clean_text`` (the text without those lines),
   ``boilerplate_lines_removed``, and ``keep``/``drop_reason`` (a document whose every line is boilerplate
   is dropped as ``boilerplate_only``).

The text read is preprocess's cleaned text when it wrote one, else the shard's; later stages read this
stage's ``clean_text`` in its place (``stages/text.py``). Run it after preprocess and before dedup, so that
two pages that differ only by their menus are exact duplicates. The result does not depend on shard,
worker or partition counts.
"""

from __future__ import annotations

import hashlib
import logging
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_curation.core import storage, uris
from airflow_curation.core.accounting import RowAccounting
from airflow_curation.core.boilerplate import KEY_COLUMNS, document_line_counts, remove_lines, sum_counts_in_place
from airflow_curation.core.faults import fault_point
from airflow_curation.core.fingerprint import checksum_url
from airflow_curation.core.integrity import IntegrityError, verified_reads
from airflow_curation.core.lease import Lease
from airflow_curation.core.lsh import (
    UnreadableSpill,
    partition_of,
    partition_ranges,
    partitions_for,
    read_partition,
    read_partitions,
    write_partitioned,
)
from airflow_curation.core.lsh import merge_partitions as merge_spill_range
from airflow_curation.core.manifest import ShardEntry, UnitEntry
from airflow_curation.core.merge_plan import MiddlePass, middle_pass
from airflow_curation.core.schema import CLEAN_TEXT, DROP_REASON, KEEP, TEXT, blank_texts
from airflow_curation.stages.attrs import AttrsFile, AttrsStage, clear_caches, keep_accounting, upstream_head
from airflow_curation.stages.barrier import (
    BLOCK,
    BlockPass,
    global_lease,
    held,
    lost_step_files,
    plan_group_around,
    plan_key_uri,
    read_plan_key,
)
from airflow_curation.stages.base import Stage, StageRunner, UnitResult, file_record
from airflow_curation.stages.settings import Setting, size
from airflow_curation.stages.text import ShardText, clean_text_attrs

log = logging.getLogger(__name__)

REMOVED = "boilerplate_lines_removed"
ONLY_BOILERPLATE = "boilerplate_only"
_SPILL_BYTES = 16  # one spilled (key, docs) pair
_LINES_A_DOCUMENT = 64  # distinct lines a document, for the spill's estimate (tens in real pages)
# The partition cap: a partition must fit the memory budget, and past ~2 TB of text 4,096 partitions (dedup's cap)
# no longer did (3.6 GB of pairs a partition at 50 TB). The middle pass keeps the reads a partition at one a
# group of shards, not one a shard, so more partitions cost fewer reads than they did.
MAX_PARTITIONS = 65_536
# A partition's peak memory over its pairs' bytes while read and summed: ~1.05x measured, read into one array a
# column and summed in those arrays (was 5.3-5.5x with an argsort: RESULTS.md, *a partition summed in place*);
# 2 leaves room for the interpreter's own and the allocator's slack.
PARTITION_EXPANSION = 2


def spill_estimate(rows: int) -> int:
    """Step 1's spill for ``rows`` documents, in bytes: what the partitions and the middle pass are sized by."""
    return rows * _LINES_A_DOCUMENT * _SPILL_BYTES


def _inputs(s: dict) -> list[str]:
    return [s["uri"], *([s["text_uri"]] if s.get("text_uri") else [])]


def _units(shards: list[dict], run_key: str) -> list[UnitEntry]:
    """Step 3's units: a shard's unit is redone when its inputs or the global step's result change."""
    return [
        UnitEntry(
            unit_id=s["shard_id"], inputs=_inputs(s), input_checksum=f"{s['input_checksum']}#{run_key}", rows=s["rows"]
        )
        for s in shards
    ]


class BoilerplateCountStage(BlockPass, Stage):
    """Step 1 as a stage of its own, so that each shard's spill is checkpointed and a rerun counts only
    the shards not done yet. Built and run by :class:`BoilerplateStage`."""

    name = "boilerplate_counts"
    version = "1"
    SETTINGS = Stage.SETTINGS.extend(
        Setting("partitions", int, 1, "key partitions of the spill", cli=False, minimum=0),
        Setting("shards", list, [], "the shards to count (BoilerplateStage's plan)", runtime=True, cli=False),
        BLOCK,
        Setting("batch_rows", int, 8192, "rows per batch", runtime=True, cli=False, minimum=1),
    )

    def spill_uri(self, shard_id: str) -> str:
        return storage.join(self.lake.path("boilerplate", self.fingerprint, "spill"), f"{shard_id}.keys.arrow")

    def plan(self) -> list[UnitEntry]:
        return [
            UnitEntry(unit_id=s["shard_id"], inputs=_inputs(s), input_checksum=s["input_checksum"], rows=s["rows"])
            for s in self.config["shards"]
        ]

    def process_unit(self, unit: UnitEntry) -> UnitResult:
        if getattr(self, "_by_id", None) is None:  # once per process, not a scan per unit
            self._by_id = {s["shard_id"]: s for s in self.config["shards"]}
        s = self._by_id[unit.unit_id]
        inputs = [(s["uri"], s.get("checksum"), f"shard {unit.unit_id}")]
        if s.get("text_uri"):
            inputs.append((s["text_uri"], s.get("text_checksum"), f"cleaned text of shard {unit.unit_id}"))
        with verified_reads(inputs):  # each input fetched once: verified, then parsed from those bytes
            text = ShardText(s["uri"], s.get("text_uri"), s.get("user_file", False))
            batches = (t.column(TEXT) for t in text.batches([TEXT], int(self.config["batch_rows"])))
            keys, docs, stats = document_line_counts(batches)
        spill = self.spill_uri(unit.unit_id)
        write_partitioned(spill, {"key": keys, "docs": docs}, partition_of(keys, int(self.config["partitions"])))
        nbytes, _ = storage.stat(spill)
        acc = RowAccounting()
        acc.keep(stats["documents"])
        # the spill in the record: a rerun whose spill file is gone counts that shard again
        return UnitResult(
            outputs=[], accounting=acc, extra=stats, files=[file_record(spill, nbytes, checksum_url(spill))]
        )


def merge_partitions(
    lo: int, hi: int, spill_uris: list[str], min_documents: int, out_uri: str, merged: MiddlePass | None = None
) -> dict:
    """Step 2 for the partitions ``lo <= p < hi`` (one unit): counts summed over every shard; the keys held
    by at least ``min_documents`` documents, with their counts, to ``out_uri``.

    One partition read at a time (each sized to ``memory_budget``): a unit's range is its share of the
    partitions among the workers, and reading it at once held the whole range (by the stage's own spill
    estimate, ~7 GB in each unit of a 4-worker run on 100 GB of text at the default budget). That costs
    partitions x shards reads of the spill in all, not units x shards; with the middle pass (``merged``)
    partitions x groups
    (docs/boilerplate.md, *At scale*)."""
    keys, docs = [], []
    distinct = 0
    for p in range(lo, hi):
        sources = merged.inputs(p) if merged else spill_uris
        try:
            ((_, part),) = read_partitions(sources, p, p + 1, KEY_COLUMNS)
        except UnreadableSpill as e:
            if not merged or e.uri not in sources:
                raise
            storage.remove(e.uri)  # the middle pass keeps the files it finds: the rerun writes this one again
            raise IntegrityError(
                f"boilerplate: the middle pass's file {e.uri} is unreadable ({e.reason[:120]}): removed, run "
                "boilerplate again to merge it again"
            ) from e
        k, d = part["key"], part["docs"]
        m = sum_counts_in_place(k, d)  # in the arrays read: a partition costs its pairs, not 5x them
        distinct += m
        frequent = np.flatnonzero(d[:m] >= np.uint64(min_documents))
        keys.append(k[frequent])
        docs.append(d[frequent])
        del part, k, d
    k = np.concatenate(keys) if keys else np.empty(0, np.uint64)
    d = np.concatenate(docs) if docs else np.empty(0, np.uint64)
    write_partitioned(out_uri, {"key": k, "docs": d}, np.zeros(len(k), np.int64))
    return {"distinct_lines": distinct, "frequent_lines": int(len(k)), "frequent_line_docs": int(d.sum())}


def _merge_chunk(group: list[str], lo: int, hi: int, out_uri: str) -> int:
    """One unit of the middle pass: partitions ``lo..hi`` of a group's spill files as one file (kept where an
    earlier attempt wrote it: files are written whole, atomically). Returns the rows merged now."""
    if storage.exists(out_uri):
        return 0
    return merge_spill_range(group, lo, hi, out_uri)


def spill_reads(partitions: int, shards: int, chunk: int | None = None, groups: int | None = None) -> int:
    """The global step's reads of a spill (one file's piece of a partition range): partitions x shards, or with
    the middle pass (``chunk`` partitions a chunk, ``groups`` groups of shards) chunks x shards to merge, then
    partitions x groups."""
    if chunk is None:
        return partitions * shards
    return -(-partitions // chunk) * shards + partitions * int(groups or 0)


class BoilerplateStage(AttrsStage):
    """Lines held by at least min_documents documents of the snapshot (menus, footers, cookie banners)
    removed from every document: clean_text beside the shard, boilerplate_lines_removed per document.

    Exact line keys (a 64-bit hash of the stripped line), counted once per document, spilled by key partition and
    summed in a global step bounded by memory_budget; documents that are boilerplate only are dropped. Later
    stages read the cleaned text. See docs/boilerplate.md.
    """

    name = "boilerplate"
    version = "1"
    UPSTREAM = ("preprocess", "ingest")
    # In a pipeline it runs only when min_documents is given (the DAG's boilerplate_min_documents); the CLI
    # and a stage built by hand have the default.
    OPTIONAL_WITHOUT = "min_documents"
    STREAMS = False  # a global barrier: a line's count needs every shard
    SETTINGS = AttrsStage.SETTINGS.extend(
        Setting("min_documents", int, 10, "a line held by at least this many documents is boilerplate", minimum=2),
        Setting(
            "memory_budget",
            size,
            512 << 20,
            "memory for one partition of the global step, e.g. 256MB; sets the partition count",
            runtime=True,
            minimum=1,
        ),
        Setting("partitions", int, None, "force the partition count", runtime=True, minimum=0),
        Setting(
            "spill_merge",
            str,
            "auto",
            "merge the count spills by chunk of partitions and group of shards before the global step sums them "
            "(auto: where the reads are many and small and merging at least halves them; docs/boilerplate.md)",
            choices=("auto", "on", "off"),
            runtime=True,
        ),
        Setting("batch_rows", int, 8192, "rows per batch", runtime=True, minimum=1),
    )

    # -- steps 1 and 2 happen while planning step 3 ------------------------------------------------
    def plan(self) -> list[UnitEntry]:
        return self._plan_whole(global_lease(self.lake, self.name, "boilerplate's global step"))

    def plan_group(self, index: int, count: int) -> list[UnitEntry]:
        """Group ``index`` of ``count`` of an array (not group 0): from the upstream manifest's pages of its
        block and the run key the whole plan left, once the global step is done; before that, the block's
        counts first, then the whole plan only in the task that does the global step
        (:func:`~airflow_curation.stages.barrier.plan_group_around`). Plain-file inputs: the whole plan."""
        if self.config.get("inputs"):
            return super().plan_group(index, count)
        clear_caches()
        self._wait_for_upstream()
        return plan_group_around(
            lambda: self._plan_from_pages(index, count),
            lambda: self._count_block(index, count),
            global_lease(self.lake, self.name, "boilerplate's global step"),
            self._plan_whole,
            index,
            count,
        )

    def _shard(self, e: ShardEntry) -> tuple[dict, bool]:
        """What steps 1 and 3 know of a shard, and whether its input checksum follows from the manifest alone
        (the cleaned text's checksum recorded there, not hashed from the file)."""
        text = clean_text_attrs(e, self.attrs_name)
        text_checksum = self.attrs_checksum(e, text[0]) if text else None
        shard = {
            "shard_id": e.shard_id,
            "uri": e.uri,
            "text_uri": e.attrs[text[0]] if text else None,
            "checksum": e.checksum,
            "text_checksum": text_checksum,
            "rows": e.rows,
            "input_checksum": e.checksum + (f"+{text_checksum}" if text else ""),
            "user_file": self.user_files,
        }
        return shard, not text or bool(e.attrs_checksums.get(text[0]))

    def _counts(self, rows: int, shards: list[dict], block: bool = False) -> BoilerplateCountStage:
        """Step 1's stage for ``rows`` rows in all (its partitions follow from them) over ``shards`` (one task's
        block of them where ``block``)."""
        # A document has tens of distinct lines; their pairs are what a partition holds while it is summed.
        budget = int(self.config["memory_budget"])
        parts = int(
            self.config["partitions"]
            or partitions_for(spill_estimate(rows), budget, PARTITION_EXPANSION, maximum=MAX_PARTITIONS)
        )
        config = {
            "partitions": parts,
            "shards": shards,
            "block": block,
            "batch_rows": self.config["batch_rows"],
            "workers": self.config.get("workers", 1),
            "max_attempts": self.config.get("max_attempts", 2),
            "max_failed_fraction": 0.0,
        }
        return BoilerplateCountStage(self.lake, config, self.run_id)

    def _key_uri(self, counts: BoilerplateCountStage) -> str | None:
        return plan_key_uri(
            self.lake, self.name, self.config.get("input_manifest"), [counts.fingerprint, self.fingerprint]
        )

    def _plan_whole(self, lease: Lease | None) -> list[UnitEntry]:
        """Every unit of the run, steps 1 and 2 done first (under ``lease``; None: the caller holds it)."""
        clear_caches()  # a rerun in this process must see the inputs as they are now
        self._wait_for_upstream()
        self._group = None
        planned = [self._shard(e) for e in self.entries().values()]
        shards = [s for s, _ in planned]
        counts = self._counts(sum(s["rows"] for s in shards), shards)
        run_key = hashlib.sha256(
            (
                f"{counts.fingerprint}|{self.config['min_documents']}|" + "|".join(s["input_checksum"] for s in shards)
            ).encode()
        ).hexdigest()[:16]
        self._run_key = run_key
        self._global = self._global_step(counts, shards, run_key, lease)
        key_uri = self._key_uri(counts) if all(recorded for _, recorded in planned) else None
        if key_uri:  # the tasks of an array that plan after this find the run key without the whole plan
            storage.write_json(key_uri, {"run_key": run_key, "shards": len(shards)})
        return _units(shards, run_key)

    def _plan_from_pages(self, index: int, count: int) -> list[UnitEntry] | None:
        """Group ``index`` of ``count`` from its pages, or None while the global step of this plan is not done."""
        head = upstream_head(self.config["input_manifest"])
        run_key = read_plan_key(self._key_uri(self._counts(head.rows, []))).get("run_key")
        done_uri = self.lake.path("boilerplate", str(run_key), "_SUCCESS.json")
        if not run_key or not storage.exists(done_uri):
            return None
        self._group = (index, count)  # entries(): this block's shards only, here and in workers
        shards = [self._shard(e)[0] for e in self.entries().values()]
        self._run_key = run_key
        self._global = self._read_done(done_uri)
        log.info(
            "boilerplate: group %d/%d: %d shards planned from their pages (run key %s)",
            index,
            count,
            len(shards),
            run_key,
        )
        return _units(shards, run_key)

    def _count_block(self, index: int, count: int) -> None:
        """Step 1 for the shards of block ``index`` of ``count`` only, read from their pages."""
        self._group = (index, count)
        shards = [self._shard(e)[0] for e in self.entries().values()]
        self._group = None
        head = upstream_head(self.config["input_manifest"])
        StageRunner(self._counts(head.rows, shards, block=True), self.default_mapper()).run(shard_group=(index, count))

    def _global_step(
        self, counts: BoilerplateCountStage, shards: list[dict], run_key: str, lease: Lease | None
    ) -> dict:
        """Steps 1 and 2, once for all the tasks of a run.

        One task of an array (``shard_group``) first counts the shards of its own block, beside the other
        tasks (one task counted every shard of the snapshot before, the others waiting on its lease). The
        rest is done once, by whoever holds ``_locks/boilerplate.global.lease`` first: it counts what is
        still missing (the blocks of tasks not started yet; checkpoints skip the others) and sums the counts;
        the other tasks wait while it lives, then read its ``_SUCCESS.json``. ``lease`` None: the caller
        holds it and counted its block already (:meth:`plan_group`)."""
        gdir = self.lake.path("boilerplate", run_key)
        done_uri = storage.join(gdir, "_SUCCESS.json")
        if storage.exists(done_uri):
            return self._read_done(done_uri)
        group = self.shard_group
        if lease is not None and group is not None and group[1] > 1:
            StageRunner(counts, self.default_mapper()).run(shard_group=group)
        with held(lease):
            if storage.exists(done_uri):  # another task did it while this one waited
                return self._read_done(done_uri)
            manifest = StageRunner(counts, self.default_mapper()).run()
            if manifest.status != "complete":
                raise RuntimeError(f"boilerplate: counting the lines of some shards failed ({manifest.status})")
            fault_point("boilerplate.after_counts")
            spills = [counts.spill_uri(s["shard_id"]) for s in shards]
            parts = int(counts.config["partitions"])
            rows = sum(int(s["rows"]) for s in shards)
            self._warn_past_budget(parts, rows)
            merged = self._middle_pass(spills, parts, rows, gdir)
            ranges = partition_ranges(parts, max(1, int(self.config.get("workers") or 1)))
            outs = [storage.join(gdir, "frequent", f"unit-{u:05d}.arrow") for u in range(len(ranges))]
            minimum = int(self.config["min_documents"])
            stats = list(
                self.default_mapper()(
                    merge_partitions, [(lo, hi, spills, minimum, outs[u], merged) for u, (lo, hi) in enumerate(ranges)]
                )
            )
            shape = (
                {"chunk_partitions": merged.chunk, "chunks": len(merged.files), "groups": len(merged.files[0])}
                if merged
                else {}
            )
            result = {
                "frequent": outs,
                "partitions": parts,
                "middle_pass": shape or None,
                "spill_reads": merged.reads if merged else spill_reads(parts, len(spills)),
                **{k: sum(s[k] for s in stats) for k in ("distinct_lines", "frequent_lines", "frequent_line_docs")},
            }
            log.info("boilerplate: global step done: %s", {k: v for k, v in result.items() if k != "frequent"})
            storage.write_json(done_uri, {**result, "frequent": [uris.relativize(u, self.lake.root) for u in outs]})
            if merged:  # an intermediate: the frequent lines are the step's result
                fs, path = storage.filesystem(storage.join(gdir, "merged"))
                fs.rm(path, recursive=True)
            return result

    def _warn_past_budget(self, parts: int, rows: int) -> None:
        """Say so where the partitions are capped (``MAX_PARTITIONS``) and one, by the spill's estimate, needs more
        than ``memory_budget`` to sum (past ~60 TB of text at the default budget), and what budget fits."""
        budget = int(self.config["memory_budget"])
        need = math.ceil(spill_estimate(rows) * PARTITION_EXPANSION / parts)
        if self.config["partitions"] or parts < MAX_PARTITIONS or need <= budget:
            return
        log.warning(
            "boilerplate: %d partitions (the cap) of %s rows' line counts need ~%d MiB each to sum, past "
            "memory_budget %d MiB: a worker may run out of memory; memory_budget=%dMiB fits (docs/boilerplate.md, "
            "At scale)",
            parts,
            f"{rows:,}",
            need >> 20,
            budget >> 20,
            -(-need // (1 << 20)),
        )

    def _middle_pass(self, spills: list[str], parts: int, rows: int, gdir: str) -> MiddlePass | None:
        """Where it pays (or ``spill_merge`` says), the spill files merged by chunk of partitions and group of
        shards (:func:`~airflow_curation.core.merge_plan.middle_pass`: a reader's range is one partition here,
        since step 2 reads one at a time), or None. Step 2 then reads a partition from one file a group, not one
        a shard. A merged file already there was written whole by an earlier attempt of this run key and shape
        (its folder), and is kept (a killed pass resumes; one of another shape, from another ``memory_budget``,
        is never read)."""
        mode = self.config["spill_merge"]
        if mode == "off":
            return None
        budget = int(self.config["memory_budget"])
        spans = [(p, p + 1) for p in range(parts)]
        folder = storage.join(gdir, "merged")
        done = middle_pass(
            spills, spans, spill_estimate(rows), budget, folder, self.default_mapper(), mode == "on", _merge_chunk
        )
        if done is None:
            return None
        log.info(
            "boilerplate: middle pass: %d chunks of %d partitions x %d groups of %d shards (%d rows merged now)",
            len(done.files),
            done.chunk,
            len(done.files[0]),
            done.group,
            done.rows,
        )
        fault_point("boilerplate.after_merge")
        return done

    def _read_done(self, uri: str) -> dict:
        doc = storage.read_json(uri)
        return {**doc, "frequent": [uris.resolve(u, self.lake.root) for u in doc["frequent"]]}

    # -- step 3 ------------------------------------------------------------------------------------
    def frequent_keys(self) -> np.ndarray:
        """Every boilerplate key, sorted (read once per process)."""
        if getattr(self, "_frequent", None) is None:
            try:
                got = read_partition(self._global["frequent"], 0, KEY_COLUMNS)["key"]
            except (FileNotFoundError, UnreadableSpill) as e:  # a file the step's mark vouched for: redo the step
                done = self.lake.path("boilerplate", self._run_key, "_SUCCESS.json")
                raise lost_step_files(e, self._global["frequent"], done, "boilerplate") or e from e
            self._frequent = np.sort(got)
        return self._frequent

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_frequent"}

    def compute(self, table: pa.Table) -> pa.Table:
        text = table.column(TEXT)
        clean, removed = remove_lines(text, self.frequent_keys())
        # Dropped: a document that had lines and has none left (every one was boilerplate).
        only = pc.and_(pa.array(removed > 0), blank_texts(clean))
        return pa.table(
            {
                CLEAN_TEXT: clean,
                REMOVED: pa.array(removed, pa.int32()),
                KEEP: pc.invert(only),
                DROP_REASON: pc.if_else(only, ONLY_BOILERPLATE, pa.scalar(None, pa.string())),
            }
        )

    def account(self, result: pa.Table) -> RowAccounting:
        acc = keep_accounting(result, ONLY_BOILERPLATE)
        removed = result.column(REMOVED)
        acc.note("lines_removed:boilerplate", int(pc.sum(removed).as_py() or 0))
        acc.note("documents_with_boilerplate", int(pc.sum(pc.greater(removed, 0)).as_py() or 0))
        return acc

    def write_unit(self, unit: UnitEntry, entry: ShardEntry, uri: str) -> AttrsFile:
        fault_point("boilerplate.before_attrs")
        out = super().write_unit(unit, entry, uri)
        out.extra["frequent_lines"] = self._global.get("frequent_lines")
        return out
