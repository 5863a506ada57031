"""Attrs stages: additive columns for every shard, one unit per shard.

:class:`AttrsStage` does what every such stage needs and none should write again:

- inputs: the complete upstream manifest (``input_manifest``), or plain Parquet files with ``id`` and
  ``text`` (``inputs`` + ``output_dir``: what ``curation <stage> FILE... --output DIR`` uses);
- the plan: one unit per shard with the rows it must read and an input checksum of the shard and of
  every upstream attrs file it reads (so that a changed input redoes that unit only);
- verification of those files against the checksums their manifest recorded;
- the output, ``attrs/<name>/<fingerprint>/<shard>.parquet`` (or ``output_dir/<shard>.parquet``), written
  atomically with its checksum, and the shard handed on with it (:meth:`ShardEntry.with_attrs`).

A subclass implements :meth:`AttrsStage.compute`, ``table -> new columns`` for a batch of the shard's rows;
the base streams the shard through it in batches of ``batch_rows`` (the whole shard when unset). Stages
with more to do (a global phase, checkpoints inside a shard) override :meth:`AttrsStage.write_unit`.
"""

from __future__ import annotations

import logging
import resource
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_curation.core import storage
from airflow_curation.core.accounting import RowAccounting
from airflow_curation.core.checkpoint import CheckpointRecord
from airflow_curation.core.faults import fault_point
from airflow_curation.core.fingerprint import checksum_url
from airflow_curation.core.integrity import shard_files, verified_reads
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest, ManifestHead, ShardEntry, UnitEntry, group_range
from airflow_curation.core.schema import DROP_REASON, ID, KEEP, TEXT, check_id_text, checked_user_rows, string_ids
from airflow_curation.core.shards import DEFAULT_ROW_GROUP_ROWS, _CountingSink, column_names, parquet_writer
from airflow_curation.core.unique_ids import repeated_ids
from airflow_curation.stages.base import Stage, StageFailed, UnitMapper, UnitResult, local_mapper
from airflow_curation.stages.plain_files import (
    check_output_owner,
    claim_output,
    file_entries,
    file_stem,
    input_files,
    same_file,
)
from airflow_curation.stages.settings import Setting
from airflow_curation.stages.text import ShardText, clean_text_attrs, clean_text_uri

log = logging.getLogger(__name__)


@dataclass
class AttrsFile:
    """What writing one shard's attrs file gave: its size and checksum, the unit's books, and details
    for the checkpoint record (``extra``)."""

    nbytes: int
    checksum: str
    accounting: RowAccounting
    extra: dict[str, Any] = field(default_factory=dict)
    columns: list[str] | None = None  # the file's columns (None: its footer is read once, by the writer's unit)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # other files for the shard, by role


# Upstream shards, read once per process: workers (Dask, a process pool) get the stage without them, so
# that 10,000 shard entries do not travel with every unit. ``group`` (i, n): only the shards of block i of n
# (``group_range``), from the manifest pages that hold them (one task of an array reads its slice, not the run).
@lru_cache(maxsize=8)
def _manifest_entries(uri: str, group: tuple[int, int] | None = None) -> dict[str, ShardEntry]:
    head = upstream_head(uri)
    if head.status != "complete":
        raise ValueError(f"upstream manifest {uri} is {head.status_text}, not complete")
    return {s.shard_id: s for s in head.shards(*(group or (0, 1)))}


# The upstream head the plan's wait found complete, which its entries are read from just after: one read of the
# head a plan, not two (on an object store a GET, tens of ms, the whole budget of a task's plan at 50,000 shards).
_complete_heads: dict[str, ManifestHead] = {}


def upstream_head(uri: str) -> ManifestHead:
    """The head of the upstream manifest ``uri`` as this plan's wait found it complete (read now where it did
    not wait: :func:`clear_caches` at each plan's start forgets the last plan's)."""
    return _complete_heads.get(uri) or ManifestHead.read(uri)


