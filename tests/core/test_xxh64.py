"""The compiled XXH64 over Arrow strings is xxhash's, bit for bit, for every length class of the algorithm (the
32-byte stripes, the 8-, 4- and 1-byte tails), non-ASCII text, empty values, every string layout and a prefix."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
import xxhash

from airflow_curation.core.xxh64 import xxh64_prefixed


def _values(seed: int) -> list[str]:
    rnd = random.Random(seed)
    alphabet = "abcXYZ019 -_/:é数🙂\t"
    out = ["", "a", "abcd", "abcdefgh", "x" * 31, "x" * 32, "y" * 33, "z" * 64 + "é"]
    out += ["".join(rnd.choice(alphabet) for _ in range(n)) for n in range(0, 90)]
    return out


@pytest.mark.parametrize("prefix", [b"", b"7:", b"1234567890123456789:"])
@pytest.mark.parametrize("layout", [pa.string(), pa.large_string()])
def test_every_value_hashes_as_xxhash_does(prefix, layout):
    values = _values(len(prefix))
    got = xxh64_prefixed(prefix, pa.array(values, layout))
    want = np.array([xxhash.xxh64_intdigest(prefix + v.encode()) for v in values], np.uint64)
    assert got.dtype == np.uint64 and np.array_equal(got, want)


def test_chunked_sliced_dictionary_and_integer_columns():
    values = _values(3)
    want = [xxhash.xxh64_intdigest(b"s:" + v.encode()) for v in values]
    chunked = pa.chunked_array([pa.array(values[:40]), pa.array(values[40:])])
    assert xxh64_prefixed(b"s:", chunked).tolist() == want
    assert xxh64_prefixed(b"s:", pa.array(values).slice(5, 20)).tolist() == want[5:25]
    assert xxh64_prefixed(b"s:", pa.array(values).dictionary_encode()).tolist() == want
    ints = [0, 7, -3, 10**15]
    assert xxh64_prefixed(b"s:", pa.array(ints)).tolist() == [xxhash.xxh64_intdigest(f"s:{i}".encode()) for i in ints]
    assert xxh64_prefixed(b"s:", pa.array([], pa.string())).tolist() == []
