"""Query engines that compute the validation metrics over a :class:`CuratedView` (``query_engine``).

Both return the same ``metrics`` dict, so checks and the report never know which one ran:

- ``duckdb``: in process, over the Parquet files in place (object stores through fsspec, offline);
- ``daft``: Daft dataframes, locally or on a Ray cluster (``daft_runner="ray"``) for lakes too big
  for one node.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import tempfile
from collections.abc import Callable
from typing import Any

from airflow_curation.core import redact, storage
from airflow_curation.core.schema import CLUSTER_ID, DROP_REASON, ID, TEXT
from airflow_curation.stages.mappers import ray as ray_cluster
from airflow_curation.stages.mappers.budget import cpu_count
from airflow_curation.stages.validate import arrow_scan, bounded, daft_stats, partials, partitions, sandbox
from airflow_curation.stages.validate.limits import Bounds, CheckTimedOut, QueryProcess, interrupt_after
from airflow_curation.stages.validate.view import CuratedView, same_schema

log = logging.getLogger(__name__)

QUANTILES = bounded.QUANTILES
HIST_BINS = bounded.HIST_BINS
# Memory per query: a group's attrs hash tables; one partition's distinct ids. Results do not depend on them.
GROUP_ROWS = 100_000
TEXT_BYTES = "__text_bytes"
IDS_PER_PASS = 1_000_000


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


_division = bounded.hist_division

# Parquet's min/max statistics leave NaN out (as the format says, and pyarrow writes them); DuckDB 2.0.1 reads
# them as "no NaN here" and folds a comparison the statistics decide away: over [0.5, NaN, 0.25], `x < 1.0`
# and `NOT isnan(x)` count 3 (duckdb/duckdb#25521). Every view reads with NaN assumed possible, so the
# report's metrics and a declared query's filters give what the same query gives over the rows themselves.
NAN_SAFE = "can_have_nan = true"


class DuckDBEngine:
    """:param threads: DuckDB threads (default: the cores this process may use, :func:`cpu_count`; DuckDB's own
        default counts the node's cores whatever the task's cpuset or CPU limit).
    :param memory_limit: e.g. ``"4GB"``; DuckDB spills past it.
    :param group_rows: rows of shards joined with their attrs in one query (0: all in one).
    :param ids_per_pass: ids per hash partition of the distinct-id and cluster counts (0: one pass).
    :param bounds: memory limit (overrides ``memory_limit``), temp folder and its cap for every query
        (:mod:`.limits`); without it DuckDB's defaults hold (80% of RAM, ``.tmp`` in the working directory).
    :param spill_dir: local folder for those partitions (default: ``bounds``' temp folder, else the system's).
    :param fanout: partitions one routing level of them writes (:mod:`.partitions`).
    :param trace: DuckDB's query and file-system log (``duckdb_logs``): what each query read.
    :param views: build the views (``docs``, ``curated``...) and lock the connection for sql checks; False for
        a part of a split run, which reads only its shards (:meth:`partial`).
    """

    def __init__(
        self,
        view: CuratedView,
        threads: int | None = None,
        memory_limit: str | None = None,
        group_rows: int | None = GROUP_ROWS,
        ids_per_pass: int | None = IDS_PER_PASS,
        bounds: Bounds | None = None,
        spill_dir: str | None = None,
        fanout: int = partitions.FANOUT,
        trace: bool = False,
        views: bool = True,
    ) -> None:
        import duckdb

        self.view = view
        self.group_rows = GROUP_ROWS if group_rows is None else group_rows
        self.ids_per_pass = IDS_PER_PASS if ids_per_pass is None else ids_per_pass
        if spill_dir and storage.protocol_of(spill_dir) not in ("file", "local"):
            raise ValueError(f"spill_dir must be a local folder, not {spill_dir!r}")
        self.spill_dir = storage.local_path(spill_dir) if spill_dir else (bounds.temp_dir if bounds else None)
        self.fanout = fanout
        self.con = duckdb.connect(":memory:")
        if trace:
            self.con.execute("CALL enable_logging(['QueryLog', 'FileSystem'])")
        self.con.execute(f"SET threads = {int(threads or cpu_count())}")
        # DuckDB's threads read the attrs files of the selection passes too
        self.threads = int(self.con.execute("SELECT current_setting('threads')").fetchone()[0])
        if memory_limit:
            self.con.execute(f"SET memory_limit = {_sql_str(memory_limit)}")
        if bounds:  # before the lock below: no query can change them back
            self.con.execute(f"SET memory_limit = '{int(bounds.memory_bytes)}B'")
            self.con.execute(f"SET temp_directory = {_sql_str(bounds.temp_dir)}")
            self.con.execute(f"SET max_temp_directory_size = '{int(bounds.max_temp_bytes)}B'")
        self._register_filesystems()
        if views:  # a split run's part (:meth:`partial`) reads its own shards' files only, and runs no user SQL
            self._create_views()
            # From here on, user SQL (sql checks) runs on this connection: lock it to the view's files.
            sandbox.lock_duckdb(self.con, [storage.local_path(f) for f in view.files()])

    def _register_filesystems(self) -> None:
        # Remote lakes go through fsspec (credentials and endpoints from storage options): no DuckDB
        # extension download, which an air-gapped cluster could not do anyway.
        seen = set()
        for uri in self.view.files():
            proto = storage.protocol_of(uri)
            if proto in ("file", "local") or proto in seen:
                continue
            seen.add(proto)
            fs, _ = storage.filesystem(uri)
            self.con.register_filesystem(fs)

    def _files(self, files: list[str]) -> str:
        return "[" + ", ".join(_sql_str(storage.local_path(f)) for f in files) + "]"

    def _read_all(self, files: list[str]) -> str:
        """``read_parquet`` of ``files`` as one relation: by column name where their schemas differ, else by
        position (``union_by_name`` re-reads every footer whenever a query over the view binds: the
        report runs dozens of queries over every attrs file)."""
        by_name = "false" if same_schema(files) else "true"
        return f"read_parquet({self._files(files)}, union_by_name = {by_name}, {NAN_SAFE})"

    def _create_views(self) -> None:
        v = self.view
        self.con.execute(f"CREATE VIEW shards AS SELECT * FROM {self._read_all(v.shard_files)}")
        select = ["s.*"]
        joins = []
        for a in v.attrs:
            self.con.execute(f"CREATE VIEW {_q('attrs_' + a.stage)} AS SELECT * FROM {self._read_all(a.files)}")
            select += [f"{a.alias}.{_q(src)} AS {_q(dst)}" for src, dst in a.columns.items()]
            select.append(f"({a.alias}.{_q(ID)} IS NOT NULL) AS {_q(a.has_flag)}")
            joins.append(f"LEFT JOIN {_q('attrs_' + a.stage)} AS {a.alias} ON {a.alias}.{_q(ID)} = s.{_q(ID)}")
        self.con.execute(f"CREATE VIEW docs AS SELECT {', '.join(select)} FROM shards AS s {' '.join(joins)}")
        where = self._where(v.curated_conditions())
        clean = v.clean_text_column()
        # the curated text is the cleaned text where preprocess cleaned lines (what later stages read)
        fields = f"* REPLACE (coalesce({_q(clean)}, {_q(TEXT)}) AS {_q(TEXT)})" if clean else "*"
        self.con.execute(f"CREATE VIEW curated AS SELECT {fields} FROM docs{' WHERE ' + where if where else ''}")
        redacted = v.redacted_column()
        if redacted:  # the curated rows with the pii stage's redactions applied to their text
            self.con.execute(
                f"CREATE VIEW curated_redacted AS SELECT * REPLACE (coalesce({_q(redacted)}, {_q(TEXT)}) AS "
                f"{_q(TEXT)}) FROM curated"
            )

    @staticmethod
    def _cond(c: tuple[str, str]) -> str:
        kind, col = c
        if kind == "keep":
            return f"coalesce({_q(col)}, false)"
        if kind == "not":
            return f"NOT coalesce({_q(col)}, false)"
        return _q(col)

    def _where(self, conds: list[tuple[str, str]]) -> str:
        return " AND ".join(self._cond(c) for c in conds)

    def sql(self, query: str, timeout_s: float | None = None) -> tuple | None:
        """The first row of a user's read query over ``docs``, ``curated``, ``shards``,
        ``attrs_<stage>``; :class:`~.sandbox.SqlRefused` for anything else, :class:`~.limits.CheckTimedOut`
        once it has run ``timeout_s`` (the query is interrupted)."""
        import duckdb

        statement = sandbox.duckdb_statement(query)
        with interrupt_after(timeout_s, self.con.interrupt) if timeout_s else contextlib.nullcontext() as fired:
            try:
                return self.con.execute(statement).fetchone()
            except duckdb.Error as e:
                if fired is not None and fired.is_set():
                    raise CheckTimedOut(timeout_s) from None
                raise sandbox.SqlFailed(redact.scrub(e)) from None  # not chained: the raw text stays out of logs

    def metrics(self, curated_signals: list[str] | None = None) -> dict[str, Any]:
        """The metrics in bounded memory: the joined view a group of shards at a time (each shard joined
        with its own attrs files), the distinct ids and cluster sizes in hash partitions, the signals'
        statistics under a budget of values per query (:mod:`.bounded`); the numbers are those of one
        query over the whole view."""
        v = self.view
        out = self._counts(v.shard_groups(self.group_rows))
        out["attrs_rows"] = {
            a.stage: int(self.con.execute(f"SELECT count(*) FROM {_q('attrs_' + a.stage)}").fetchone()[0])
            for a in v.attrs
        }
        out["drop_reasons"] = self._drop_reasons()
        return self.finish(out, self._distinct_ids(), self._clusters(), curated_signals)

    def finish(
        self, counts: dict[str, Any], distinct_ids: int, clusters: dict | None, curated_signals: list[str] | None
    ) -> dict[str, Any]:
        """The metrics from the view's additive counts (:meth:`_counts`, ``attrs_rows``, ``drop_reasons``: one
        query's, or the sum of the parts' of :meth:`partial`), the key counts, and the signals' statistics
        (computed here, over the whole view)."""
        out: dict[str, Any] = {"query_engine": "duckdb", **counts, "distinct_ids": int(distinct_ids)}
        out["signals"] = self._signals()
        if curated_signals:
            out["curated_signals"] = self._signals(curated_signals, groups=self.view.shard_groups(self.group_rows))
        out["clusters"] = clusters
        return out

    def partial(self, idx: list[int], parts: int, keys: dict[str, str]) -> dict[str, Any]:
        """The additive counts of the shards ``idx`` (and their attrs files) for one task of a split run, and
        their keys written to ``keys`` (``{"ids"|"clusters": local Parquet path}``, what
        :mod:`.partials` counts across the tasks): ``id`` of the shards, ``cluster_id`` of the dedup attrs,
        nulls left out, each with ``__p``, its hash partition of ``parts``, sorted by it."""
        v = self.view
        groups = [g for g in partials.split(idx, v.rows_by_shard, self.group_rows)]
        out = self._counts(groups)
        out["attrs_rows"] = {}
        sources = {"ids": ([v.shard_files[i] for i in idx], ID)}
        for a in v.attrs:
            files = [a.by_shard[i] for i in idx if a.by_shard[i]]
            out["attrs_rows"][a.stage] = (
                int(self.con.execute(f"SELECT count(*) FROM {self._read_all(files)}").fetchone()[0]) if files else 0
            )
            if CLUSTER_ID in a.columns and "clusters" not in sources:
                sources["clusters"] = (files, CLUSTER_ID)
        out["drop_reasons"] = self._drop_reasons(idx)
        for kind, (files, col) in sources.items():
            rel = self._read_all(files) if files else f"(SELECT NULL::VARCHAR AS {_q(col)} LIMIT 0)"
            self.con.execute(
                f"COPY (SELECT (hash({_q(col)}) % {int(parts)})::UBIGINT AS __p, {_q(col)} AS key FROM {rel} "
                f"WHERE {_q(col)} IS NOT NULL ORDER BY __p) TO {_sql_str(keys[kind])} "
                f"(FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE {partials.ROW_GROUP})"
            )
        return out

    def _counts(self, groups: list[list[int]]) -> dict[str, Any]:
        """Rows, text bytes, null counts, missing attrs, funnel and duplicates of the view over the shards of
        ``groups``, a query per group (each shard joined with its own attrs files): counts and sums, so the
        groups (and the parts of a split run) add up."""
        v = self.view
        cols = [n for n in v.schema().names if not n.startswith("_has_")]
        tb = _q(TEXT_BYTES)  # the groups' text is its length in bytes (see _docs)
        exprs = ["count(*)", f"coalesce(sum({tb}), 0)"]
        exprs += [f"count(*) - count({_q(c)})" for c in cols]
        exprs += [f"count(*) FILTER (WHERE NOT {_q(a.has_flag)})" for a in v.attrs]
        steps = v.funnel_steps()
        for _, _, conds in steps:
            w = self._where(conds)
            exprs += [f"count(*) FILTER (WHERE {w})", f"coalesce(sum({tb}) FILTER (WHERE {w}), 0)"]
        dup = next((a.duplicate_column for a in v.attrs if a.duplicate_column), None)
        if dup:
            exprs += [f"count({_q(dup)})", f"count(*) FILTER (WHERE {_q(dup)})"]
        row = [0] * len(exprs)
        for idx in groups:  # every expression is a count or a sum: the groups add up
            part = self.con.execute(f"SELECT {', '.join(exprs)} FROM {self._docs(idx)}").fetchone()
            row = [a + int(b) for a, b in zip(row, part)]
        out: dict[str, Any] = {"rows": int(row[0]), "text_bytes": int(row[1])}
        row = row[2:]
        out["null_counts"] = {c: int(n) for c, n in zip(cols, row)}
        row = row[len(cols) :]
        out["missing_attrs"] = {a.stage: int(n) for a, n in zip(v.attrs, row)}
        row = row[len(v.attrs) :]
        funnel = [{"label": "ingested", "stage": "ingest", "rows": out["rows"], "bytes": out["text_bytes"]}]
        for (label, stage, _), i in zip(steps, range(0, 2 * len(steps), 2)):
            funnel.append({"label": label, "stage": stage, "rows": int(row[i]), "bytes": int(row[i + 1])})
        out["funnel"] = funnel
        row = row[2 * len(steps) :]
        out["duplicates"] = None
        if dup:
            out["duplicates"] = partials.duplicates(dup, int(row[0]), int(row[1]))
        return out

    # --- bounded pieces ---------------------------------------------------------------------------

    def _rel(self, files: list[str], schema_files: list[str], keys: list[int]) -> str:
        """``files`` as one relation with ``__k`` (the shard each file belongs to, ``keys``), its columns
        those of ``schema_files`` too (null where a file lacks one), as the view's ``union_by_name``."""
        schema = f"(SELECT * FROM read_parquet({self._files(schema_files)}, union_by_name = true, {NAN_SAFE}) LIMIT 0)"
        if not files:
            return f"(SELECT *, NULL::BIGINT AS __k FROM {schema})"
        m = ", ".join(f"({_sql_str(storage.local_path(f))}, {k})" for f, k in zip(files, keys))
        return (
            f"(SELECT __t.* EXCLUDE (__file), __m.k AS __k FROM (SELECT * FROM {schema} UNION ALL BY NAME "
            f"SELECT * FROM read_parquet({self._files(files)}, union_by_name = true, filename = '__file', {NAN_SAFE})) AS __t "
            f"JOIN (VALUES {m}) AS __m(f, k) ON __m.f = __t.__file)"
        )

    def _docs(self, idx: list[int]) -> str:
        """The view's ``docs`` over the shards ``idx``, each shard joined with its own attrs files, lean: a
        shard column other than ``id`` is only whether it is null (true or null), and the text's length
        is ``__text_bytes``, so a join holds a few bytes per row whichever side it builds on."""
        v = self.view
        rel = self._rel([v.shard_files[i] for i in idx], [v.schema_file], idx)
        lean = [f"{_q(ID)}", "__k", f"strlen({_q(TEXT)}) AS {_q(TEXT_BYTES)}"]
        lean += [
            f"(CASE WHEN {_q(c)} IS NULL THEN NULL ELSE true END) AS {_q(c)}" for c in v.shard_schema.names if c != ID
        ]
        shards = f"(SELECT {', '.join(lean)} FROM {rel})"
        select = ["s.* EXCLUDE (__k)"]
        joins = []
        for a in v.attrs:
            have = [(a.by_shard[i], i) for i in idx if a.by_shard[i]]
            rel = self._rel([f for f, _ in have], a.schema_files, [k for _, k in have])
            select += [f"{a.alias}.{_q(src)} AS {_q(dst)}" for src, dst in a.columns.items()]
            select.append(f"({a.alias}.{_q(ID)} IS NOT NULL) AS {_q(a.has_flag)}")
            joins.append(f"LEFT JOIN {rel} AS {a.alias} ON {a.alias}.{_q(ID)} = s.{_q(ID)} AND {a.alias}.__k = s.__k")
        return f"(SELECT {', '.join(select)} FROM {shards} AS s {' '.join(joins)})"

    def _by_key(self, relation: str, col: str, query: Callable[[str], str]) -> list[tuple]:
        """The rows of ``query(rel)`` over ``rel``, the non-null ``col`` of ``relation``, in each hash partition
        of ``col`` (a key falls in exactly one): one query where the view's rows fit ``ids_per_pass``, else one
        scan of ``col`` routed into partitions spilled to a temp folder, each queried alone
        (:mod:`.partitions`)."""
        src = f"(SELECT {_q(col)} FROM {relation} WHERE {_q(col)} IS NOT NULL)"
        bases = partitions.levels(self.view.shard_rows, self.ids_per_pass, self.fanout)
        if not bases:
            return self.con.execute(query(src)).fetchall()
        digits = ", ".join(partitions.digit(_q(col), level, bases) for level in range(len(bases)))
        batch = min(max(self.ids_per_pass, 2048), 1 << 20)
        # Cursors of their own: DuckDB refuses a streamed result on a connection that holds an unfinished one.
        scan, each = self.con.cursor(), self.con.cursor()
        try:
            reader = scan.sql(f"SELECT {digits}, {_q(col)} FROM {src}").to_arrow_reader(batch)
            with tempfile.TemporaryDirectory(prefix="validate-keys-", dir=self.spill_dir) as folder:
                parts = partitions.count(
                    reader, bases, folder, lambda t: each.from_arrow(t).query("__part", query("__part")).fetchall()
                )
        finally:
            scan.close()
            each.close()
        return [row for rows in parts for row in rows]

    def _distinct_ids(self) -> int:
        return sum(
            int(n) for (n,) in self._by_key("shards", ID, lambda rel: f"SELECT count(DISTINCT {_q(ID)}) FROM {rel}")
        )

    def _signals(self, only: list[str] | None = None, groups: list[list[int]] | None = None) -> dict[str, dict]:
        """Statistics of the signals, over their attrs files, or (``groups``) over the curated rows."""
        wanted = set(only) if only is not None else set(self.view.numeric_columns())
        run = lambda sql: self.con.execute(sql).fetchall()  # noqa: E731
        out: dict[str, dict] = {}
        if groups is None:
            for a in self.view.attrs:
                pairs = [(src, dst) for src, dst in a.columns.items() if dst in wanted]
                out.update(
                    bounded.column_stats(run, [_q("attrs_" + a.stage)], pairs, files=a.files, threads=self.threads)
                )
            return out
        names = [dst for a in self.view.attrs for dst in a.columns.values() if dst in wanted]
        if not names:
            return out
        where = self._where(self.view.curated_conditions())
        select = ", ".join(_q(n) for n in names)
        parts = [f"(SELECT {select} FROM {self._docs(idx)}{' WHERE ' + where if where else ''})" for idx in groups]
        # histograms and selection passes: each part's rows streamed as Arrow batches, binned in numpy, and
        # spilled by the first pass to a local file that the later passes read instead of joining again
        with tempfile.TemporaryDirectory(prefix="validate-curated-", dir=self.spill_dir) as folder:
            spill = os.path.join(folder, "curated.parquet")
            batches = arrow_scan.relation_batches(self.con, parts, names, spill)
            return bounded.column_stats(run, parts, [(n, n) for n in names], batches=batches)

    def _clusters(self) -> dict | None:
        for a in self.view.attrs:
            if CLUSTER_ID in a.columns:
                c = _q(CLUSTER_ID)
                rows = self._by_key(  # a cluster falls in one hash partition of its id
                    _q("attrs_" + a.stage),
                    CLUSTER_ID,
                    lambda rel: f"SELECT n, count(*) FROM (SELECT count(*) AS n FROM {rel} GROUP BY {c}) GROUP BY n",
                )
                sizes: dict[int, int] = {}
                for size, k in rows:
                    sizes[int(size)] = sizes.get(int(size), 0) + int(k)
                sizes = dict(sorted(sizes.items()))
                return {"clusters": sum(sizes.values()), "sizes": sizes, "largest": max(sizes) if sizes else 0}
        return None

    def _drop_reasons(self, idx: list[int] | None = None) -> dict[str, dict[str, int]]:
        """Rows per drop reason of each stage that records one; ``idx``: only the attrs files of those shards."""
        out = {}
        for a in self.view.attrs:
            if DROP_REASON in a.columns:
                files = a.files if idx is None else [a.by_shard[i] for i in idx if a.by_shard[i]]
                if idx is None:
                    rel = _q("attrs_" + a.stage)
                elif files:
                    rel = self._read_all(files)
                else:
                    out[a.stage] = {}
                    continue
                rows = self.con.execute(
                    f"SELECT {DROP_REASON}, count(*) FROM {rel} WHERE {DROP_REASON} IS NOT NULL "
                    f"AND {DROP_REASON} <> '' GROUP BY 1 ORDER BY 2 DESC"
                ).fetchall()
                out[a.stage] = {str(r): int(n) for r, n in rows}
        return out

    def close(self) -> None:
        self.con.close()


