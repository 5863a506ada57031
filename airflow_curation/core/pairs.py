"""Two uint64 columns sorted and grouped in the arrays that hold them, with no index beside them.

The global steps hold a partition of rows of two 64-bit words (boilerplate's (line key, count), dedup's (bucket,
node), the edges (source, destination)); sorting them through an ``argsort`` or ``lexsort`` index, then gathering
each column, took 24 bytes a row beside the row's own 16, and the partitions are sized by what that peak needs
(benchmarks/RESULTS.md, *a partition summed in place*). Here a row moves as a whole inside its two arrays.
"""

from __future__ import annotations

import numpy as np

from airflow_curation.core.jit import numba


def sort_pairs(first: np.ndarray, second: np.ndarray) -> None:
    """Sort the rows ``(first[i], second[i])`` ascending, by ``first`` then ``second``, in the two arrays
    themselves (both uint64, writable, of one length)."""
    check_pairs(first, second, "sort_pairs")
    sort_rows(first, second)


def check_pairs(first: np.ndarray, second: np.ndarray, caller: str) -> None:
    """Refuse what the in-place kernels cannot work in: two writable uint64 arrays of one length."""
    if first.dtype != np.uint64 or second.dtype != np.uint64 or len(first) != len(second):
        raise ValueError(
            f"{caller}: two uint64 arrays of one length, got {first.dtype}[{len(first)}] and "
            f"{second.dtype}[{len(second)}]"
        )
    if not first.flags.writeable or not second.flags.writeable:
        raise ValueError(f"{caller}: the arrays must be writable (the result is written in them)")


@numba.njit(cache=True, nogil=True, inline="always")
def _less(a: np.uint64, b: np.uint64, pa: np.uint64, pb: np.uint64) -> bool:  # pragma: no cover - compiled
    return a < pa or (a == pa and b < pb)


@numba.njit(cache=True, nogil=True, inline="always")
def _swap(first, second, payload, i, j) -> None:  # pragma: no cover - compiled
    first[i], first[j] = first[j], first[i]
    second[i], second[j] = second[j], second[i]
    if payload is not None:  # pruned where it is None: two columns pay nothing for it
        payload[i], payload[j] = payload[j], payload[i]


@numba.njit(cache=True, nogil=True)
def sort_rows(first: np.ndarray, second: np.ndarray, payload=None) -> None:  # pragma: no cover - compiled
    """:func:`sort_pairs` without its checks, for other kernels: :func:`introsort` with its usual depth limit.
    ``payload``, a third column of the rows, moves with them and is not compared."""
    n = len(first)
    depth = 0
    while n > 1:
        n >>= 1
        depth += 1
    introsort(first, second, 2 * depth + 2, payload)


@numba.njit(cache=True, nogil=True)
def introsort(first: np.ndarray, second: np.ndarray, limit: int, payload=None) -> None:  # pragma: no cover
    """Quicksort of the rows: Hoare's partition around the median of three (equal rows split evenly, so a
    partition of one row repeated millions of times stays n log n), the larger side deferred on a stack of at most
    log2(n) ranges, short ranges by insertion; a range still unsorted ``limit`` partitions deep is heapsorted, so
    no input, however ordered, costs more than n log n."""
    stack = np.empty(3 * 128, np.int64)
    top = 0
    lo, hi, depth = 0, len(first) - 1, 0  # inclusive
    while True:
        while hi - lo > 16:
            if depth >= limit:
                _heapsort(first, second, lo, hi, payload)
                hi = lo  # done: nothing left for insertion
                break
            depth += 1
            mid = lo + (hi - lo) // 2
            if _less(first[mid], second[mid], first[lo], second[lo]):
                _swap(first, second, payload, mid, lo)
            if _less(first[hi], second[hi], first[lo], second[lo]):
                _swap(first, second, payload, hi, lo)
            if _less(first[hi], second[hi], first[mid], second[mid]):
                _swap(first, second, payload, hi, mid)
            pa, pb = first[mid], second[mid]
            i, j = lo - 1, hi + 1
            while True:
                i += 1
                while _less(first[i], second[i], pa, pb):
                    i += 1
                j -= 1
                while _less(pa, pb, first[j], second[j]):
                    j -= 1
                if i >= j:
                    break
                _swap(first, second, payload, i, j)
            # [lo, j] and [j + 1, hi], each shorter than [lo, hi]: the smaller now, the larger later
            if j - lo < hi - j - 1:
                stack[top], stack[top + 1], stack[top + 2] = j + 1, hi, depth
                hi = j
            else:
                stack[top], stack[top + 1], stack[top + 2] = lo, j, depth
                lo = j + 1
            top += 3
        for i in range(lo + 1, hi + 1):
            a, b = first[i], second[i]
            c = payload[i] if payload is not None else 0
            j = i - 1
            while j >= lo and _less(a, b, first[j], second[j]):
                first[j + 1], second[j + 1] = first[j], second[j]
                if payload is not None:
                    payload[j + 1] = payload[j]
                j -= 1
            first[j + 1], second[j + 1] = a, b
            if payload is not None:
                payload[j + 1] = c
        if top == 0:
            return
        top -= 3
        lo, hi, depth = stack[top], stack[top + 1], stack[top + 2]


@numba.njit(cache=True, nogil=True)
def _heapsort(first: np.ndarray, second: np.ndarray, lo: int, hi: int, payload) -> None:  # pragma: no cover
    """Rows ``lo..hi`` (inclusive) sorted by a binary max-heap: the introsort's bound where partitions go deep."""
    n = hi - lo + 1
    for start in range(n // 2 - 1, -1, -1):
        _sift(first, second, lo, start, n, payload)
    for end in range(n - 1, 0, -1):
        _swap(first, second, payload, lo, lo + end)
        _sift(first, second, lo, 0, end, payload)


@numba.njit(cache=True, nogil=True)
def _sift(first: np.ndarray, second: np.ndarray, lo: int, root: int, n: int, payload) -> None:  # pragma: no cover
    while True:
        child = 2 * root + 1
        if child >= n:
            return
        c = lo + child
        if child + 1 < n and _less(first[c], second[c], first[c + 1], second[c + 1]):
            child += 1
            c += 1
        r = lo + root
        if not _less(first[r], second[r], first[c], second[c]):
            return
        _swap(first, second, payload, r, c)
        root = child


def distinct_pairs_in_place(first: np.ndarray, second: np.ndarray) -> int:
    """The distinct rows, ascending, written over the arrays: ``first[:m], second[:m]`` for the ``m`` returned."""
    check_pairs(first, second, "distinct_pairs_in_place")
    return int(_distinct(first, second))


@numba.njit(cache=True, nogil=True)
def _distinct(first: np.ndarray, second: np.ndarray) -> int:  # pragma: no cover - compiled
    n = len(first)
    if n == 0:
        return 0
    sort_rows(first, second)
    m = 0
    for i in range(1, n):
        if first[i] != first[m] or second[i] != second[m]:
            m += 1
            first[m], second[m] = first[i], second[i]
    return m + 1
