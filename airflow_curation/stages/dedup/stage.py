"""Dedup: global exact and MinHash-LSH near dedup, bounded in memory; ``attrs/dedup/<shard>.parquet``.

Three phases, each resumable:

1. signatures, per shard (parallel, checkpointed as the ``dedup_signatures`` sub-stage): exact keys and
   band hashes spilled to ``dedup/<fingerprint>/spill/`` by bucket partition;
2. global (the barrier): in units of contiguous partition ranges (at least as many as slots), candidate
   edges inside each bucket (optionally verified by exact Jaccard) and exact-duplicate groups, then
   connected components by large-star/small-star, all in ``dedup/<run key>/`` and marked done by
   ``_SUCCESS.json``;
3. per shard (the stage's own checkpointed units): ``id``, ``cluster_id``, ``is_duplicate``,
   ``exact_duplicate``, ``near_duplicate``, same rows and order as the shard.

The keeper of a cluster is its first document in manifest order (shard order, then row): its node key
is the ``cluster_id`` of every member. Results do not depend on worker or partition counts.

Two inputs: a lake (``input_manifest``) or plain Parquet files with ``id`` and ``text`` (``inputs`` +
``output_dir``, what ``curation dedup FILE...`` uses).
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import asdict
from typing import Any

from airflow_curation.core import spill_pack, storage, uris
from airflow_curation.core.accounting import RowAccounting
from airflow_curation.core.arrays import to_numpy
from airflow_curation.core.components import EDGE_ROW_BYTES, LABEL_COLUMNS, connected_components
from airflow_curation.core.faults import fault_point
from airflow_curation.core.fingerprint import config_fingerprint
from airflow_curation.core.integrity import verified_reads
from airflow_curation.core.lease import Lease
from airflow_curation.core.lsh import (
    SPILL_SUFFIX,
    UnreadableSpill,
    gather_partition,
    next_power_of_two,
    pack_spills,
    partition_ranges,
    partitions_for,
)
from airflow_curation.core.manifest import Manifest, ShardEntry, UnitEntry, group_range
from airflow_curation.core.minhash import MinHashParams, lsh_params
from airflow_curation.core.schema import CLUSTER_ID, EXACT_DUPLICATE, KEEP, NEAR_DUPLICATE
from airflow_curation.core.shards import attrs_columns, write_parquet
from airflow_curation.stages.attrs import AttrsFile, AttrsStage, clear_caches, upstream_head
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
from airflow_curation.stages.base import Stage, StageRunner, UnitMapper, UnitResult, local_mapper
from airflow_curation.stages.dedup import phases, snapshots
from airflow_curation.stages.dedup.phases import DedupParams
from airflow_curation.stages.settings import Setting, size
from airflow_curation.stages.text import ShardText, clean_text_attrs

log = logging.getLogger(__name__)

# Bytes one spilled document costs in phase 2 per band (bucket + node) and for its exact key.
_BAND_BYTES, _EXACT_BYTES = 16, 24
# A unit's partition is bucketed in the arrays it is read into, its bands and then its exact keys: measured at
# ~1.05x those bytes at the margin, its edges included (benchmarks/RESULTS.md, *Dedup's global phase: a unit's
# partition*); sized at 2x, the pieces being read and the edges' writes have room under the budget. It was 4x
# (``partitions_for``'s default) while a partition sorted through a ``lexsort`` index, which took 4.9-5.1x.
PARTITION_EXPANSION = 2.0
# Output partitions of the global phase's labels and exact duplicates (shard i's are in partition
# i % this): files the gather writes, each holding one batch per shard it covers.
MAX_OUT_PARTITIONS = 256
_WORKER_BASE = 768 << 20  # a worker process with pyarrow, numba and the kernels loaded


# What reading the spill file by file costs and what packing costs (benchmarks/bench_spill_pack.py, RESULTS.md
# *Packed spill*): an open of a file for a unit's range (on a local disk CPU seconds, growing with the
# partitions its footer lists; on an object store the wall seconds of ~4 requests on a loopback S3, a floor),
# each (partition, file) piece's own decode (a pack's range decodes as one stream), and the copy per byte and
# per batch.
_LOCAL_OPEN_S, _LOCAL_OPEN_S_PER_PARTITION, _PIECE_S = 30e-6, 40e-9, 15e-6
_LOCAL_PACK_S_PER_BYTE, _PACK_S_PER_BATCH = 2.5e-9, 3e-6
_REMOTE_OPEN_S, _REMOTE_PACK_S_PER_BYTE = 22e-3, 44e-9


def spill_groups(
    shards: int, units: int, partitions: int, spill_bytes: int, memory_budget: int, remote: bool = False
) -> list[range]:
    """Consecutive shards whose spill files the global phase reads packed as one (empty: each file alone).

    Every unit opens every spill file for its range of partitions: units x shards opens (ranged GETs on an
    object store), and at a fixed memory budget the units grow with the data, so the term grows with its
    square. Packed k to a group it is units x shards / k, for one more copy of the spill (its batches as
    stored, :mod:`~airflow_curation.core.spill_pack`); see :func:`pack_groups`.

    :param remote: the spill is on an object store (an open costs requests, the copy a GET and a PUT).
    """
    return pack_groups(shards, units, partitions, spill_bytes, memory_budget, remote, kinds=2)


def pack_groups(
    sources: int,
    readers: int,
    partitions: int,
    total_bytes: int,
    memory_budget: int,
    remote: bool = False,
    kinds: int = 1,
) -> list[range]:
    """Consecutive ``sources`` (each ``kinds`` files written by :func:`~airflow_curation.core.lsh.write_partitioned`
    in ``partitions`` partitions, ``total_bytes`` in all) packed by group, for ``readers`` tasks that each open
    every file for their partitions (empty: each file alone). A group holds at most half the memory budget
    (the packing task holds it whole); files are packed only where the opens saved cost more than the copy."""
    if readers <= 1 or sources <= 1:
        return []
    per_source = total_bytes / sources
    k = min(sources, int(memory_budget // max(1.0, 2 * per_source)))
    if k <= 1:
        return []
    if remote:
        open_s, byte_s = _REMOTE_OPEN_S, _REMOTE_PACK_S_PER_BYTE
    else:
        open_s, byte_s = _LOCAL_OPEN_S + partitions * _LOCAL_OPEN_S_PER_PARTITION, _LOCAL_PACK_S_PER_BYTE
    saved = kinds * (readers * open_s + partitions * _PIECE_S) * (1 - 1 / k)
    cost = per_source * byte_s + kinds * partitions * _PACK_S_PER_BATCH
    if saved <= cost:
        return []
    return [range(i, min(i + k, sources)) for i in range(0, sources, k)]


def edge_bytes(totals: dict) -> int:
    """The bytes of the edges the global phase's units wrote (``totals``: their counts): both directions of
    each, :data:`~airflow_curation.core.components.EDGE_ROW_BYTES` a row."""
    return 2 * (totals["verified"] + totals["exact_edges"]) * EDGE_ROW_BYTES


def _inputs(s: dict) -> list[str]:
    """A shard's unit inputs: the shard, its preprocess attrs (keep) and its cleaned text, once each."""
    return list(dict.fromkeys([s["uri"], *(u for u in (s["keep_uri"], s.get("text_uri")) if u)]))


