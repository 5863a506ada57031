"""Connected components of a graph too large for one machine's memory: large-star / small-star
(Kiveris et al., "Connected Components in MapReduce and Beyond", SoCC 2014) over spill files.

The edge set lives in hash partitions by source node, both directions stored. One step reads one
partition at a time, groups each node's neighbours with a sort, and writes the new edges back into
partitions; a round is a large-star step then a small-star step. When a round leaves the edge set
unchanged, every component is a star around its lowest node, which is its label. No step ever holds
more than one partition, and the result (label = the component's lowest node) does not depend on the
number of partitions or workers.

Two things keep the rounds' cost at what is still unsolved rather than at the whole graph times the rounds the
largest component needs (those grow with the log of its size: a path of 10^6 nodes takes 18 rounds). A
small-star step reports every node whose only neighbour is a lower node (a leaf); the next large-star step
finds a node that is lower than all its neighbours and whose neighbours all reported as its leaves: that
component is a finished star, closed (a leaf's only edge after a small-star step is to its reported centre),
so its labels are written there and its edges dropped. And each step runs in the partitions the edges still
alive need (its own reads a span of the previous step's), down to one, where union-find finishes in memory.
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
    SPILL_SUFFIX,
    mix64,
    partition_of,
    partition_ranges,
    partitions_for,
    read_partition,
    read_partitions,
    write_partitioned,
)
from airflow_curation.core.merge_plan import middle_pass
from airflow_curation.core.pairs import distinct_pairs_in_place

log = logging.getLogger(__name__)

EDGE_COLUMNS = {"src": np.uint64, "dst": np.uint64}
# A step's output: its edges, both directions; after a small-star step, leaf = 1 on the row (src = the leaf's only
# neighbour, dst = the leaf) that reports the leaf to that neighbour, in the neighbour's partition.
STEP_COLUMNS = {**EDGE_COLUMNS, "leaf": np.uint8}
LABEL_COLUMNS = {"node": np.uint64, "label": np.uint64}
EDGE_ROW_BYTES = 16  # a directed edge row (src, dst), what the memory budget sizes partitions by
STEP_ROW_BYTES = 17  # a step's row (src, dst, leaf) as a reader decodes it
MERGE_MODES = ("auto", "on", "off")
Mapper = Callable[[Callable[..., Any], Iterable[tuple]], Iterator[Any]]


class Components(NamedTuple):
    """Label spill files (columns ``node``, ``label``: only nodes whose label differs from themselves, partitioned
    by ``shard index % out_partitions``: the last step's and those of the finished stars), the star rounds it
    took (0: the graph was solved in memory), the (file, step) reads its steps made (their middle passes' included),
    the directed edges each step wrote (what is still unsolved after it), and the steps whose inputs were merged
    first."""

    labels: list[str]
    rounds: int
    reads: int = 0
    steps: tuple[int, ...] = ()
    merged: int = 0


def _serial(fn, arg_tuples):
    for args in arg_tuples:
        yield fn(*args)


def _both_directions(
    a: np.ndarray, b: np.ndarray, flag: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Undirected edges (a, b), self-loops dropped, as (src, dst) rows both ways, and each row's leaf flag:
    ``flag`` of its pair on the reverse (b, a) row, 0 elsewhere."""
    keep = a != b
    a, b = np.asarray(a[keep], np.uint64), np.asarray(b[keep], np.uint64)
    leaf = np.zeros(2 * a.size, np.uint8)
    if flag is not None:
        leaf[a.size :] = flag[keep]
    return np.concatenate([a, b]), np.concatenate([b, a]), leaf


def write_edges(uri: str, a: np.ndarray, b: np.ndarray, num_partitions: int) -> int:
    """Write undirected edges (both directions) partitioned by source."""
    src, dst, _ = _both_directions(np.asarray(a, np.uint64), np.asarray(b, np.uint64))
    return write_partitioned(uri, {"src": src, "dst": dst}, partition_of(src, num_partitions))


def _grouped(src: np.ndarray, dst: np.ndarray):
    """Distinct edges sorted by source, each source's group index, and each group's lowest
    neighbour-or-self. The edges are sorted and made distinct in ``src`` and ``dst`` themselves (the caller's
    arrays, read for this step: no index and gathered copies beside them), which are then slices of them."""
    m = distinct_pairs_in_place(src, dst)
    src, dst = src[:m], dst[:m]
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


def _read_span(inputs: list[str], span: tuple[int, int], columns: dict = EDGE_COLUMNS) -> dict[str, np.ndarray]:
    """The edges of partitions ``span[0] <= p < span[1]`` of ``inputs``, one open a file."""
    got = [r for _, r in read_partitions(inputs, span[0], span[1], columns)]
    if len(got) == 1:
        return got[0]
    return {c: np.concatenate([r[c] for r in got]) if got else np.empty(0, t) for c, t in columns.items()}


def _write_labels(uri: str, nodes: np.ndarray, labels: np.ndarray, out_partitions: int) -> int:
    """(node, label) rows partitioned by shard index, so that each shard's writer reads one partition."""
    part = (nodes >> np.uint64(32)).astype(np.int64) % out_partitions
    return write_partitioned(uri, {"node": nodes, "label": labels}, part)


def _step(
    kind: str,
    inputs: list[str],
    span: tuple[int, int],
    num_partitions: int,
    out_uri: str,
    columns: dict,
    labels_uri: str,
    out_partitions: int,
) -> tuple[int, int, int]:
    """One large-star or small-star step on the input's partitions ``span`` (each source's edges lie in one
    partition, so a span of them is a whole set of sources); returns (edges written, digest of its input
    edges, labels written: the finished stars a large-star step found, into ``labels_uri``)."""
    e = _read_span(inputs, span, columns)
    # the sources the small-star step before reported as leaves, taken before the rows are sorted in place
    reported = e["src"][e["leaf"] == 1] if "leaf" in e else np.empty(0, np.uint64)
    src, dst, starts, group, mins = _grouped(e.pop("src"), e.pop("dst"))
    del e
    digest = _digest(src, dst)
    m = mins[group] if src.size else np.empty(0, np.uint64)
    nodes = src[starts] if src.size else np.empty(0, np.uint64)
    degree = np.diff(np.r_[starts, src.size]) if src.size else np.empty(0, np.int64)
    labelled, flag = 0, None
    if kind == "large":
        # link every larger neighbour to the lowest node of the neighbourhood
        sel = dst > src
        if reported.size:
            # a node below all its neighbours, every one of which reported it as its only neighbour in the
            # small-star step before: a closed star around its lowest node, finished; labelled, not linked
            leaves = np.bincount(np.searchsorted(nodes, reported), minlength=nodes.size)
            done = (mins == nodes) & (leaves == degree)
            if done.any():
                finished = done[group]
                labelled = _write_labels(labels_uri, dst[finished], src[finished], out_partitions)
                sel &= ~finished
        a, b = dst[sel], m[sel]
    else:
        # link every smaller neighbour, and the node itself, to the lowest of them
        sel = dst < src
        head = mins < nodes
        a = np.concatenate([dst[sel], nodes[head]])
        b = np.concatenate([m[sel], mins[head]])
        # a node whose only neighbour is lower keeps exactly that edge through this step, and no other source
        # writes it: its reverse row (the neighbour's side) carries the report
        flag = np.r_[np.zeros(int(sel.sum()), np.uint8), (degree[head] == 1).astype(np.uint8)]
    src_out, dst_out, leaf = _both_directions(a, b, flag)
    write_partitioned(out_uri, {"src": src_out, "dst": dst_out, "leaf": leaf}, partition_of(src_out, num_partitions))
    return int(src_out.size), digest, labelled


def _labels(inputs: list[str], p: int, out_uri: str, out_partitions: int) -> int:
    """At convergence: (node, label) of every node whose label is lower than itself, partitioned by
    shard index so that each shard's writer reads one partition."""
    e = read_partition(inputs, p, EDGE_COLUMNS)
    src, dst, starts, group, mins = _grouped(e.pop("src"), e.pop("dst"))
    nodes = src[starts] if src.size else np.empty(0, np.uint64)
    sel = mins < nodes
    return _write_labels(out_uri, nodes[sel], mins[sel], out_partitions)


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
    _write_labels(out_uri, nodes[sel], labels[sel], out_partitions)


def connected_components(
    edge_uris: list[str],
    work_dir: str,
    num_partitions: int,
    out_partitions: int,
    mapper: Mapper | None = None,
    max_rounds: int = 200,
    input_partitions: int | None = None,
    memory_budget: int | None = None,
    merge: str = "off",
    merge_budget: int | None = None,
    input_bytes: int | None = None,
) -> Components:
    """Label every node of the graph in ``edge_uris`` with its component's lowest node.

    :param num_partitions: the partitions the steps run in (each step reads partitions x files pieces).
    :param input_partitions: the partitions ``edge_uris`` were written in by :func:`write_edges`, when more
        than ``num_partitions`` (written before the edges were counted): the first step reads contiguous
        spans of them, every edge of a source lying in one.
    :param memory_budget: where given, each step runs in the partitions the edges still alive need
        (:func:`~airflow_curation.core.lsh.partitions_for`, never more than the step before), and the rest is
        solved in memory once they fit one; else every step runs in ``num_partitions``.
    :param merge: ``auto``, ``on`` or ``off``: each step's input files merged first by chunk of its tasks and
        group of files (:func:`~airflow_curation.core.merge_plan.middle_pass`), where that pays (``auto``) or
        always (``on``): a step's task reads one file a group instead of every file of the step before, so a
        step's reads grow as partitions^1.5, not partitions^2 (docs/dedup.md).
    :param merge_budget: one merge unit's memory (default ``memory_budget``; no merge without either).
    :param input_bytes: the decoded bytes of ``edge_uris`` (sizes the first step's merge groups; without it the
        first step merges only where ``merge`` is ``on``).
    :returns: the label spill files, the rounds taken and the step reads (:class:`Components`).
    """
    input_partitions = input_partitions or num_partitions
    if num_partitions > input_partitions:
        raise ValueError(f"{num_partitions} partitions from edges written in {input_partitions}")
    if num_partitions == 1:
        out = storage.join(work_dir, "labels", f"part-00000{SPILL_SUFFIX}")
        _in_memory(list(edge_uris), out, out_partitions, input_partitions)
        return Components([out], 0, len(edge_uris))  # one read of each file, as the in-memory finish counts
    mapper = mapper or _serial
    if merge not in MERGE_MODES:
        raise ValueError(f"merge must be one of {MERGE_MODES}, got {merge!r}")
    merge_budget = merge_budget or memory_budget
    merger = None if merge == "off" or not merge_budget else (merge == "on", merge_budget, mapper)
    current, written_in, columns, current_bytes = list(edge_uris), input_partitions, EDGE_COLUMNS, input_bytes
    parts, reads, finished, steps, merged_steps = num_partitions, 0, [], [], 0
    labels_dir = storage.join(work_dir, "labels")
    previous_digest = None
    for rnd in range(max_rounds):
        round_digest = None
        for kind in ("large", "small"):
            if parts == 1:  # what is left fits one partition: union-find, as for a small graph
                out = storage.join(labels_dir, f"part-00000{SPILL_SUFFIX}")
                _in_memory(current, out, out_partitions, written_in)
                _remove(current, edge_uris)
                return Components([out, *finished], rnd + 1, reads + len(current), tuple(steps), merged_steps)
            step = storage.join(work_dir, f"round-{rnd:03d}-{kind}")
            outs = [storage.join(step, f"part-{p:05d}{SPILL_SUFFIX}") for p in range(parts)]
            labels = [storage.join(step, f"labels-{p:05d}{SPILL_SUFFIX}") for p in range(parts)]
            spans = partition_ranges(written_in, parts)
            folder = storage.join(step, "merged")
            inputs, n_reads, merged = _step_inputs(current, edge_uris, spans, current_bytes, merger, folder)
            args = [
                (kind, inputs(p), spans[p], parts, outs[p], columns, labels[p], out_partitions) for p in range(parts)
            ]
            results = list(mapper(_step, args))
            reads, merged_steps = reads + n_reads, merged_steps + bool(merged)
            finished += [uri for uri, (_, _, n) in zip(labels, results) if n]
            if round_digest is None:
                round_digest = sum(d for _, d, _ in results) & (2**64 - 1)
            _remove(current, edge_uris)
            _remove(merged, [])
            current, written_in, columns = outs, parts, STEP_COLUMNS
            edges = sum(n for n, _, _ in results)
            current_bytes = edges * STEP_ROW_BYTES
            steps.append(edges)
            fault_point("dedup.mid_components")
            log.info("components: round %d %s-star, %d directed edges in %d partitions", rnd, kind, edges, parts)
            if edges == 0:  # every component was a finished star, labelled where it was found
                _remove(current, edge_uris)
                if not finished:
                    finished.append(storage.join(labels_dir, f"part-00000{SPILL_SUFFIX}"))
                    _write_labels(finished[0], np.empty(0, np.uint64), np.empty(0, np.uint64), out_partitions)
                return Components(finished, rnd + 1, reads, tuple(steps), merged_steps)
            if memory_budget:
                parts = min(parts, partitions_for(edges * EDGE_ROW_BYTES, memory_budget))
        if round_digest == previous_digest:
            break  # the last round changed nothing: every component is a star around its lowest node
        previous_digest = round_digest
    else:
        raise RuntimeError(f"connected components did not converge in {max_rounds} rounds")
    outs = [storage.join(labels_dir, f"part-{p:05d}{SPILL_SUFFIX}") for p in range(written_in)]
    spans = [(p, p + 1) for p in range(written_in)]
    folder = storage.join(work_dir, f"round-{rnd:03d}-labels", "merged")
    inputs, n_reads, merged = _step_inputs(current, edge_uris, spans, current_bytes, merger, folder)
    list(mapper(_labels, [(inputs(p), p, outs[p], out_partitions) for p in range(written_in)]))
    reads += n_reads
    _remove(current, edge_uris)
    _remove(merged, [])
    return Components(outs + finished, rnd + 1, reads, tuple(steps), merged_steps + bool(merged))


def _step_inputs(
    current: list[str],
    edge_uris: list[str],
    spans: list[tuple[int, int]],
    total: int | None,
    merger: tuple | None,
    folder: str,
) -> tuple[Callable[[int], list[str]], int, list[str]]:
    """What each task of a step reads: its span of every file of ``current`` (tasks x files reads), or, where
    the middle pass runs (``merger``: (forced, budget, mapper)), its span of its chunk's merged files, one a
    group of files (chunks x files + tasks x groups reads); then ``current`` is read through the copies only and
    removed at once (unless it is the caller's ``edge_uris``): one step's edges on the lake at a time, not two.
    Returns (task -> its files, the reads, the merged files to remove once the step is done)."""
    if merger is not None and (total is not None or merger[0]):
        force, budget, mapper = merger
        done = middle_pass(current, spans, total or 0, budget, folder, mapper, force)
        if done is not None:
            _remove(current, edge_uris)
            return done.inputs, done.reads, [uri for row in done.files for uri in row]
    return (lambda _: current), len(spans) * len(current), []


def _remove(step_files: list[str], edge_uris: list[str]) -> None:
    """A step's input files once read, unless they are the caller's edge files."""
    if list(step_files) != list(edge_uris):
        for uri in step_files:
            storage.remove(uri)
