"""Incremental dedup across snapshots: probe the persisted LSH buckets of every earlier snapshot.

A snapshot's dedup already persists what a later snapshot needs to probe it: phase 1's spill files
(``(bucket, node)`` per band, ``(hi, lo, node)`` exact keys, one row group per hash partition) and the
attrs files (``id``, ``cluster_id``, ``prior_*``). Once every shard is done, :func:`write_index` lists
them with their checksums in ``snapshot=<S>/dedup/index/<index key>/_INDEX.json``; the index key names
the settings that decide bucket hashes, so only compatible snapshots are probed.

A later snapshot N (:func:`find_priors` lists the indexes of snapshots that sort before N, never after):

1. :func:`probe_partition` (per hash partition, parallel): N's rows of partition p against partition p of
   every earlier index (:func:`~airflow_curation.core.lsh.read_nested_partition`: partition counts are
   powers of two, so indexes written with other counts are read one partition at a time); a match is
   ``(node, snapshot ordinal, earlier node, exact)``, the earliest snapshot's lowest node first.
2. :func:`resolve` (once; memory grows with the matches, not the corpus): every match's within-N cluster
   (phase 2's labels) takes the earliest match of any member; the earlier node becomes the first document
   of its own cluster (its ``prior_*`` when it had one, else its keeper), read from that snapshot's attrs.
   Every member of such a cluster, N's keeper included, is written out partitioned by shard.
3. :func:`apply_prior` (per shard, in phase 3): those rows become duplicates with ``prior_snapshot`` and
   ``prior_id``; N's earlier outputs and the earlier snapshots' outputs are never rewritten.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_curation.core import storage, uris
from airflow_curation.core.components import LABEL_COLUMNS
from airflow_curation.core.fingerprint import checksum_url, config_fingerprint
from airflow_curation.core.integrity import IntegrityError, read_verified, verify_file
from airflow_curation.core.layout import Lake
from airflow_curation.core.lsh import (
    SPILL_SUFFIX,
    read_nested_partition,
    read_output_partition,
    read_partition,
    row_of,
    shard_of,
    write_partitioned,
)
from airflow_curation.core.schema import (
    CLUSTER_ID,
    EXACT_DUPLICATE,
    ID,
    IS_DUPLICATE,
    NEAR_DUPLICATE,
    PRIOR_ID,
    PRIOR_SNAPSHOT,
)
from airflow_curation.stages.dedup.phases import BAND_COLUMNS, EXACT_COLUMNS, DedupParams

log = logging.getLogger(__name__)

INDEX_FORMAT = "airflow-curation/dedup-index"
INDEX_VERSION = 1
INDEX_FILE = "_INDEX.json"
MATCH_COLUMNS = {"node": np.uint64, "ord": np.int64, "pnode": np.uint64, "exact": np.bool_}
PRIOR_COLUMNS = {"node": np.uint64, "snapshot": object, "id": object, "exact": np.bool_}
_SNAPSHOT_DIR = re.compile(r"/snapshot=([^/]+)/dedup/index/")


def index_key(params: DedupParams) -> str:
    """Names the settings that decide bucket hashes and clusters (not the partition count)."""
    d = asdict(params)
    d.pop("partitions")
    return config_fingerprint("dedup_index", d, str(INDEX_VERSION))


_INDEX_DEPTH = 3  # folders between the dataset base and the index: dedup/index/<key>/


def index_uri(lake: Lake, key: str) -> str:
    return lake.path("dedup", "index", key, INDEX_FILE)


def find_priors(lake: Lake, key: str) -> list[dict[str, str]]:
    """The complete indexes (same key) of the snapshots of ``lake``'s dataset that sort before its own,
    oldest first, each with the checksum of its ``_INDEX.json`` (it enters the fingerprint: a rerun after
    an earlier snapshot changed, or appeared, recomputes). Snapshot names must sort in time order (ISO
    dates, what ``{{ ds }}`` gives)."""
    if not lake.snapshot:
        return []
    pattern = storage.join(lake.root, lake.dataset, "snapshot=*", "dedup", "index", key, INDEX_FILE)
    priors = []
    for uri in storage.glob(pattern):
        m = _SNAPSHOT_DIR.search(uri.replace("\\", "/"))
        if m and m.group(1) < lake.snapshot:
            priors.append({"snapshot": m.group(1), "index": uri, "checksum": checksum_url(uri)})
    return sorted(priors, key=lambda p: p["snapshot"])


def unindexed_earlier(lake: Lake, priors: list[dict[str, str]]) -> list[str]:
    """The snapshots of ``lake``'s dataset before its own that ``priors`` (:func:`find_priors`) leaves out: no
    complete index of these parameters, because their dedup has not finished (dates run side by side, as a
    backfill runs them), failed, or ran with others. A run across snapshots cannot probe their documents: it
    says so, and records them (a rerun after they finish recomputes: its fingerprint changes)."""
    if not lake.snapshot:
        return []
    probed = {p["snapshot"] for p in priors}
    earlier = []
    for uri in storage.glob(storage.join(lake.root, lake.dataset, "snapshot=*")):
        name = uri.rstrip("/").rsplit("/", 1)[-1].removeprefix("snapshot=")
        if name < lake.snapshot and name not in probed:
            earlier.append(name)
    return sorted(earlier)


def write_index(
    lake: Lake, key: str, fingerprint: str, params: DedupParams, shards: list[dict[str, Any]], priors: list[dict]
) -> str:
    """This snapshot's index, written last and atomically: the spill files and attrs of every shard in
    node order (``shards``: ``shard_id``, ``bands``, ``exact``, ``attrs``, ``attrs_checksum``). Its content
    is deterministic (no run id, no time), so a rerun that changes nothing leaves its checksum alone."""

    def ref(uri: str | None, checksum: str | None = None) -> dict[str, str] | None:
        return {"uri": uri, "checksum": checksum or checksum_url(uri)} if uri else None

    doc = {
        "format": INDEX_FORMAT,
        "format_version": INDEX_VERSION,
        "dataset": lake.dataset,
        "snapshot": lake.snapshot,
        "index_key": key,
        "fingerprint": fingerprint,
        "partitions": params.partitions,
        "near": params.near,
        "exact": params.exact,
        "priors": [{"snapshot": p["snapshot"], "checksum": p["checksum"]} for p in priors],
        "shards": [
            {
                "shard_id": s["shard_id"],
                "bands": ref(s["bands"] if params.near else None),
                "exact": ref(s["exact"] if params.exact else None),
                "attrs": ref(s["attrs"], s["attrs_checksum"]),
            }
            for s in shards
        ],
    }
    uri = index_uri(lake, key)
    # URIs relative to the lake root (core/uris.py): a copied lake's later snapshots read the copy's spills.
    storage.write_json(uri, uris.map_keys(doc, lambda u: uris.relativize(u, lake.root)))
    return uri


def load_priors(priors: list[dict[str, str]], key: str) -> list[dict[str, Any]]:
    """Read and verify every earlier index and the spill files it lists (one pass each, here, so that the
    partition tasks need not)."""
    docs = []
    for p in priors:
        what = f"dedup index of snapshot {p['snapshot']}"
        doc = json.loads(read_verified(p["index"], p["checksum"], what).to_pybytes())  # one read: checked, parsed
        if doc.get("format") != INDEX_FORMAT or doc.get("index_key") != key:
            raise IntegrityError(f"{what} {p['index']} is not a dedup index with key {key}")
        root = uris.root_of(p["index"], doc, _INDEX_DEPTH)
        if root:
            doc = uris.map_keys(doc, lambda u, root=root: uris.resolve(u, root))
        for s in doc["shards"]:
            for kind in ("bands", "exact"):
                if s.get(kind):
                    verify_file(s[kind]["uri"], s[kind]["checksum"], f"{what}: {kind} of shard {s['shard_id']}")
        docs.append(doc)
    return docs


def probe_inputs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a partition task needs of each index (small and picklable)."""
    return [
        {
            "partitions": int(d["partitions"]),
            "bands": [s["bands"]["uri"] for s in d["shards"]] if d["near"] else [],
            "exact": [s["exact"]["uri"] for s in d["shards"]] if d["exact"] else [],
        }
        for d in docs
    ]