def _units(shards: list[dict], run_key: str) -> list[UnitEntry]:
    """A unit per shard; its checksum joins the shard's with the run key, so a new run redoes every unit."""
    return [
        UnitEntry(
            unit_id=s["shard_id"], inputs=_inputs(s), input_checksum=f"{s['input_checksum']}#{run_key}", rows=s["rows"]
        )
        for s in shards
    ]


def _encode_reads(reads: list[tuple[str, str]]) -> list[list]:
    """Which attrs each shard of a plan reads (``(keep key, cleaned-text key)``, in manifest order) as runs
    ``[count, keep, text]``: the shards of one upstream run share their attrs' columns, so a plan is a few
    runs whatever its shard count, and a task decodes its block's without reading every shard's."""
    runs: list[list] = []
    for keep, text in reads:
        if runs and runs[-1][1:] == [keep, text]:
            runs[-1][0] += 1
        else:
            runs.append([1, keep, text])
    return runs


def _decode_reads(runs, block: range, total: int) -> list[tuple[str, str]] | None:
    """The pairs of :func:`_encode_reads` at the positions of ``block``; None where ``runs`` is absent or does
    not cover ``total`` shards (a key file written before it was recorded, or not by this code)."""
    try:
        if sum(int(r[0]) for r in runs) != total or any(len(r) != 3 for r in runs):
            return None
    except (TypeError, ValueError, IndexError):
        return None
    out: list[tuple[str, str]] = []
    at = 0
    for count, keep, text in runs:
        lo, hi = max(at, block.start), min(at + count, block.stop)
        out += [(keep, text)] * max(0, hi - lo)
        at += count
        if at >= block.stop:
            break
    return out


class DedupSignaturesStage(BlockPass, Stage):
    """Phase 1 as a stage of its own, so that each shard's spill files are checkpointed and a rerun
    signs only the shards not done yet. Built and run by :class:`DedupStage`."""

    name = "dedup_signatures"
    version = "2"  # 2: spill files named .arrow (were .parquet)
    SETTINGS = Stage.SETTINGS.extend(
        Setting("params", dict, {}, "DedupParams, as a dict", cli=False),
        Setting("keep_column", str, KEEP, "the column of upstream attrs that says which rows to consider", cli=False),
        Setting("shards", list, [], "the shards to sign (DedupStage's plan)", runtime=True, cli=False),
        BLOCK,
        Setting("batch_rows", int, 8192, "rows per batch", runtime=True, cli=False, minimum=1),
    )

    @property
    def params(self) -> DedupParams:
        p = dict(self.config["params"])
        return DedupParams(**{**p, "minhash": MinHashParams(**p["minhash"])})

    def spill_uris(self, shard_id: str) -> tuple[str, str]:
        base = self.lake.path("dedup", self.fingerprint, "spill")
        return (
            storage.join(base, f"{shard_id}.bands{SPILL_SUFFIX}"),
            storage.join(base, f"{shard_id}.exact{SPILL_SUFFIX}"),
        )

    def ids_uri(self, shard_id: str) -> str:
        """The shard's ids and keep mask, written by phase 1 for phase 3 (:func:`.phases.write_ids`)."""
        return storage.join(self.lake.path("dedup", self.fingerprint, "spill"), f"{shard_id}.ids.arrow")

    def plan(self) -> list[UnitEntry]:
        return [
            UnitEntry(unit_id=s["shard_id"], inputs=_inputs(s), input_checksum=s["input_checksum"])
            for s in self.config["shards"]
        ]

    def process_unit(self, unit: UnitEntry) -> UnitResult:
        if getattr(self, "_by_id", None) is None:
            self._by_id = {s["shard_id"]: s for s in self.config["shards"]}
        s = self._by_id[unit.unit_id]
        inputs = [(s["uri"], s.get("checksum"), f"shard {unit.unit_id}")]
        if s["keep_uri"]:
            inputs.append((s["keep_uri"], s.get("keep_checksum"), f"preprocess attrs of shard {unit.unit_id}"))
        if s.get("text_uri") and s["text_uri"] != s["keep_uri"]:
            inputs.append((s["text_uri"], s.get("text_checksum"), f"cleaned text of shard {unit.unit_id}"))
        bands_uri, exact_uri = self.spill_uris(unit.unit_id)
        with verified_reads(inputs):  # each input fetched once: verified, then parsed from those bytes
            stats = phases.sign_shard(
                ShardText(s["uri"], s.get("text_uri"), s.get("user_file", False)),
                s["index"],
                s["keep_uri"],
                self.config["keep_column"],
                self.params,
                bands_uri,
                exact_uri,
                int(self.config["batch_rows"]),
                self.ids_uri(unit.unit_id),
            )
        acc = RowAccounting()
        acc.keep(stats["considered"])
        if stats["rows"] > stats["considered"]:
            acc.drop("not_kept_upstream", stats["rows"] - stats["considered"])
        return UnitResult(outputs=[], accounting=acc, extra=stats)