def clear_caches() -> None:
    _complete_heads.clear()
    _manifest_entries.cache_clear()
    file_entries.cache_clear()


class AttrsStage(Stage):
    """Base class of the stages that add columns to every shard.

    Settings every attrs stage has, besides the base ones: ``input_manifest`` or ``inputs`` +
    ``output_dir``, and ``upstream_wait_s`` (how long to wait for a ``planned`` upstream manifest to
    complete: the upstream gate opens on its shards' checkpoints, its job writes the final manifest just
    after).
    """

    INPUTS = "manifest_or_files"
    SETTINGS = Stage.SETTINGS.extend(
        Setting(
            "output_dir", str, None, "plain-file mode: where <file stem>.parquet results go", runtime=True, cli=False
        ),
        Setting(
            "upstream_wait_s",
            float,
            600,
            "seconds to wait for a planned upstream manifest to complete (while streaming: without a new "
            "upstream shard)",
            runtime=True,
            minimum=0,
        ),
        Setting(
            "stream",
            bool,
            True,
            "while the upstream run is still going, process its shards as their checkpoints appear",
            runtime=True,
        ),
        Setting(
            "stream_poll_s", float, 2.0, "seconds between looks at the upstream checkpoints", runtime=True, minimum=0
        ),
    )
    # Attrs stages start on single upstream shards unless they say otherwise (dedup: a global step first).
    STREAMS = True
    # The shard columns compute() is given (those the shard has).
    columns: tuple[str, ...] = (ID, TEXT)

    def __init__(self, lake, config, run_id) -> None:
        super().__init__(lake, config, run_id)
        c = self.config
        if bool(c.get("input_manifest")) == bool(c.get("inputs")):
            raise ValueError(f"{self.name}: give either input_manifest (a lake) or inputs (plain Parquet files)")
        if c.get("inputs") and not c.get("output_dir"):
            raise ValueError(f"{self.name}: plain-file inputs need output_dir")
        # Plain files as ingest takes its inputs: files, folders, globs (on an object store the shell expands none).
        self._files = input_files(c["inputs"], c["output_dir"]) if c.get("inputs") else ()
        outs = []
        for f in self._files:
            # `--output .` beside the inputs wrote each result over its input: the user's text was gone.
            for out in self.plain_outputs(file_stem(f)):
                if same_file(out, f):
                    raise ValueError(
                        f"{self.name}: the result for {f} would be written over it ({out}); give an output folder "
                        "that holds no input file"
                    )
                outs.append(out)
        if self._files:  # nor over another stage's results, or a user's files, in that folder
            check_output_owner(self.name, c["output_dir"], outs)

    # -- what a subclass writes ----------------------------------------------------------------------
    @property
    def attrs_name(self) -> str:
        """Names the output (``attrs/<attrs_name>/``) and the shards' ``attrs`` key: the stage name."""
        return self.name

    def compute(self, table: pa.Table) -> pa.Table:
        """The new columns for the rows of ``table`` (the shard's ``columns``, one batch of rows): the same
        rows in the same order. ``id`` is added in front when the result has none."""
        raise NotImplementedError

    def account(self, result: pa.Table) -> RowAccounting:
        """The books of one computed batch (default: :func:`keep_accounting`)."""
        return keep_accounting(result, self.name)

    def reads_attrs(self, entry: ShardEntry) -> list[str]:
        """The upstream attrs (keys of ``entry.attrs``) a unit reads besides the shard: they enter its
        input checksum and are verified before it runs. Default: none."""
        return []

    # -- inputs --------------------------------------------------------------------------------------
    @property
    def user_files(self) -> bool:
        """Plain-file mode: the inputs are a user's Parquet files, not shards ingest wrote and checked."""
        return bool(self.config.get("inputs"))

    def entries(self) -> dict[str, ShardEntry]:
        """The shards to process, by id: the upstream manifest's, or one per plain input file; only those of
        this task's group when it planned one (:meth:`plan_group`)."""
        group = getattr(self, "_group", None)
        if self.config.get("inputs"):
            entries = file_entries(self._files)
            if not group:
                return entries
            block = group_range(len(entries), *group)
            return dict(list(entries.items())[block.start : block.stop])
        return _manifest_entries(self.config["input_manifest"], group)

    def _wait_for_upstream(self, group: tuple[int, int] | None = None) -> None:
        """Wait while the upstream run goes on (streaming its checkpointed shards meanwhile, where the stage
        streams): while its manifest is ``planned``, or ``failed`` with a relaunch pending (its follower
        reopens it for the next attempt; :attr:`ManifestHead.relaunch_pending`). A failed upstream that no
        follower will relaunch ends the wait at once.

        :param group: the group whose plan this is (None: the whole plan). One task of an array streams its
            own block of the upstream only, also group 0, which plans every unit (``shard_group``)."""
        uri = self.config.get("input_manifest")
        if not uri:
            return
        wait = float(self.config.get("upstream_wait_s") or 0)
        started = time.monotonic()
        if self.STREAMS and self.config.get("stream") and not self.collecting:
            if self._stream_upstream(uri, group or self.shard_group):
                wait = 0.0  # already waited that long without a new upstream shard
        deadline = time.monotonic() + wait
        while _going(upstream := ManifestHead.read(uri)) and time.monotonic() < deadline:
            time.sleep(1.0)
        if upstream.status != "complete":
            setting = float(self.config.get("upstream_wait_s") or 0)
            raise ValueError(f"{self.name}: {upstream_problem(upstream, time.monotonic() - started, setting)}")
        _complete_heads[uri] = upstream

    # -- streaming -----------------------------------------------------------------------------------
    def _stream_upstream(self, uri: str, group: tuple[int, int] | None = None) -> bool:
        """While the upstream run goes on (its manifest ``planned``, or failed with a relaunch pending), process
        the shards of the upstream units already checkpointed, pass after pass, each unit through the same
        retries and checkpoints as the run proper. Returns when the upstream run is over (complete: the normal
        plan then finds these units done and skips them; or failed for good: False) or no new upstream shard
        came for ``upstream_wait_s`` (True).

        One task of an array (``group`` (i, n)) streams the upstream units of block i of n only (group 0 too,
        although it plans the whole run: its ``shard_group``), read from the pages that hold them, and looks up
        their records one by one: a pass costs O(its units), not O(the run's), and the n tasks share the work
        instead of each doing all of it (no unit is run by two tasks at once). A collect step streams nothing.
        With one shard per upstream unit (every attrs stage) that block's shards are the ones its plan gets once
        the upstream completes; otherwise they are near it, and a unit another task did is found checkpointed
        and skipped."""
        from airflow_curation.stages.base import _attempt_unit  # the runner's own unit step

        wait = float(self.config.get("upstream_wait_s") or 0)
        poll = float(self.config.get("stream_poll_s") or 2.0)
        deadline = time.monotonic() + wait
        seen: set[str] = set()
        self._streamed: dict[str, ShardEntry] = {}
        mapper = None
        units: list[UnitEntry] | None = None
        while True:
            head = ManifestHead.read(uri)
            if not _going(head):
                return False
            if head.relaunch_pending != getattr(self, "_saw_pending", False):
                self._saw_pending = head.relaunch_pending
                if head.relaunch_pending:
                    log.info("%s: streaming: the upstream run failed; its relaunch is pending: waiting", self.name)
            if units is None or head.data["index"] != getattr(self, "_stream_index", None):
                units, self._stream_index = head.units(*(group or (0, 1))), head.data["index"]
            new = {sid: e for sid, e in upstream_checkpointed(head, units, group is None).items() if sid not in seen}
            if not new:
                if time.monotonic() >= deadline:
                    return True
                time.sleep(poll)
                continue
            deadline = time.monotonic() + wait
            seen.update(new)
            self._streamed.update(new)
            store = self.checkpoints
            units = [self.unit_for(sid, e) for sid, e in new.items()]
            todo = [u for u in units if store.is_done(u.unit_id, u.input_checksum, self.fingerprint) is None]
            log.info(
                "%s: streaming: %d upstream shards checkpointed so far, %d new, %d to run",
                self.name,
                len(seen),
                len(new),
                len(todo),
            )
            mapper = mapper or self.stream_mapper()
            max_attempts = int(self.config.get("max_attempts", 2))
            for unit, (status, _) in zip(todo, mapper(_attempt_unit, ((self, u, max_attempts) for u in todo))):
                log.info("%s: streaming: unit %s %s", self.name, unit.unit_id, status)

    def stream_mapper(self) -> UnitMapper:
        """Where streamed units run: on the stage's cluster when it names one (``scheduler_address``), else in
        this process or a process pool of ``workers``. A mapper that starts a cluster per call (a Dask
        LocalCluster) would pay that start on every pass; it runs what remains once the upstream completes."""
        if self.config.get("scheduler_address"):
            return self.default_mapper()
        return local_mapper(int(self.config.get("workers") or 1))

    def unit_for(self, shard_id: str, entry: ShardEntry) -> UnitEntry:
        """The unit that processes one upstream shard."""
        attrs = self.reads_attrs(entry)
        attrs += [k for k in clean_text_attrs(entry, self.attrs_name) if k not in attrs]
        return UnitEntry(
            unit_id=shard_id,
            inputs=[entry.uri, *(entry.attrs[k] for k in attrs)],
            input_checksum=self.input_checksum(entry, attrs),
            rows=entry.rows,
        )

    def entry(self, unit: UnitEntry) -> ShardEntry:
        """The shard of ``unit``; re-read when a long-lived worker's cache is older than the plan."""
        streamed = getattr(self, "_streamed", None) or {}
        if unit.unit_id in streamed and streamed[unit.unit_id].uri == unit.inputs[0]:
            return streamed[unit.unit_id]
        entry = self.entries().get(unit.unit_id)
        if entry is None or entry.uri != unit.inputs[0] or not unit.input_checksum.startswith(entry.checksum):
            clear_caches()
            entry = self.entries()[unit.unit_id]
        return entry

    def attrs_checksum(self, entry: ShardEntry, key: str) -> str:
        """The checksum the manifest recorded for one of ``entry``'s attrs files (hashed when it has none)."""
        return entry.attrs_checksums.get(key) or checksum_url(entry.attrs[key])

    def reusable(self, unit: UnitEntry, record: CheckpointRecord) -> bool:
        """A matching record stands for this run where it wrote this run's result: a plain-file run into another
        output folder (one lake, the same settings: ``output_dir`` is no setting of the result) writes its own
        (it was 'done' by the first folder's record and wrote nothing)."""
        if not self._files:
            return True
        want = self.output_uri(unit.unit_id)
        return any(same_file(f["uri"], want) for f in record.files)

    def input_checksum(self, entry: ShardEntry, attrs: list[str]) -> str:
        return entry.checksum + "".join(f"+{self.attrs_checksum(entry, key)}" for key in attrs)

    def plan(self) -> list[UnitEntry]:
        return self._plan(None)

    def plan_group(self, index: int, count: int) -> list[UnitEntry]:
        """Group ``index`` of ``count``: the units of the upstream shards of block ``index`` of ``count``
        (``group_range``), read from the upstream manifest's pages that hold them only. A subclass with its own :meth:`plan`
        (dedup's global phases) is sliced from it instead."""
        if type(self).plan is not AttrsStage.plan:
            return super().plan_group(index, count)
        return self._plan((index, count))

    def _plan(self, group: tuple[int, int] | None) -> list[UnitEntry]:
        clear_caches()  # a rerun in this process must see the inputs as they are now
        self._wait_for_upstream(group)
        self._group = group  # entries() from now on, here and in workers: this group's shards only
        # manifest order: the next manifest keeps it
        return [self.unit_for(shard_id, entry) for shard_id, entry in self.entries().items()]

    @staticmethod
    def unit_attrs(unit: UnitEntry, entry: ShardEntry) -> dict[str, str]:
        """The upstream attrs ``unit`` reads, key -> URI, as planned."""
        return {key: uri for uri in unit.inputs[1:] for key, u in entry.attrs.items() if u == uri}

    def read_attrs_uris(self, unit: UnitEntry, entry: ShardEntry) -> list[str]:
        """The URIs of the attrs :meth:`reads_attrs` names (not the cleaned text's, unless it names that too)."""
        wanted = set(self.reads_attrs(entry))
        return [uri for key, uri in self.unit_attrs(unit, entry).items() if key in wanted]

    # -- after all units ------------------------------------------------------------------------------
    def collect(self, manifest: Manifest) -> None:
        """Plain-file mode: ids must be unique across the input files, as ingest requires of a lake (a result
        row is keyed by its id: two rows of one id are two results no join on the id tells apart). A unit sees
        its own file only, so this is checked once, after all of them, in bounded memory
        (:mod:`~airflow_curation.core.unique_ids`); the results stay and the run fails naming the repeats.
        A subclass's collect calls it first."""
        if not self._files:
            return
        found = repeated_ids(list(file_entries(self._files).values()))
        if not found.total:
            return
        doc_id, (f0, r0, _), (f1, r1, _) = found.listed[0]
        files = {e.shard_id: e.uri for e in file_entries(self._files).values()}
        raise StageFailed(
            f"{self.name}: {found.total} row{'s' if found.total > 1 else ''} of the input files repeat an earlier "
            f"row's id (ids must be unique: the results are keyed by id); first: {files[f1]} row {r1} has id "
            f"{doc_id!r}, as {files[f0]} row {r0}. Give each row its own id, or ingest the files into a lake "
            "(`curation ingest --id-field id`), which quarantines the repeats and keeps the first"
        )

    # -- one shard -----------------------------------------------------------------------------------
    def plain_outputs(self, shard_id: str) -> list[str]:
        """The files a unit writes for the plain input file ``shard_id`` (its results, and any other)."""
        return [self.output_uri(shard_id)]

    def output_uri(self, shard_id: str) -> str:
        if self.config.get("output_dir"):
            return storage.join(self.config["output_dir"], f"{shard_id}.parquet")
        return self.lake.attrs_uri(self.attrs_name, shard_id, self.fingerprint)

    def process_unit(self, unit: UnitEntry) -> UnitResult:
        entry = self.entry(unit)
        uri = self.output_uri(unit.unit_id)
        if self._files and not getattr(self, "_claimed", False):
            claim_output(self.name, self.config["output_dir"])  # the folder is this stage's from now on
            self._claimed = True
        # The shard and attrs are fetched once, verified, and parsed from those bytes (held while the unit runs).
        with verified_reads(self.verified_inputs(unit, entry)):
            out = self.write_unit(unit, entry, uri)
        fault_point(f"{self.name}.after_attrs_write")
        # Its columns go in the entry it hands on: every later plan reads them there, not in the file's footer.
        columns = out.columns if out.columns is not None else column_names(uri, out.checksum, f"{self.name} attrs")
        return UnitResult.attrs(
            self.attrs_name, entry, uri, out.nbytes, out.checksum, out.accounting, out.extra, columns, out.files
        )

    def verified_inputs(self, unit: UnitEntry, entry: ShardEntry) -> list[tuple[str, str | None, str]]:
        """``(uri, recorded checksum, what)`` of the files :meth:`write_unit` reads: fetched once, checked against
        their manifest, and parsed from those bytes. The shard and the unit's upstream attrs."""
        return shard_files(entry, self.unit_attrs(unit, entry), unit.unit_id)

    def write_unit(self, unit: UnitEntry, entry: ShardEntry, uri: str) -> AttrsFile:
        """Stream the shard through :meth:`compute` in batches of ``batch_rows`` (default: the whole shard)
        into ``uri``."""
        return write_attrs(
            entry.uri,
            uri,
            self._computed,
            self.account,
            self.columns,
            int(self.config.get("batch_rows") or 0) or None,
            self.text_uri(unit, entry),
            self.attrs_compression(),
            self.user_files,
        )

    def attrs_compression(self) -> str:
        """The Parquet codec of the attrs files."""
        return "zstd"

    def text_uri(self, unit: UnitEntry, entry: ShardEntry) -> str | None:
        """The cleaned text this unit reads in the place of the shard's ``text`` (planned in its inputs), or
        None (``stages/text.py``)."""
        return clean_text_uri(entry, unit.inputs, self.attrs_name)

    def _computed(self, table: pa.Table) -> pa.Table:
        result = self.compute(table)
        if result.num_rows != table.num_rows:
            raise ValueError(
                f"{self.name}: compute() returned {result.num_rows} rows for {table.num_rows}: "
                f"attrs must have the shard's rows in the shard's order"
            )
        if ID not in result.column_names:
            result = result.add_column(0, ID, string_ids(table.column(ID)))
        return result


