"""The decontaminate stage: flagged documents and their spans, several benchmarks, bad evaluation rows, the
index built once and partitioned, reruns, the operator and the CLI, and datatrove's flagged set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.core.ngram_match import normalize, word_spans, words
from airflow_curation.stages import STAGES
from airflow_curation.stages.base import StageFailed, StageRunner
from airflow_curation.stages.decontaminate.index import EvalSetError
from airflow_curation.stages.decontaminate.stage import DecontaminateStage
from airflow_curation.stages.validate import ValidateStage

from . import gen

REPO = Path(__file__).resolve().parents[2]
TARGET = "airflow_curation.stages.decontaminate.stage:DecontaminateStage"
N = 8
MMLU = "The mitochondria is the powerhouse of the cell, producing 36 ATP molecules per glucose in humans."
GSM = "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May."
SHARED = "alpha beta gamma delta epsilon zeta eta theta iota kappa"  # in both benchmarks
TEXTS = [
    # mmlu, restyled: case, punctuation, another number, an accent
    "Notes: THE MITOCHONDRIA -- is the powerhouse of the céll; producing 38 ATP molecules, they say.",
    "Nothing from any benchmark here, just ordinary words about gardens and rivers and hills.",
    # seven words of gsm8k only (a near miss at n=8)
    "She said natalia sold clips to 48 of her and left.",
    f"gsm8k: Natalia sold clips to 12 of her friends in April! and then {SHARED}",
    f"{SHARED} and more",
    "",
]


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    # The entry point (pyproject.toml) is live once the checkout is installed again; until then, here and
    # in the job processes the CLI starts.
    monkeypatch.setitem(STAGES, "decontaminate", TARGET)
    monkeypatch.setenv("CURATION_STAGES", f"decontaminate={TARGET}")


@pytest.fixture
def evals(tmp_path) -> dict[str, str]:
    mmlu = tmp_path / "mmlu_test.jsonl"
    mmlu.write_text(json.dumps({"question": MMLU}) + "\n" + json.dumps({"question": f"Greek: {SHARED}."}) + "\n")
    gsm = tmp_path / "gsm8k_test.parquet"
    pq.write_table(pa.table({"question": [GSM, f"letters {SHARED}"]}), gsm)
    return {"mmlu": str(mmlu), "gsm8k": str(gsm)}


@pytest.fixture
def ingested(ingest_texts) -> tuple[Lake, str]:
    lake, uri, rows = ingest_texts(TEXTS, "web")
    assert rows == 2 * len(TEXTS) - 2  # (an empty text is quarantined by ingest)
    return lake, uri


def _config(ingest_uri: str, evals: dict[str, str], **extra) -> dict:
    return {"input_manifest": ingest_uri, "eval_sets": evals, "text_column": "question", "ngram": N, **extra}


def test_flags_docs_with_benchmark_and_span_and_keeps_the_books(ingested, evals):
    lake, ingest_uri = ingested
    shards_before = {s.uri: Path(s.uri).read_bytes() for s in Manifest.read(ingest_uri).shards}
    stage = DecontaminateStage(lake, _config(ingest_uri, evals), "r1")
    manifest = StageRunner(stage).run()
    assert manifest.status == "complete"
    acc = manifest.accounting
    assert acc["read"] == 10 and acc["kept"] + sum(acc["dropped"].values()) == acc["read"]
    # per shard: doc 0 mmlu; doc 3 gsm8k (its first match; the shared run of words comes later); doc 4 shared
    assert acc["dropped"] == {"decontaminated:mmlu": 2, "decontaminated:gsm8k": 4}
    for shard in manifest.shards:
        assert Path(shard.uri).read_bytes() == shards_before[shard.uri]  # never rewritten
        texts = pq.read_table(shard.uri).column("text").to_pylist()
        rows = pq.read_table(shard.attrs["decontaminate"]).to_pylist()
        assert [r["contaminated"] for r in rows] == [True, False, False, True, True]
        assert [r["contamination_benchmark"] for r in rows] == ["mmlu", None, None, "gsm8k", "gsm8k"]
        assert [r["contamination_benchmarks"] for r in rows] == [
            ["mmlu"], None, None, ["gsm8k", "mmlu"], ["gsm8k", "mmlu"]
        ]  # fmt: skip
        assert [r["keep"] for r in rows] == [False, True, True, False, False]
        first = rows[0]
        span = texts[0][first["contamination_start"] : first["contamination_end"]]
        assert span == "THE MITOCHONDRIA -- is the powerhouse of the céll"
        assert first["contamination_ngram"] == "the mitochondria is the powerhouse of the cell"
        assert first["contamination_matches"] == 5  # 12 words in common: 5 windows of 8
        for r, text in zip(rows, texts):
            if r["contaminated"]:  # the span is the matched n-gram, word for word
                assert (
                    " ".join(words(text[r["contamination_start"] : r["contamination_end"]])) == r["contamination_ngram"]
                )
    # counts per benchmark in validate's report
    StageRunner(ValidateStage(lake, {"input_manifest": stage.manifest_uri}, "r1")).run()
    report = json.loads(Path(lake.path("_manifests", "r1", "report.json")).read_text())
    d = report["stages"]["decontaminate"]
    assert d["counts"] == {"contaminated_docs": 6, "matched:mmlu": 6, "matched:gsm8k": 4}
    assert d["accounting"]["dropped"] == {"decontaminated:mmlu": 2, "decontaminated:gsm8k": 4}
    card = Path(lake.path("_manifests", "r1", "README.md")).read_text()  # the dataset card says the same
    section = card.split("### Decontamination", 1)[1].split("\n## ", 1)[0]
    assert "| matched:mmlu | 6 |" in section and "| contaminated_docs | 6 |" in section
    # a rerun skips every shard and builds no index
    index = Path(stage.index_dir, "_SUCCESS.json")
    stamp = index.stat().st_mtime_ns
    rerun = StageRunner(DecontaminateStage(lake, _config(ingest_uri, evals), "r2")).run()
    assert {u.status for u in rerun.units} == {"skipped"} and index.stat().st_mtime_ns == stamp


def test_mark_only_keeps_every_row(ingested, evals):
    lake, ingest_uri = ingested
    manifest = StageRunner(DecontaminateStage(lake, _config(ingest_uri, evals, drop=False), "r1")).run()
    assert manifest.accounting["kept"] == 10 and manifest.accounting["dropped"] == {}
    rows = pq.read_table(manifest.shards[0].attrs["decontaminate"])
    assert "keep" not in rows.column_names and rows.column("contaminated").to_pylist()[0] is True


def test_an_edited_eval_file_redoes_the_shards(ingested, evals):
    lake, ingest_uri = ingested
    StageRunner(DecontaminateStage(lake, _config(ingest_uri, evals), "r1")).run()
    Path(evals["mmlu"]).write_text(json.dumps({"question": "nothing left of the old question at all here"}) + "\n")
    again = DecontaminateStage(lake, _config(ingest_uri, evals), "r2")
    manifest = StageRunner(again).run()
    assert {u.status for u in manifest.units} == {"done"}
    assert "decontaminated:mmlu" not in manifest.accounting["dropped"]


def test_the_eval_sets_in_another_order_reuse_the_index(ingested, evals):
    """The same sets named in another order are the same configuration (the fingerprint sorts them): the
    rerun skips every shard and finds its index (a guard: the code before passed it too)."""
    lake, ingest_uri = ingested
    first = StageRunner(DecontaminateStage(lake, _config(ingest_uri, evals), "o1")).run()
    reordered = dict(reversed(list(evals.items())))
    again = DecontaminateStage(lake, _config(ingest_uri, reordered), "o2")
    assert (
        again.fingerprint == first.fingerprint
        and again.index_key == DecontaminateStage(lake, _config(ingest_uri, evals), "o3").index_key
    )
    manifest = StageRunner(again).run()
    assert {u.status for u in manifest.units} == {"skipped"}
    assert len(list(Path(lake.path("decontaminate")).iterdir())) == 1  # one index


def test_a_bad_eval_row_fails_clearly_or_is_quarantined(ingested, evals, tmp_path):
    lake, ingest_uri = ingested
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": MMLU}) + "\n{not json\n" + json.dumps({"question": 7}) + "\n")
    sets = {**evals, "mmlu": str(bad)}
    with pytest.raises(EvalSetError, match=r"eval set mmlu: .*bad\.jsonl line 2: invalid_json"):
        StageRunner(DecontaminateStage(lake, _config(ingest_uri, sets), "r1")).run()
    stage = DecontaminateStage(lake, _config(ingest_uri, sets, bad_eval_rows="skip"), "r2")
    manifest = StageRunner(stage).run()
    assert manifest.accounting["dropped"]["decontaminated:mmlu"] == 2  # the good row still counts
    doc = json.loads(Path(stage.index_dir, "_SUCCESS.json").read_text())
    assert doc["counts"]["mmlu"] == {"rows": 1, "ngrams": 9, "bad_rows": 2}
    quarantined = pq.read_table(os.path.join(stage.index_dir, doc["quarantine"])).to_pylist()
    assert [(q["position"], q["reason"]) for q in quarantined] == [(2, "invalid_json"), (3, "text_not_string")]
    with pytest.raises(ValueError, match="no eval_sets given"):
        DecontaminateStage(lake, {"input_manifest": ingest_uri}, "r3")


def test_a_partitioned_index_flags_the_same_documents(tmp_path):
    evals, texts, expected = gen.make(3, 200, {"mmlu": 30, "gsm8k": 20}, 13)
    files = {}
    for b, rows in evals.items():
        files[b] = str(tmp_path / f"{b}.jsonl")
        Path(files[b]).write_text("".join(json.dumps({"text": t}) + "\n" for t in rows))
    src = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"id": [str(i) for i in range(len(texts))], "text": texts}), src)
    flagged, partitions = {}, {}
    for budget in (1 << 30, 4096):  # one partition; many, spilled while building and evicted while probing
        out = tmp_path / f"out-{budget}"
        config = {"inputs": [str(src)], "output_dir": str(out), "eval_sets": files, "memory_budget": budget}
        stage = DecontaminateStage(Lake(str(out), "_curation"), config, "r1")
        StageRunner(stage).run()
        rows = pq.read_table(out / "docs.parquet").to_pylist()
        flagged[budget] = {int(r["id"]): r["contamination_benchmark"] for r in rows if r["contaminated"]}
        partitions[budget] = stage._index_doc["partitions"]
    assert partitions[1 << 30] == 1 and partitions[4096] > 1
    assert flagged[1 << 30] == flagged[4096] == expected


@pytest.mark.parametrize(
    "text",
    [
        "Hello, World! The 3.14 café's naïve — test İstanbul  x\u0301y 1,000 men.",
        "ÀÉÎ ǅemal ﬁne ß STRASSE ½ ٣٤ \u0301alone 2.5.6 ok",
        "tabs\tand\nnewlines\u00a0nbsp\u2003em",
        "",
    ],
)
def test_word_spans_cover_the_words_of_the_normalised_text(text):
    spans = word_spans(text)
    assert len(spans) == len(words(text))
    for (a, b), w in zip(spans, words(text)):
        assert normalize(text[a:b]) == w


def test_operator_is_declared_from_the_settings():
    from stages.test_operator_declarations import (
        test_operator_arguments_are_the_stages_settings_documented_and_templated as declared,
    )

    declared("decontaminate")
    from airflow_curation.operators.decontaminate import DecontaminateOperator

    op = DecontaminateOperator(
        task_id="d", dataset="web", lake="/tmp/lake", input_manifest="/m.json", eval_sets="mmlu=/e/m.jsonl",
        ngram="13", drop="false", text_column="None",
    )  # fmt: skip
    assert op.build_config({}) == {
        "input_manifest": "/m.json", "eval_sets": {"mmlu": ["/e/m.jsonl"]}, "ngram": 13, "drop": False
    }  # fmt: skip
    from airflow.sdk.exceptions import AirflowSkipException

    for unset in ("", " {} ", "None", None):
        skip = DecontaminateOperator(
            task_id="d2", dataset="web", lake="/l", input_manifest="/m.json", eval_sets=unset,
            optional=True,
        )  # fmt: skip
        with pytest.raises(AirflowSkipException, match="decontaminate skipped: no eval_sets configured"):
            skip.execute({})


def test_cli_on_plain_parquet(evals, tmp_path):
    src = tmp_path / "mine.parquet"
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(len(TEXTS))], "text": TEXTS}), src)
    code = "import sys; from airflow_curation.cli import main; sys.exit(main(sys.argv[1:]))"
    args = ["decontaminate", str(src), "--output", str(tmp_path / "out"), "--ngram", str(N)]
    args += ["--eval-sets", ",".join(f"{b}={f}" for b, f in evals.items()), "--text-column", "question"]
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = pq.read_table(tmp_path / "out" / "mine.parquet")
    assert out.column("contaminated").to_pylist() == [True, False, False, True, True, False]


def test_same_flagged_documents_as_datatrove(tmp_path):
    from preprocess.conftest import _oracle_python

    evals, texts, expected = gen.make(7, 300, {"mmlu": 40, "gsm8k": 30}, 13)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"n": 13, "eval": evals, "docs": texts, "index_dir": str(tmp_path / "dt")}))
    runner = Path(__file__).with_name("datatrove_oracle.py")
    proc = subprocess.run(
        [_oracle_python(".venv-oracles"), str(runner), str(spec)], capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = {f["i"]: f for f in json.loads(proc.stdout)["flagged"]}

    files = {}
    for b, rows in evals.items():
        files[b] = str(tmp_path / f"{b}.parquet")
        pq.write_table(pa.table({"text": rows}), files[b])
    src = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"id": [str(i) for i in range(len(texts))], "text": texts}), src)
    config = {"inputs": [str(src)], "output_dir": str(tmp_path / "out"), "eval_sets": files}
    StageRunner(DecontaminateStage(Lake(str(tmp_path / "out"), "_curation"), config, "r1")).run()
    rows = pq.read_table(tmp_path / "out" / "docs.parquet").to_pylist()
    ours = {int(r["id"]): r for r in rows if r["contaminated"]}
    assert len(expected) > 20 and set(ours) == set(theirs) == set(expected)
    for i, r in ours.items():  # the same first n-gram, of the same benchmark
        assert (r["contamination_ngram"], r["contamination_benchmark"]) == (theirs[i]["ngram"], theirs[i]["task"])


def test_stage_failed_is_raised_for_an_unreadable_eval_file(ingested, tmp_path):
    lake, ingest_uri = ingested
    (tmp_path / "m.csv").write_text("question\nwhat is this\n")
    with pytest.raises((EvalSetError, StageFailed), match="not JSONL or Parquet"):
        StageRunner(DecontaminateStage(lake, _config(ingest_uri, {"mmlu": str(tmp_path / "m.csv")}), "r1")).run()


def test_array_tasks_share_one_index_and_collect_the_run(ingested, evals, monkeypatch):
    """Tasks of an array (shard groups) each probe their own block; the index is built by the first only."""
    from airflow_curation.stages.decontaminate import index as eval_index

    lake, ingest_uri = ingested
    builds = []
    real = eval_index.build_index
    monkeypatch.setattr(eval_index, "build_index", lambda *a, **k: builds.append(a[0]) or real(*a, **k))
    for i in range(2):
        StageRunner(DecontaminateStage(lake, _config(ingest_uri, evals), "r1")).run(shard_group=(i, 2))
    manifest = StageRunner(DecontaminateStage(lake, _config(ingest_uri, evals), "r1")).run(collect=True)
    assert len(builds) == 1 and manifest.status == "complete"
    assert manifest.accounting["dropped"] == {"decontaminated:mmlu": 2, "decontaminated:gsm8k": 4}


def test_a_missing_eval_file_is_named_with_its_set(ingested, tmp_path):
    lake, ingest_uri = ingested
    (tmp_path / "gsm8k.jsonl").write_text('{"text": "two plus two"}\n')
    sets = {"gsm8k": str(tmp_path / "gsm8k.jsonl"), "mmlu": str(tmp_path / "missing.jsonl")}
    with pytest.raises(EvalSetError, match=f"eval set mmlu: {tmp_path}/missing.jsonl does not exist"):
        DecontaminateStage(lake, _config(ingest_uri, sets), "r1")