class DedupStage(AttrsStage):
    """Global exact and MinHash-LSH near dedup: cluster_id and is_duplicate for every row.

    Finds exact (normalised content) and near (Jaccard >= threshold) duplicates across all inputs and writes
    id, cluster_id, is_duplicate, exact_duplicate and near_duplicate: attrs/dedup/ in a lake, or
    DIR/<file>.parquet for plain Parquet files. The LSH layout (bands x rows) defaults to the one with the
    least weighted false-positive + false-negative area for threshold and num_perm. See docs/dedup.md.
    """

    name = "dedup"
    version = "1"
    # boilerplate first: two pages that differ only by their menus are exact duplicates once it ran
    UPSTREAM = ("boilerplate", "preprocess", "ingest")
    # A global barrier: a shard's clusters depend on every other shard (the components of all partitions),
    # so it cannot start on single upstream shards; its per-shard attrs stream out to enrich.
    STREAMS = False
    SETTINGS = AttrsStage.SETTINGS.extend(
        Setting(
            "threshold",
            float,
            0.8,
            "Jaccard similarity at which two documents are near duplicates",
            minimum=0,
            maximum=1,
        ),
        Setting("num_perm", int, 128, "MinHash permutations", minimum=1),
        Setting("ngram", int, 5, "tokens per shingle", minimum=1),
        Setting("tokenizer", str, "word", "word (\\w+), space or char", choices=("word", "space", "char")),
        Setting("normalization", str, "NFKC", "Unicode normalization before hashing"),
        Setting("lowercase", bool, True, "lowercase before hashing"),
        Setting("seed", int, 1, "permutation seed"),
        Setting("bands", int, None, "LSH bands (default: derived from threshold and num_perm)", minimum=1),
        Setting("rows", int, None, "LSH rows per band (with bands)", minimum=1),
        Setting("exact", bool, True, "find exact duplicates (normalised-content hash)"),
        Setting("near", bool, True, "find near duplicates (MinHash-LSH)"),
        Setting("verify", bool, False, "keep only candidate pairs whose exact Jaccard reaches threshold"),
        Setting(
            "only_kept",
            bool,
            True,
            "consider only the rows preprocess kept (its keep column), when present",
            off_flag="--all-rows",
        ),
        Setting("keep_column", str, KEEP, "the column of upstream attrs that says so"),
        Setting(
            "memory_budget",
            size,
            1 << 30,
            "memory for one partition of the global phase, e.g. 512MB; sets the partition count",
            runtime=True,
            minimum=1,
        ),
        Setting("partitions", int, None, "force the partition count", runtime=True, minimum=0),
        Setting(
            "components_merge",
            str,
            "auto",
            "merge each connected-components step's input files by chunk of its tasks and group of files first "
            "(auto: where the reads are many and small and merging at least halves them; docs/dedup.md)",
            choices=("auto", "on", "off"),
            runtime=True,
        ),
        Setting(
            "global_units",
            int,
            None,
            "units of the global phase, each a contiguous range of partitions (default: the slots, i.e. "
            "workers or the Dask cluster's threads; never fewer than the memory budget needs)",
            runtime=True,
            minimum=0,
        ),
        Setting(
            "mapper",
            str,
            "local",
            "where work runs: local (in-process / a process pool of workers) or dask "
            "(one cluster for every phase: scheduler_address, or a LocalCluster)",
            choices=("local", "dask"),
            runtime=True,
        ),
        Setting("scheduler_address", str, None, "run on this Dask cluster instead of a LocalCluster", runtime=True),
        Setting("batch_rows", int, 8192, "rows per batch when signing", runtime=True, minimum=1),
        Setting(
            "across_snapshots",
            bool,
            False,
            "in a snapshot of a lake: also mark rows that duplicate a document of an earlier snapshot "
            "(probing the buckets every snapshot persists); run the dates in order",
            runtime=True,  # enters the fingerprint through fingerprint below, only where it has an effect
        ),
        Setting(
            "prior_indexes",
            list,
            None,
            "set by the stage, not by users: the earlier snapshots' indexes it probes (in the fingerprint)",
            runtime=True,
            cli=False,
        ),
        Setting(
            "unprobed_snapshots",
            list,
            None,
            "set by the stage, not by users: the earlier snapshots with no index it could probe (not fingerprinted)",
            runtime=True,
            cli=False,
        ),
        renamed={"engine": "mapper"},
    )

    @classmethod
    def check_config(cls, config: dict[str, Any]) -> None:
        super().check_config(config)
        if not (config["exact"] or config["near"]):
            raise ValueError("dedup: nothing to do with exact=False and near=False")
        dedup_params(config)

    def __init__(self, lake, config, run_id) -> None:
        super().__init__(lake, config, run_id)
        c = self.config
        self.params = dedup_params(c)
        self._ids_files: dict[str, str | None] = {}  # phase 3: each shard's ids file, where phase 1 wrote one
        # Which earlier snapshots this run probes is decided once, here, and enters the fingerprint: a rerun
        # of snapshot N after N+1 exists probes the same ones (only earlier dates), and a rerun after an
        # earlier snapshot was added or rerun recomputes.
        # Every snapshot of a lake persists its index (so that turning across_snapshots on later still
        # probes all earlier dates); only across_snapshots probes.
        self.persists = bool(lake.snapshot and not c.get("inputs"))
        self.incremental = bool(c["across_snapshots"] and self.persists)
        key = snapshots.index_key(self.params)
        self.config["prior_indexes"] = snapshots.find_priors(lake, key) if self.incremental else []
        unprobed = snapshots.unindexed_earlier(lake, self.config["prior_indexes"]) if self.incremental else []
        self.config["unprobed_snapshots"] = unprobed  # recorded in the manifest beside prior_indexes
        if unprobed:
            log.warning(
                "dedup across snapshots: the earlier snapshots %s have no finished dedup index with these "
                "parameters (still running, failed or other settings): duplicates of their documents are not "
                "marked in %s; rerun this date after theirs finish (docs/dedup.md, Across snapshots)",
                ", ".join(unprobed),
                lake.snapshot,
            )

    @property
    def fingerprint(self) -> str:
        """The settings' fingerprint; across snapshots, also the earlier indexes probed (their snapshots and
        checksums), so a run that probes others is a different run. Runs in a lake without snapshots (or
        with ``across_snapshots`` off) keep the fingerprints they always had."""
        base = super().fingerprint
        if not getattr(self, "incremental", False):
            return base
        priors = [(p["snapshot"], p["checksum"]) for p in self.config["prior_indexes"]]
        return config_fingerprint(self.name, {"settings": base, "across_snapshots": priors}, self.version)

    # -- where things run ------------------------------------------------------------------------
    def default_mapper(self) -> UnitMapper:
        """``local``: in-process or a process pool of ``workers``. ``dask``: one cluster for every phase
        (``scheduler_address``, or a LocalCluster sized from the memory budget, started once and closed
        in :meth:`collect` or at exit), through the shared Dask mapper."""
        if self.config["mapper"] != "dask":
            return local_mapper(int(self.config.get("workers", 1)))
        from airflow_curation.stages.mappers.dask import dask_mapper

        address = self.config.get("scheduler_address")
        if not address:
            cluster = self._local_cluster()
            if cluster is None:  # a plan of one worker runs in this process, as the Dask mapper runs one
                return local_mapper(1)
            address = cluster.scheduler_address
        return dask_mapper(address)

    def _local_cluster(self):
        """The LocalCluster every phase shares, started once; None where the plan gives one worker (a cluster
        of one would only add its start-up to every task of an array)."""
        if getattr(self, "_cluster", None) is None and not getattr(self, "_one_worker", False):
            from airflow_curation.stages.mappers.budget import available_memory, plan_workers

            self._wait_for_upstream()  # the runner asks for its mapper before it plans
            # A worker holds one shard's batch (phases 1, 3) or one partition (phase 2, sized by
            # memory_budget), plus the interpreter with pyarrow and the compiled kernels.
            sizes = [e.bytes for e in self.entries().values()] or [0]
            per_worker = _WORKER_BASE + max(8 * max(sizes), int(self.config["memory_budget"]))
            plan = plan_workers(
                sizes, expansion=8.0, base_bytes=_WORKER_BASE, max_workers=int(self.config.get("workers") or 0) or None
            )
            workers = max(1, min(plan.workers, int(0.8 * available_memory()) // per_worker))
            if workers == 1:
                log.info("dedup: one Dask worker planned: every phase in this process (%s)", plan.to_dict())
                self._one_worker = True
                return None
            import atexit

            from distributed import LocalCluster

            log.info(
                "dedup: Dask LocalCluster of %d workers, %d MiB each (%s)", workers, per_worker >> 20, plan.to_dict()
            )
            self._cluster = LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0", memory_limit=per_worker
            )
            atexit.register(self.close)
        return getattr(self, "_cluster", None)

    def close(self) -> None:
        cluster, self._cluster = getattr(self, "_cluster", None), None
        if cluster is not None:
            cluster.close()

    def __getstate__(self) -> dict:
        # Units travel to workers with the stage; a cluster handle does not.
        return {k: v for k, v in self.__dict__.items() if k != "_cluster"}

    # -- inputs ----------------------------------------------------------------------------------
    def reads_attrs(self, entry: ShardEntry) -> list[str]:
        """Preprocess's attrs, when ``only_kept`` and they have the ``keep_column``."""
        uri = entry.attrs.get("preprocess") if self.config["only_kept"] else None
        if not uri:
            return []
        names = attrs_columns(entry, "preprocess")  # recorded in the entry: no footer read
        return ["preprocess"] if self.config["keep_column"] in names else []

    def _shard(self, e: ShardEntry, index: int, read: tuple[str, str] | None = None) -> tuple[dict, bool, tuple]:
        """What phases 1 and 3 know of the shard at position ``index``, whether its input checksum follows
        from the manifest alone (every attrs checksum recorded there, none hashed from the file), and which
        attrs it reads: ``(keep key, cleaned-text key)``, ``""`` for none.

        :param read: that pair as the whole plan found it in the attrs files' footers (:func:`_encode_reads`):
            given, no footer is opened."""
        if read is None:
            # the entry's recorded attrs columns (footer reads for an entry without them): does preprocess's
            # attrs have the keep column? which holds the cleaned text, read in the place of the shard's?
            keep = self.reads_attrs(e)
            text = clean_text_attrs(e)
        else:
            keep, text = ([read[0]] if read[0] else []), ([read[1]] if read[1] else [])
        keep_uri = e.attrs[keep[0]] if keep else None
        keep_checksum = self.attrs_checksum(e, keep[0]) if keep else None
        text_uri = e.attrs[text[0]] if text else None
        text_checksum = self.attrs_checksum(e, text[0]) if text else None
        checksum = f"{e.checksum}+{keep_checksum or '-'}@{index}" + (f"+text:{text_checksum}" if text else "")
        recorded = all(e.attrs_checksums.get(k) for k in (*keep, *text))
        return (
            {
                "shard_id": e.shard_id,
                "uri": e.uri,
                "index": index,
                "keep_uri": keep_uri,
                "text_uri": text_uri,
                "checksum": e.checksum,
                "keep_checksum": keep_checksum,
                "text_checksum": text_checksum,
                "rows": e.rows,
                "input_checksum": checksum,
                "user_file": self.user_files,
            },
            recorded,
            (keep[0] if keep else "", text[0] if text else ""),
        )

    def _sig_stage(self, rows: int, shards: list[dict]) -> tuple[DedupSignaturesStage, DedupParams, int]:
        """Phase 1's stage for ``rows`` rows in all (its partitions follow from them), and the output partitions."""
        self._spilled = self._spill_bytes(rows)
        parts, self._units, self._cc_parts = self._layout(self._spilled)
        params = DedupParams(**{**asdict(self.params), "minhash": self.params.minhash, "partitions": parts})
        sig_config = {
            "params": {**asdict(params)},
            "keep_column": self.config["keep_column"],
            "shards": shards,
            "batch_rows": self.config["batch_rows"],
            "max_attempts": self.config.get("max_attempts", 2),
            "max_failed_fraction": 0.0,
        }
        return DedupSignaturesStage(self.lake, sig_config, self.run_id), params, parts

    def _spill_bytes(self, rows: int) -> int:
        return rows * (_BAND_BYTES * self.params.bands * self.params.near + _EXACT_BYTES * self.params.exact)

    def _fit_to_signed(self, signed: Manifest, parts: int) -> None:
        """Units and components partitions for the rows phase 1 signed (those kept upstream), not for every row
        as planned: a corpus that preprocess mostly dropped gets a global phase of its own size, not units x
        shards spill reads and components partitions squared sized for rows it never spilled. The partitions
        stay as planned (they are in the spill files and the fingerprint); no label depends on either."""
        signed_rows = int(signed.accounting.get("kept", 0))
        self._spilled = self._spill_bytes(signed_rows)
        _, units, cc_parts = self._layout(self._spilled)
        self._units, self._cc_parts = min(units, parts), min(cc_parts, parts)
        log.info("dedup: %d rows signed: %d units, %d for the components", signed_rows, self._units, self._cc_parts)

    def _plan_key_uri(self, sig: DedupSignaturesStage) -> str | None:
        """Where the run key of this plan is kept for the tasks of an array (:func:`.barrier.plan_key_uri`)."""
        return plan_key_uri(self.lake, "dedup", self.config.get("input_manifest"), [sig.fingerprint, self.fingerprint])

    def plan_group(self, index: int, count: int) -> list[UnitEntry]:
        """Group ``index`` of ``count`` of an array (not group 0): once the global phase of this plan is done (a
        rerun, a task that starts after the barrier), its units from the upstream manifest's pages of its block
        only and the run key from the file the whole plan left (:meth:`_plan_key_uri`); what it reads grows with
        its own shards. Before that, it signs its block from its pages, and only the task that then does the
        global phase plans the whole run (:func:`~airflow_curation.stages.barrier.plan_group_around`)."""
        if self.config.get("inputs"):
            return super().plan_group(index, count)
        clear_caches()
        self._wait_for_upstream()
        return plan_group_around(
            lambda: self._plan_from_pages(index, count),
            lambda: self._sign_block(index, count),
            global_lease(self.lake, "dedup", "dedup's global phase"),
            self._plan_whole,
            index,
            count,
        )

    def _plan_from_pages(self, index: int, count: int) -> list[UnitEntry] | None:
        """Group ``index`` of ``count`` from its pages, or None while the global phase of this plan is not done."""
        head = upstream_head(self.config["input_manifest"])
        sig, params, parts = self._sig_stage(head.rows, [])
        doc = read_plan_key(self._plan_key_uri(sig))
        run_key = doc.get("run_key")
        if not run_key or not self._globals_done(run_key):
            return None
        self._group = (index, count)  # entries(): this block's shards only, here and in workers
        block = group_range(head.shard_count, index, count)
        # Which attrs each shard reads, as the whole plan found them (a key file from before it recorded
        # them: the footers are read, as then).
        reads = _decode_reads(doc.get("reads"), block, head.shard_count)
        shards = [
            self._shard(e, block.start + k, reads[k] if reads else None)[0]
            for k, e in enumerate(self.entries().values())
        ]
        sig.config["shards"] = shards
        self._shards = {s["shard_id"]: s for s in shards}
        self._sig = sig
        out_parts = max(1, min(head.shard_count, MAX_OUT_PARTITIONS))
        self._run_key = run_key
        self._global = self._phase2(sig, params, shards, run_key, out_parts)  # reads its _SUCCESS.json
        self._prior = self._probe(sig, params, shards, run_key, out_parts) if self.incremental else None
        log.info(
            "dedup: group %d/%d: %d shards planned from their pages (run key %s)", index, count, len(shards), run_key
        )
        return _units(shards, run_key)

    def _sign_block(self, index: int, count: int) -> None:
        """Phase 1 for the shards of block ``index`` of ``count`` only, read from their pages."""
        head = upstream_head(self.config["input_manifest"])
        block = group_range(head.shard_count, index, count)
        self._group = (index, count)
        shards = [self._shard(e, block.start + k)[0] for k, e in enumerate(self.entries().values())]
        self._group = None
        sig, _, _ = self._sig_stage(head.rows, shards)
        sig.config["block"] = True
        StageRunner(sig, self.default_mapper()).run(shard_group=(index, count))

    # -- phases 1 and 2 happen while planning phase 3 ----------------------------------------------
    def plan(self) -> list[UnitEntry]:
        return self._plan_whole(global_lease(self.lake, "dedup", "dedup's global phase"))

    def _plan_whole(self, lease: Lease | None) -> list[UnitEntry]:
        """Every unit of the run, phases 1 and 2 done first (under ``lease``; None: the caller holds it)."""
        clear_caches()  # a rerun in this process must see the inputs as they are now
        self._wait_for_upstream()
        self._group = None
        # Manifest order (shard, then row) decides each cluster's keeper: the order is kept as listed.
        entries = list(self.entries().values())
        planned = [self._shard(e, index) for index, e in enumerate(entries)]
        shards = [s for s, _, _ in planned]
        rows = sum(e.rows for e in entries)
        sig, params, parts = self._sig_stage(rows, shards)
        out_parts = max(1, min(len(entries), MAX_OUT_PARTITIONS))
        log.info(
            "dedup: %d shards, %d rows, %d bands x %d rows, %d partitions in %d units, %d for the components "
            "(memory budget %d bytes)",
            len(entries),
            rows,
            self.params.bands,
            self.params.rows,
            parts,
            self._units,
            self._cc_parts,
            self.config["memory_budget"],
        )
        run_key = hashlib.sha256(
            (sig.fingerprint + "|" + "|".join(s["input_checksum"] for s in shards)).encode()
        ).hexdigest()[:16]
        self._shards = {s["shard_id"]: s for s in shards}
        self._sig = sig
        self._run_key = run_key
        self._global_phases(sig, params, shards, run_key, out_parts, lease)
        key_uri = self._plan_key_uri(sig) if all(recorded for _, recorded, _ in planned) else None
        if key_uri:  # the tasks of an array that plan after this find the run key without the whole plan,
            # and which attrs each shard reads without opening their footers (two a shard: issue 20)
            reads = _encode_reads([read for _, _, read in planned])
            storage.write_json(key_uri, {"run_key": run_key, "shards": len(shards), "reads": reads})
        return _units(shards, run_key)

    def _global_phases(
        self,
        sig: DedupSignaturesStage,
        params: DedupParams,
        shards: list[dict],
        run_key: str,
        out_parts: int,
        lease: Lease | None,
    ) -> None:
        """Phases 1 and 2 (and the probe of earlier snapshots), once for all the tasks of a run.

        One task of an array (``shard_group``) first signs its own shards (its contiguous block of positions) beside
        the other tasks, under the array's run (no lease). The rest is done once, by whoever holds
        ``_locks/dedup.global.lease`` first; the other tasks wait while it lives (a dead holder's lease is
        taken over) and then read its ``_SUCCESS.json``. The holder signs what is still missing (the
        shards of tasks not started yet: with ``array_parallelism`` below the groups, those may never run
        before it) and runs the global phase. A whole run takes the lease without contention. ``lease`` None:
        the caller holds it and signed its block already (:meth:`plan_group`)."""
        if self._globals_done(run_key):
            self._global = self._phase2(sig, params, shards, run_key, out_parts)  # reads its _SUCCESS.json
            self._prior = self._probe(sig, params, shards, run_key, out_parts) if self.incremental else None
            return
        group = self.shard_group
        if lease is not None and group is not None and group[1] > 1:
            StageRunner(sig, self.default_mapper()).run(shard_group=group)
        with held(lease):
            if not self._globals_done(run_key):  # else another task did it while this one waited
                self._fit_to_signed(StageRunner(sig, self.default_mapper()).run(), params.partitions)
                fault_point("dedup.after_signatures")
            self._global = self._phase2(sig, params, shards, run_key, out_parts)
            self._prior = self._probe(sig, params, shards, run_key, out_parts) if self.incremental else None

    def _globals_done(self, run_key: str) -> bool:
        """Whether the global phase (and, across snapshots, the probe) of this run key is done."""
        if not storage.exists(self.lake.path("dedup", run_key, "_SUCCESS.json")):
            return False
        probed = not (self.incremental and self.config["prior_indexes"])
        return probed or storage.exists(storage.join(self._probe_dir(run_key), "_SUCCESS.json"))

    def _layout(self, spill_bytes: int) -> tuple[int, int, int]:
        """(LSH partitions, global-phase units, components partitions).

        Units: at least the slots that run them (else workers idle through the barrier), and at least what
        the memory budget needs (a unit holds its range of every spill file). Partitions: at least the
        units, each unit a contiguous range of them (it opens each spill file once for its range), a
        power of two where later snapshots read them nested. A forced ``partitions`` is taken as it is,
        with at most that many units. The components' partitions follow the memory budget alone: their
        steps read every partition of every edge file (partitions squared), over edges that are a fraction
        of the spill. None of the three changes a label."""
        memory = partitions_for(spill_bytes, int(self.config["memory_budget"]), PARTITION_EXPANSION)
        forced = self.config["partitions"]
        units = max(memory, self._slots())
        parts = int(forced) if forced else units
        if self.persists:  # later snapshots read this one's spills partition by partition (nested counts)
            parts = next_power_of_two(parts)
        return parts, min(units, parts), min(parts, int(forced) if forced else memory)

    def _slots(self) -> int:
        """Units that can run at once: ``global_units``, else the workers of the mapper."""
        if self.config["global_units"]:
            return max(1, int(self.config["global_units"]))
        if self.config["mapper"] == "dask":
            address = self.config.get("scheduler_address")
            if not address:
                cluster = self._local_cluster()
                return max(1, len(cluster.workers)) if cluster is not None else 1
            from distributed import Client

            with Client(address) as client:
                return max(1, sum(client.nthreads().values()))
        return max(1, int(self.config.get("workers") or 1))

    def _phase2(
        self, sig: DedupSignaturesStage, params: DedupParams, shards: list[dict], run_key: str, out_parts: int
    ) -> dict:
        gdir = self.lake.path("dedup", run_key)
        done_uri = storage.join(gdir, "_SUCCESS.json")
        if storage.exists(done_uri):
            log.info("dedup: global phase already done (%s)", done_uri)
            return self._read_done(done_uri)
        parts, cc_parts = params.partitions, self._cc_parts
        ranges = partition_ranges(parts, self._units)
        band_uris = [sig.spill_uris(s["shard_id"])[0] for s in shards]
        exact_uris = [sig.spill_uris(s["shard_id"])[1] for s in shards]
        budget = int(self.config["memory_budget"])
        groups = spill_groups(len(shards), len(ranges), parts, self._spilled, budget, not storage.is_local(gdir))
        if groups:
            started = time.monotonic()
            folder = storage.join(gdir, "packed")
            band_uris = self._pack(band_uris, groups, folder, "bands")
            exact_uris = self._pack(exact_uris, groups, folder, "exact")
            log.info(
                "dedup: the spill of %d shards packed into %d groups in %.1f s, read by %d units",
                len(shards),
                len(groups),
                time.monotonic() - started,
                len(ranges),
            )
        shard_uris = [(s["uri"], s.get("text_uri"), s.get("user_file", False)) for s in shards]
        edge_uris = [storage.join(gdir, "edges", f"unit-{u:05d}{SPILL_SUFFIX}") for u in range(len(ranges))]
        exact_dup_uris = [storage.join(gdir, "exact", f"unit-{u:05d}{SPILL_SUFFIX}") for u in range(len(ranges))]
        stats = list(
            self.default_mapper()(
                phases.bucket_partitions,
                [
                    (
                        lo,
                        hi,
                        band_uris,
                        exact_uris,
                        shard_uris,
                        params,
                        cc_parts,
                        out_parts,
                        edge_uris[u],
                        exact_dup_uris[u],
                    )
                    for u, (lo, hi) in enumerate(ranges)
                ],
            )
        )
        if groups:  # a copy, read: the shards' own spill files stay (reruns, later snapshots)
            for uri in band_uris + exact_uris:
                storage.remove(uri)
        totals = {k: sum(s[k] for s in stats) for k in ("candidates", "verified", "exact_edges")}
        # The edge files were written in cc_parts partitions, sized (before any edge existed) for the whole
        # spill; the components run in what the edges counted need, each of its steps reading partitions x
        # files pieces (squared): at 50 TB ~1/5 of the spill's partitions, 1/25 of the pieces.
        written, cc_parts = cc_parts, self._components_partitions(totals, cc_parts)
        # The units' outputs are read as the spill is: each components partition opens every unit's edge file,
        # each output partition every unit's exact-duplicate file, units x partitions opens, and the units
        # follow the slots (16,384 on 256 nodes: ~8 M opens). Packed where that pays, as the spill is.
        remote = not storage.is_local(gdir)
        edge_groups = pack_groups(len(ranges), cc_parts, written, edge_bytes(totals), budget, remote)
        exact_groups = pack_groups(len(ranges), out_parts, out_parts, totals["exact_edges"] * 8, budget, remote)
        folder = storage.join(gdir, "packed-units")
        edge_inputs = self._pack(edge_uris, edge_groups, folder, "edges") if edge_groups else edge_uris
        exact_inputs = self._pack(exact_dup_uris, exact_groups, folder, "exact") if exact_groups else exact_dup_uris
        # Each step in the partitions its live edges need (finished stars leave the graph as they are found),
        # but a forced ``partitions`` keeps them all.
        components = connected_components(
            edge_inputs,
            storage.join(gdir, "components"),
            cc_parts,
            out_parts,
            self.default_mapper(),
            input_partitions=written,
            memory_budget=None if self.config["partitions"] else budget,
            merge=self.config["components_merge"],
            merge_budget=budget,
            input_bytes=edge_bytes(totals),
        )
        label_uris = components.labels
        # Phase 3 reads its shard's output partition of the labels and of the exact duplicates: from every
        # unit's and components partition's file that is that many opens per shard, a pairs term that grows
        # with the square of the data. Gathered by output partition first, it is two opens per shard; one
        # batch per shard in each gathered file, and it reads its own rows alone, not those of the
        # shards / out_partitions shards that share its partition (at 50,000 shards, 195 shards' rows).
        gathered = len(label_uris) > 1 or len(exact_dup_uris) > 1
        if gathered:
            label_uris = self._gather(label_uris, storage.join(gdir, "labels-by-out"), LABEL_COLUMNS, out_parts)
            exact_dup_uris = self._gather(
                exact_inputs, storage.join(gdir, "exact-by-out"), phases.NODE_COLUMNS, out_parts
            )
        for uri in (edge_inputs if edge_groups else []) + (exact_inputs if exact_groups else []):
            storage.remove(uri)  # copies: the units' own files stay
        result = {
            "labels": label_uris,
            "exact": exact_dup_uris,
            "gathered": gathered,
            "by_shard": gathered,
            "out_partitions": out_parts,
            "partitions": parts,
            "units": len(ranges),
            "components_partitions": cc_parts,
            "edge_partitions": written,
            "components_rounds": components.rounds,
            "components_reads": components.reads,
            "components_merged_steps": components.merged,
            "components_steps": list(components.steps),
            "spill_groups": len(groups),
            "edge_groups": len(edge_groups),
            "exact_groups": len(exact_groups),
            "bands": params.bands,
            "rows": params.rows,
            **totals,
        }
        log.info("dedup: global phase done: %s", totals)
        self._write_done(done_uri, result)
        return result

    def _components_partitions(self, totals: dict, written: int) -> int:
        """The components' partitions for the edges the units wrote (:func:`edge_bytes`), at most the ``written``
        ones; a forced ``partitions`` keeps them all."""
        if self.config["partitions"]:
            return written
        return min(written, partitions_for(edge_bytes(totals), int(self.config["memory_budget"])))

    def _pack(self, uris: list[str], groups: list[range], folder: str, kind: str) -> list[str]:
        """Partitioned files ``uris`` (spill, or the units' outputs) packed by ``groups`` of consecutive ones (a task a
        group)."""
        outs = [storage.join(folder, f"group-{g:05d}.{kind}{spill_pack.SUFFIX}") for g in range(len(groups))]
        list(self.default_mapper()(pack_spills, [([uris[i] for i in r], outs[g]) for g, r in enumerate(groups)]))
        return outs

    def _gather(self, uris: list[str], folder: str, columns: dict, out_parts: int) -> list[str]:
        outs = [storage.join(folder, f"part-{q:05d}{SPILL_SUFFIX}") for q in range(out_parts)]
        list(self.default_mapper()(gather_partition, [(uris, q, columns, outs[q], True) for q in range(out_parts)]))
        return outs

    # -- across snapshots ----------------------------------------------------------------------------
    def _probe(self, sig: DedupSignaturesStage, params: DedupParams, shards: list[dict], run_key: str, out_parts: int):
        """This snapshot's clusters against every earlier snapshot's index (:mod:`.snapshots`); resumable
        like phase 2 (``_SUCCESS.json``). Returns ``{"uris": [...], ...counts}``, or None with no priors."""
        priors = self.config["prior_indexes"]
        if not priors:
            return None
        pdir = self._probe_dir(run_key)
        done_uri = storage.join(pdir, "_SUCCESS.json")
        if storage.exists(done_uri):
            return self._read_done(done_uri)
        docs = snapshots.load_priors(priors, snapshots.index_key(self.params))
        inputs = snapshots.probe_inputs(docs)
        parts = params.partitions
        band_uris = [sig.spill_uris(s["shard_id"])[0] for s in shards]
        exact_uris = [sig.spill_uris(s["shard_id"])[1] for s in shards]
        match_uris = [storage.join(pdir, "match", f"part-{p:05d}{SPILL_SUFFIX}") for p in range(parts)]
        list(
            self.default_mapper()(
                snapshots.probe_partition,
                [(p, parts, band_uris, exact_uris, inputs, params, match_uris[p]) for p in range(parts)],
            )
        )
        g = self._global
        uris, counts = snapshots.resolve(
            match_uris, g["labels"], out_parts, docs, pdir, bool(g.get("gathered")), bool(g.get("by_shard"))
        )
        result = {"uris": uris, "by_shard": True, "snapshots": [p["snapshot"] for p in priors], **counts}
        log.info("dedup: probed %d earlier snapshots: %s", len(priors), counts)
        self._write_done(done_uri, result)
        return result

    def _probe_dir(self, run_key: str) -> str:
        priors = [(p["snapshot"], p["checksum"]) for p in self.config["prior_indexes"]]
        key = hashlib.sha256((run_key + "|" + repr(priors)).encode()).hexdigest()[:16]
        return self.lake.path("dedup", run_key, f"prior-{key}")

    # A global phase's ``_SUCCESS.json`` lists the files it made, stored relative to the lake root like a
    # manifest's (``core/uris.py``): a copied lake's rerun reads the copy's.
    _DONE_URI_LISTS = ("labels", "exact", "uris")

    def _done_doc(self, doc: dict, fn) -> dict:
        return {k: [fn(u) for u in v] if k in self._DONE_URI_LISTS else v for k, v in doc.items()}

    def _write_done(self, uri: str, result: dict) -> None:
        storage.write_json(uri, self._done_doc(result, lambda u: uris.relativize(u, self.lake.root)))

    def _read_done(self, uri: str) -> dict:
        return self._done_doc(storage.read_json(uri), lambda u: uris.resolve(u, self.lake.root))

    def collect(self, manifest: Manifest) -> None:
        """Persist this snapshot's index for later snapshots, once every shard is done (an index with holes
        would name documents that have no attrs)."""
        super().collect(manifest)  # plain files: their ids unique
        self.close()
        if not self.persists:
            return
        by_id = {s.shard_id: s for s in manifest.shards}
        if len(by_id) != len(self._shards) or any("dedup" not in s.attrs for s in by_id.values()):
            log.warning("dedup: some shards failed; no index for later snapshots is written")
            return
        rows = []
        for shard_id, s in sorted(self._shards.items(), key=lambda kv: kv[1]["index"]):
            bands, exact = self._sig.spill_uris(shard_id)
            e = by_id[shard_id]
            rows.append(
                {
                    "shard_id": shard_id,
                    "bands": bands,
                    "exact": exact,
                    "attrs": e.attrs["dedup"],
                    "attrs_checksum": e.attrs_checksums.get("dedup"),
                }
            )
        params = self._sig.params
        uri = snapshots.write_index(
            self.lake, snapshots.index_key(self.params), self.fingerprint, params, rows, self.config["prior_indexes"]
        )
        log.info("dedup: index for later snapshots written: %s", uri)

    # -- phase 3 -----------------------------------------------------------------------------------
    def _ids_file(self, shard_id: str) -> str | None:
        """Phase 1's ids file of the shard, where it wrote one (a shard signed before it did: None)."""
        if shard_id not in self._ids_files:
            uri = self._sig.ids_uri(shard_id)
            self._ids_files[shard_id] = uri if storage.exists(uri) else None
        return self._ids_files[shard_id]

    def verified_inputs(self, unit: UnitEntry, entry: ShardEntry) -> list[tuple[str, str | None, str]]:
        # With phase 1's ids file (checked by its own checksum) phase 3 reads neither the shard nor its attrs.
        return [] if self._ids_file(unit.unit_id) else super().verified_inputs(unit, entry)

    def write_unit(self, unit: UnitEntry, entry: ShardEntry, uri: str) -> AttrsFile:
        s = self._shards[unit.unit_id]
        g = self._global
        try:
            table = phases.shard_result(
                s["uri"],
                s["index"],
                s["keep_uri"],
                self.config["keep_column"],
                g["labels"],
                g["exact"],
                int(g["out_partitions"]),
                bool(g.get("gathered")),  # absent from a global phase done before gathering existed
                bool(g.get("by_shard")),  # absent from one gathered a partition to a batch
                self._ids_file(unit.unit_id),
                entry.rows,
            )
        except (FileNotFoundError, UnreadableSpill) as e:  # a file the phase's mark vouched for: redo the phase
            done = self.lake.path("dedup", self._run_key, "_SUCCESS.json")
            raise lost_step_files(e, [*g["labels"], *g["exact"]], done, "dedup") or e from e
        if self.incremental:
            prior = self._prior or {}
            try:
                table = snapshots.apply_prior(
                    table, s["index"], prior.get("uris"), int(g["out_partitions"]), bool(prior.get("by_shard"))
                )
            except (FileNotFoundError, UnreadableSpill) as e:  # the probe's file: redo the probe
                done = storage.join(self._probe_dir(self._run_key), "_SUCCESS.json")
                raise lost_step_files(e, list(prior.get("uris") or []), done, "dedup") or e from e
        fault_point("dedup.before_attrs")
        nbytes, checksum = write_parquet(uri, table)
        n = table.num_rows
        n_considered = int(to_numpy(table.column(CLUSTER_ID).is_valid()).sum())
        exact = int(to_numpy(table.column(EXACT_DUPLICATE)).sum())
        near = int(to_numpy(table.column(NEAR_DUPLICATE)).sum())
        acc = RowAccounting()
        acc.keep(n_considered - exact - near)
        for reason, count in (
            ("exact_duplicate", exact),
            ("near_duplicate", near),
            ("not_kept_upstream", n - n_considered),
        ):
            if count:
                acc.drop(reason, count)
        extra = {"exact_duplicates": exact, "near_duplicates": near}
        return AttrsFile(nbytes, checksum, acc, extra, table.column_names)  # its columns, for the entry


def dedup_params(c: dict[str, Any]) -> DedupParams:
    """The MinHash and LSH parameters the settings ``c`` give (bands and rows, or the threshold's)."""
    mh = MinHashParams(
        num_perm=int(c["num_perm"]),
        ngram=int(c["ngram"]),
        tokenizer=c["tokenizer"],
        normalization=c["normalization"],
        lowercase=bool(c["lowercase"]),
        seed=int(c["seed"]),
    )
    if (c["bands"] is None) != (c["rows"] is None):
        raise ValueError("dedup: give both bands and rows, or neither")
    bands, rows = (
        (int(c["bands"]), int(c["rows"])) if c["bands"] is not None else lsh_params(float(c["threshold"]), mh.num_perm)
    )
    if bands * rows > mh.num_perm or bands < 1 or rows < 1:
        raise ValueError(f"dedup: {bands} bands x {rows} rows do not fit {mh.num_perm} permutations")
    return DedupParams(
        minhash=mh,
        bands=bands,
        rows=rows,
        threshold=float(c["threshold"]),
        exact=bool(c["exact"]),
        near=bool(c["near"]),
        verify=bool(c["verify"]),
    )