def _going(head: ManifestHead) -> bool:
    """The upstream run may still add shards: planned, or failed with a relaunch pending."""
    return head.status == "planned" or head.relaunch_pending


def upstream_problem(head: ManifestHead, waited: float, wait: float) -> str:
    """Why a downstream stage cannot read the upstream run ``head`` (not complete), for its error: the
    manifest, its status, the failed units and whether a relaunch was pending, declined or never in sight."""
    where = f"upstream manifest {head.uri} is not complete"
    if head.status == "planned":
        return f"{where}: still planned after {waited:.0f} s (upstream_wait_s={wait:g})"
    found = f"{where}: {head.status_text} (found after {waited:.0f} s)"
    if head.status != "failed":
        return f"{found}; a finished upstream is not waited for"
    failed = head.unit_statuses.get("failed", 0)
    names = ", ".join(head.failed_units[:5]) + (", ..." if failed > 5 else "")
    units = f"{failed} of {head.unit_count} units failed: {names}" if failed else "no unit failed"
    relaunch = head.relaunch or {}
    if head.relaunch_pending:
        then = f"its relaunch was still pending after upstream_wait_s={wait:g}: no follower reopened it"
    elif relaunch.get("why"):
        then = f"not relaunched ({relaunch['why']}), so a finished upstream is not waited for"
    else:
        then = "a finished upstream is not waited for"
    return f"{found}: the {head.stage} run failed, {units}; {then}"


