"""The export stage: tokenize's packed sequences, globally shuffled, written in the trainers' formats.

Two phases, each resumable (see :mod:`.phases` for the order rule and docs/export.md), and where the gather
would read many small pieces, a middle pass between them (:mod:`.merge`: the spill files merged by chunk of
buckets, so a gather unit reads one merged file a group of shards instead of every spill file):

1. scatter, per packed shard (parallel, checkpointed as the ``export_scatter`` sub-stage): the shard's
   sequences spilled to ``export/<fingerprint>/spill/<shard>.arrow``, one batch per bucket. One task of an
   array scatters its own block of shards (read from the tokenize manifest's pages of that block); the
   first to find the scatter unfinished afterwards takes a lease and scatters what is still missing, and
   every task waits for ``spill/_done/<run key>.json`` before it gathers;
2. gather, per contiguous range of buckets (the stage's own checkpointed units): one ranged read of every
   spill file (or of its chunk's merged files), then per bucket the seeded order and one file per format: ``megatron/<bucket>.bin/.idx``,
   ``mds/shard.<bucket>.<k>.mds`` (``mds/index.json`` after the last unit), ``parquet/<bucket>.parquet``,
   and ``order/<bucket>.parquet`` (the source shard and row of every written sequence).

The bucket count comes from bytes (``file_size``), never from the shard count. The books are kept in
sequences: every sequence of the tokenize manifest is written exactly once (checked in :meth:`collect`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import re
import time
import uuid
from collections.abc import Callable
from functools import cached_property
from typing import Any

from airflow_curation.core import storage
from airflow_curation.core.accounting import RowAccounting
from airflow_curation.core.faults import fault_point
from airflow_curation.core.fingerprint import checksum_url
from airflow_curation.core.integrity import verified_reads
from airflow_curation.core.lease import Lease
from airflow_curation.core.lsh import UnreadableSpill, partition_ranges
from airflow_curation.core.manifest import Manifest, ManifestError, ManifestHead, UnitEntry, group_range
from airflow_curation.core.merge_plan import merge_plan
from airflow_curation.stages.barrier import lost_step_files
from airflow_curation.stages.base import Stage, StageFailed, StageRunner, UnitResult, _attempt_unit, file_record
from airflow_curation.stages.export import formats, marks, phases
from airflow_curation.stages.export.merge import ExportMergeStage, merge_config
from airflow_curation.stages.settings import Setting, size
from airflow_curation.stages.tokenize.packing import packed_files, packed_in_head

log = logging.getLogger(__name__)

FORMATS = ("megatron", "mds", "parquet")
SUCCESS_FILE = "_SUCCESS.json"  # in an output folder: it holds a whole export (written last, removed first)
# What an export names its files (phases.bucket_stem): megatron/00000.bin|.idx, parquet|order/00000.parquet,
# mds/shard.00000.000.mds
_EXPORT_FILE = re.compile(r"^(\d{5}\.(bin|idx|parquet)|shard\.\d{5}\.\d{3}\.mds)$")


# A gather unit holds its range of every spill file, the sorted copy, the cut-off padding and the bytes it
# writes: about four times its buckets' tokens.
GATHER_EXPANSION = 4


def gather_units(total: int, memory_budget: int, slots: int, buckets: int) -> int:
    """The gather's units for ``total`` bytes of tokens in ``buckets`` buckets: as many as the memory budget
    needs, and at least ``slots``, a unit for each worker and each task of an array (a backend running N tasks
    sets ``min_units`` = N: with the budget's units alone, all tasks but one sat through the gather idle); at
    most one a bucket. What the stage plans and what the 50 TB plan (benchmarks/simulate_scale.py) counts."""
    return max(1, min(buckets, max(math.ceil(GATHER_EXPANSION * total / memory_budget), slots)))


class ExportScatterStage(Stage):
    """Phase 1 as a stage of its own, so that each packed shard's spill file is checkpointed and a rerun
    scatters only the shards not done yet. Built and run by :class:`ExportStage`."""

    name = "export_scatter"
    version = "1"
    SETTINGS = Stage.SETTINGS.extend(
        Setting("seed", int, 0, "shuffle seed", cli=False),
        Setting("buckets", int, 1, "buckets (output files per format)", cli=False),
        Setting("dtype", str, "uint16", "token dtype", cli=False),
        Setting("vocab_size", int, None, "ids must be below it", cli=False, minimum=0),
        Setting("boundaries", bool, False, "spill the document boundaries too (the parquet format)", cli=False),
        Setting("shards", list, [], "the packed shards to scatter (ExportStage's plan)", runtime=True, cli=False),
    )

    def spill_uri(self, shard_id: str) -> str:
        return self.lake.path("export", self.fingerprint, "spill", f"{shard_id}.arrow")

    def plan(self) -> list[UnitEntry]:
        return [
            UnitEntry(unit_id=s["shard_id"], inputs=[s["uri"]], input_checksum=f"{s['checksum']}@{s['index']}")
            for s in self.config["shards"]
        ]

    def process_unit(self, unit: UnitEntry) -> UnitResult:
        shards = self.config["shards"]
        if getattr(self, "_by_id", (None,))[0] is not shards:  # one lookup per unit, not a scan of the list
            self._by_id = (shards, {s["shard_id"]: s for s in shards})
        s = self._by_id[1][unit.unit_id]
        uri = self.spill_uri(unit.unit_id)
        c = self.config
        with verified_reads([(s["uri"], s["checksum"], f"packed shard {unit.unit_id}")]):  # one fetch: checked, parsed
            stats = phases.scatter_shard(
                s["uri"], s["index"], c["seed"], c["buckets"], c["dtype"], c["vocab_size"], c["boundaries"], uri
            )
        nbytes, _ = storage.stat(uri)
        acc = RowAccounting()
        acc.keep(stats["sequences"])
        return UnitResult(outputs=[], accounting=acc, extra=stats, files=[file_record(uri, nbytes, checksum_url(uri))])


class ExportStage(Stage):
    """Globally shuffle tokenize's packed sequences (seeded, deterministic) and write them as a Megatron-LM
    indexed dataset, MosaicML streaming (MDS) shards and/or Parquet. See docs/export.md."""

    name = "export"
    version = "1"
    INPUTS = "manifest"
    UPSTREAM = ("tokenize",)
    OPTIONAL_WITHOUT = "formats"
    SETTINGS = Stage.SETTINGS.extend(
        Setting("formats", list, ["megatron"], "any of megatron, mds, parquet (comma-separated)"),
        Setting("seed", int, 0, "shuffle seed: the same seed and input give the same bytes"),
        Setting(
            "file_size",
            size,
            1 << 30,
            "target tokens bytes per output file, e.g. 1GiB: sets the bucket count (files per format)",
            minimum=1,
        ),
        Setting(
            "vocab_size", int, None, "vocabulary size (default: the tokenizer file the tokenize run names)", minimum=0
        ),
        Setting(
            "mds_size_limit", size, formats.MDS_SIZE_LIMIT, "MDS shard size limit (MDSWriter's size_limit)", minimum=1
        ),
        Setting(
            "memory_budget",
            size,
            8 << 30,
            "memory of one gather or merge unit (a range of buckets read at once); with workers, sets the units",
            runtime=True,
            minimum=1,
        ),
        Setting(
            "spill_merge",
            str,
            "auto",
            "merge the spill files by chunk of buckets before the gather (auto: where the gather's reads are "
            "many and small and merging at least halves them; docs/export.md)",
            choices=("auto", "on", "off"),
            runtime=True,
        ),
        Setting(
            "tokenize_manifest",
            str,
            None,
            "set by the stage from input_manifest: the tokenize manifest it reads",
            runtime=True,
            cli=False,
        ),
        Setting(
            "upstream_wait_s",
            float,
            600,
            "seconds to wait for a planned tokenize manifest to complete (its gate opens on its checkpoints, "
            "its job writes the final manifest just after)",
            runtime=True,
            minimum=0,
        ),
        Setting(
            "output_dir", str, None, "write the formats here (default: export/<fingerprint>/ in the lake)", runtime=True
        ),
    )

    @classmethod
    def check_config(cls, config: dict[str, Any]) -> None:
        super().check_config(config)
        unknown = sorted(set(config["formats"]) - set(FORMATS))
        if unknown or not config["formats"]:
            raise ValueError(f"export: formats must be some of {list(FORMATS)}, not {config['formats']!r}")

    def __init__(self, lake, config, run_id) -> None:
        super().__init__(lake, config, run_id)
        self.config["formats"] = [f for f in FORMATS if f in self.config["formats"]]  # one spelling, one fingerprint
        # The manifest names its input tokenize_manifest, not input_manifest: export's books are in sequences,
        # not rows, so the row chain between stages (the runner's, the gates', validate's) does not apply to
        # it; collect checks that every sequence is written once instead.
        if self.config.get("input_manifest"):
            self.config["tokenize_manifest"] = self.config.pop("input_manifest")

    # -- inputs --------------------------------------------------------------------------------------
    @cached_property
    def tokenize_head(self) -> ManifestHead:
        """The tokenize manifest's head (its units are read page by page: a task reads its block's only)."""
        uri = self.config.get("tokenize_manifest")
        if not uri:
            raise ValueError("export needs input_manifest, a tokenize manifest")
        deadline = time.monotonic() + float(self.config["upstream_wait_s"] or 0)
        while (m := ManifestHead.read(uri)).status == "planned" and time.monotonic() < deadline:
            time.sleep(1.0)
        if m.status != "complete" or "tokens" not in m.config:
            raise ManifestError(f"export: {uri} is not a complete tokenize manifest (status {m.status_text})")
        return m

    @cached_property
    def vocab_size(self) -> int:
        if self.config["vocab_size"]:
            return int(self.config["vocab_size"])
        from airflow_curation.stages.tokenize.stage import load_tokenizer

        tokenizer = self.tokenize_head.config.get("tokenizer")
        if not tokenizer:
            raise ValueError("export: the tokenize manifest names no tokenizer file; give vocab_size (--vocab-size)")
        try:
            return int(load_tokenizer(tokenizer).get_vocab_size(with_added_tokens=True))
        except ValueError as e:
            raise ValueError(f"export: {e}; give vocab_size (--vocab-size)") from None

    def out_dir(self) -> str:
        return self.config.get("output_dir") or self.lake.path("export", self.fingerprint)

    def work_dirs(self) -> list[str]:
        return [self.lake.base, *([self.config["output_dir"]] if self.config.get("output_dir") else [])]

    # -- phase 1 while planning phase 2 --------------------------------------------------------------
    def plan(self) -> list[UnitEntry]:
        """Phase 1 (the scatter: this task's block first in a task of an array), then the gather units."""
        group = self.shard_group if self.shard_group is not None and self.shard_group[1] > 1 else None
        return self._plan_run(group)

    def plan_group(self, index: int, count: int) -> list[UnitEntry]:
        """One task of an array: it scatters its own block of packed shards, waits for the whole scatter (or
        finishes it, :meth:`_scatter`), and returns its block of the gather units."""
        units = self._plan_run((index, count) if count > 1 else None)
        block = group_range(len(units), index, count)
        return units[block.start : block.stop]

    def _spill_uris(self) -> list[str]:
        """The spill file of every packed shard, listed by the first gather unit (which reads them all): a
        task's plan needs none of their names, nor the pages they come from."""
        if self._gather.get("spill_uris") is None:
            fp = self._gather["scatter_fingerprint"]  # ExportScatterStage.spill_uri's, without that stage
            self._gather["spill_uris"] = [
                self.lake.path("export", fp, "spill", f"{sid}.arrow") for sid, _ in packed_files(self.tokenize_head)
            ]
        return self._gather["spill_uris"]

    def _gather_uris(self, lo: int) -> list[str]:
        """What the gather unit of buckets from ``lo`` reads: its chunk's merged files (one a group of shards)
        after the middle pass, else every spill file."""
        merge: ExportMergeStage | None = self._gather["merge"]
        return self._spill_uris() if merge is None else merge.merged_uris(lo)

    def _shards(self, positions: range | None) -> list[dict[str, Any]]:
        """The packed shards at ``positions`` (None: all) of the tokenize manifest to scatter, each with its
        position (``index``, which keys its sequences' order)."""
        start = positions.start if positions is not None else 0
        shards = []
        for k, (shard_id, rec) in enumerate(packed_files(self.tokenize_head, positions)):
            if rec is None:
                raise ManifestError(
                    f"export: shard {shard_id} has no packed file in the tokenize manifest {self.tokenize_head.uri}"
                )
            shards.append({"shard_id": shard_id, "uri": rec["uri"], "checksum": rec["checksum"], "index": start + k})
        return shards

    def _plan_run(self, group: tuple[int, int] | None) -> list[UnitEntry]:
        self._check_writable(self.out_dir())
        head = self.tokenize_head
        tokens = head.config["tokens"]
        self._sequences = int(tokens["sequences"])
        seq_len = int(tokens["seq_len"])
        dtype = formats.token_dtype(self.vocab_size)
        total = self._sequences * seq_len * dtype.itemsize
        buckets = max(1, math.ceil(total / int(self.config["file_size"])))
        scatter = ExportScatterStage(
            self.lake,
            {
                "seed": self.config["seed"],
                "buckets": buckets,
                "dtype": dtype.name,
                "vocab_size": self.vocab_size,
                "boundaries": "parquet" in self.config["formats"],
                "shards": [],
                "workers": self.config["workers"],
                "max_attempts": self.config["max_attempts"],
            },
            self.run_id,
        )
        run_key = self._run_key(scatter)
        self._scatter(scatter, run_key, group)
        fault_point("export.after_scatter")
        # The folder's files are about to change: it holds a whole export again once collect marks it.
        storage.remove(storage.join(self.out_dir(), SUCCESS_FILE))
        slots = max(int(self.config["workers"] or 1), int(self.config["min_units"] or 1))
        ranges = partition_ranges(buckets, gather_units(total, int(self.config["memory_budget"]), slots, buckets))
        self._gather = {
            # every spill file, listed by the first gather unit (:meth:`_spill_uris`; the order of reading does
            # not enter the written order: phases)
            "spill_uris": None,
            "scatter_fingerprint": scatter.fingerprint,
            "run_key": run_key,
            "seq_len": seq_len,
            "dtype": dtype.name,
            "buckets": buckets,
            "merge": self._merge(ranges, total, run_key, scatter.fingerprint, group),
        }
        fault_point("export.after_merge")
        log.info(
            "export: %d sequences, %d buckets (%s tokens) in %d units%s",
            self._sequences,
            buckets,
            dtype.name,
            len(ranges),
            f", reading {len(self._gather['merge'].config['groups'])} merged files each"
            if self._gather["merge"]
            else "",
        )
        # The output folder is part of what a unit did: an export to another folder is not done by this one's.
        where = hashlib.sha256(self.out_dir().encode()).hexdigest()[:8]
        return [
            UnitEntry(unit_id=f"buckets-{lo:05d}-{hi:05d}", inputs=[], input_checksum=f"{run_key}:{where}:{lo}-{hi}")
            for lo, hi in ranges
        ]

    @staticmethod
    def _check_writable(out: str) -> None:
        """One small write to the output folder before the scatter (a pass over every packed shard): a bucket
        that does not exist, or a folder this job may not write, failed the gather units only after it."""
        probe = storage.join(out, f".probe-{uuid.uuid4().hex[:12]}")
        try:
            storage.write_bytes(probe, b"")
        except Exception as e:  # noqa: BLE001 - any refusal, named with the folder
            raise OSError(f"export: cannot write to the output folder {out}: {type(e).__name__}: {e}") from e
        storage.remove(probe)

    def _run_key(self, scatter: ExportScatterStage) -> str:
        """What names the scatter: a changed or reordered packed shard is another run. The shard pages'
        checksums (in the head) cover every entry, so its packed file's checksum, in order: no page is read. A
        manifest from before (packed files in its head) by its units' order and its head's packed checksums."""
        head = self.tokenize_head
        old = packed_in_head(head)
        if old is None:
            parts = [scatter.fingerprint, "shards", str(head.shard_count), *head.data["index"]["shards"]["checksums"]]
        else:
            units_meta = head.data["index"]["units"]
            order = units_meta.get("checksums") or [u["unit_id"] for u in head.unit_dicts()]
            parts = [scatter.fingerprint, str(head.unit_count), *order]
            parts += [f"{k}={v['checksum']}" for k, v in sorted(old.items())]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]

    def _scatter(self, scatter: ExportScatterStage, run_key: str, group: tuple[int, int] | None) -> None:
        """Phase 1, once for all the tasks of a run, marked done by ``spill/_done/<run key>.json`` (in the
        spill folder: removing the spills removes it).

        A task of an array (``group``) first scatters its own block of shards (read from the pages of that
        block), beside the other tasks. The rest is done once, by whoever holds ``_locks/export.scatter.lease``
        first while the mark is missing: it scatters what is still missing (the blocks of tasks not started
        yet; checkpoints skip the others) and leaves the mark; the other tasks wait while it lives (a dead
        holder's lease is taken over), then find the mark. A whole run does it all without contention."""
        done = marks.scatter_mark(self.lake, scatter.fingerprint, run_key)

        def block() -> list[UnitEntry]:
            scatter.config["shards"] = self._shards(group_range(self.tokenize_head.unit_count, *group))
            return scatter.plan()

        def whole() -> None:
            scatter.config["shards"] = self._shards(None)

        self._once(scatter, done, group, block, whole)

    def _merge(
        self, ranges: list[tuple[int, int]], total: int, run_key: str, scatter_fp: str, group: tuple[int, int] | None
    ) -> ExportMergeStage | None:
        """The middle pass (:mod:`.merge`), once for all the tasks of a run as the scatter, where it pays (or
        ``spill_merge`` says); the merge stage, whose files the gather units read, or None."""
        mode = self.config["spill_merge"]
        shards = self.tokenize_head.unit_count
        tokens = self.tokenize_head.config["tokens"]
        # The largest packed shard's bytes (a tokenize manifest from before records none: the mean is assumed)
        largest = int(tokens.get("largest_shard_sequences", 0)) * total // max(1, int(tokens["sequences"]))
        budget = int(self.config["memory_budget"])
        shape = None if mode == "off" else merge_plan(len(ranges), shards, total, budget, mode == "on", largest)
        if shape is None:
            return None
        merge = ExportMergeStage(
            self.lake,
            {
                **merge_config(run_key, scatter_fp, ranges, shape[0], shards, shape[1]),
                "tokenize_manifest": self.tokenize_head.uri,
                "workers": self.config["workers"],
                "max_attempts": self.config["max_attempts"],
            },
            self.run_id,
        )
        done = marks.merge_mark(self.lake, merge.fingerprint)

        def block() -> list[UnitEntry]:
            units = merge.plan()
            mine = group_range(len(units), *group)
            return units[mine.start : mine.stop]

        self._once(merge, done, group, block, lambda: None)
        return merge

    def _once(
        self,
        sub: Stage,
        done: str,
        group: tuple[int, int] | None,
        block: Callable[[], list[UnitEntry]],
        whole: Callable[[], None],
    ) -> None:
        """Run the sub-stage ``sub`` once for all the tasks of a run, marked done by the file ``done``.

        A task of an array (``group``) first runs ``block()``'s units (its own share), beside the other tasks.
        The rest is done once, by whoever holds ``_locks/<sub's name>.lease`` first while the mark is missing:
        it runs ``sub`` whole after ``whole()`` (checkpoints skip the units done) and leaves the mark; the other
        tasks wait while it lives (a dead holder's lease is taken over), then find the mark. A whole run does
        it all without contention."""
        if storage.exists(done):
            log.info("export: %s already done (%s)", sub.name, done)
            return
        if group is not None:
            self._run_units(sub, block())
        lease_uri = self.lake.path("_locks", sub.name.replace("_", ".") + ".lease")
        lease = Lease(lease_uri, f"{sub.name} on {self.lake.base}", math.inf)
        with lease if group is not None else contextlib.nullcontext():
            if storage.exists(done):  # another task finished it while this one waited
                return
            whole()
            m = StageRunner(sub, self.default_mapper()).run()
            storage.write_json(done, {"run_id": self.run_id, "units": len(m.units)})

    def _run_units(self, sub: Stage, units: list[UnitEntry]) -> None:
        """Run those of ``units`` without a checkpoint yet, through the runner's own unit step (retries,
        checkpoints), without a manifest or a sweep of the lake: what the task's share costs only."""
        store, fp = sub.checkpoints, sub.fingerprint
        todo = [u for u in units if store.is_done(u.unit_id, u.input_checksum, fp) is None]
        attempts = int(sub.config["max_attempts"])
        results = self.default_mapper()(_attempt_unit, ((sub, u, attempts) for u in todo))
        failed = [(u.unit_id, p.get("error")) for u, (status, p) in zip(todo, results) if status != "done"]
        if failed:
            raise StageFailed(
                f"export: {len(failed)} of {len(todo)} {sub.name} units of this task failed: {failed[:5]}"
            )
        log.info(
            "export: %s: %d units of this task's share (%d already done)", sub.name, len(todo), len(units) - len(todo)
        )

    def process_unit(self, unit: UnitEntry) -> UnitResult:
        lo, hi = (int(x) for x in unit.unit_id.removeprefix("buckets-").split("-"))
        g = self._gather
        uris = self._gather_uris(lo)
        try:
            result = phases.gather_buckets(
                lo,
                hi,
                uris,
                int(self.config["seed"]),
                g["seq_len"],
                g["dtype"],
                self.config["formats"],
                self.out_dir(),
                int(self.config["mds_size_limit"]),
            )
        except (FileNotFoundError, UnreadableSpill) as e:
            merge: ExportMergeStage | None = g["merge"]
            if merge is None:
                mark, phase = marks.scatter_mark(self.lake, g["scatter_fingerprint"], g["run_key"]), "scatter"
            else:
                mark, phase = marks.merge_mark(self.lake, merge.fingerprint), "middle pass"
            raise lost_step_files(e, uris, mark, "export", phase) or e from e
        acc = RowAccounting()
        acc.keep(sum(b["sequences"] for b in result["buckets"]))
        return UnitResult(outputs=[], accounting=acc, extra={"buckets": result["buckets"]}, files=result["files"])

    # -- after all units -----------------------------------------------------------------------------
    def _remove_earlier_exports(self, out: str, mine: set[str]) -> None:
        """Remove from ``out`` the files of an earlier export that this one did not write: an export with
        fewer buckets (a larger file_size), another mds_size_limit or other formats left the earlier one's
        other buckets beside its own, and a trainer reading the folder took both (each sequence up to twice).
        Only files named as an export names them, in its folders, are touched (and MDS's index.json where
        this export writes no MDS). ``mine``: this export's files, as ``<folder>/<name>``."""
        stale = []
        for folder in (*FORMATS, "order"):
            for uri in storage.glob(storage.join(out, folder, "*")):
                name = _tail(uri, 1)
                if _EXPORT_FILE.match(name) and f"{folder}/{name}" not in mine:
                    stale.append(uri)
                elif folder == "mds" and name == "index.json" and "mds" not in self.config["formats"]:
                    stale.append(uri)
        for uri in stale:
            storage.remove(uri)
        if stale:
            log.warning("export: removed %d files of an earlier export from %s (not this export's)", len(stale), out)

    def collect(self, manifest: Manifest) -> None:
        """Every sequence written once (the books), MDS's ``index.json``, and the summary in the manifest
        (``config["export"]``)."""
        buckets: list[dict[str, Any]] = []
        files: dict[str, str] = {}  # this export's files, as <folder>/<name> -> checksum
        for unit in manifest.units:
            rec = self.checkpoints.load(unit.unit_id)
            if rec is None or rec.fingerprint != manifest.fingerprint:
                raise StageFailed(f"export: unit {unit.unit_id} has no checkpoint")
            buckets.extend(rec.extra["buckets"])
            files.update((_tail(f["uri"], 2), f["checksum"]) for f in rec.files)
        buckets.sort(key=lambda b: b["bucket"])
        written = sum(b["sequences"] for b in buckets)
        if written != self._sequences:
            raise StageFailed(f"export: wrote {written} sequences, the tokenize manifest has {self._sequences}")
        out = self.out_dir()
        self._remove_earlier_exports(out, set(files))
        summary: dict[str, Any] = {
            "sequences": written,
            "tokens": sum(b["tokens"] for b in buckets),
            "buckets": len(buckets),
            "dtype": self._gather["dtype"],
            "seq_len": self._gather["seq_len"],
            "seed": int(self.config["seed"]),
            "formats": self.config["formats"],
            "output_dir": out,
            "bucket_sequences": [b["sequences"] for b in buckets],  # where each bucket starts: curation trace
        }
        stems = [phases.bucket_stem(b["bucket"]) for b in buckets]
        # trace reads a bucket's order file checked against this: a later export into the folder replaced it
        summary["order_checksums"] = [files.get(f"order/{s}.parquet") for s in stems]
        if "megatron" in self.config["formats"]:
            summary["megatron_prefixes"] = [storage.join(out, "megatron", s) for s in stems]
        if "mds" in self.config["formats"]:
            index = formats.mds_index([info for b in buckets for info in b["mds"]])
            summary["mds_index"] = storage.join(out, "mds", "index.json")
            storage.write_bytes(summary["mds_index"], index)
        if "parquet" in self.config["formats"]:
            summary["parquet"] = [storage.join(out, "parquet", s + ".parquet") for s in stems]
        manifest.config = {**manifest.config, "export": summary}
        # Last: the folder holds this export, whole (a reader of the folder looks for it; its files listed)
        names = sorted({*files, *(["mds/index.json"] if "mds" in summary["formats"] else [])})
        storage.write_json(
            storage.join(out, SUCCESS_FILE),
            {"manifest": self.manifest_uri, "sequences": written, "formats": summary["formats"], "files": names},
        )


def _tail(uri: str, parts: int) -> str:
    """The last ``parts`` names of ``uri``'s path, joined by ``/``."""
    return "/".join(uri.replace("\\", "/").rstrip("/").split("/")[-parts:])
