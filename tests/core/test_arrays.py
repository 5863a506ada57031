"""NumPy <-> Arrow without pyarrow's pandas shim, and worker processes that import neither pandas nor SciPy's
linear algebra (a fixed cost of every task of the stages that use neither)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_curation.core.arrays import from_numpy, partition_order, strings, to_numpy

CASES = [
    np.arange(13, dtype=np.uint64),
    np.array([True, False, True] * 7),
    np.arange(11, dtype=np.int32),
    np.linspace(0, 1, 9),
    np.linspace(0, 1, 9, dtype=np.float32),
    np.zeros(0, bool),
    np.zeros(0, np.int64),
]


@pytest.mark.parametrize("values", CASES, ids=lambda v: f"{v.dtype}-{len(v)}")
def test_round_trips_equal_pyarrow(values):
    a = from_numpy(values)
    assert a.equals(pa.array(values)) and a.type == pa.array(values).type
    a.validate(full=True)
    for part in (a, a.slice(1), a.slice(min(3, len(a)), 4), pa.chunked_array([a, a.slice(1)], a.type)):
        got, want = to_numpy(part), part.to_numpy(zero_copy_only=False) if len(part) else np.zeros(0, values.dtype)
        assert got.dtype == want.dtype and np.array_equal(got, want)


def test_mask_type_and_fallbacks():
    keep = np.arange(11) % 3 == 0
    got = from_numpy(np.arange(11), pa.int32(), mask=keep)
    assert got.equals(pa.array(np.arange(11), pa.int32(), mask=keep)) and got.null_count == 4
    assert from_numpy(np.array(["a", None], object)).equals(pa.array(["a", None]))  # not numbers: pyarrow's
    assert list(to_numpy(pa.array(["x", "y"]))) == ["x", "y"]
    assert np.isnan(to_numpy(pa.array([1.0, None]))[1])  # nulls: pyarrow's conversion, as before
    assert strings(["gopher", "", "ünï"]).equals(pa.array(["gopher", "", "ünï"], pa.string()))


WORKER = r"""
import json, sys
from airflow_curation.cli import main
main(sys.argv[1:])
print(json.dumps({m: m in sys.modules for m in ("pandas", "scipy.linalg", "cffi")}), file=sys.stderr)
"""


@pytest.mark.parametrize("stage", ["preprocess", "dedup"])
def test_stage_worker_imports_no_pandas_scipy_linalg_nor_cffi(tmp_path, stage):
    """What numba's first kernel call would import for nothing here (core.jit, core.arrays)."""
    f = tmp_path / "in.parquet"
    texts = [f"document {i} with some words that repeat, the end. " * 20 for i in range(50)]
    pq.write_table(pa.table({"id": [str(i) for i in range(50)], "text": texts}), f)
    out = str(tmp_path / "out")
    cmd = [sys.executable, "-c", WORKER, stage, str(f), "--output", out, "--workers", "1", "--mapper", "local"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert pq.read_table(tmp_path / "out" / "in.parquet").num_rows == 50
    assert json.loads(proc.stderr.strip().splitlines()[-1]) == {"pandas": False, "scipy.linalg": False, "cffi": False}


@pytest.mark.parametrize(
    "partitions, rows, dtype",
    [
        (1, 1000, np.int64),
        (7, 5000, np.int64),
        (4096, 20000, np.int64),
        (65536, 200000, np.int64),
        (70000, 50000, np.int64),
        (300, 4000, np.uint64),
        (50, 0, np.int64),
    ],
)
def test_partition_order_is_the_stable_sort_and_its_counts(partitions, rows, dtype):
    # the 16-bit radix path (under 2**16), the 64-bit fallback past it, unsigned input and no rows at all
    rng = np.random.default_rng(partitions + rows)
    part = rng.integers(0, partitions, rows).astype(dtype)
    if rows:
        part[0] = partitions - 1  # the largest number present: 65,535 still takes 16 bits, 69,999 does not
    order, counts = partition_order(part, partitions)
    assert order.tolist() == np.argsort(part.astype(np.int64), kind="stable").tolist()
    assert counts.tolist() == np.bincount(part.astype(np.int64), minlength=partitions).tolist()
    assert len(counts) == partitions


def test_partition_order_refuses_negative_numbers():
    with pytest.raises(ValueError, match="partition numbers must be >= 0, got -1"):
        partition_order(np.array([3, -1, 2]))