def upstream_checkpointed(head: ManifestHead, units: list[UnitEntry], listing: bool = True) -> dict[str, ShardEntry]:
    """The shards of ``units`` (of a still running, ``planned``, manifest) that are checkpointed, in plan
    order: a record with the manifest's fingerprint and the unit's input checksum means its outputs are
    complete (what the checkpoint gate counts), and the final manifest will list exactly these entries.
    ``listing``: find the records from one listing of the checkpoint folder (all of a run's units); else
    look each unit's record up (a block of them: no cost that grows with the run's other units)."""
    store = Lake.from_dict(head.lake).checkpoints(head.stage, head.fingerprint)
    done = store.scan()[0] if listing else None
    out: dict[str, ShardEntry] = {}
    for unit in units:
        if done is not None and unit.unit_id not in done:
            continue
        rec = store.is_done(unit.unit_id, unit.input_checksum, head.fingerprint)
        for o in rec.outputs if rec is not None else []:
            entry = ShardEntry(**o)
            out[entry.shard_id] = entry
    return out


def keep_accounting(result: pa.Table, default_reason: str = "dropped") -> RowAccounting:
    """With a ``keep`` column, rows not kept are dropped by their ``drop_reason`` (``default_reason`` where it
    is null or absent); without one, every row is kept."""
    acc = RowAccounting()
    if KEEP not in result.column_names:
        acc.keep(result.num_rows)
        return acc
    keep = result.column(KEEP)
    keep = pc.fill_null(keep, False) if keep.null_count else keep  # (the fill's scalar would import pandas)
    acc.keep(int(pc.sum(keep).as_py() or 0))
    dropped = result.num_rows - acc.kept
    reasons = (
        result.column(DROP_REASON).filter(pc.invert(keep)).to_pylist()
        if DROP_REASON in result.column_names
        else [None] * dropped
    )
    for reason, n in Counter(r or default_reason for r in reasons).items():
        acc.drop(reason, n)
    return acc


