"""The trainers' file formats, written here (no trainer library is imported): Megatron-LM's indexed
dataset, MosaicML streaming's MDS shards, and Parquet in tokenize's packed layout.

Each writer takes one bucket's sequences, in their final order: ``tokens`` (sequences x seq_len, already
in the token dtype) and ``lengths`` (the real tokens of each sequence; the padding of a tokenize shard's
last sequence is not written to Megatron or MDS, where it would be trained on as text). The phases write
the bytes atomically. The tests read them back with megatron-core's ``IndexedDataset`` and mosaicml-streaming's
``StreamingDataset``.
"""

from __future__ import annotations

import json
import struct

import numpy as np

# megatron/core/datasets/indexed_dataset.py (megatron-core 0.16): _INDEX_HEADER, DType codes
MEGATRON_HEADER = b"MMIDIDX\x00\x00"
MEGATRON_VERSION = 1
MEGATRON_DTYPE_CODES = {np.dtype(np.uint16): 8, np.dtype(np.int32): 4}
# DType.optimal_dtype: uint16 for a vocabulary (cardinality) under 65,500, else int32
MEGATRON_UINT16_BELOW = 65500
MDS_SIZE_LIMIT = 1 << 26  # MDSWriter's default size_limit (64 MiB)
MDS_COLUMN = "tokens"  # the column llm-foundry's StreamingTextDataset reads


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest dtype that holds every id, chosen as Megatron's ``DType.optimal_dtype`` does."""
    return np.dtype(np.uint16 if vocab_size < MEGATRON_UINT16_BELOW else np.int32)


def _ragged(tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The real tokens of every sequence, concatenated (padding cut off)."""
    if tokens.size == 0:
        return tokens.reshape(-1)
    seq_len = tokens.shape[1]
    keep = np.arange(seq_len)[None, :] < lengths[:, None]
    return tokens[keep]


def megatron_files(tokens: np.ndarray, lengths: np.ndarray) -> tuple[bytes, bytes]:
    """The ``.bin`` (the tokens) and ``.idx`` (header, dtype code, counts, int32 sequence lengths, int64 byte
    pointers, int64 document indices) of one indexed dataset: one Megatron sequence and one document per
    packed sequence."""
    dtype = tokens.dtype
    lengths = np.asarray(lengths, np.int32)
    n = len(lengths)
    pointers = np.zeros(n, np.int64)
    if n:
        pointers[1:] = np.cumsum(lengths[:-1].astype(np.int64)) * dtype.itemsize
    documents = np.arange(n + 1, dtype=np.int64)  # document i is sequence i; [0, ..., n]
    idx = b"".join(
        [
            MEGATRON_HEADER,
            struct.pack("<Q", MEGATRON_VERSION),
            struct.pack("<B", MEGATRON_DTYPE_CODES[dtype]),
            struct.pack("<Q", n),
            struct.pack("<Q", len(documents)),
            lengths.tobytes(),
            pointers.tobytes(),
            documents.tobytes(),
        ]
    )
    return _ragged(tokens, lengths).astype(dtype.newbyteorder("<"), copy=False).tobytes(), idx


def mds_shards(stem: str, tokens: np.ndarray, lengths: np.ndarray, size_limit: int) -> list[tuple[bytes, dict]]:
    """MDS shards ``<stem>.<k>.mds`` of samples ``{"tokens": ndarray:<dtype>}`` (the real tokens), cut where
    MDSWriter cuts them (``size_limit``): each shard's bytes and its ``index.json`` entry, in order."""
    dtype = tokens.dtype
    config = _mds_config(f"ndarray:{dtype.name}", size_limit)
    config_data = json.dumps(config, sort_keys=True).encode()
    lengths = np.asarray(lengths, np.int64)
    flat = _ragged(tokens, lengths).astype(dtype.newbyteorder("<"), copy=False)
    ends = np.cumsum(lengths)
    infos: list[tuple[bytes, dict]] = []
    samples: list[bytes] = []
    size = 4 + 4 + len(config_data)  # MDSWriter's extra_bytes_per_shard
    for i, n in enumerate(lengths.tolist()):
        # NDArray with its dtype in the header and a dynamic shape: one byte (ndim << 2 | shape dtype code),
        # the shape in the smallest unsigned type that holds it, the values.
        code, shape_type = _shape_code(n)
        field = bytes([(1 << 2) | code]) + np.array([n], shape_type).tobytes() + flat[ends[i] - n : ends[i]].tobytes()
        sample = struct.pack("<I", len(field)) + field  # a variable-size column: its size comes first
        if samples and size_limit < size + len(sample) + 4:  # MDSWriter.write: flush, then add
            infos.append(_mds_shard(f"{stem}.{len(infos):03d}.mds", samples, config, config_data))
            samples, size = [], 4 + 4 + len(config_data)
        samples.append(sample)
        size += len(sample) + 4  # extra_bytes_per_sample: its offset
    if samples:
        infos.append(_mds_shard(f"{stem}.{len(infos):03d}.mds", samples, config, config_data))
    return infos


def _mds_config(encoding: str, size_limit: int) -> dict:
    """MDSWriter.get_config: written into every shard and into its index.json entry."""
    return {
        "column_encodings": [encoding],
        "column_names": [MDS_COLUMN],
        "column_sizes": [None],
        "compression": None,
        "format": "mds",
        "hashes": [],
        "size_limit": size_limit,
        "version": 2,
    }


def _shape_code(n: int) -> tuple[int, type]:
    """NDArray's shape dtype code (0 uint8, 1 uint16, 2 uint32, 3 uint64) and type for a dimension ``n``."""
    for code, t in enumerate((np.uint8, np.uint16, np.uint32, np.uint64)):
        if n <= np.iinfo(t).max:
            return code, t
    raise ValueError(f"sequence of {n} tokens")


def _mds_shard(name: str, samples: list[bytes], config: dict, config_data: bytes) -> tuple[bytes, dict]:
    """MDSWriter.encode_joint_shard: sample count (uint32), n+1 uint32 offsets from the file's start, the
    config JSON, the samples."""
    n = len(samples)
    head = 4 + 4 * (n + 1) + len(config_data)
    offsets = head + np.concatenate([[0], np.cumsum([len(s) for s in samples])]).astype(np.int64)
    if offsets[-1] >= 2**32:
        raise ValueError(f"MDS shard {name} over 4 GiB: lower mds_size_limit")
    data = struct.pack("<I", n) + offsets.astype(np.uint32).tobytes() + config_data + b"".join(samples)
    entry = {**config, "raw_data": {"basename": name, "bytes": len(data), "hashes": {}}, "samples": n, "zip_data": None}
    return data, entry


def mds_index(shards: list[dict]) -> bytes:
    """``index.json`` of the MDS folder: every shard, in order (MDSWriter's layout, version 2)."""
    return json.dumps({"shards": shards, "version": 2}, sort_keys=True).encode()
