"""The tokenize stage (issue 12, item 5): the rows the pipeline kept, tokenized with a tokenizer file and
packed into fixed-length sequences with their document boundaries; every row accounted for; token
counts in the manifest and the report; reruns byte-identical.

The pipeline is the real one, in process: ingest -> preprocess -> dedup -> tokenize -> validate, over
standard-library prose with planted duplicates, junk and rows without tokens. The tokenizers are trained
here (``tokenizer_files``), never downloaded.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizer_files import EOS, PAD, stdlib_prose, train_bpe, train_wordpiece
from tokenizers import Tokenizer

from airflow_curation.cli import main as curation
from airflow_curation.core.fingerprint import checksum_url
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.core.schema import DROP_REASON, KEEP
from airflow_curation.stages import stage_class
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.tokenize.stage import TokenizeStage

SEQ_LEN = 128


def _run(lake: Lake, name: str, config: dict, run_id: str = "pipe") -> Manifest:
    return StageRunner(stage_class(name)(lake, config, run_id)).run()


@pytest.fixture(scope="module")
def prose() -> list[str]:
    return stdlib_prose(120)


@pytest.fixture(scope="module")
def bpe(prose, tmp_path_factory) -> str:
    return train_bpe(str(tmp_path_factory.mktemp("tok") / "tokenizer.json"), prose)


@pytest.fixture(scope="module")
def pipeline(prose, bpe, tmp_path_factory):
    base = tmp_path_factory.mktemp("pipe")
    docs = [t for t in prose[:60] if len(t.split()) >= 80][:40]
    docs += docs[:5]  # exact duplicates: dedup marks the later copies
    docs += ["short", "", "   \n ", "!!!! ????"]  # junk for preprocess, and empty rows
    src = base / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    lake = Lake(str(base / "lake"), "pipe")
    ingest = _run(lake, "ingest", {"inputs": [str(src)], "target_shard_bytes": 16384, "row_group_rows": 16})
    _run(lake, "preprocess", {"input_manifest": lake.manifest_uri("pipe", "ingest"), "mapper": "local"})
    dedup = _run(lake, "dedup", {"input_manifest": lake.manifest_uri("pipe", "preprocess"), "mapper": "local"})
    config = {"input_manifest": lake.manifest_uri("pipe", "dedup"), "tokenizer": bpe, "seq_len": SEQ_LEN}
    tok = _run(lake, "tokenize", config)
    return {"lake": lake, "ingest": ingest, "dedup": dedup, "tokenize": tok, "config": config, "docs": docs}


def _kept_upstream(manifest: Manifest) -> dict[str, str]:
    """id -> text of the rows preprocess kept and dedup did not mark, in manifest order."""
    out = {}
    for shard in manifest.shards:
        rows = pq.read_table(shard.uri, columns=["id", "text"]).to_pylist()
        keep = pq.read_table(shard.attrs["preprocess"], columns=["keep"]).column("keep").to_pylist()
        dup = pq.read_table(shard.attrs["dedup"], columns=["is_duplicate"]).column("is_duplicate").to_pylist()
        out.update({r["id"]: r["text"] for r, k, d in zip(rows, keep, dup) if k and not d})
    return out


def test_every_row_is_accounted_for_and_only_kept_rows_are_packed(pipeline, bpe):
    m, dedup = pipeline["tokenize"], pipeline["dedup"]
    assert m.status == "complete" and len(m.shards) == len(dedup.shards) > 1
    acc = m.accounting
    assert acc["read"] == dedup.rows == acc["kept"] + sum(acc["dropped"].values())
    assert acc["dropped"]["duplicate"] >= 5 and acc["dropped"]["not_kept"] >= 4
    kept = _kept_upstream(dedup)
    assert acc["kept"] == len(kept)

    tok = Tokenizer.from_file(bpe)
    eos = tok.token_to_id(EOS)
    packed_ids, stream = [], []
    for shard in m.shards:
        attrs = pq.read_table(shard.attrs["tokenize"])
        assert attrs.column_names == ["id", "token_count", KEEP, DROP_REASON]
        for row in attrs.to_pylist():
            if row[KEEP]:
                assert row["token_count"] == len(tok.encode(kept[row["id"]], add_special_tokens=False).ids)
            else:
                assert row["id"] not in kept and row[DROP_REASON] in {"not_kept", "duplicate"}
        packed = pq.read_table(shard.files["packed"]["uri"])
        assert packed.schema.field("input_ids").type == pa.list_(pa.int32(), SEQ_LEN)
        for ids, n, doc_ids in zip(*(packed.column(c).to_pylist() for c in ("input_ids", "n_tokens", "doc_ids"))):
            stream += ids[:n]
            packed_ids += [d for d in doc_ids if not packed_ids or packed_ids[-1] != d]
    # The packed stream is every kept document, in manifest order, each followed by EOS.
    assert packed_ids == list(kept)
    expected = []
    for text in kept.values():
        expected += [*tok.encode(text, add_special_tokens=False).ids, eos]
    assert stream == expected


def test_token_counts_in_the_manifest_and_the_report(pipeline):
    lake, m = pipeline["lake"], pipeline["tokenize"]
    tokens = m.config["tokens"]
    assert "shards" not in tokens  # per shard: in the checkpoint records and the entries (the head stays small)
    stage = TokenizeStage(lake, pipeline["config"], "pipe")
    shards = {s.shard_id: stage.checkpoints.load(s.shard_id).extra for s in m.shards}
    for s in m.shards:  # each entry names its packed file as the unit wrote it
        assert s.files["packed"] == {
            "uri": shards[s.shard_id]["packed_uri"],
            "checksum": shards[s.shard_id]["packed_checksum"],
            "bytes": Path(shards[s.shard_id]["packed_uri"]).stat().st_size,
        }
    assert checksum_url(m.shards[0].files["packed"]["uri"]) == m.shards[0].files["packed"]["checksum"]
    assert tokens["tokens"] == sum(s["tokens"] for s in shards.values()) == tokens["doc_tokens"] + tokens["documents"]
    assert tokens["documents"] == m.accounting["kept"] and tokens["seq_len"] == SEQ_LEN
    assert tokens["sequences"] * SEQ_LEN == tokens["tokens"] + tokens["padding"]
    assert all(s["padding"] < SEQ_LEN for s in shards.values())  # at most one padded sequence per shard

    v = _run(lake, "validate", {"input_manifest": lake.manifest_uri("pipe", "tokenize"), "max_duplicate_rate": 0.5})
    report = json.loads(Path(v.config["report_json"]).read_text())
    assert report["status"] == "passed", report["summary"]
    funnel = {f["label"]: f["rows"] for f in report["metrics"]["funnel"]}
    assert funnel["tokenized"] == m.accounting["kept"] == funnel["dedup"]
    assert report["tokens"]["tokenize"]["tokens"] == tokens["tokens"]
    assert report["tokens"]["tokenize"]["sequences"] == tokens["sequences"]
    html = Path(v.config["report_html"]).read_text()
    assert "Tokens" in html and f"{tokens['tokens']:,}" in html


def test_rerun_skips_and_recomputing_is_byte_identical(pipeline, bpe, tmp_path):
    lake, m, config = pipeline["lake"], pipeline["tokenize"], pipeline["config"]
    assert {u.status for u in _run(lake, "tokenize", config).units} == {"skipped"}
    before = {s.shard_id: Path(s.files["packed"]["uri"]).read_bytes() for s in m.shards}
    attrs_before = {s.shard_id: Path(s.attrs["tokenize"]).read_bytes() for s in m.shards}
    stage = TokenizeStage(lake, config, "again")
    shutil.rmtree(lake.checkpoint_dir("tokenize", stage.fingerprint))
    # Another batch size and a process pool (runtime settings): the same configuration, the same bytes.
    again = _run(lake, "tokenize", {**config, "batch_rows": 7, "workers": 2}, run_id="again")
    assert {u.status for u in again.units} == {"done"}
    assert {s.shard_id: Path(s.files["packed"]["uri"]).read_bytes() for s in again.shards} == before
    assert {s.shard_id: Path(s.attrs["tokenize"]).read_bytes() for s in again.shards} == attrs_before

    # Another tokenizer file at the same path is another configuration.
    other = tmp_path / "tokenizer.json"
    shutil.copy(bpe, other)
    fp = TokenizeStage(lake, {**config, "tokenizer": str(other)}, "x").fingerprint
    assert fp == stage.fingerprint
    train_bpe(str(other), stdlib_prose(40), vocab_size=500)
    assert TokenizeStage(lake, {**config, "tokenizer": str(other)}, "x").fingerprint != fp


def test_shard_groups_then_collect_give_the_same_counts(pipeline):
    """As a Slurm array or a Kubernetes Indexed Job runs it: groups of shards, then the collect step."""
    lake, config = pipeline["lake"], {**pipeline["config"], "seq_len": 64}
    whole = _run(lake, "tokenize", config, run_id="whole")
    shutil.rmtree(lake.checkpoint_dir("tokenize", TokenizeStage(lake, config, "g").fingerprint))
    for i in range(2):
        StageRunner(TokenizeStage(lake, config, "groups")).run(shard_group=(i, 2))
    collected = StageRunner(TokenizeStage(lake, config, "groups")).run(collect=True)
    assert collected.status == "complete" and collected.accounting == whole.accounting
    assert collected.config["tokens"] == whole.config["tokens"]


def test_cli_on_plain_parquet_with_a_wordpiece_tokenizer(prose, tmp_path, capsys):
    wp = train_wordpiece(str(tmp_path / "wp.json"), prose)
    src = tmp_path / "docs.parquet"
    texts = [prose[0], "", "\u200b\u200b", prose[1], None]  # zero-width spaces: text, but no token
    pq.write_table(pa.table({"id": [f"r{i}" for i in range(5)], "text": pa.array(texts, pa.string())}), src)
    out = tmp_path / "out"
    code = curation(["tokenize", str(src), "--output", str(out), "--tokenizer", wp, "--seq-len", "64"])
    assert code == 0, capsys.readouterr().err
    summary = json.loads(capsys.readouterr().out)
    attrs = pq.read_table(out / "docs.parquet").to_pydict()
    assert attrs[KEEP] == [True, False, False, True, False]
    assert attrs[DROP_REASON] == [None, "empty", "empty_after_tokenize", None, "empty"]
    assert attrs["token_count"][2] == 0 and attrs["token_count"][1] is None
    packed = pq.read_table(out / "packed" / "docs.parquet")
    sep = Tokenizer.from_file(wp).token_to_id("[SEP]")  # WordPiece's end of document, found by itself
    ids = [
        i
        for seq, n in zip(packed.column("input_ids").to_pylist(), packed.column("n_tokens").to_pylist())
        for i in seq[:n]
    ]
    assert ids.count(sep) == 2 and ids[-1] == sep
    assert summary["tokens"]["tokens"] == len(ids) and summary["tokens"]["documents"] == 2
    manifest = Manifest.read(summary["manifest_uri"])
    assert manifest.accounting == {
        "read": 5,
        "kept": 2,
        "dropped": {"empty": 2, "empty_after_tokenize": 1},
        "quarantined": {},
    }

    assert (
        curation(["tokenize", str(src), "--output", str(tmp_path / "o2"), "--tokenizer", str(tmp_path / "none.json")])
        == 1
    )
    assert "not found" in capsys.readouterr().err
    assert (
        curation(["tokenize", str(src), "--output", str(tmp_path / "o3"), "--tokenizer", wp, "--eos-token", "<nope>"])
        == 1
    )
    assert "not in the tokenizer's vocabulary" in capsys.readouterr().err


def test_the_pad_token_fills_the_last_sequence(bpe, prose, tmp_path):
    src = tmp_path / "one.parquet"
    pq.write_table(pa.table({"id": ["a"], "text": [prose[2][:400]]}), src)
    lake = Lake(str(tmp_path / "o"), "_curation")
    config = {
        "inputs": [str(src)],
        "output_dir": str(tmp_path / "o"),
        "tokenizer": bpe,
        "seq_len": 4096,
        "pad_token": PAD,
    }
    m = StageRunner(TokenizeStage(lake, config, "r")).run()
    packed = pq.read_table(tmp_path / "o" / "packed" / "one.parquet").to_pydict()
    n = packed["n_tokens"][0]
    pad = Tokenizer.from_file(bpe).token_to_id(PAD)
    assert packed["input_ids"][0][n:] == [pad] * (4096 - n) and m.config["tokens"]["padding"] == 4096 - n


def test_operator_coerces_settings_and_skips_without_a_tokenizer():
    from airflow.sdk.exceptions import AirflowSkipException

    from airflow_curation.operators.tokenize import TokenizeOperator

    op = TokenizeOperator(
        task_id="t", dataset="d", lake="/l", input_manifest="/m.json", tokenizer="/t.json", seq_len="512"
    )
    assert op.build_config({}) == {"input_manifest": "/m.json", "tokenizer": "/t.json", "seq_len": 512}
    skip = TokenizeOperator(
        task_id="t2", dataset="d", lake="/l", input_manifest="/m.json", tokenizer=" ", optional=True
    )
    with pytest.raises(AirflowSkipException, match="tokenize skipped: no tokenizer configured"):
        skip.execute({})