def write_attrs(
    shard_uri: str,
    out_uri: str,
    compute: Callable[[pa.Table], pa.Table],
    account: Callable[[pa.Table], RowAccounting],
    columns: Sequence[str],
    batch_rows: int | None = None,
    text_uri: str | None = None,
    compression: str = "zstd",
    user_file: bool = False,
) -> AttrsFile:
    """Stream a shard (or any Parquet file with ``id`` and ``text``) through ``compute`` and write the results
    to ``out_uri`` as they come, atomically and hashed on the way out: one batch in memory at a time.

    :param columns: the columns ``compute`` reads (those the file has).
    :param batch_rows: rows per ``compute`` call and per row group; None: the whole file at once.
    :param text_uri: an attrs file whose ``clean_text`` is read in the place of ``text`` (:class:`ShardText`).
    :param compression: the Parquet codec of the output.
    :param user_file: ``shard_uri`` is a user's Parquet file: its rows are checked (:class:`ShardText`).
    """
    started = time.time()
    accounting = RowAccounting()
    text_bytes = 0
    with storage.open_read(shard_uri) as f:
        schema = pq.ParquetFile(f).schema_arrow
    check_id_text(schema, shard_uri)
    columns = [c for c in columns if c in schema.names]
    with storage.atomic_open(out_uri) as out:
        sink = _CountingSink(out)
        writer = None
        try:
            for table in ShardText(shard_uri, text_uri, user_file).batches(columns, batch_rows):
                if TEXT in table.column_names:
                    text_bytes += _text_bytes(table.column(TEXT))
                result = compute(table)
                accounting.merge(account(result))
                if writer is None:
                    writer = parquet_writer(sink, result.schema, compression)
                writer.write_table(result, row_group_size=batch_rows or DEFAULT_ROW_GROUP_ROWS)
            if writer is None:  # an empty shard still gets its (empty) attrs file
                empty = schema.empty_table().select(columns)
                empty = compute(checked_user_rows(empty, shard_uri) if user_file else empty)
                writer = parquet_writer(sink, empty.schema, compression)
                writer.write_table(empty)
        finally:
            if writer is not None:
                writer.close()
    extra = {
        "attrs_bytes": sink.tell(),
        "attrs_checksum": sink.checksum.hexdigest(),
        "text_bytes": text_bytes,
        "seconds": round(time.time() - started, 3),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    return AttrsFile(sink.tell(), sink.checksum.hexdigest(), accounting, extra, writer.schema.names)


def _text_bytes(col: pa.ChunkedArray | pa.Array) -> int:
    """Bytes of text in a string column, from its data buffers (no pass over the values)."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    total = 0
    for chunk in chunks:
        buffers = chunk.buffers()
        total += buffers[2].size if len(buffers) > 2 and buffers[2] is not None else 0
    return total