class DaftEngine:
    """Daft dataframes; ``runner="ray"`` runs them on a Ray cluster (``ray_address``, or a local one).

    :param runner: ``native`` (this process, multithreaded) or ``ray``.
    :param ray_address: Ray cluster address; None starts a local Ray.
    """

    def __init__(
        self, view: CuratedView, runner: str = "native", ray_address: str | None = None, bounds: Bounds | None = None
    ) -> None:
        import daft

        self.daft = daft
        self.view = view
        self.runner = runner
        self.ray_address = ray_address
        self.bounds = bounds
        self._child: QueryProcess | None = None  # where sql checks run, with bounds
        if runner == "ray":
            self.ray_address = _set_ray_runner(daft, ray_address)
        elif runner != "native":
            raise ValueError(f"daft_runner must be 'native' or 'ray', not {runner!r}")
        self.io_config = _daft_io_config(daft, view.shard_files[0])

    def _read(self, files: list[str]):
        return self.daft.read_parquet([storage.local_path(f) for f in files], io_config=self.io_config)

    def _attrs(self, a):
        df = self._read(a.files)
        return df.select(
            *[self.daft.col(src).alias(dst) for src, dst in a.columns.items()],
            self.daft.col(ID).alias(f"__id_{a.stage}"),
        )

    def docs(self):
        col = self.daft.col
        df = self._read(self.view.shard_files)
        for a in self.view.attrs:
            df = df.join(self._attrs(a), left_on=ID, right_on=f"__id_{a.stage}", how="left")
            df = df.with_column(a.has_flag, col(f"__id_{a.stage}").not_null()).exclude(f"__id_{a.stage}")
        return df.with_column("__bytes", col(TEXT).length_bytes())

    def _cond(self, c):
        col, lit = self.daft.col, self.daft.lit
        kind, name = c
        if kind == "keep":
            return col(name).fill_null(lit(False))
        if kind == "not":
            return ~col(name).fill_null(lit(False))
        return col(name)

    def _all(self, conds):
        expr = self.daft.lit(True)
        for c in conds:
            expr = expr & self._cond(c)
        return expr

    def metrics(self, curated_signals: list[str] | None = None) -> dict[str, Any]:
        col, lit = self.daft.col, self.daft.lit
        v = self.view
        docs = self.docs()
        cols = [n for n in v.schema().names if not n.startswith("_has_")]
        aggs = [col("__bytes").count().alias("__rows"), col("__bytes").sum().alias("__text_bytes")]
        aggs += [col(c).is_null().cast(self.daft.DataType.int64()).sum().alias(f"__null_{c}") for c in cols]
        aggs += [(~col(a.has_flag)).cast(self.daft.DataType.int64()).sum().alias(f"__miss_{a.stage}") for a in v.attrs]
        steps = v.funnel_steps()
        for i, (_, _, conds) in enumerate(steps):
            w = self._all(conds)
            aggs += [
                w.cast(self.daft.DataType.int64()).sum().alias(f"__f{i}_rows"),
                (w.cast(self.daft.DataType.int64()) * col("__bytes")).sum().alias(f"__f{i}_bytes"),
            ]
        dup = next((a.duplicate_column for a in v.attrs if a.duplicate_column), None)
        if dup:
            aggs += [
                col(dup).count().alias("__dup_assessed"),
                col(dup).fill_null(lit(False)).cast(self.daft.DataType.int64()).sum().alias("__dup_n"),
            ]
        r = docs.agg(*aggs).to_pydict()
        g = {k: (vals[0] if vals else None) for k, vals in r.items()}
        distinct = docs.select(ID).distinct().count_rows()
        out: dict[str, Any] = {
            "query_engine": f"daft-{self.runner}",
            "rows": int(g["__rows"] or 0),
            "text_bytes": int(g["__text_bytes"] or 0),
            "distinct_ids": int(distinct),
        }
        out["null_counts"] = {c: int(g[f"__null_{c}"] or 0) for c in cols}
        out["missing_attrs"] = {a.stage: int(g[f"__miss_{a.stage}"] or 0) for a in v.attrs}
        out["funnel"] = [{"label": "ingested", "stage": "ingest", "rows": out["rows"], "bytes": out["text_bytes"]}]
        out["funnel"] += [
            {"label": label, "stage": stage, "rows": int(g[f"__f{i}_rows"] or 0), "bytes": int(g[f"__f{i}_bytes"] or 0)}
            for i, (label, stage, _) in enumerate(steps)
        ]
        out["duplicates"] = None
        if dup:
            out["duplicates"] = partials.duplicates(dup, int(g["__dup_assessed"] or 0), int(g["__dup_n"] or 0))
        out["attrs_rows"] = {a.stage: int(self._read(a.files).count_rows()) for a in v.attrs}
        out["signals"] = self._signals(None)
        if curated_signals:
            out["curated_signals"] = self._signals(curated_signals, docs.where(self._all(v.curated_conditions())))
        out["clusters"] = self._clusters()
        out["drop_reasons"] = self._drop_reasons()
        return out

    def _signals(self, only: list[str] | None, frame=None) -> dict[str, dict]:
        """Count, min, max, mean, quantiles (exact, DuckDB's ``quantile_cont``: :mod:`.daft_stats`) and the
        histogram of each numeric signal."""
        wanted = list(only) if only is not None else self.view.numeric_columns()
        out = {}
        for a in self.view.attrs:
            names = [dst for dst in a.columns.values() if dst in wanted]
            if not names:
                continue
            df = (frame if frame is not None else self._attrs(a)).select(*names)
            stats = daft_stats.signal_stats(self.daft, df, names)
            out.update(stats)
            plan = [(n, _division(s["min"], s["max"])) for n, s in stats.items() if s["count"]]
            self._hists(df, plan, out)
        return out

    def _hists(self, df, plan: list[tuple[str, bounded.HistDivision]], out: dict[str, dict]) -> None:
        """Every column's bins in one scan: bin indexes unpivoted to (column, bin), then one group-by."""
        if not plan:
            return
        col, lit, i64 = self.daft.col, self.daft.lit, self.daft.DataType.int64()
        bins = []
        for n, d in plan:
            x = col(n).cast(self.daft.DataType.float64())
            x = x if d.scale == 1.0 else x * lit(d.scale)
            bins.append(((x - d.start) / d.width).floor().cast(i64).alias(n))
        long = (
            df.select(*bins)
            .with_column("__one", self.daft.lit(1))
            .unpivot(ids="__one", values=[n for n, _ in plan], variable_name="c", value_name="b")
        )
        g = long.where(col("b").not_null()).groupby("c", "b").agg(col("b").count().alias("k")).to_pydict()
        counts = {n: [0] * (len(d.edges) - 1) for n, d in plan}
        for c, b, k in zip(g["c"], g["b"], g["k"]):
            arr = counts[c]
            arr[min(max(int(b), 0), len(arr) - 1)] += int(k)
        for n, d in plan:
            out[n]["hist"] = {"edges": d.edges, "counts": counts[n]}

    def _clusters(self) -> dict | None:
        col = self.daft.col
        for a in self.view.attrs:
            if CLUSTER_ID in a.columns:
                df = self._read(a.files).where(col(CLUSTER_ID).not_null())
                per = df.groupby(CLUSTER_ID).agg(col(CLUSTER_ID).count().alias("n"))
                sizes_df = per.groupby("n").agg(col("n").count().alias("k")).to_pydict()
                sizes = {int(n): int(k) for n, k in sorted(zip(sizes_df["n"], sizes_df["k"]))}
                return {"clusters": sum(sizes.values()), "sizes": sizes, "largest": max(sizes) if sizes else 0}
        return None

    def _drop_reasons(self) -> dict[str, dict[str, int]]:
        col = self.daft.col
        out = {}
        for a in self.view.attrs:
            if DROP_REASON in a.columns:
                df = self._read(a.files).where(col(DROP_REASON).not_null() & (col(DROP_REASON) != ""))
                g = df.groupby(DROP_REASON).agg(col(DROP_REASON).count().alias("n")).to_pydict()
                out[a.stage] = {str(r): int(n) for r, n in sorted(zip(g[DROP_REASON], g["n"]), key=lambda t: -t[1])}
        return out

    def tables(self) -> dict[str, Any]:
        """The frames a sql check can name, as in the DuckDB engine."""
        docs = self.docs().exclude("__bytes")
        tables = {
            "shards": self._read(self.view.shard_files),
            "docs": docs,
            "curated": docs.where(self._all(self.view.curated_conditions())),
        }
        clean = self.view.clean_text_column()
        if clean:
            from daft import col

            tables["curated"] = tables["curated"].with_column(TEXT, col(clean).fill_null(col(TEXT)))
        tables.update({f"attrs_{a.stage}": self._read(a.files) for a in self.view.attrs})
        redacted = self.view.redacted_column()
        if redacted:
            from daft import col

            tables["curated_redacted"] = tables["curated"].with_column(TEXT, col(redacted).fill_null(col(TEXT)))
        return tables

    def sql(self, query: str, timeout_s: float | None = None) -> tuple | None:
        """The first row of a user's read query (see :func:`~.sandbox.daft_query` for what passes). With
        bounds, it runs in a child process (one for all checks) that is killed past ``timeout_s`` or the
        memory and temp limits (Daft's native runner cannot be interrupted from Python)."""
        q = sandbox.daft_query(query)
        if self.bounds is None:
            return self._first_row(q)
        if self._child is None:  # one child for every check: it imports Daft once (5-6 s on a busy machine)
            self._child = QueryProcess(DaftEngine, (self.view, self.runner, self.ray_address), self.bounds)
        return self._child.run(_first_row, (q,), timeout_s or self.bounds.timeout_s)

    def _first_row(self, q: str) -> tuple | None:
        try:
            # register_globals=False: only these frames, never whatever DataFrame is in scope.
            out = self.daft.sql(q, register_globals=False, **self.tables()).limit(1).to_pydict()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # noqa: BLE001 - Daft's Rust panics are BaseExceptions
            raise sandbox.SqlFailed(redact.scrub(e)) from None
        cols = list(out.values())
        return tuple(c[0] for c in cols) if cols and cols[0] else None

    def close(self) -> None:
        if self._child is not None:
            self._child.close()


