"""LSH precision and recall on real near duplicates against exact-Jaccard ground truth, beside
datasketch's MinHashLSH with the same parameters; spill files; connected components vs union-find."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_curation.core import storage
from airflow_curation.core.components import connected_components, write_edges
from airflow_curation.core.integrity import IntegrityError
from airflow_curation.core.lsh import (
    bucket_pairs,
    merge_partitions,
    node_keys,
    pack_spills,
    partition_of,
    partition_ranges,
    partitions_for,
    read_partition,
    read_partition_pieces,
    read_partitions,
    row_of,
    shard_of,
    star_edges,
    star_edges_in_place,
    star_edges_keyed_in_place,
    unique_edges,
    write_partitioned,
)
from airflow_curation.core.minhash import MinHasher, MinHashParams, band_hashes, jaccard, lsh_params
from airflow_curation.core.pairs import distinct_pairs_in_place, sort_pairs

THRESHOLD = 0.8


def _scores(pred: set[tuple[int, int]], jac: np.ndarray) -> tuple[float, float, float]:
    i, j = np.nonzero(np.triu(jac >= THRESHOLD))
    truth = set(zip(i.tolist(), j.tolist()))
    tp = len(pred & truth)
    precision = tp / max(1, len(pred))
    recall = tp / max(1, len(truth))
    return precision, recall, 2 * precision * recall / max(1e-12, precision + recall)


def test_precision_recall_follow_theory_and_match_datasketch(nd_corpus):
    """Recall and precision are random (pairs come in correlated groups: one page's mutated copies), so
    both sides are averaged over seeds and compared with the S-curve's expectation too."""
    from datasketch import MinHash, MinHashLSH

    from .corpus import shingle_set

    ids, texts, jac = nd_corpus
    bands, rows = lsh_params(THRESHOLD, 128)
    ours = []
    for seed in range(1, 5):
        sig, _ = MinHasher(MinHashParams(seed=seed)).signatures(texts)
        ours.append(_scores(bucket_pairs(band_hashes(sig, bands, rows)), jac))
    theirs = []
    encoded = [[" ".join(s).encode() for s in shingle_set(t)] for t in texts]
    for seed in range(1, 3):
        lsh = MinHashLSH(threshold=THRESHOLD, num_perm=128)
        sketches = []
        for k, shingles in enumerate(encoded):
            m = MinHash(num_perm=128, seed=seed)
            m.update_batch(shingles)
            lsh.insert(k, m)
            sketches.append(m)
        assert (lsh.b, lsh.r) == (bands, rows)
        pred = {(min(k, o), max(k, o)) for k, m in enumerate(sketches) for o in lsh.query(m) if o != k}
        theirs.append(_scores(pred, jac))
    p, r, f1 = np.mean(ours, axis=0)
    dp, dr, df1 = np.mean(theirs, axis=0)
    i, j = np.triu_indices(len(texts), 1)
    v = jac[i, j]
    hit = 1 - (1 - v**rows) ** bands
    expected_recall = hit[v >= THRESHOLD].sum() / (v >= THRESHOLD).sum()
    print(
        f"ours P={p:.3f} R={r:.3f} F1={f1:.3f}; datasketch P={dp:.3f} R={dr:.3f} F1={df1:.3f}; "
        f"expected R={expected_recall:.3f}"
    )
    assert abs(r - expected_recall) < 0.05
    assert p >= 0.85 and r >= 0.8
    assert f1 >= df1 - 0.03


@pytest.fixture(scope="module")
def ours(nd_corpus):
    ids, texts, jac = nd_corpus
    hasher = MinHasher()
    sig, _ = hasher.signatures(texts)
    bands, rows = lsh_params(THRESHOLD, 128)
    return hasher, bucket_pairs(band_hashes(sig, bands, rows))


def test_verification_removes_false_positives(nd_corpus, ours):
    ids, texts, jac = nd_corpus
    hasher, pred = ours
    shingles = [hasher.shingles(t) for t in texts]
    verified = {(x, y) for x, y in pred if jaccard(shingles[x], shingles[y]) >= THRESHOLD}
    p, r, _ = _scores(verified, jac)
    assert p == 1.0
    assert r == _scores(pred, jac)[1]  # verification never loses a true pair


def test_spill_roundtrip_by_partition(tmp_path):
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 2**63, 5000, dtype=np.uint64)
    nodes = np.arange(5000, dtype=np.uint64)
    parts = (keys % np.uint64(7)).astype(np.int64)
    files = []
    for k in range(3):
        f = str(tmp_path / f"s{k}.parquet")
        sl = slice(k * 2000, (k + 1) * 2000)
        write_partitioned(f, {"bucket": keys[sl], "node": nodes[sl]}, parts[sl])
        files.append(f)
    seen = []
    for p in range(8):
        r = read_partition(files, p, {"bucket": np.uint64, "node": np.uint64})
        assert (r["bucket"] % np.uint64(7) == p).all()
        seen.append(r["node"])
    assert sorted(np.concatenate(seen).tolist()) == nodes.tolist()
    write_partitioned(str(tmp_path / "empty.parquet"), {"bucket": np.empty(0, np.uint64)}, np.empty(0, np.int64))
    assert read_partition([str(tmp_path / "empty.parquet")], 0, {"bucket": np.uint64})["bucket"].size == 0