def _match(
    cur_keys: list[np.ndarray], cur_nodes: np.ndarray, past_keys: list[np.ndarray], past_nodes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(current node, lowest earlier node with the same keys)`` for every current row with a match."""
    if not cur_nodes.size or not past_nodes.size:
        return np.empty(0, np.uint64), np.empty(0, np.uint64)
    dtype = np.dtype([(f"k{i}", np.uint64) for i in range(len(cur_keys))])

    def packed(keys: list[np.ndarray]) -> np.ndarray:
        out = np.empty(keys[0].size, dtype)
        for i, k in enumerate(keys):
            out[f"k{i}"] = k
        return out

    past = packed(past_keys)
    order = np.lexsort([past_nodes, *reversed(past_keys)])
    past, past_nodes = past[order], past_nodes[order]
    first = np.ones(past.size, bool)
    first[1:] = past[1:] != past[:-1]
    past, past_nodes = past[first], past_nodes[first]  # each key's lowest node
    cur = packed(cur_keys)
    at = np.minimum(np.searchsorted(past, cur), past.size - 1)
    hit = past[at] == cur
    return cur_nodes[hit], past_nodes[at[hit]]


def probe_partition(
    p: int,
    num_partitions: int,
    band_uris: list[str],
    exact_uris: list[str],
    priors: list[dict[str, Any]],
    params: DedupParams,
    out_uri: str,
) -> int:
    """Partition ``p`` of this snapshot against partition ``p`` of every earlier index: one row per matched
    node with its earliest match (lowest snapshot ordinal, then lowest node), ``exact`` when any match of
    the node was on the exact key. Returns the matched nodes."""
    nodes, ords, pnodes, exact = [], [], [], []

    def add(n: np.ndarray, pn: np.ndarray, o: int, ex: bool) -> None:
        nodes.append(n)
        pnodes.append(pn)
        ords.append(np.full(n.size, o, np.int64))
        exact.append(np.full(n.size, ex))

    if params.near:
        cur = read_partition(band_uris, p, BAND_COLUMNS)
        for o, pr in enumerate(priors):
            if pr["bands"] and cur["node"].size:
                past = read_nested_partition(pr["bands"], p, num_partitions, pr["partitions"], BAND_COLUMNS, "bucket")
                add(*_match([cur["bucket"]], cur["node"], [past["bucket"]], past["node"]), o, False)
    if params.exact:
        cur = read_partition(exact_uris, p, EXACT_COLUMNS)
        for o, pr in enumerate(priors):
            if pr["exact"] and cur["node"].size:
                past = read_nested_partition(pr["exact"], p, num_partitions, pr["partitions"], EXACT_COLUMNS, "hi")
                add(*_match([cur["hi"], cur["lo"]], cur["node"], [past["hi"], past["lo"]], past["node"]), o, True)
    m = _reduce_matches(
        *(
            np.concatenate(x) if x else np.empty(0, d)
            for x, d in zip((nodes, ords, pnodes, exact), MATCH_COLUMNS.values())
        )
    )
    _write_table(out_uri, m)
    return int(m["node"].size)


def _reduce_matches(node, ord_, pnode, exact) -> dict[str, np.ndarray]:
    """One row per node: its earliest (ordinal, earlier node), and whether any of its matches was exact."""
    if not node.size:
        return {k: np.empty(0, d) for k, d in MATCH_COLUMNS.items()}
    order = np.lexsort([pnode, ord_, node])
    node, ord_, pnode, exact = node[order], ord_[order], pnode[order], exact[order]
    first = np.ones(node.size, bool)
    first[1:] = node[1:] != node[:-1]
    starts = np.flatnonzero(first)
    any_exact = np.maximum.reduceat(exact.astype(np.uint8), starts).astype(bool)
    return {"node": node[first], "ord": ord_[first], "pnode": pnode[first], "exact": any_exact}


def _write_table(uri: str, columns: dict[str, np.ndarray]) -> None:
    with storage.atomic_open(uri) as f:
        pq.write_table(pa.table({k: pa.array(v) for k, v in columns.items()}), f, compression="zstd")


def _read_table(uris: list[str]) -> dict[str, np.ndarray]:
    tables = []
    for uri in uris:
        tables.append(storage.read_parquet(uri))
    t = pa.concat_tables(tables) if tables else None
    if t is None or not t.num_rows:
        return {k: np.empty(0, d) for k, d in MATCH_COLUMNS.items()}
    return {k: t.column(k).to_numpy().astype(d, copy=False) for k, d in MATCH_COLUMNS.items()}


class _PriorAttrs:
    """Earlier snapshots' attrs files, read (and verified) once each, as they are needed."""

    def __init__(self, docs: list[dict[str, Any]]) -> None:
        self.docs = docs
        self._cache: dict[tuple[int, int], dict[str, list]] = {}

    def rows(self, o: int, shard: int) -> dict[str, list]:
        if (o, shard) not in self._cache:
            ref = self.docs[o]["shards"][shard]["attrs"]
            what = f"dedup attrs of snapshot {self.docs[o]['snapshot']}"
            t = pq.read_table(pa.BufferReader(read_verified(ref["uri"], ref["checksum"], what)))  # one read
            names = [c for c in (ID, CLUSTER_ID, PRIOR_SNAPSHOT, PRIOR_ID) if c in t.column_names]
            self._cache[(o, shard)] = {c: t.column(c).to_pylist() for c in names}
        return self._cache[(o, shard)]

    def first_of(self, o: int, node: int) -> tuple[str, str]:
        """The first document of ``node``'s cluster in snapshot ``o``: its own prior, else its keeper."""
        shard, row = int(node >> 32), int(node & 0xFFFFFFFF)
        r = self.rows(o, shard)
        if r.get(PRIOR_SNAPSHOT) and r[PRIOR_SNAPSHOT][row] is not None:
            return r[PRIOR_SNAPSHOT][row], r[PRIOR_ID][row]
        keeper = r[CLUSTER_ID][row]
        if keeper is None:  # the spill holds only considered rows, which all have a cluster id
            raise IntegrityError(f"snapshot {self.docs[o]['snapshot']}: node {node} has no cluster id")
        k = self.rows(o, keeper >> 32)
        return self.docs[o]["snapshot"], k[ID][keeper & 0xFFFFFFFF]


def resolve(
    match_uris: list[str],
    label_uris: list[str],
    out_partitions: int,
    docs: list[dict[str, Any]],
    out_dir: str,
    gathered: bool = False,
    by_shard: bool = False,
) -> tuple[list[str], dict[str, int]]:
    """Clusters of this snapshot -> their earliest earlier document; every member written out, partitioned
    by shard like phase 2's labels. Returns the files and counts. ``gathered``, ``by_shard``: how phase 2's
    labels were gathered (:func:`~airflow_curation.core.lsh.gather_partition`)."""

    def labels_of(q: int) -> dict[str, np.ndarray]:
        return read_output_partition(label_uris, q, LABEL_COLUMNS, gathered, by_shard)

    m = _reduce_matches(*_read_table(match_uris).values())
    # node -> its cluster (phase 2's label; a node without one is its own cluster's keeper)
    label_parts = sorted({int(q) for q in shard_of(m["node"]) % out_partitions})
    lab = [labels_of(q) for q in label_parts]
    lab_node = np.concatenate([x["node"] for x in lab]) if lab else np.empty(0, np.uint64)
    lab_label = np.concatenate([x["label"] for x in lab]) if lab else np.empty(0, np.uint64)
    order = np.argsort(lab_node)
    lab_node, lab_label = lab_node[order], lab_label[order]
    comp = m["node"].copy()
    if lab_node.size:
        at = np.minimum(np.searchsorted(lab_node, m["node"]), lab_node.size - 1)
        hit = lab_node[at] == m["node"]
        comp[hit] = lab_label[at[hit]]
    # each cluster takes its earliest match
    order = np.lexsort([m["pnode"], m["ord"], comp])
    comp_s, ord_s, pnode_s = comp[order], m["ord"][order], m["pnode"][order]
    first = np.ones(comp_s.size, bool)
    first[1:] = comp_s[1:] != comp_s[:-1]
    clusters, c_ord, c_pnode = comp_s[first], ord_s[first], pnode_s[first]
    attrs = _PriorAttrs(docs)
    firsts = [attrs.first_of(int(o), int(n)) for o, n in zip(c_ord.tolist(), c_pnode.tolist())]
    snap = np.array([f[0] for f in firsts], dtype=object)
    ids = np.array([f[1] for f in firsts], dtype=object)
    exact_nodes = np.sort(m["node"][m["exact"]])
    uris = []
    members_total = 0
    for q in range(out_partitions):
        lq = labels_of(q) if clusters.size else None
        nodes_q, cl_q = [], []
        if lq is not None and lq["node"].size:
            at = np.minimum(np.searchsorted(clusters, lq["label"]), clusters.size - 1)
            hit = clusters[at] == lq["label"]
            nodes_q.append(lq["node"][hit])
            cl_q.append(at[hit])
        keepers = np.flatnonzero((shard_of(clusters) % out_partitions) == q)  # keepers are in no label file
        nodes_q.append(clusters[keepers])
        cl_q.append(keepers)
        node = np.concatenate(nodes_q)
        idx = np.concatenate(cl_q).astype(np.int64)
        ex = np.isin(node, exact_nodes, assume_unique=False)
        uri = storage.join(out_dir, "prior", f"part-{q:05d}{SPILL_SUFFIX}")
        # one batch per shard: phase 3 of a shard reads its own rows (:func:`apply_prior`)
        write_partitioned(uri, {"node": node, "snapshot": snap[idx], "id": ids[idx], "exact": ex}, shard_of(node))
        members_total += int(node.size)
        uris.append(uri)
    return uris, {
        "prior_matched_nodes": int(m["node"].size),
        "prior_clusters": int(clusters.size),
        "prior_rows": members_total,
    }


def apply_prior(
    table: pa.Table, shard_index: int, prior_uris: list[str] | None, out_partitions: int, by_shard: bool = False
) -> pa.Table:
    """Phase 3's attrs of one shard with the cross-snapshot duplicates marked: ``is_duplicate`` for every
    member of a cluster whose first document is in an earlier snapshot, ``exact_duplicate`` where the row's
    own match was on the exact key, and ``prior_snapshot``/``prior_id`` naming that first document.
    ``by_shard``: :func:`resolve` wrote one batch per shard (this shard's are read from its partition's file
    alone), else one per output partition (found in every file)."""
    n = table.num_rows
    snap = np.full(n, None, dtype=object)
    pid = np.full(n, None, dtype=object)
    dup = table.column(IS_DUPLICATE).to_numpy(zero_copy_only=False).astype(bool)
    exact = table.column(EXACT_DUPLICATE).to_numpy(zero_copy_only=False).astype(bool)
    if prior_uris:
        q = shard_index % out_partitions
        r = read_output_partition(prior_uris, q, PRIOR_COLUMNS, False, by_shard, shard_index)
        mine = shard_of(r["node"]) == shard_index
        rows = row_of(r["node"][mine])
        snap[rows] = r["snapshot"][mine]
        pid[rows] = r["id"][mine]
        dup[rows] = True
        exact[rows] |= r["exact"][mine]
    return (
        table.set_column(table.schema.get_field_index(IS_DUPLICATE), IS_DUPLICATE, pa.array(dup))
        .set_column(table.schema.get_field_index(EXACT_DUPLICATE), EXACT_DUPLICATE, pa.array(exact))
        .set_column(table.schema.get_field_index(NEAR_DUPLICATE), NEAR_DUPLICATE, pa.array(dup & ~exact))
        .append_column(PRIOR_SNAPSHOT, pa.array(snap, pa.string()))
        .append_column(PRIOR_ID, pa.array(pid, pa.string()))
    )