def _first_row(engine: DaftEngine, query: str) -> tuple | None:
    """In the child process of a Daft ``sql`` check (its engine built there: the frames are lazy)."""
    return engine._first_row(query)


def _set_ray_runner(daft, address: str | None) -> str | None:
    """Daft on Ray (``stages/mappers/ray.py``: no address is a new local Ray, whatever else runs on the
    machine); returns the address a child process joins to use the same Ray (a local one's GCS address)."""
    import ray

    # A local Ray for this job: its CPUs, not every core of a shared machine.
    local_cpus = int(os.environ.get("CURATION_RAY_NUM_CPUS", min(4, cpu_count())))
    target, _ = ray_cluster.connect(address, num_cpus=local_cpus if ray_cluster.resolve(address).local else None)
    joined = None if target.local else target.address
    try:
        daft.set_runner_ray(address=joined)
    except Exception as e:  # noqa: BLE001 - the runner can be set once per process
        if "already" not in str(e).lower() and "cannot set runner" not in str(e).lower():
            raise
        log.info("daft runner already set: %s", e)
    return joined or ray.get_runtime_context().gcs_address


def _daft_io_config(daft, uri: str):
    proto = storage.protocol_of(uri)
    if proto != "s3":
        return None
    opts = storage.options_for(uri)
    client = opts.get("client_kwargs", {})
    s3 = daft.io.S3Config(
        key_id=opts.get("key"),
        access_key=opts.get("secret"),
        endpoint_url=opts.get("endpoint_url") or client.get("endpoint_url"),
        region_name=client.get("region_name", "us-east-1"),
        anonymous=bool(opts.get("anon")),
    )
    return daft.io.IOConfig(s3=s3)


def make_engine(view: CuratedView, config: dict[str, Any], bounds: Bounds | None = None, views: bool = True):
    engine = config.get("query_engine", "duckdb")
    if engine == "duckdb":
        return DuckDBEngine(
            view,
            views=views,
            threads=config.get("threads"),
            memory_limit=config.get("memory_limit"),
            group_rows=config.get("group_rows"),
            ids_per_pass=config.get("ids_per_pass"),
            bounds=bounds,
        )
    if engine == "daft":
        return DaftEngine(
            view, runner=config.get("daft_runner", "native"), ray_address=config.get("ray_address"), bounds=bounds
        )
    raise ValueError(f"unknown query_engine {engine!r}; use 'duckdb' or 'daft'")


def finite(x: Any) -> Any:
    """JSON has no NaN: turn non-finite floats into None."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
