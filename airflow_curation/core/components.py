"""Connected components of a graph too large for one machine's memory: large-star / small-star
(Kiveris et al., "Connected Components in MapReduce and Beyond", SoCC 2014) over spill files.

The edge set lives in hash partitions by source node, both directions stored. One step reads one
partition at a time, groups each node's neighbours with a sort, and writes the new edges back into
partitions; a round is a large-star step then a small-star step. When a round leaves the edge set
unchanged, every component is a star around its lowest node, which is its label. No step ever holds
more than one partition, and the result (label = the component's lowest node) does not depend on the
number of partitions or workers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np

from airflow_curation.core import storage
from airflow_curation.core.faults import fault_point
from airflow_curation.core.jit import numba
from airflow_curation.core.lsh import (
    mix64,
    partition_of,
    partition_ranges,
    read_partition,
    read_partitions,
    unique_edges,
    write_partitioned,
)

log = logging.getLogger(__name__)

EDGE_COLUMNS = {"src": np.uint64, "dst": np.uint64}
LABEL_COLUMNS = {"node": np.uint64, "label": np.uint64}
Mapper = Callable[[Callable[..., Any], Iterable[tuple]], Iterator[Any]]


class Components(NamedTuple):
    """Label spill files (columns ``node``, ``label``: only nodes whose label differs from themselves, partitioned
    by ``shard index % out_partitions``) and the star rounds it took (0: the graph was solved in memory)."""

    labels: list[str]
    rounds: int


def _serial(fn, arg_tuples):
    for args in arg_tuples:
        yield fn(*args)


def _both_directions(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    keep = a != b
    a, b = a[keep], b[keep]
    return np.concatenate([a, b]), np.concatenate([b, a])


def write_edges(uri: str, a: np.ndarray, b: np.ndarray, num_partitions: int) -> int:
    """Write undirected edges (both directions) partitioned by source."""
    src, dst = _both_directions(np.asarray(a, np.uint64), np.asarray(b, np.uint64))
    return write_partitioned(uri, {"src": src, "dst": dst}, partition_of(src, num_partitions))


def _grouped(src: np.ndarray, dst: np.ndarray):
    """Distinct edges sorted by source, each source's group index, and each group's lowest
    neighbour-or-self."""
    src, dst = unique_edges(src, dst)
    starts = np.flatnonzero(np.r_[True, src[1:] != src[:-1]]) if src.size else np.empty(0, np.int64)
    group = np.cumsum(np.r_[True, src[1:] != src[:-1]]) - 1 if src.size else np.empty(0, np.int64)
    mins = np.minimum(np.minimum.reduceat(dst, starts), src[starts]) if src.size else np.empty(0, np.uint64)
    return src, dst, starts, group, mins


def _digest(src: np.ndarray, dst: np.ndarray) -> int:
    """Order-independent digest of the distinct undirected edges stored as src < dst."""
    keep = src < dst
    with np.errstate(over="ignore"):
        h = mix64(mix64(src[keep]) ^ dst[keep])
    return int(h.sum(dtype=np.uint64)) ^ int(keep.sum())


def _read_span(inputs: list[str], span: tuple[int, int]) -> dict[str, np.ndarray]:
    """The edges of partitions ``span[0] <= p < span[1]`` of ``inputs``, one open a file."""
    got = [r for _, r in read_partitions(inputs, span[0], span[1], EDGE_COLUMNS)]
    if len(got) == 1:
        return got[0]
    return {c: np.concatenate([r[c] for r in got]) if got else np.empty(0, t) for c, t in EDGE_COLUMNS.items()}


def _step(kind: str, inputs: list[str], span: tuple[int, int], num_partitions: int, out_uri: str) -> tuple[int, int]:
    """One large-star or small-star step on the input's partitions ``span`` (one, or after the edge files,
    several whose edges of a source lie in one of them); returns (edges written, digest of its input edges)."""
    e = _read_span(inputs, span)
    src, dst, starts, group, mins = _grouped(e["src"], e["dst"])
    digest = _digest(src, dst)
    m = mins[group] if src.size else np.empty(0, np.uint64)
    if kind == "large":
        # link every larger neighbour to the lowest node of the neighbourhood
        sel = dst > src
        a, b = dst[sel], m[sel]
    else:
        # link every smaller neighbour, and the node itself, to the lowest of them
        sel = dst < src
        head = mins < src[starts]
        a = np.concatenate([dst[sel], src[starts][head]])
        b = np.concatenate([m[sel], mins[head]])
    return write_edges(out_uri, a, b, num_partitions), digest


def _labels(inputs: list[str], p: int, out_uri: str, out_partitions: int) -> int:
    """At convergence: (node, label) of every node whose label is lower than itself, partitioned by
    shard index so that each shard's writer reads one partition."""
    e = read_partition(inputs, p, EDGE_COLUMNS)
    src, dst, starts, group, mins = _grouped(e["src"], e["dst"])
    nodes = src[starts] if src.size else np.empty(0, np.uint64)
    sel = mins < nodes
    nodes, labels = nodes[sel], mins[sel]
    part = (nodes >> np.uint64(32)).astype(np.int64) % out_partitions
    return write_partitioned(out_uri, {"node": nodes, "label": labels}, part)