def test_one_shards_node_keys_are_stored_as_rows_and_read_back_whole(tmp_path):
    """A shard's spill file keeps its node keys' shared high word once: each key costs 4 bytes, not 8, and
    every reader (one partition, a range, Arrow pieces) gets the uint64 keys written. Keys that span
    shards, or columns of random hashes, are stored as they are."""
    rng = np.random.default_rng(3)
    rows = 20_000
    buckets = rng.integers(0, 2**63, rows, dtype=np.uint64)
    nodes = node_keys(70_000, rng.permutation(rows).astype(np.uint64))  # high word 70,000: past 16 bits
    parts = partition_of(buckets, 64)
    one, two = str(tmp_path / "one.arrow"), str(tmp_path / "two.arrow")
    write_partitioned(one, {"bucket": buckets, "node": nodes}, parts)
    mixed = nodes.copy()
    mixed[::2] = node_keys(3, np.arange(mixed[::2].size, dtype=np.uint64))
    write_partitioned(two, {"bucket": buckets, "node": mixed}, parts)
    with pa.memory_map(one) as f:
        stored = pa.ipc.open_file(f).schema
    assert stored.field("node").type == pa.uint32() and stored.field("bucket").type == pa.uint64()
    with pa.memory_map(two) as f:
        assert pa.ipc.open_file(f).schema.field("node").type == pa.uint64()
    # 8 bytes of random bucket hash a row plus 4 of (random) row, lz4 framing aside: not 8 + 8
    assert os.path.getsize(one) < rows * 13
    cols = {"bucket": np.uint64, "node": np.uint64}
    for uri, want in ((one, nodes), (two, mixed)):
        got = dict(read_partitions([uri], 0, 64, cols))
        for p in range(64):
            assert got[p]["node"].dtype == np.uint64
            assert got[p]["node"].tolist() == want[parts == p].tolist()
            assert got[p]["bucket"].tolist() == buckets[parts == p].tolist()
        assert read_partition([uri], 5, cols)["node"].tolist() == want[parts == 5].tolist()
        pieces = dict(read_partition_pieces([uri, uri], 9, 11, ["node"]))
        assert [t.column("node").type for t in pieces[9]] == [pa.uint64()] * 2
        assert pieces[10][1].column("node").to_pylist() == want[parts == 10].tolist()


def test_spill_files_of_the_parquet_format_are_still_read(tmp_path):
    """Spill files written before they were Arrow IPC (Parquet, one row group per partition, the index in
    the schema's metadata): what earlier snapshots' indexes list, and a run resumed across an upgrade."""
    keys = np.arange(10, dtype=np.uint64)
    nodes = keys + np.uint64(100)
    parts = (keys % np.uint64(3)).astype(np.int64)
    order = np.argsort(parts, kind="stable")
    t = pa.table({"bucket": keys[order], "node": nodes[order]})
    t = t.replace_schema_metadata({b"curation.partitions": json.dumps({"0": 0, "1": 1, "2": 2}).encode()})
    old = str(tmp_path / "old.parquet")
    with pq.ParquetWriter(old, t.schema) as w:
        for p in range(3):
            w.write_table(t.filter(pa.compute.equal(pa.array(parts[order]), p)))
    new = str(tmp_path / "new.parquet")
    write_partitioned(new, {"bucket": keys, "node": nodes}, parts)
    for p in range(3):
        r = read_partition([old, new], p, {"bucket": np.uint64, "node": np.uint64})
        mine = keys[parts == p]
        assert r["bucket"].tolist() == mine.tolist() * 2
        assert r["node"].tolist() == (mine + np.uint64(100)).tolist() * 2


