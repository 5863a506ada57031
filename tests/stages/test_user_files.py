"""A user's own Parquet files (plain-file mode, ``inputs`` + ``output_dir``) read as a lake's shards are: every
stage that takes them checks the rows ingest would have checked (valid UTF-8, an id on every row) and says
which row broke, once, without retrying; text in any Arrow string layout (a pandas categorical, a view) is read
as plain text, with the results of a plain string column."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizer_files import EOS, stdlib_prose, train_bpe

from airflow_curation.core.layout import Lake
from airflow_curation.stages import stage_class
from airflow_curation.stages.base import StageFailed, StageRunner

# One stage per way a stage reads a user's file: through write_attrs (preprocess, pii), the dedup signatures'
# own unit, tokenize's packing loop.
STAGES = ["preprocess", "pii", "dedup", "tokenize"]
TEXTS = stdlib_prose(12)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> str:
    return train_bpe(str(tmp_path_factory.mktemp("tok") / "tokenizer.json"), TEXTS, vocab_size=400)


def _config(name: str, tokenizer: str) -> dict:
    return {"tokenizer": tokenizer, "eos_token": EOS, "seq_len": 64} if name == "tokenize" else {}


def _run(tmp: Path, name: str, files: list[str], tokenizer: str, tag: str):
    out = tmp / f"out-{name}-{tag}"
    config = {"inputs": files, "output_dir": str(out), "batch_rows": 5, **_config(name, tokenizer)}
    return StageRunner(stage_class(name)(Lake(str(tmp / f"lake-{tag}"), "ds"), config, "r1")).run(), out


def _write(path: Path, ids: pa.Array | list, text: pa.Array) -> str:
    pq.write_table(pa.table({"id": ids, "text": text}), str(path))
    return str(path)


def _raw_strings(values: list[bytes]) -> pa.Array:
    """Strings over raw bytes: Parquet readers hand such a column over without checking its UTF-8."""
    raw = pa.array(values, pa.binary())
    return pa.Array.from_buffers(pa.string(), len(raw), raw.buffers(), raw.null_count)


@pytest.mark.parametrize("name", STAGES)
def test_invalid_utf8_and_missing_ids_fail_the_file_naming_the_row(name, tokenizer, tmp_path):
    values = [t.encode() for t in TEXTS]
    values[7] = values[7][:20] + b"\xff\xfe" + values[7][20:]  # in the second batch of 5 rows
    bad = _write(tmp_path / "bad.parquet", [f"d{i}" for i in range(len(values))], _raw_strings(values))
    with pytest.raises(StageFailed, match=r"bad.parquet: row 7 has invalid UTF-8 in 'text' \(row 7: byte 20"):
        _run(tmp_path, name, [bad], tokenizer, "utf8")
    # tried once (a second attempt cannot mend the file), and the unit's failure record says why
    failures = [json.loads(f.read_text()) for f in tmp_path.rglob("*.failed.json")]
    assert [(f["attempt"], f["error"].split(":")[0]) for f in failures] == [(1, "BadRows")]
    assert not (tmp_path / f"out-{name}-utf8" / "bad.parquet").exists()

    ids = [f"d{i}" for i in range(len(TEXTS))]
    ids[3] = None
    no_id = _write(tmp_path / "noid.parquet", ids, pa.array(TEXTS))
    with pytest.raises(StageFailed, match=r"noid.parquet: row 3 has no id"):
        _run(tmp_path, name, [no_id], tokenizer, "noid")


@pytest.mark.parametrize("name", STAGES)
def test_text_in_any_string_layout_gives_the_plain_columns_results(name, tokenizer, tmp_path):
    ids = [f"d{i}" for i in range(len(TEXTS) * 2)]
    texts = TEXTS + TEXTS[:6] + ["Ω ünïcödé 文字 " * 20] * 6  # repeats, for a dictionary and for dedup
    layouts = {
        "plain": pa.array(texts),
        "categorical": pa.array(texts).dictionary_encode(),
        "view": pa.array(texts, pa.string_view()),
        "large": pa.array(texts, pa.large_string()),
    }
    results = {}
    for layout, text in layouts.items():
        (tmp_path / layout).mkdir()
        f = _write(tmp_path / layout / "docs.parquet", ids, text)
        manifest, out = _run(tmp_path, name, [f], tokenizer, layout)
        assert manifest.status == "complete"
        results[layout] = pq.read_table(str(out / "docs.parquet"))
        if name == "tokenize":
            results[layout] = (results[layout], pq.read_table(str(out / "packed" / "docs.parquet")))
    for layout in ("categorical", "view", "large"):
        assert results[layout] == results["plain"], layout