@numba.njit(cache=True, nogil=True)
def _union_find(a, b, n):
    """Root of every node 0..n-1 after joining each pair (a[i], b[i]); union by lower index, so a root
    is its component's lowest index."""
    parent = np.arange(n)
    for i in range(a.size):
        x, y = a[i], b[i]
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        while parent[y] != y:
            parent[y] = parent[parent[y]]
            y = parent[y]
        if x < y:
            parent[y] = x
        elif y < x:
            parent[x] = y
    for i in range(n):
        r = i
        while parent[r] != r:
            r = parent[r]
        parent[i] = r
    return parent


def _in_memory(edge_uris: list[str], out_uri: str, out_partitions: int, input_partitions: int = 1) -> None:
    """The whole graph in one partition (the memory budget says it fits): union-find in one pass, the
    same labels (each node's component's lowest node) as the star rounds, written the same way."""
    e = _read_span(edge_uris, (0, input_partitions))
    nodes, idx = np.unique(np.concatenate([e["src"], e["dst"]]), return_inverse=True)
    half = e["src"].size
    root = _union_find(idx[:half].astype(np.int64), idx[half:].astype(np.int64), nodes.size)
    labels = nodes[root]  # nodes are sorted, so the lowest index is the lowest node
    sel = labels < nodes
    nodes, labels = nodes[sel], labels[sel]
    part = (nodes >> np.uint64(32)).astype(np.int64) % out_partitions
    write_partitioned(out_uri, {"node": nodes, "label": labels}, part)


def connected_components(
    edge_uris: list[str],
    work_dir: str,
    num_partitions: int,
    out_partitions: int,
    mapper: Mapper | None = None,
    max_rounds: int = 200,
    input_partitions: int | None = None,
) -> Components:
    """Label every node of the graph in ``edge_uris`` with its component's lowest node.

    :param num_partitions: the partitions the steps run in (each step reads partitions x files pieces).
    :param input_partitions: the partitions ``edge_uris`` were written in by :func:`write_edges`, when more
        than ``num_partitions`` (written before the edges were counted): the first step reads contiguous
        spans of them, every edge of a source lying in one.
    :returns: the label spill files and the rounds taken (:class:`Components`).
    """
    input_partitions = input_partitions or num_partitions
    if num_partitions > input_partitions:
        raise ValueError(f"{num_partitions} partitions from edges written in {input_partitions}")
    if num_partitions == 1:
        out = storage.join(work_dir, "labels", "part-00000.parquet")
        _in_memory(list(edge_uris), out, out_partitions, input_partitions)
        return Components([out], 0)
    mapper = mapper or _serial
    current = list(edge_uris)
    spans = partition_ranges(input_partitions, num_partitions)  # the first step's reads of the edge files
    previous_digest = None
    for rnd in range(max_rounds):
        round_digest = None
        for kind in ("large", "small"):
            outs = [
                storage.join(work_dir, f"round-{rnd:03d}-{kind}", f"part-{p:05d}.parquet")
                for p in range(num_partitions)
            ]
            reads = spans if (rnd, kind) == (0, "large") else [(p, p + 1) for p in range(num_partitions)]
            results = list(mapper(_step, [(kind, current, r, num_partitions, outs[p]) for p, r in enumerate(reads)]))
            if round_digest is None:
                round_digest = sum(d for _, d in results) & (2**64 - 1)
            if current is not edge_uris and list(current) != list(edge_uris):
                for uri in current:
                    storage.remove(uri)  # the previous step's files: no longer needed
            current = outs
            fault_point("dedup.mid_components")
            log.info("components: round %d %s-star, %d directed edges", rnd, kind, sum(n for n, _ in results))
        if round_digest == previous_digest:
            break  # the last round changed nothing: every component is a star around its lowest node
        previous_digest = round_digest
    else:
        raise RuntimeError(f"connected components did not converge in {max_rounds} rounds")
    outs = [storage.join(work_dir, "labels", f"part-{p:05d}.parquet") for p in range(num_partitions)]
    list(mapper(_labels, [(current, p, outs[p], out_partitions) for p in range(num_partitions)]))
    for uri in current:
        storage.remove(uri)
    return Components(outs, rnd + 1)
