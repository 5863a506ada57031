"""The boilerplate stage in the pipeline DAG, in a real ``dag.test()`` (local backend): configured, it removes
the menu and footer lines that many pages share before dedup, which reads the cleaned text (two pages that
differ only by their menus become exact duplicates), and validate's report shows the counts. Unconfigured,
the stage is one skipped group that writes nothing: tests/dedup/test_pipeline_dag.py runs that DAG."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from curation_airflow_helpers import final_manifest, pipeline_module
from dedup.corpus import handbook_docs

from airflow_curation.core.layout import Lake, curation_run_id

pytestmark = pytest.mark.airflow
MENU_A = ["Home | Packages | Documentation | Support", "Search this site", "Skip to main content"]
MENU_B = ["Start | Downloads | Forum | Contact us", "Sign in to your account", "Language: English"]
FOOTER = ["Copyright 2026 Example Project. All rights reserved.", "Privacy policy | Terms of use"]
MIN_DOCUMENTS = 5


def _bodies(n: int) -> list[str]:
    """English prose, about 150 words each: runs of the handbook's sentences (past the page's header)."""
    words = " ".join(
        t for i, t in handbook_docs(["apt.html", "sect.apt-get.html", "unix-services.html"]) if i.startswith("en-US/")
    ).split()[400:]
    return [" ".join(words[i * 150 : (i + 1) * 150]) for i in range(n)]


def _page(menu: list[str], body: str) -> str:
    return "\n".join([*menu, "", body, "", *FOOTER])


def test_boilerplate_lines_are_removed_before_dedup_and_reported(airflow_db, tmp_path, monkeypatch):
    monkeypatch.setenv("CURATION_POLL_INTERVAL", "0.2")
    module = pipeline_module("curation_pipeline_boilerplate")
    assert module.dag.params["boilerplate_min_documents"] is None  # unset: the stage is skipped

    bodies = _bodies(24)
    # Two sites' menus (12 pages each), one footer on every page; the copy is doc-00's body under the other menu.
    pages = {f"doc-{i:02d}": _page(MENU_A if i < 12 else MENU_B, b) for i, b in enumerate(bodies)}
    pages["copy"] = _page(MENU_B, bodies[0])
    assert pages["copy"] != pages["doc-00"]
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "docs.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in pages.items()))

    dag_run = module.dag.test(
        logical_date=datetime(2026, 11, 25, tzinfo=timezone.utc),
        run_conf={
            "input": str(inputs),
            "lake": str(tmp_path / "lake"),
            "dataset": "web",
            "preset": "gopher",
            "boilerplate_min_documents": MIN_DOCUMENTS,
        },
    )
    assert dag_run.state == "success", dag_run.state
    lake = Lake(str(tmp_path / "lake"), "web", "2026-11-25")
    run_id = curation_run_id(dag_run.run_id, lake.snapshot)
    boilerplate, dedup = (
        final_manifest(lake.manifest_uri(run_id, "boilerplate")),
        final_manifest(lake.manifest_uri(run_id, "dedup")),
    )
    assert boilerplate.status == dedup.status == "complete"
    assert boilerplate.config["min_documents"] == MIN_DOCUMENTS
    assert boilerplate.config["input_manifest"] == lake.manifest_uri(run_id, "preprocess")
    assert dedup.config["input_manifest"] == lake.manifest_uri(run_id, "boilerplate")

    rows = {}
    for shard in dedup.shards:
        assert set(shard.attrs) >= {"preprocess", "boilerplate", "dedup"}
        ids = [json.loads(m or "{}").get("id") for m in pq.read_table(shard.uri, columns=["meta"])["meta"].to_pylist()]
        ids = [i or s for i, s in zip(ids, pq.read_table(shard.uri, columns=["id"])["id"].to_pylist())]
        bp = pq.read_table(shard.attrs["boilerplate"]).to_pylist()
        dd = pq.read_table(shard.attrs["dedup"]).to_pylist()
        rows.update({i: {**b, **d} for i, b, d in zip(ids, bp, dd)})
    assert set(rows) == set(pages)
    per_page = len(MENU_A) + len(FOOTER)  # every menu line is on 12 or 13 pages, the footer on all 25
    for i, r in rows.items():
        assert r["boilerplate_lines_removed"] == per_page, i
        assert r["clean_text"].strip() == bodies[0 if i == "copy" else int(i[4:])], i
    # dedup read the cleaned text: the copy is doc-00 exactly, not merely near it
    assert rows["copy"]["exact_duplicate"] and rows["copy"]["cluster_id"] == rows["doc-00"]["cluster_id"]
    assert sum(r["is_duplicate"] for r in rows.values()) == 1

    acc = boilerplate.accounting
    assert acc["read"] == acc["kept"] == len(pages)
    assert acc["notes"]["lines_removed:boilerplate"] == per_page * len(pages)
    assert acc["notes"]["documents_with_boilerplate"] == len(pages)
    report_uri = Path(lake.manifest_uri(run_id, "report"))
    report = json.loads(report_uri.read_text())
    assert report["stages"]["boilerplate"]["accounting"]["notes"]["lines_removed:boilerplate"] == per_page * len(pages)
    html = report_uri.with_suffix(".html").read_text()
    assert "Notes (boilerplate)" in html and "lines_removed:boilerplate" in html
