"""``core/pairs.py``: rows of two uint64 columns sorted in their own arrays, whatever their order, and made distinct."""

from __future__ import annotations

import numpy as np
import pytest

from airflow_curation.core.pairs import check_pairs, distinct_pairs_in_place, introsort, sort_pairs


def _columns(shape: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    first = {
        "random": rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False),
        "few": rng.integers(0, 4, n).astype(np.uint64),
        "equal": np.full(n, 9, np.uint64),
        "ascending": np.arange(n, dtype=np.uint64),
        "descending": np.arange(n, 0, -1, dtype=np.uint64),
        "organ_pipe": np.r_[np.arange(n // 2), np.arange(n - n // 2, 0, -1)].astype(np.uint64),
    }[shape]
    return first, rng.integers(0, 3, n).astype(np.uint64)


@pytest.mark.parametrize("shape", ["random", "few", "equal", "ascending", "descending", "organ_pipe"])
@pytest.mark.parametrize("limit", [0, 1, 4, None])
def test_rows_are_sorted_as_lexsort_sorts_them_at_any_depth_limit(shape, limit):
    """The rows come out in ``np.lexsort``'s order (by first, then second) on every shape, with the quicksort
    left to run (None: the usual limit) or handed to the heapsort at once (0) or after a few partitions: the
    bound that keeps an ordered or hostile input at n log n gives the same rows."""
    rng = np.random.default_rng(17)
    for n in (0, 1, 2, 16, 17, 18, 1_000, 50_001):
        first, second = _columns(shape, n, rng)
        order = np.lexsort([second, first])
        a, b = first.copy(), second.copy()
        if limit is None:
            sort_pairs(a, b)
        else:
            introsort(a, b, limit)
        assert a.tolist() == first[order].tolist() and b.tolist() == second[order].tolist(), (shape, n)


def test_distinct_rows_are_numpys_unique_rows():
    rng = np.random.default_rng(2)
    first, second = rng.integers(0, 50, 20_000).astype(np.uint64), rng.integers(0, 50, 20_000).astype(np.uint64)
    expected = np.unique(np.stack([first, second], axis=1), axis=0)
    a, b = first.copy(), second.copy()
    m = distinct_pairs_in_place(a, b)
    assert np.stack([a[:m], b[:m]], axis=1).tolist() == expected.tolist()
    assert distinct_pairs_in_place(np.empty(0, np.uint64), np.empty(0, np.uint64)) == 0


def test_what_cannot_be_sorted_in_place_is_refused():
    keys = np.arange(4, dtype=np.uint64)
    with pytest.raises(ValueError, match="uint64"):
        check_pairs(keys.astype(np.int64), keys, "caller")
    with pytest.raises(ValueError, match="one length"):
        sort_pairs(keys, np.ones(3, np.uint64))
    keys.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        distinct_pairs_in_place(keys, np.ones(4, np.uint64))
