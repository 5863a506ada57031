"""NumPy arrays to Arrow arrays and back without ``pa.array`` or ``to_numpy``.

``pa.array`` and ``Array.to_numpy`` ask pyarrow's pandas shim about pandas, and the shim imports pandas
to answer: 0.3-0.7 CPU-seconds on the first call in every worker process, for stages that use no pandas.
A numeric or boolean array's buffers are wrapped or read (booleans bit-packed) instead.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def _bits(values: np.ndarray) -> pa.Buffer:
    return pa.py_buffer(np.packbits(values.astype(bool, copy=False), bitorder="little"))


def from_numpy(values: np.ndarray, type: pa.DataType | None = None, mask: np.ndarray | None = None) -> pa.Array:
    """``pa.array(values, type, mask=mask)`` for a 1-D numeric or boolean array (``mask``: True = null),
    zero-copy for contiguous numbers; other arrays go to ``pa.array``."""
    values = np.asarray(values)
    if values.dtype.kind not in "biuf":  # strings, objects...: pyarrow's own conversion
        return pa.array(values, type, mask=mask)
    values = np.ascontiguousarray(values)
    if values.ndim != 1:
        raise ValueError(f"from_numpy takes 1-D arrays, got shape {values.shape}")
    if type is not None and pa.from_numpy_dtype(values.dtype) != type:
        values = values.astype(bool if type == pa.bool_() else _NUMPY[type])
    arrow_type = pa.from_numpy_dtype(values.dtype)
    n = len(values)
    validity, nulls = None, 0
    if mask is not None:
        mask = np.asarray(mask, bool)
        nulls = int(mask.sum())
        validity = _bits(~mask) if nulls else None
    data = _bits(values) if values.dtype == bool else pa.py_buffer(values)
    return pa.Array.from_buffers(arrow_type, n, [validity, data], null_count=nulls)


_NUMPY = {
    pa.int8(): np.int8,
    pa.int16(): np.int16,
    pa.int32(): np.int32,
    pa.int64(): np.int64,
    pa.uint8(): np.uint8,
    pa.uint16(): np.uint16,
    pa.uint32(): np.uint32,
    pa.uint64(): np.uint64,
    pa.float32(): np.float32,
    pa.float64(): np.float64,
}


def to_numpy(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """``values.to_numpy(zero_copy_only=False)``: a numeric or boolean array without nulls read from its
    buffers (numbers zero-copy for one chunk); other types and arrays with nulls through pyarrow."""
    if isinstance(values, pa.ChunkedArray):
        if values.num_chunks == 1:
            return to_numpy(values.chunk(0))
        if values.null_count or (values.type != pa.bool_() and values.type not in _NUMPY):
            return values.to_numpy()
        dtype = bool if values.type == pa.bool_() else _NUMPY[values.type]
        return np.concatenate([to_numpy(c) for c in values.chunks]) if values.num_chunks else np.empty(0, dtype)
    if values.null_count:  # pyarrow's own conversion (None in an object array, or NaN)
        return values.to_numpy(zero_copy_only=False)
    n, offset, data = len(values), values.offset, values.buffers()[1]
    if values.type == pa.bool_():
        if n == 0:
            return np.empty(0, bool)
        bits = np.frombuffer(data, np.uint8)
        return np.unpackbits(bits, count=offset + n, bitorder="little")[offset:].astype(bool)
    dtype = _NUMPY.get(values.type)
    if dtype is None:  # strings, dictionaries...: pyarrow's own conversion
        return values.to_numpy(zero_copy_only=False)
    if n == 0:
        return np.empty(0, dtype)
    return np.frombuffer(data, dtype, count=n, offset=offset * np.dtype(dtype).itemsize)


def strings(values: list[str]) -> pa.Array:
    """``pa.array(values, pa.string())`` for a short list of strings without nulls (rule names, labels)."""
    encoded = [v.encode("utf-8") for v in values]
    offsets = np.zeros(len(encoded) + 1, np.int32)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return pa.Array.from_buffers(
        pa.string(), len(encoded), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    )


def one_chunk(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``values`` as one array (a chunked array's chunks combined; none: an empty array of its type)."""
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks() if values.num_chunks else pa.array([], values.type)
    return values


def string_buffers(values: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """``(data bytes, int64 offsets)`` of the values as UTF-8 strings, for a compiled loop over them (any string
    layout or dictionary of strings; integers as their decimal text; a null as the bytes its slot spans, none in
    the arrays pyarrow builds)."""
    values = one_chunk(values)
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    if not pa.types.is_large_string(values.type):
        values = values.cast(pa.large_string())
    bufs = values.buffers()
    offsets = np.frombuffer(bufs[1], np.int64, count=len(values) + 1, offset=values.offset * 8)
    if bufs[2] is None or offsets[-1] == 0:
        return np.zeros(1, np.uint8), offsets
    return np.frombuffer(bufs[2], np.uint8), offsets


def partition_order(partition: np.ndarray, partitions: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The rows' order by partition number, stable (a partition's rows stay in their given order), and each
    partition's row count (index ``p``, at least ``partitions`` entries). Numbers under 2**16 (every partition
    count the stages plan: boilerplate's cap is 65,536) are sorted as 16-bit keys, which numpy sorts by radix,
    linear in rows: ~15-20 ns a row where a 64-bit stable sort (a merge sort) took 45-90, and the counts come
    from one ``bincount``, not a second sort. Every spill write pays it, rows x passes at 50 TB."""
    partition = np.asarray(partition)
    if partition.size and partition.min() < 0:
        raise ValueError(f"partition numbers must be >= 0, got {int(partition.min())}")
    small = partition.size and partition.max() < 1 << 16
    keys = partition.astype(np.uint16) if small else partition.astype(np.int64, copy=False)
    return np.argsort(keys, kind="stable"), np.bincount(keys, minlength=partitions)
