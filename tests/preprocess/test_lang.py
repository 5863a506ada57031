"""Language ID: the lang/lang_score signals, 'in' rules, --lang on the stage and the CLI, offline."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
from core.test_langid import SENTENCES  # one sentence per language, shared with the core tests

from airflow_curation.core.manifest import Manifest
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.preprocess.stage import Preprocessor, PreprocessStage

from .conftest import REPO
from .test_stage import _make_lake


def test_preprocessor_adds_lang_only_when_asked():
    table = pa.table({"id": list(SENTENCES), "text": list(SENTENCES.values())})
    assert "lang" not in Preprocessor(preset="gopher").process(table).column_names
    out = Preprocessor(preset="none", lang=["en", "de"]).process(table)
    assert out.column("lang").to_pylist() == list(SENTENCES)
    assert out.column("keep").to_pylist() == [code in ("en", "de") for code in SENTENCES]
    assert set(out.column("drop_reason").drop_null().to_pylist()) == {"lang"}
    always = Preprocessor(preset="none", lang_id=True).process(table)
    assert always.column("keep").to_pylist() == [True] * len(SENTENCES) and "lang_score" in always.column_names


def test_stage_with_lang_on_a_lake(tmp_path, prose, code, warm_signals):
    lake, ingest_uri = _make_lake(tmp_path / "lake", prose, code)
    stage = PreprocessStage(
        lake, {"input_manifest": ingest_uri, "preset": "gopher", "lang": "en", "mapper": "local"}, "lang-1"
    )
    manifest = StageRunner(stage).run()
    assert manifest.status == "complete"
    acc = manifest.accounting
    assert acc["read"] == acc["kept"] + sum(acc["dropped"].values()) == 122
    attrs = pa.concat_tables(pq.read_table(s.attrs["preprocess"]) for s in manifest.shards)
    rows = {r["id"]: r for r in attrs.select(["id", "lang", "keep", "drop_reason"]).to_pylist()}
    assert rows["edge/ru"]["lang"] == "ru" and rows["edge/ru"]["drop_reason"] in ("lang", "gopher_word_count")
    assert rows["edge/empty"]["drop_reason"] == "empty"  # the preset's rules come first
    assert all(r["lang"] == "en" for r in rows.values() if r["keep"])
    plain = PreprocessStage(lake, {"input_manifest": ingest_uri}, "x").fingerprint
    assert stage.fingerprint != plain
    # The language settings at their defaults leave the fingerprint as it was before they existed.
    defaults = {"lang": [], "lang_min_score": None, "lang_id": "auto", "lang_max_chars": 0}
    assert PreprocessStage(lake, {"input_manifest": ingest_uri, **defaults}, "x").fingerprint == plain
    assert PreprocessStage(lake, {"input_manifest": ingest_uri, "lang_max_chars": 2000}, "x").fingerprint != plain


def test_cli_lang_flag_on_plain_parquet(tmp_path):
    src = tmp_path / "multi.parquet"
    pq.write_table(pa.table({"id": list(SENTENCES), "text": list(SENTENCES.values())}), src)
    code = "import sys; from airflow_curation.cli import main; sys.exit(main(sys.argv[1:]))"
    args = [
        str(src),
        "--output",
        str(tmp_path / "out"),
        "--preset",
        "none",
        "--lang",
        "fr,es",
        "--lang-min-score",
        "0.6",
    ]
    proc = subprocess.run(
        [sys.executable, "-c", code, "preprocess", *args], capture_output=True, text=True, cwd=REPO, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = pq.read_table(tmp_path / "out" / "multi.parquet")
    assert out.column("keep").to_pylist() == [code in ("fr", "es") for code in SENTENCES]
    manifest_uri = next(p for p in (tmp_path / "out" / "_curation").rglob("preprocess.json"))
    config = Manifest.read(str(manifest_uri)).config
    assert config["lang"] == "fr,es" and config["lang_min_score"] == 0.6