def test_a_range_of_partitions_opens_each_spill_file_once(tmp_path, monkeypatch):
    """A reader of partitions lo..hi-1 opens each file once for the range (not once per partition) and gets
    what per-partition reads get, empty partitions included; the ranges cover every partition once."""
    rng = np.random.default_rng(2)
    cols = {"bucket": np.uint64, "node": np.uint64}
    files = []
    for k in range(4):
        keys = rng.integers(0, 2**63, 3000, dtype=np.uint64)
        f = str(tmp_path / f"s{k}.bands.parquet")
        write_partitioned(f, {"bucket": keys, "node": keys + np.uint64(k)}, (keys % np.uint64(50)).astype(np.int64))
        files.append(f)
    one = {p: read_partition(files, p, cols) for p in range(64)}
    opened = []
    real_open = storage.open_arrow
    monkeypatch.setattr(storage, "open_arrow", lambda uri: opened.append(uri) or real_open(uri))
    ranges = partition_ranges(64, 5)
    assert [hi - lo for lo, hi in ranges] == [12, 13, 13, 13, 13] and ranges[0][0] == 0 and ranges[-1][1] == 64
    for lo, hi in ranges:
        got = list(read_partitions(files, lo, hi, cols))
        assert [p for p, _ in got] == list(range(lo, hi))
        for p, r in got:
            assert all(r[c].tolist() == one[p][c].tolist() for c in cols)
    assert len(opened) == len(ranges) * len(files)
    assert partition_ranges(3, 8) == [(0, 1), (1, 2), (2, 3)]  # never more ranges than partitions


def test_spill_files_with_the_json_index_are_still_read(tmp_path):
    """Arrow IPC spill files written before the binary partition list (a JSON map in the schema's
    metadata): what earlier snapshots' indexes list, and a run resumed across an upgrade."""
    keys = np.arange(12, dtype=np.uint64)
    parts = (keys % np.uint64(4)).astype(np.int64)
    order = np.argsort(parts, kind="stable")
    t = pa.table({"bucket": keys[order], "node": keys[order] + np.uint64(100)})
    present = [1, 3]  # partitions 0 and 2 left out: the map, not the batch order, says which is which
    meta = {b"curation.partitions": json.dumps({str(p): i for i, p in enumerate(present)}).encode()}
    old = tmp_path / "old.bands.parquet"
    with pa.ipc.new_file(str(old), t.schema.with_metadata(meta)) as w:
        for p in present:
            w.write_table(t.filter(pa.compute.equal(pa.array(parts[order]), p)))
    for p in range(4):
        r = read_partition([str(old)], p, {"bucket": np.uint64, "node": np.uint64})
        assert r["bucket"].tolist() == (keys[parts == p].tolist() if p in present else [])
    got = dict(read_partitions([str(old)], 0, 4, {"node": np.uint64}))
    assert got[3]["node"].tolist() == [103, 107, 111] and got[2]["node"].size == 0


def test_a_truncated_spill_file_fails_clearly_naming_it(tmp_path):
    f = tmp_path / "s.bands.parquet"
    keys = np.arange(1000, dtype=np.uint64)
    write_partitioned(str(f), {"bucket": keys, "node": keys}, (keys % np.uint64(4)).astype(np.int64))
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    with pytest.raises(IntegrityError, match="s.bands.parquet"):
        read_partition([str(f)], 1, {"bucket": np.uint64, "node": np.uint64})
    with pytest.raises(IntegrityError, match="s.bands.parquet"):
        list(read_partitions([str(f)], 0, 4, {"bucket": np.uint64, "node": np.uint64}))


def test_star_edges_link_each_bucket_to_its_lowest_node():
    a, b = star_edges([np.array([5, 5, 5, 7, 7, 9], np.uint64)], np.array([30, 10, 20, 2, 1, 4], np.uint64))
    assert sorted(zip(a.tolist(), b.tolist())) == [(1, 2), (10, 20), (10, 30)]


