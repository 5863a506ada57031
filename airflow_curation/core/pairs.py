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


@numba.njit(cache=True, nogil=True)
def sort_rows(first: np.ndarray, second: np.ndarray) -> None:  # pragma: no cover - compiled
    """:func:`sort_pairs` without its checks, for other kernels. Quicksort of the rows: Hoare's partition around
    the median of three (equal rows split evenly, so a partition of one row repeated millions of times stays
    n log n), the larger side deferred on a stack of at most log2(n) ranges, short ranges by insertion."""
    stack = np.empty(256, np.int64)
    top = 0
    lo, hi = 0, len(first) - 1  # inclusive
    while True:
        while hi - lo > 16:
            mid = lo + (hi - lo) // 2
            if _less(first[mid], second[mid], first[lo], second[lo]):
                first[mid], first[lo] = first[lo], first[mid]
                second[mid], second[lo] = second[lo], second[mid]
            if _less(first[hi], second[hi], first[lo], second[lo]):
                first[hi], first[lo] = first[lo], first[hi]
                second[hi], second[lo] = second[lo], second[hi]
            if _less(first[hi], second[hi], first[mid], second[mid]):
                first[hi], first[mid] = first[mid], first[hi]
                second[hi], second[mid] = second[mid], second[hi]
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
                first[i], first[j] = first[j], first[i]
                second[i], second[j] = second[j], second[i]
            # [lo, j] and [j + 1, hi], each shorter than [lo, hi]: the smaller now, the larger later
            if j - lo < hi - j - 1:
                stack[top], stack[top + 1] = j + 1, hi
                hi = j
            else:
                stack[top], stack[top + 1] = lo, j
                lo = j + 1
            top += 2
        for i in range(lo + 1, hi + 1):
            a, b = first[i], second[i]
            j = i - 1
            while j >= lo and _less(a, b, first[j], second[j]):
                first[j + 1], second[j + 1] = first[j], second[j]
                j -= 1
            first[j + 1], second[j + 1] = a, b
        if top == 0:
            return
        top -= 2
        lo, hi = stack[top], stack[top + 1]


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
