"""The dataset card (issue 24, item 4): written beside validate's report, in the Hugging Face layout, with
the run's sources, each stage's settings and fingerprint, the funnel and token totals per source, all
equal to what the run itself recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizer_files import stdlib_prose, train_bpe

from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.stages import stage_class
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.tokenize.stage import load_tokenizer
from airflow_curation.stages.validate import ValidateStage
from airflow_curation.stages.validate.card import size_category


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Two sources in their own folders (wiki/, code/), a bad record, ingest -> tokenize -> validate."""
    base = tmp_path_factory.mktemp("card")
    prose = stdlib_prose(120)
    tok = train_bpe(str(base / "tokenizer.json"), prose)
    raw = base / "raw"
    (raw / "wiki").mkdir(parents=True)
    (raw / "code").mkdir()
    texts = {"wiki": prose[:70], "code": prose[70:110]}
    for src, rows in texts.items():
        lines = [json.dumps({"text": t}) for t in rows]
        if src == "code":
            lines.append("{not json")
        (raw / src / "part.jsonl").write_text("\n".join(lines) + "\n")
    lake = Lake(str(base / "lake"), "d")
    StageRunner(stage_class("ingest")(lake, {"inputs": [str(raw)], "target_shard_bytes": 8192}, "r")).run()
    tokenize = stage_class("tokenize")(
        lake, {"input_manifest": lake.manifest_uri("r", "ingest"), "tokenizer": tok, "seq_len": 64}, "r"
    )
    StageRunner(tokenize).run()
    StageRunner(ValidateStage(lake, {"input_manifest": lake.manifest_uri("r", "tokenize")}, "r")).run()
    card = Path(lake.path("_manifests", "r", "README.md")).read_text()
    report = json.loads(Path(lake.path("_manifests", "r", "report.json")).read_text())
    return {"card": card, "report": report, "lake": lake, "texts": texts, "tok": tok}


def _table_rows(card: str, header: str) -> list[list[str]]:
    lines = card.splitlines()
    i = lines.index(header)
    rows = []
    for line in lines[i + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_tokens_per_source_are_the_tokens_of_each_source_s_documents(run):
    tok = load_tokenizer(run["tok"])
    expected = {
        src: (len(rows), sum(len(tok.encode(t, add_special_tokens=False).ids) for t in rows))
        for src, rows in run["texts"].items()
    }
    rows = _table_rows(run["card"], "| source | documents | tokens |")
    assert {r[0]: (int(r[1].replace(",", "")), int(r[2].replace(",", ""))) for r in rows} == expected
    manifest = Manifest.read(run["lake"].manifest_uri("r", "tokenize"))
    by_source = manifest.config["tokens"]["by_source"]
    assert sum(c["doc_tokens"] for c in by_source.values()) == manifest.config["tokens"]["doc_tokens"]


def test_each_stage_s_fingerprint_and_settings_are_its_manifest_s(run):
    rows = {r[0]: r for r in _table_rows(run["card"], "| stage | fingerprint | rows | settings |")}
    assert set(rows) == {"ingest", "tokenize"}
    for st in rows:
        m = Manifest.read(run["lake"].manifest_uri("r", st))
        assert rows[st][1] == f"`{m.fingerprint}`"
        assert rows[st][2].replace(",", "") == str(m.rows)
    assert "seq_len=64" in rows["tokenize"][3] and "workers=" not in rows["tokenize"][3]  # runtime left out


def test_sources_funnel_and_metadata_follow_the_report(run):
    card, report = run["card"], run["report"]
    kept = report["metrics"]["funnel"][-1]["rows"]
    assert card.startswith("---\npretty_name:") and f"- {size_category(kept)}\n" in card
    assert f"- Curated rows: {kept:,}" in card
    assert "Ingest read 111 records and kept 110." in card  # the bad line: read, not kept, not lost
    acc = report["stages"]["ingest"]["accounting"]
    lost = {(r[0], r[1]): int(r[2]) for r in _table_rows(card, "| not kept at ingest | reason | records |")}
    assert lost == {
        **{("dropped", k): v for k, v in acc["dropped"].items()},
        **{("quarantined", k): v for k, v in acc["quarantined"].items()},
    }
    assert sum(lost.values()) == 1
    funnel = _table_rows(card, "| step | stage | rows | text bytes |")
    assert [(r[0], int(r[2].replace(",", ""))) for r in funnel] == [
        (f["label"], f["rows"]) for f in report["metrics"]["funnel"]
    ]


def test_size_categories_are_hugging_face_s_buckets():
    assert [size_category(n) for n in (0, 999, 1000, 12_345, 10**7, 10**13)] == [
        "n<1K",
        "n<1K",
        "1K<n<10K",
        "10K<n<100K",
        "10M<n<100M",
        "n>1T",
    ]
