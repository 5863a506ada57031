"""embed with real vLLM on CPU (all-MiniLM-L6-v2): columns, filters, truncation, batching, resume after kill.

One vLLM engine for the whole module (the in-process engine cache); the kill test starts one more in a
real subprocess, which is the point of that test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from enrich_helpers import make_docs, read_attrs, record, run_enrich, write_lake

from airflow_curation.core.checkpoint import CheckpointStore
from airflow_curation.jobs.spec import JobSpec
from airflow_curation.stages.base import StageFailed
from airflow_curation.stages.enrich.stage import EnrichStage

pytestmark = pytest.mark.usefixtures("release_engines_after")

MAX_TOKENS = 48


def embed_config(minilm, **over):
    return {
        "task": "embed",
        "model": minilm,
        "model_runtime": "vllm",
        "dtype": "float32",
        "max_input_tokens": MAX_TOKENS,
        "batch_size": 8,
        "checkpoint_rows": 16,
        **over,
    }


@pytest.fixture(scope="module")
def lake_with_edge_cases(tmp_path_factory):
    docs = make_docs(40)
    docs[3]["text"] = ""
    docs[4]["text"] = "   \n\t "
    docs[5]["text"] = " ".join(f"word{i}" for i in range(400))  # far over MAX_TOKENS
    root = str(tmp_path_factory.mktemp("lake"))
    lake, uri = write_lake(
        root, {"part-0": docs}, keep={"part-0": {"d00010", "d00011"}}, duplicates={"part-0": {"d00012", "d00010"}}
    )
    return lake, uri, docs


@pytest.fixture(scope="module")
def embedded(lake_with_edge_cases, minilm):
    lake, uri, docs = lake_with_edge_cases
    stage, manifest = run_enrich(lake, uri, **embed_config(minilm))
    return stage, manifest, docs


def test_embed_writes_fixed_size_vectors_for_every_row_in_shard_order(embedded):
    stage, manifest, docs = embedded
    assert manifest.status == "complete"
    entry = manifest.shards[0]
    assert set(entry.attrs) == {"preprocess", "dedup", "enrich-embed"}
    attrs = read_attrs(entry.attrs["enrich-embed"])
    assert attrs.column("id").to_pylist() == [d["id"] for d in docs]
    emb_type = attrs.schema.field("embedding").type
    assert pa.types.is_fixed_size_list(emb_type) and emb_type.list_size == 384
    assert emb_type.value_type == pa.float32()
    vectors = attrs.column("embedding").to_pylist()
    enriched = attrs.column("enriched").to_pylist()
    for v, e in zip(vectors, enriched):
        if e:
            assert abs(np.linalg.norm(v) - 1.0) < 1e-4  # MiniLM's Normalize module
        else:
            assert v == [None] * 384  # not enriched: a vector of nulls


def test_filtered_empty_and_long_rows_are_flagged_and_accounted(embedded):
    stage, manifest, docs = embedded
    attrs = read_attrs(manifest.shards[0].attrs["enrich-embed"]).to_pydict()
    reason = dict(zip(attrs["id"], attrs["skip_reason"]))
    assert reason["d00003"] == "empty" and reason["d00004"] == "empty"
    assert reason["d00010"] == "not_kept"  # preprocess dropped it first
    assert reason["d00011"] == "not_kept" and reason["d00012"] == "duplicate"
    assert sum(r is not None for r in attrs["skip_reason"]) == 5
    truncated = dict(zip(attrs["id"], attrs["truncated"]))
    tokens = dict(zip(attrs["id"], attrs["input_tokens"]))
    assert truncated["d00005"] is True and tokens["d00005"] > MAX_TOKENS
    assert not any(t for i, t in truncated.items() if i != "d00005" and t is not None)
    assert manifest.accounting == {
        "read": 40,
        "kept": 35,
        "dropped": {"duplicate": 1, "empty": 2, "not_kept": 2},
        "quarantined": {},
    }


def test_vllm_embeddings_match_sentence_transformers(embedded, minilm):
    from sentence_transformers import SentenceTransformer

    stage, manifest, docs = embedded
    attrs = read_attrs(manifest.shards[0].attrs["enrich-embed"]).to_pydict()
    st = SentenceTransformer(minilm, device="cpu")
    st.max_seq_length = MAX_TOKENS  # same truncation, in tokens, as the stage
    rows = [0, 1, 5, 20]  # includes the truncated one
    ref = st.encode([docs[i]["text"] for i in rows], normalize_embeddings=True)
    got = np.asarray([attrs["embedding"][i] for i in rows])
    cos = (ref * got).sum(axis=1)
    assert np.all(cos > 0.999), cos


def test_batch_size_does_not_change_results_and_rerun_does_no_work(embedded, lake_with_edge_cases, minilm):
    stage, manifest, docs = embedded
    lake, uri, _ = lake_with_edge_cases
    first = read_attrs(manifest.shards[0].attrs["enrich-embed"])
    # Another name: a separate output; batch size 3 and checkpoint every 7 rows.
    stage2, manifest2 = run_enrich(
        lake, uri, run_id="e2", **embed_config(minilm, name="b3", batch_size=3, checkpoint_rows=7)
    )
    second = read_attrs(manifest2.shards[0].attrs["enrich-b3"])
    a = np.asarray(
        [v for v, e in zip(first.column("embedding").to_pylist(), first.column("enriched").to_pylist()) if e]
    )
    b = np.asarray(
        [v for v, e in zip(second.column("embedding").to_pylist(), second.column("enriched").to_pylist()) if e]
    )
    assert np.allclose(a, b, atol=1e-5)
    # Same settings again: the checkpoint matches, nothing is recomputed.
    stage3, manifest3 = run_enrich(lake, uri, run_id="e3", **embed_config(minilm))
    assert [u.status for u in manifest3.units] == ["skipped"]
    assert manifest3.accounting == manifest.accounting


def test_resume_after_kill_mid_shard_recomputes_nothing(tmp_path, minilm):
    docs = make_docs(600)
    lake, uri = write_lake(str(tmp_path), {"big": docs})
    config = embed_config(minilm, input_manifest=uri, mapper="local", checkpoint_rows=25, batch_size=25)
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(JobSpec(stage="enrich", lake=lake.to_dict(), run_id="k1", config=config).to_json())
    stage = EnrichStage(lake, config, "k1")
    unit = stage.plan()[0]
    parts_dir = stage.parts_dir(unit)

    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen(
        [sys.executable, "-m", "airflow_curation.jobs", "run", str(spec_path)],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "job.log", "wb"),
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if os.path.isdir(parts_dir) and any(
                f.endswith(".parquet") and not f.startswith(".") for f in os.listdir(parts_dir)
            ):
                break
            time.sleep(0.05)
        assert proc.poll() is None, (tmp_path / "job.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the job and the vLLM engine process it spawned
        proc.wait()

    out_uri = stage.output_uri("big")
    assert not os.path.exists(out_uri)
    assert CheckpointStore(lake.checkpoint_dir("enrich", stage.fingerprint)).load("big") is None
    parts_before = sorted(f for f in os.listdir(parts_dir) if f.endswith(".parquet") and not f.startswith("."))
    assert parts_before
    covered = int(parts_before[-1].split("-")[1].split(".")[0])
    assert 0 < covered < 600
    saved = pa.concat_tables([pq.read_table(os.path.join(parts_dir, p)) for p in parts_before])

    stage2, manifest = run_enrich(lake, uri, run_id="k1", **{k: v for k, v in config.items() if k != "input_manifest"})
    rec = record(stage2, "big")
    assert rec.extra["rows_resumed"] == covered
    assert rec.extra["rows_computed"] == 600 - covered
    out = pq.read_table(out_uri)
    ids = out.column("id").to_pylist()
    assert ids == [d["id"] for d in docs] and len(set(ids)) == 600
    # Checkpointed rows come from the parts, untouched; the parts are gone once merged.
    assert out.slice(0, covered).column("embedding").to_pylist() == saved.column("embedding").to_pylist()
    assert not os.path.exists(parts_dir)
    assert manifest.accounting["kept"] == 600


def test_cli_plain_parquet_files(tmp_path, minilm):
    from airflow_curation.cli import main

    docs = make_docs(12)
    src = tmp_path / "in.parquet"
    pq.write_table(
        pa.table({"id": [d["id"] for d in docs], "text": [d["text"] for d in docs], "lang": ["en"] * 12}), src
    )
    out = tmp_path / "out"
    rc = main(
        [
            "enrich",
            str(src),
            "--task",
            "embed",
            "--model",
            minilm,
            "--output",
            str(out),
            "--mapper",
            "local",
            "--dtype",
            "float32",
            "--max-input-tokens",
            str(MAX_TOKENS),
            "--batch-size",
            "8",
            "--checkpoint-rows",
            "16",
        ]
    )
    assert rc == 0
    table = pq.read_table(out / "in.parquet")
    assert table.column("id").to_pylist() == [d["id"] for d in docs]
    assert table.schema.field("embedding").type.list_size == 384
    assert all(table.column("enriched").to_pylist())
    meta = json.loads(table.schema.metadata[b"airflow_curation.enrich"])
    assert meta["task"] == "embed" and meta["model_runtime"] == "vllm"


def test_cli_rejects_parquet_without_text_column(tmp_path, minilm, capsys):
    from airflow_curation.cli import main

    src = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"id": ["a"], "body": ["x"]}), src)
    assert (
        main(
            [
                "enrich",
                str(src),
                "--task",
                "embed",
                "--model",
                minilm,
                "--output",
                str(tmp_path / "o"),
                "--mapper",
                "local",
            ]
        )
        == 1
    )
    assert "ValueError" in (err := capsys.readouterr().err) and "missing column 'text'" in err


def _users_file(path, texts: list[bytes], row_group_size: int) -> str:
    raw = pa.array(texts, pa.binary())  # strings over raw bytes: a Parquet reader does not check their UTF-8
    text = pa.Array.from_buffers(pa.string(), len(raw), raw.buffers(), raw.null_count)
    pq.write_table(
        pa.table({"id": [f"u{i}" for i in range(len(texts))], "text": text}), str(path), row_group_size=row_group_size
    )
    return str(path)


def _on_files(minilm, out, files: list[str], **over):
    from airflow_curation.core.layout import Lake
    from airflow_curation.stages.base import StageRunner

    config = {**embed_config(minilm), "inputs": files, "output_dir": str(out), "mapper": "local", **over}
    return StageRunner(EnrichStage(Lake(str(out), "_curation"), config, "r1")).run()


def test_a_users_parquet_file_is_streamed_in_chunks_and_a_bad_row_fails_before_any_model_work(minilm, tmp_path):
    """``curation enrich a.parquet --output out/``: the texts are read a chunk at a time (checkpoint_rows), the rows
    keep their file order whatever the chunking, the bookkeeping stays under out/_curation (its parts were
    written beside the user's results, in out/_parts), and a row of invalid UTF-8 near the end fails the file
    at once, naming the row, before the model ran on the rows before it."""
    texts = [f"note {i}: the tide came in over the harbour wall".encode() for i in range(30)]
    texts[4] = b""
    a = _users_file(tmp_path / "a.parquet", texts, 7)
    _on_files(minilm, tmp_path / "out-a", [a])
    b = _users_file(tmp_path / "b.parquet", texts, 3)
    _on_files(minilm, tmp_path / "out-b", [b], checkpoint_rows=5)
    got_a, got_b = (pq.read_table(tmp_path / f"out-{k}" / f"{k}.parquet") for k in "ab")
    assert got_a.column("id").to_pylist() == got_b.column("id").to_pylist() == [f"u{i}" for i in range(30)]
    assert got_a.column("enriched").to_pylist() == [i != 4 for i in range(30)]
    assert got_a.column("skip_reason").to_pylist()[4] == "empty"
    va, vb = (np.array([v for v in t.column("embedding").to_pylist() if v[0] is not None]) for t in (got_a, got_b))
    assert va.shape == (29, 384) and np.allclose(va, vb, atol=1e-4)
    assert sorted(p.name for p in (tmp_path / "out-a").iterdir()) == ["_curation", "a.parquet"]

    texts[27] = texts[27][:10] + b"\xff" + texts[27][10:]
    bad = _users_file(tmp_path / "bad.parquet", texts, 7)
    with pytest.raises(StageFailed, match=r"bad.parquet: row 27 has invalid UTF-8 in 'text'"):
        _on_files(minilm, tmp_path / "out-bad", [bad])
    assert not list((tmp_path / "out-bad").rglob("*.parquet"))  # no part: the model never ran


def test_a_users_integer_ids_are_written_as_strings(minilm, tmp_path):
    """enrich failed on a user's integer ids (`Expected bytes, got a 'int' object`, after the model ran)."""
    f = tmp_path / "n.parquet"
    pq.write_table(pa.table({"id": pa.array([3, 1, 2], pa.int64()), "text": ["one note", "", "two notes"]}), f)
    _on_files(minilm, tmp_path / "out", [str(f)])
    got = pq.read_table(tmp_path / "out" / "n.parquet")
    assert got.column("id").to_pylist() == ["3", "1", "2"] and got.column("enriched").to_pylist() == [True, False, True]