@pytest.mark.parametrize("shape", ["empty", "one", "distinct", "few_buckets", "one_bucket", "repeats", "sorted"])
def test_bucketing_in_place_gives_the_edges_of_star_and_unique_edges(shape):
    """A partition bucketed in its own arrays (``star_edges_in_place``, then ``distinct_pairs_in_place``) gives the
    edges of ``unique_edges(*star_edges(...))`` row for row: each bucket's members linked to its lowest node, a node
    repeated in a bucket linked once, on every shape a partition takes (one bucket of every row, every row its
    own bucket, rows already sorted)."""
    rng = np.random.default_rng(11)
    n = 100_003
    bucket = {
        "empty": np.empty(0, np.uint64),
        "one": np.array([7], np.uint64),
        "distinct": rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False),
        "few_buckets": rng.integers(0, 9, n).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15),
        "one_bucket": np.full(n, 2**64 - 1, np.uint64),
        "repeats": rng.integers(0, n // 3, n).astype(np.uint64),
        "sorted": np.repeat(np.arange(n // 5, dtype=np.uint64), 5)[:n],
    }[shape]
    node = rng.integers(0, 2**40, len(bucket)).astype(np.uint64)
    node[: len(node) // 4] = node[len(node) // 4 : 2 * (len(node) // 4)]  # nodes repeated, in other buckets too
    a, b = unique_edges(*star_edges([bucket], node))
    bk, nd = bucket.copy(), node.copy()
    e = star_edges_in_place(bk, nd)
    m = distinct_pairs_in_place(bk[:e], nd[:e])
    assert bk[:m].tolist() == a.tolist() and nd[:m].tolist() == b.tolist()
    if shape in ("distinct", "one"):
        assert m == 0
    xs, ys = bucket.copy(), node.copy()
    sort_pairs(xs, ys)
    order = np.lexsort([node, bucket])
    assert xs.tolist() == bucket[order].tolist() and ys.tolist() == node[order].tolist()


def _bucketing_peak(tmp_path, band_spills: list[str], exact_spills: list[str]) -> tuple[dict, int]:
    """``bucket_partitions`` on one partition of these spills, after a run on their first files (kernels loaded
    outside the count): its stats and the peak of numpy's allocations by ``tracemalloc``."""
    import tracemalloc

    from airflow_curation.stages.dedup.phases import DedupParams, bucket_partitions

    params = DedupParams(near=bool(band_spills), exact=bool(exact_spills))

    def bucketed(bands, exact, name):
        return bucket_partitions(0, 1, bands, exact, [], params, 1, 1, str(tmp_path / name), str(tmp_path / "x.arrow"))

    bucketed(band_spills[:1], exact_spills[:1], "warm.arrow")
    tracemalloc.start()
    try:
        stats = bucketed(band_spills, exact_spills, "edges.arrow")
        return stats, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_dedup_partition_is_bucketed_in_the_arrays_it_was_read_into(tmp_path):
    """Dedup's global phase holds a partition's band rows and its edges, not a sort index and gathered copies
    besides: by tracemalloc (numpy's allocations), bucketing a partition of 8 band spills allocates < 1.5x its
    rows' 16 bytes (the code before: 4.1x, a lexsort index, the gathered columns and the group arrays)."""
    rng = np.random.default_rng(5)
    spills, rows = [], 0
    for s in range(8):
        bucket = rng.integers(1, 2**63, 50_000, dtype=np.uint64)
        bucket[:500] = np.arange(500, dtype=np.uint64)  # 1% of each file in buckets every file shares
        node = node_keys(s, np.arange(50_000, dtype=np.uint64))
        spills.append(str(tmp_path / f"s{s}.bands.arrow"))
        write_partitioned(spills[-1], {"bucket": bucket, "node": node}, np.zeros(50_000, np.int64))
        rows += 50_000
    stats, peak = _bucketing_peak(tmp_path, spills, [])
    assert stats["candidates"] == 500 * 7  # each shared bucket: 8 members, 7 edges to the lowest
    assert peak < 1.5 * 16 * rows, f"{peak / rows:.1f} bytes a row"


@pytest.mark.parametrize("shape", ["empty", "one", "distinct", "few_keys", "one_key", "high_words_collide"])
def test_keyed_bucketing_in_place_gives_the_edges_of_star_edges(shape):
    """Exact keys (two columns, a 128-bit hash) bucketed in their own arrays, the node carried along: the same
    (lowest, member) edges as ``star_edges([hi, lo], node)``, counted with their repeats, on every shape,
    keys whose high words are equal and low words differ (one bucket each) included."""
    rng = np.random.default_rng(23)
    n = 60_001
    few = rng.integers(0, 7, n).astype(np.uint64)
    hi, lo = {
        "empty": (np.empty(0, np.uint64), np.empty(0, np.uint64)),
        "one": (np.array([3], np.uint64), np.array([4], np.uint64)),
        "distinct": tuple(rng.integers(0, 2**64, (2, n), dtype=np.uint64, endpoint=False)),
        "few_keys": (few * np.uint64(0x9E3779B97F4A7C15), few ^ np.uint64(5)),
        "one_key": (np.full(n, 2**64 - 1, np.uint64), np.full(n, 1, np.uint64)),
        "high_words_collide": (np.full(n, 42, np.uint64), rng.integers(0, 50, n).astype(np.uint64)),
    }[shape]
    node = rng.integers(0, 2**40, len(hi)).astype(np.uint64)
    node[: len(node) // 4] = node[len(node) // 4 : 2 * (len(node) // 4)]  # a node in several rows
    a, b = star_edges([hi, lo], node)
    h, lw, nd = hi.copy(), lo.copy(), node.copy()
    e = star_edges_keyed_in_place(h, lw, nd)
    assert sorted(zip(h[:e].tolist(), nd[:e].tolist())) == sorted(zip(a.tolist(), b.tolist()))
    if shape in ("distinct", "one", "empty"):
        assert e == 0
    with pytest.raises(ValueError, match="one length"):
        star_edges_keyed_in_place(h, lw, nd[:-1] if len(nd) else np.ones(1, np.uint64))


def test_exact_keys_are_bucketed_in_the_arrays_they_were_read_into(tmp_path):
    """Dedup's global phase holds a partition's exact-key rows and their edges, not a lexsort index and gathered
    copies besides: by tracemalloc, bucketing a partition of 8 exact spills (hi, lo, node) allocates < 1.5x its
    rows' 24 bytes (the code before: 3.4x)."""
    rng = np.random.default_rng(6)
    spills, rows = [], 0
    for s in range(8):
        hi, lo = rng.integers(1, 2**63, (2, 50_000), dtype=np.uint64)
        hi[:500], lo[:500] = np.arange(500, dtype=np.uint64), 7  # 1% of each file: documents every file holds
        node = node_keys(s, np.arange(50_000, dtype=np.uint64))
        spills.append(str(tmp_path / f"s{s}.exact.arrow"))
        write_partitioned(spills[-1], {"hi": hi, "lo": lo, "node": node}, np.zeros(50_000, np.int64))
        rows += 50_000
    stats, peak = _bucketing_peak(tmp_path, [], spills)
    assert stats["exact_edges"] == 500 * 7  # each shared document: 8 copies, 7 edges to the lowest node
    assert peak < 1.5 * 24 * rows, f"{peak / rows:.1f} bytes a row"


def test_node_keys_and_partition_budget():
    n = node_keys(3, np.array([0, 7], np.uint64))
    assert shard_of(n).tolist() == [3, 3] and row_of(n).tolist() == [0, 7]
    assert partitions_for(10 << 30, 1 << 30) == 40 and partitions_for(1, 1 << 30) == 1
    with pytest.raises(ValueError):
        node_keys(-1, 3)


def _union_find(n, a, b):
    parent = list(range(n))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for x, y in zip(a, b):
        rx, ry = find(x), find(y)
        if rx != ry:
            parent[max(rx, ry)] = min(rx, ry)
    return {i: find(i) for i in range(n)}


def _labels_of(outs: list[str], out_partitions: int) -> dict[int, int]:
    got = {}
    for q in range(out_partitions):
        r = read_partition(outs, q, {"node": np.uint64, "label": np.uint64})
        assert not set(r["node"].tolist()) & set(got), "a node labelled twice"
        got.update(zip(r["node"].tolist(), r["label"].tolist()))
    return got


@pytest.mark.parametrize("partitions, written", [(1, 1), (3, 3), (8, 8), (1, 7), (3, 7), (4, 16)])
def test_components_match_union_find(tmp_path, partitions, written):
    """Labels are union-find's at any partition count, also where the edges were written in more partitions
    than the steps run in (sized before the edges were counted): the first step reads spans of them."""
    rng = np.random.default_rng(partitions)
    n = 3000
    a = np.r_[rng.integers(0, n, 2500), np.arange(100, 700)]  # random edges and a long path
    b = np.r_[rng.integers(0, n, 2500), np.arange(101, 701)]
    edges = [str(tmp_path / "edges-0.parquet"), str(tmp_path / "edges-1.parquet")]  # two units' files
    write_edges(edges[0], a[:1500].astype(np.uint64), b[:1500].astype(np.uint64), written)
    write_edges(edges[1], a[1500:].astype(np.uint64), b[1500:].astype(np.uint64), written)
    got = connected_components(edges, str(tmp_path / "cc"), partitions, 2, input_partitions=written)
    outs, rounds = got.labels, got.rounds
    # in memory: union-find, no rounds; else star rounds until one changes nothing (the path needs several)
    assert rounds == 0 if partitions == 1 else rounds > 1
    assert _labels_of(outs, 2) == {k: v for k, v in _union_find(n, a.tolist(), b.tolist()).items() if v != k}


def _graph(kind: str, n: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """Edges over node keys of several shards (high words), shaped as near-duplicate graphs come."""
    keys = (rng.integers(0, 5, n).astype(np.uint64) << np.uint64(32)) | rng.permutation(n).astype(np.uint64)
    i = np.arange(1, n)
    if kind == "path":
        j = i - 1
    elif kind == "tree":  # each node a near copy of any earlier one
        j = (rng.random(n - 1) * i).astype(np.int64)
    elif kind == "drift":  # each a near copy of one of the previous 20
        j = i - 1 - (rng.random(n - 1) * np.minimum(i, 20)).astype(np.int64)
    else:  # "stars": many small clusters, each a bucket's star, two bands apiece
        j = np.where(i % 7 == 0, i, i - i % 7 + (rng.random(n - 1) * (i % 7)).astype(np.int64))
    return keys[i], keys[j]


@pytest.mark.parametrize("kind", ["path", "tree", "drift", "stars"])
@pytest.mark.parametrize("partitions, budget", [(2, None), (5, None), (8, 16 * 4 * 900)])
def test_components_finish_stars_and_shrink_partitions(tmp_path, kind, partitions, budget):
    """Finished stars leave the graph labelled where they are found, and with a memory budget each step runs in
    the partitions its live edges need (down to union-find in memory): the labels stay union-find's, each node
    labelled once."""
    rng = np.random.default_rng(len(kind) * 31 + partitions)
    a, b = _graph(kind, 1500, rng)
    uri = str(tmp_path / "edges.parquet")
    write_edges(uri, a, b, partitions)
    got = connected_components([uri], str(tmp_path / "cc"), partitions, 3, memory_budget=budget)
    nodes, idx = np.unique(np.r_[a, b], return_inverse=True)
    roots = _union_find(nodes.size, idx[: a.size].tolist(), idx[a.size :].tolist())
    want = {int(nodes[k]): int(nodes[v]) for k, v in roots.items() if v != k}
    assert _labels_of(got.labels, 3) == want
    finished = [u for u in got.labels if "/round-" in u]
    if kind == "stars":  # clusters of at most 7 nodes: each finished within a few rounds, labelled where found
        assert finished and got.rounds <= 4
    if budget:  # the live edges shrink below one partition: the steps read fewer files than at 8 throughout
        assert got.reads < 8 * 8 * 2 * got.rounds


@pytest.mark.parametrize("kind", ["tree", "drift", "stars"])
@pytest.mark.parametrize("budget", [None, 16 * 4 * 600])
def test_components_with_merged_step_inputs(tmp_path, kind, budget):
    """With the middle pass each step's task reads its span from one merged file a group of the step before's
    files, not from every one of them: the same labels as without it, each node labelled once, the reads counted
    as merge plus readers (fewer than without it here: 24 unit files, 12 partitions), no merged file left."""
    rng = np.random.default_rng(len(kind))
    a, b = _graph(kind, 2400, rng)
    units = [str(tmp_path / f"edges-{u:02d}.arrow") for u in range(24)]
    for u, sl in enumerate(np.array_split(np.arange(a.size), len(units))):
        write_edges(units[u], a[sl], b[sl], 12)
    nodes, idx = np.unique(np.r_[a, b], return_inverse=True)
    roots = _union_find(nodes.size, idx[: a.size].tolist(), idx[a.size :].tolist())
    want = {int(nodes[k]): int(nodes[v]) for k, v in roots.items() if v != k}
    runs = {}
    for merge in ("off", "on"):
        got = connected_components(
            units, str(tmp_path / merge), 12, 3, memory_budget=budget, merge=merge, merge_budget=1 << 20
        )
        assert _labels_of(got.labels, 3) == want, merge
        runs[merge] = got
    off, on = runs["off"], runs["on"]
    assert off.merged == 0 and on.merged >= 1
    assert on.steps == off.steps and on.rounds == off.rounds  # the same steps, read from other files
    assert on.reads < off.reads, (on.reads, off.reads)
    # the first step: 12 tasks x 24 files without the pass
    assert off.reads >= 12 * 24
    left = [p for p in (tmp_path / "on").rglob("*") if p.is_file() and "/merged/" in str(p)]
    assert not left, left


def test_merged_step_inputs_free_the_step_before_before_the_step_runs(tmp_path, monkeypatch):
    """Once a step's inputs are merged, the files of the step before are read through the copies only: removed
    before the step's tasks run, so the lake holds one step's edges (and its merged copy) at a time, not two
    steps' and a copy (~1 TB a step at the 50 TB plan's first steps). The units' own edge files stay."""
    from airflow_curation.core import components

    rng = np.random.default_rng(5)
    a, b = _graph("drift", 2400, rng)
    units = [str(tmp_path / f"edges-{u:02d}.arrow") for u in range(24)]
    for u, sl in enumerate(np.array_split(np.arange(a.size), len(units))):
        write_edges(units[u], a[sl], b[sl], 12)
    work = tmp_path / "cc"
    seen = []
    real = components._step

    def step(kind, inputs, span, parts, out_uri, *rest):
        if all("/merged/" in u for u in inputs):
            this = Path(out_uri).parent
            before = [p for p in work.glob("round-*/part-*.arrow") if p.parent != this]
            seen.append(before)
        return real(kind, inputs, span, parts, out_uri, *rest)

    monkeypatch.setattr(components, "_step", step)
    got = connected_components(units, str(work), 12, 3, merge="on", merge_budget=1 << 20)
    assert got.merged >= 2 and len(seen) > 12  # several steps' tasks read merged inputs
    assert not [p for before in seen for p in before], "a step ran beside the files of the step before"
    assert all(Path(u).exists() for u in units)


@pytest.mark.parametrize("files, merges", [(24, False), (96, True)])
def test_components_merge_only_where_it_pays(tmp_path, files, merges):
    """``auto`` merges where the reads are many and small (merge_plan's rule), not on a handful of files: 12 x 24
    first-step reads are under the thousand a pass pays for, so the steps read the files themselves; 12 x 96 are
    past it, so the first step reads merged files."""
    rng = np.random.default_rng(3)
    a, b = _graph("tree", 1200, rng)
    units = [str(tmp_path / f"edges-{u:02d}.arrow") for u in range(files)]
    for u, sl in enumerate(np.array_split(np.arange(a.size), len(units))):
        write_edges(units[u], a[sl], b[sl], 12)
    got = connected_components(
        units, str(tmp_path / "cc"), 12, 3, merge="auto", merge_budget=1 << 20, input_bytes=a.size * 32
    )
    assert (got.merged >= 1) is merges
    nodes, idx = np.unique(np.r_[a, b], return_inverse=True)
    roots = _union_find(nodes.size, idx[: a.size].tolist(), idx[a.size :].tolist())
    assert _labels_of(got.labels, 3) == {int(nodes[k]): int(nodes[v]) for k, v in roots.items() if v != k}
    with pytest.raises(ValueError, match="merge must be one of"):
        connected_components(units, str(tmp_path / "cc2"), 12, 3, merge="yes")


def test_components_of_a_graph_of_finished_stars_only(tmp_path):
    """Stars around their lowest node from the start: the first round finds every one finished, no label step."""
    centres = np.arange(0, 400, 4, dtype=np.uint64)
    a = np.repeat(centres, 3)
    b = a + np.tile(np.arange(1, 4, dtype=np.uint64), centres.size)
    uri = str(tmp_path / "edges.parquet")
    write_edges(uri, a, b, 4)
    got = connected_components([uri], str(tmp_path / "cc"), 4, 2)
    assert all("/round-001-large/" in u for u in got.labels)
    assert got.rounds == 2
    assert got.steps == (600, 600, 0)  # both directions of 300 edges, then nothing left
    assert _labels_of(got.labels, 2) == {int(x): int(y) for x, y in zip(b, a)}


@pytest.mark.parametrize("partitions", [1, 2])
def test_components_of_no_edges(tmp_path, partitions):
    edges = str(tmp_path / "edges.parquet")
    write_edges(edges, np.empty(0, np.uint64), np.empty(0, np.uint64), partitions)
    outs = connected_components([edges], str(tmp_path / "cc"), partitions, 1).labels
    assert read_partition(outs, 0, {"node": np.uint64, "label": np.uint64})["node"].size == 0


def _pack_corpus(tmp_path) -> list[str]:
    """Spill files as phase 1 leaves them, and the odd ones a pack must carry: a shard's keys stored as rows
    (two shards, high words past 16 bits), keys of several shards (stored whole), an empty file, and the
    earlier layouts (Parquet; Arrow IPC with a JSON index)."""
    rng = np.random.default_rng(5)
    files = []
    for k, shard in enumerate((1, 70_000, None)):
        buckets = rng.integers(0, 2**63, 3000, dtype=np.uint64)
        nodes = node_keys(shard, np.arange(3000)) if shard is not None else rng.integers(0, 2**40, 3000, np.uint64)
        f = str(tmp_path / f"s{k}.bands.arrow")
        write_partitioned(f, {"bucket": buckets, "node": nodes}, partition_of(buckets, 64))
        files.append(f)
    empty = str(tmp_path / "empty.bands.arrow")
    write_partitioned(empty, {"bucket": np.empty(0, np.uint64), "node": np.empty(0, np.uint64)}, np.empty(0))
    keys = np.arange(200, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    parts = partition_of(keys, 64)
    order = np.argsort(parts, kind="stable")
    t = pa.table({"bucket": keys[order], "node": keys[order] + np.uint64(7)})
    present = np.unique(parts)
    old = str(tmp_path / "old.bands.parquet")
    meta = {b"curation.partitions": json.dumps({str(p): i for i, p in enumerate(present.tolist())}).encode()}
    with pq.ParquetWriter(old, t.schema.with_metadata(meta)) as w:
        for p in present:
            w.write_table(t.filter(pa.compute.equal(pa.array(parts[order]), p)))
    return [files[0], empty, files[1], old, files[2]]


def test_a_pack_reads_as_the_files_it_packs(tmp_path):
    """Packed, spill files give a reader of any range the same partitions, pieces and rows in the same order
    as the files themselves (keys stored as rows widened with their own file's high word), in one open."""
    files = _pack_corpus(tmp_path)
    packs = [str(tmp_path / "a.pack"), str(tmp_path / "b.pack")]
    pack_spills(files[:3], packs[0])
    pack_spills(files[3:], packs[1])
    cols = {"bucket": np.uint64, "node": np.uint64}
    for lo, hi in ((0, 64), (5, 9), (63, 64), (60, 100), (64, 70)):
        want = list(read_partitions(files, lo, hi, cols))
        got = list(read_partitions(packs, lo, hi, cols))
        assert [p for p, _ in got] == [p for p, _ in want] == list(range(lo, hi))
        for (_, w), (_, g) in zip(want, got):
            assert all(g[c].dtype == np.uint64 and g[c].tolist() == w[c].tolist() for c in cols)

        # a pack gives one piece a partition, its files' rows in their order
        for (p, mine), (q, theirs) in zip(
            read_partition_pieces(packs, lo, hi, ["node"]), read_partition_pieces(files, lo, hi, ["node"])
        ):
            assert p == q and len(mine) <= len(packs)
            assert [n for t in mine for n in t.column("node").to_pylist()] == [
                n for t in theirs for n in t.column("node").to_pylist()
            ]
    assert sum(len(r["node"]) for _, r in read_partitions(packs, 0, 64, cols)) == 3 * 3000 + 200
    assert read_partition([packs[0]], 3, cols)["node"].size > 0


def test_a_pack_is_one_open_per_range(tmp_path, monkeypatch):
    """One open a range, whatever the layouts packed together (keys stored as rows or whole)."""
    files = _pack_corpus(tmp_path)
    pack = str(tmp_path / "all.pack")
    pack_spills(files, pack)
    cols = {"bucket": np.uint64, "node": np.uint64}
    for (_, mine), (_, theirs) in zip(read_partitions([pack], 0, 64, cols), read_partitions(files, 0, 64, cols)):
        assert all(mine[c].tolist() == theirs[c].tolist() for c in cols)
    opened = []
    real_open = storage.open_arrow
    monkeypatch.setattr(storage, "open_arrow", lambda uri: opened.append(uri) or real_open(uri))
    for lo, hi in partition_ranges(64, 5):
        list(read_partitions([pack], lo, hi, {"node": np.uint64}))
    assert opened == [pack] * 5


def test_a_damaged_pack_fails_clearly_naming_it(tmp_path):
    files = _pack_corpus(tmp_path)
    pack = tmp_path / "all.pack"
    pack_spills(files, str(pack))
    data = pack.read_bytes()
    for damaged in (data[: len(data) // 2], data[:-3], data[:20]):
        pack.write_bytes(damaged)
        with pytest.raises(IntegrityError, match="all.pack"):
            list(read_partitions([str(pack)], 0, 64, {"node": np.uint64}))
    (tmp_path / "s0.bands.arrow").write_bytes(b"not a spill file")
    with pytest.raises(IntegrityError, match="s0.bands.arrow"):
        pack_spills(files, str(tmp_path / "again.pack"))


def test_a_packs_index_grows_with_its_partitions_not_its_pieces(tmp_path):
    """A unit reads a pack's index at every open: it holds the partitions' blocks and a few bytes a source,
    never an entry a (partition, source) piece, which at 4,096 partitions and ~100 sources would be MBs a read."""
    rng = np.random.default_rng(9)
    files = []
    for k in range(20):
        buckets = rng.integers(0, 2**63, 2000, dtype=np.uint64)
        f = str(tmp_path / f"s{k}.bands.arrow")
        write_partitioned(f, {"bucket": buckets, "node": node_keys(k, np.arange(2000))}, partition_of(buckets, 64))
        files.append(f)

    def index_bytes(n: int) -> int:
        out = tmp_path / f"p{n}.pack"
        body_end = pack_spills(files[:n], str(out))
        return out.stat().st_size - body_end

    assert index_bytes(20) - index_bytes(2) < 18 * 64  # under a byte a piece


def test_a_merged_range_reads_as_the_files_it_merges(tmp_path):
    """Export's middle pass (``merge_partitions``): a range of partitions of several spill files, whatever their
    layout (keys stored as rows, keys of several shards, an empty file, Parquet, a JSON index), as one file of
    one batch a partition: a reader of any part of the range gets each partition's rows in the files' order,
    keys widened; a range where no file has a row is a file that reads as empty."""
    files = _pack_corpus(tmp_path)
    cols = {"bucket": np.uint64, "node": np.uint64}
    merged = str(tmp_path / "m.arrow")
    assert merge_partitions(files, 10, 40, merged) == sum(
        len(r["node"]) for _, r in read_partitions(files, 10, 40, cols)
    )
    for lo, hi in ((10, 40), (12, 13), (39, 45), (0, 11)):
        want = {p: r for p, r in read_partitions(files, max(lo, 10), min(hi, 40), cols)}
        got = dict(read_partitions([merged], lo, hi, cols))
        for p in range(lo, hi):
            w = want.get(p, {c: np.empty(0, np.uint64) for c in cols})
            assert all(got[p][c].tolist() == w[c].tolist() for c in cols), p
        assert all(len(pieces) <= 1 for _, pieces in read_partition_pieces([merged], lo, hi, ["node"]))
    empty = str(tmp_path / "none.arrow")
    assert merge_partitions([f for f in files if "empty" in f], 0, 64, empty) == 0  # the empty spill file alone
    assert [len(p) for _, p in read_partition_pieces([empty], 0, 64, ["node"])] == [0] * 64
