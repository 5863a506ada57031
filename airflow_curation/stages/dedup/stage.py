"""Dedup: global exact and MinHash-LSH near dedup, bounded in memory; ``attrs/dedup/<shard>.parquet``.

Three phases, each resumable:

1. signatures, per shard (parallel, checkpointed as the ``dedup_signatures`` sub-stage): exact keys and
   band hashes spilled to ``dedup/<fingerprint>/spill/`` by bucket partition;
2. global (the barrier): per partition, candidate edges inside each bucket (optionally verified by exact
   Jaccard) and exact-duplicate groups, then connected components by large-star/small-star, all in
   ``dedup/<run key>/`` and marked done by ``_SUCCESS.json``;
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
import os
import time
from dataclasses import asdict
from typing import Any

import pyarrow.parquet as pq

from airflow_curation.core import storage
from airflow_curation.core.accounting import RowAccounting
from airflow_curation.core.components import connected_components
from airflow_curation.core.faults import fault_point
from airflow_curation.core.fingerprint import checksum_url
from airflow_curation.core.integrity import verify_file
from airflow_curation.core.layout import safe_name
from airflow_curation.core.lsh import partitions_for
from airflow_curation.core.manifest import Manifest, ShardEntry, UnitEntry
from airflow_curation.core.minhash import MinHashParams, lsh_params
from airflow_curation.core.schema import check_id_text
from airflow_curation.core.shards import write_parquet
from airflow_curation.stages.base import Stage, StageRunner, UnitMapper, UnitResult, local_mapper
from airflow_curation.stages.dedup import phases
from airflow_curation.stages.dedup.phases import DedupParams

log = logging.getLogger(__name__)

# Bytes one spilled document costs in phase 2 per band (bucket + node) and for its exact key.
_BAND_BYTES, _EXACT_BYTES = 16, 24
_WORKER_BASE = 768 << 20  # a worker process with pyarrow, numba and the kernels loaded


class DedupSignaturesStage(Stage):
    """Phase 1 as a stage of its own, so that each shard's spill files are checkpointed and a rerun
    signs only the shards not done yet. Built and run by :class:`DedupStage`."""

    name = "dedup_signatures"
    version = "1"
    RUNTIME_KEYS = Stage.RUNTIME_KEYS | {"shards", "batch_rows"}
    DEFAULTS: dict[str, Any] = {"params": {}, "keep_column": "keep", "shards": [], "batch_rows": 8192}

    @property
    def params(self) -> DedupParams:
        p = dict(self.config["params"])
        return DedupParams(**{**p, "minhash": MinHashParams(**p["minhash"])})

    def spill_uris(self, shard_id: str) -> tuple[str, str]:
        base = self.lake.path("dedup", self.fingerprint, "spill")
        return (storage.join(base, f"{shard_id}.bands.parquet"), storage.join(base, f"{shard_id}.exact.parquet"))

    def plan(self) -> list[UnitEntry]:
        return [UnitEntry(unit_id=s["shard_id"], inputs=[s["uri"]] + ([s["keep_uri"]] if s["keep_uri"] else []),
                          input_checksum=s["input_checksum"]) for s in self.config["shards"]]

    def process_unit(self, unit: UnitEntry) -> UnitResult:
        if getattr(self, "_by_id", None) is None:
            self._by_id = {s["shard_id"]: s for s in self.config["shards"]}
        s = self._by_id[unit.unit_id]
        verify_file(s["uri"], s.get("checksum"), f"shard {unit.unit_id}")
        if s["keep_uri"]:
            verify_file(s["keep_uri"], s.get("keep_checksum"), f"preprocess attrs of shard {unit.unit_id}")
        bands_uri, exact_uri = self.spill_uris(unit.unit_id)
        stats = phases.sign_shard(s["uri"], s["index"], s["keep_uri"], self.config["keep_column"], self.params,
                                  bands_uri, exact_uri, int(self.config["batch_rows"]))
        acc = RowAccounting()
        acc.keep(stats["considered"])
        if stats["rows"] > stats["considered"]:
            acc.drop("not_kept_upstream", stats["rows"] - stats["considered"])
        return UnitResult(outputs=[], accounting=acc, extra=stats)


class DedupStage(Stage):
    """Settings (``config``):

    :param threshold: Jaccard similarity at which two documents are near duplicates (default 0.8).
    :param num_perm: MinHash permutations (128). :param ngram: tokens per shingle (5).
    :param tokenizer: ``word`` (``\\w+``), ``space`` or ``char``. :param normalization: ``NFKC`` or None.
    :param lowercase: lowercase before hashing. :param seed: permutation seed.
    :param bands: :param rows: LSH layout; default: derived from ``threshold`` and ``num_perm``
        (minimum weighted false-positive + false-negative area).
    :param exact: find exact duplicates (normalised-content hash). :param near: find near duplicates.
    :param verify: keep only candidate pairs whose exact Jaccard reaches ``threshold``.
    :param only_kept: consider only rows that preprocess kept (its ``keep`` column), when present.
    :param keep_column: the column of upstream attrs that says so.
    :param memory_budget: bytes one partition of phase 2 may take; sets the partition count.
    :param partitions: force the partition count instead.
    :param engine: ``local`` (in-process / process pool of ``workers``) or ``dask``.
    :param output_dir: plain-file mode: where ``<file stem>.parquet`` results go.
    :param upstream_wait_s: how long to wait for a ``planned`` upstream manifest to complete.
    """

    name = "dedup"
    version = "1"
    RUNTIME_KEYS = Stage.RUNTIME_KEYS | {"memory_budget", "partitions", "engine", "batch_rows", "output_dir",
                                         "upstream_wait_s"}
    DEFAULTS: dict[str, Any] = {
        "threshold": 0.8, "num_perm": 128, "ngram": 5, "tokenizer": "word", "normalization": "NFKC",
        "lowercase": True, "seed": 1, "bands": None, "rows": None, "exact": True, "near": True,
        "verify": False, "only_kept": True, "keep_column": "keep", "memory_budget": 1 << 30,
        "partitions": None, "engine": "local", "batch_rows": 8192, "output_dir": None,
        "upstream_wait_s": 600,
    }

    def __init__(self, lake, config, run_id) -> None:
        super().__init__(lake, config, run_id)
        c = self.config
        if bool(c.get("input_manifest")) == bool(c.get("inputs")):
            raise ValueError("dedup: give either input_manifest (a lake) or inputs (plain Parquet files)")
        if c.get("inputs") and not c["output_dir"]:
            raise ValueError("dedup: plain-file inputs need output_dir")
        if not (c["exact"] or c["near"]):
            raise ValueError("dedup: nothing to do with exact=False and near=False")
        if c["engine"] not in ("local", "dask"):
            raise ValueError(f"dedup: engine must be local or dask, not {c['engine']!r}")
        self.params = self._params()

    def _params(self) -> DedupParams:
        c = self.config
        mh = MinHashParams(num_perm=int(c["num_perm"]), ngram=int(c["ngram"]), tokenizer=c["tokenizer"],
                           normalization=c["normalization"], lowercase=bool(c["lowercase"]), seed=int(c["seed"]))
        if (c["bands"] is None) != (c["rows"] is None):
            raise ValueError("dedup: give both bands and rows, or neither")
        bands, rows = ((int(c["bands"]), int(c["rows"])) if c["bands"] is not None
                       else lsh_params(float(c["threshold"]), mh.num_perm))
        if bands * rows > mh.num_perm or bands < 1 or rows < 1:
            raise ValueError(f"dedup: {bands} bands x {rows} rows do not fit {mh.num_perm} permutations")
        return DedupParams(minhash=mh, bands=bands, rows=rows, threshold=float(c["threshold"]),
                           exact=bool(c["exact"]), near=bool(c["near"]), verify=bool(c["verify"]))

    # -- where things run ------------------------------------------------------------------------
    def default_mapper(self) -> UnitMapper:
        """``local``: in-process or a process pool of ``workers``. ``dask``: one cluster for every phase
        (``scheduler_address``, or a LocalCluster sized from the memory budget, started once and closed
        in :meth:`finalize` or at exit), through the shared Dask mapper."""
        if self.config["engine"] != "dask":
            return local_mapper(int(self.config.get("workers", 1)))
        from airflow_curation.stages.engines.dask import dask_mapper

        address = self.config.get("scheduler_address")
        if not address:
            address = self._local_cluster().scheduler_address
        return dask_mapper(address)

    def _local_cluster(self):
        if getattr(self, "_cluster", None) is None:
            import atexit

            from distributed import LocalCluster

            from airflow_curation.stages.engines.budget import plan_workers

            from airflow_curation.stages.engines.budget import available_memory

            # A worker holds one shard's batch (phases 1, 3) or one partition (phase 2, sized by
            # memory_budget), plus the interpreter with pyarrow and the compiled kernels.
            sizes = [e.bytes for e in self._entries()] or [0]
            per_worker = _WORKER_BASE + max(8 * max(sizes), int(self.config["memory_budget"]))
            plan = plan_workers(sizes, expansion=8.0, base_bytes=_WORKER_BASE,
                                max_workers=int(self.config.get("workers") or 0) or None)
            workers = max(1, min(plan.workers, int(0.8 * available_memory()) // per_worker))
            log.info("dedup: Dask LocalCluster of %d workers, %d MiB each (%s)", workers, per_worker >> 20,
                     plan.to_dict())
            self._cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                         dashboard_address=":0", memory_limit=per_worker)
            atexit.register(self.close)
        return self._cluster

    def close(self) -> None:
        cluster, self._cluster = getattr(self, "_cluster", None), None
        if cluster is not None:
            cluster.close()

    def finalize(self, manifest: Manifest) -> None:
        self.close()

    def __getstate__(self) -> dict:
        # Units travel to workers with the stage; a cluster handle does not.
        return {k: v for k, v in self.__dict__.items() if k != "_cluster"}

    # -- inputs ----------------------------------------------------------------------------------
    def _entries(self) -> list[ShardEntry]:
        if getattr(self, "_entry_list", None) is None:
            self._entry_list = self._read_entries()
        return self._entry_list

    def _read_entries(self) -> list[ShardEntry]:
        if self.config.get("input_manifest"):
            uri = self.config["input_manifest"]
            # The upstream gate opens on its shards' checkpoints; its job writes the final manifest
            # just after. Dedup is a barrier over every shard, so it waits for that manifest.
            deadline = time.monotonic() + float(self.config["upstream_wait_s"])
            while (upstream := Manifest.read(uri)).status == "planned" and time.monotonic() < deadline:
                time.sleep(1.0)
            if upstream.status != "complete":
                raise ValueError(f"dedup: upstream manifest {uri} is {upstream.status}, not complete "
                                 f"(waited {self.config['upstream_wait_s']} s)")
            return list(upstream.shards)
        entries, seen = [], set()
        for f in self.config["inputs"]:
            stem = os.path.basename(f.rstrip("/")).rsplit(".parquet", 1)[0]
            safe_name(stem, "input file name")
            if stem in seen:
                raise ValueError(f"dedup: two inputs are named {stem}.parquet; outputs would collide")
            seen.add(stem)
            with storage.open_read(f) as fh:
                pf = pq.ParquetFile(fh)
                check_id_text(pf.schema_arrow, f)
                rows = pf.metadata.num_rows
            entries.append(ShardEntry(shard_id=stem, uri=f, rows=rows, bytes=storage.size(f),
                                      checksum=checksum_url(f)))
        return entries

    def _keep_uri(self, entry: ShardEntry) -> str | None:
        if not self.config["only_kept"]:
            return None
        uri = entry.attrs.get("preprocess")
        if not uri:
            return None
        with storage.open_read(uri) as f:
            names = pq.ParquetFile(f).schema_arrow.names
        return uri if self.config["keep_column"] in names else None

    def output_uri(self, shard_id: str) -> str:
        if self.config.get("output_dir"):
            return storage.join(self.config["output_dir"], f"{shard_id}.parquet")
        return self.lake.attrs_uri(self.name, shard_id, self.fingerprint)

    # -- phases 1 and 2 happen while planning phase 3 ----------------------------------------------
    def plan(self) -> list[UnitEntry]:
        entries = self._entries()
        shards = []
        for index, e in enumerate(entries):
            keep_uri = self._keep_uri(e)
            keep_checksum = (e.attrs_checksums.get("preprocess") or checksum_url(keep_uri)) if keep_uri else None
            checksum = f"{e.checksum}+{keep_checksum or '-'}@{index}"
            shards.append({"shard_id": e.shard_id, "uri": e.uri, "index": index, "keep_uri": keep_uri,
                           "checksum": e.checksum, "keep_checksum": keep_checksum, "rows": e.rows,
                           "input_checksum": checksum})
        rows = sum(e.rows for e in entries)
        spill_bytes = rows * (_BAND_BYTES * self.params.bands * self.params.near + _EXACT_BYTES * self.params.exact)
        parts = int(self.config["partitions"] or partitions_for(spill_bytes, int(self.config["memory_budget"])))
        out_parts = max(1, min(len(entries), 256))
        log.info("dedup: %d shards, %d rows, %d bands x %d rows, %d partitions (memory budget %d bytes)",
                 len(entries), rows, self.params.bands, self.params.rows, parts, self.config["memory_budget"])
        params = DedupParams(**{**asdict(self.params), "minhash": self.params.minhash, "partitions": parts})
        sig_config = {"params": {**asdict(params)}, "keep_column": self.config["keep_column"],
                      "shards": shards, "batch_rows": self.config["batch_rows"],
                      "max_attempts": self.config.get("max_attempts", 2), "max_failed_fraction": 0.0}
        sig = DedupSignaturesStage(self.lake, sig_config, self.run_id)
        StageRunner(sig, self.default_mapper()).run()
        fault_point("dedup.after_signatures")

        run_key = hashlib.sha256((sig.fingerprint + "|" + "|".join(s["input_checksum"] for s in shards)).encode()
                                 ).hexdigest()[:16]
        self._global = self._phase2(sig, params, shards, run_key, out_parts)
        self._shards = {s["shard_id"]: s for s in shards}
        self._entry = {e.shard_id: e for e in entries}
        return [UnitEntry(unit_id=s["shard_id"], inputs=[s["uri"]], input_checksum=f"{s['input_checksum']}#{run_key}",
                          rows=s["rows"]) for s in shards]

    def _phase2(self, sig: DedupSignaturesStage, params: DedupParams, shards: list[dict], run_key: str,
                out_parts: int) -> dict:
        gdir = self.lake.path("dedup", run_key)
        done_uri = storage.join(gdir, "_SUCCESS.json")
        if storage.exists(done_uri):
            log.info("dedup: global phase already done (%s)", done_uri)
            return storage.read_json(done_uri)
        parts = params.partitions
        band_uris = [sig.spill_uris(s["shard_id"])[0] for s in shards]
        exact_uris = [sig.spill_uris(s["shard_id"])[1] for s in shards]
        shard_uris = [s["uri"] for s in shards]
        edge_uris = [storage.join(gdir, "edges", f"part-{p:05d}.parquet") for p in range(parts)]
        exact_dup_uris = [storage.join(gdir, "exact", f"part-{p:05d}.parquet") for p in range(parts)]
        stats = list(self.default_mapper()(phases.bucket_partition, [
            (p, band_uris, exact_uris, shard_uris, params, parts, out_parts, edge_uris[p], exact_dup_uris[p])
            for p in range(parts)]))
        label_uris = connected_components(edge_uris, storage.join(gdir, "components"), parts, out_parts,
                                          self.default_mapper())
        totals = {k: sum(s[k] for s in stats) for k in ("candidates", "verified", "exact_edges")}
        result = {"labels": label_uris, "exact": exact_dup_uris, "out_partitions": out_parts, "partitions": parts,
                  "bands": params.bands, "rows": params.rows, **totals}
        log.info("dedup: global phase done: %s", totals)
        storage.write_json(done_uri, result)
        return result

    # -- phase 3 -----------------------------------------------------------------------------------
    def process_unit(self, unit: UnitEntry) -> UnitResult:
        s = self._shards[unit.unit_id]
        g = self._global
        table = phases.shard_result(s["uri"], s["index"], s["keep_uri"], self.config["keep_column"], g["labels"],
                                    g["exact"], int(g["out_partitions"]))
        uri = self.output_uri(unit.unit_id)
        fault_point("dedup.before_attrs")
        nbytes, checksum = write_parquet(uri, table)
        considered = table.column("cluster_id").is_valid()
        n = table.num_rows
        n_considered = int(considered.to_numpy(zero_copy_only=False).sum())
        exact = int(table.column("exact_duplicate").to_numpy(zero_copy_only=False).sum())
        near = int(table.column("near_duplicate").to_numpy(zero_copy_only=False).sum())
        acc = RowAccounting()
        acc.keep(n_considered - exact - near)
        for reason, count in (("exact_duplicate", exact), ("near_duplicate", near),
                              ("not_kept_upstream", n - n_considered)):
            if count:
                acc.drop(reason, count)
        return UnitResult.attrs(self.name, self._entry[unit.unit_id], uri, nbytes, checksum, acc,
                                {"exact_duplicates": exact, "near_duplicates": near})
