"""The report page's stage table: quarantined rows are shown beside kept and dropped ones."""

from __future__ import annotations

from airflow_curation.stages.validate.report import render_html


def _stage(accounting: dict) -> dict:
    return {
        "status": "complete",
        "units": {"done": 2, "failed": 0},
        "rows": 7,
        "bytes": 700,
        "accounting": accounting,
        "seconds": {"total": 1.0, "max": 0.6, "mean": 0.5},
        "timings": [],
    }


def test_stage_table_shows_quarantined_rows_with_reasons():
    report = {
        "dataset": "web",
        "snapshot": "2026-11-10",
        "run_id": "r",
        "created_at": 0.0,
        "seconds": 1.0,
        "input_manifest": "/lake/m.json",
        "status": "passed",
        "summary": "ok",
        "checks": [],
        "metrics": {"engine": "duckdb", "funnel": [], "drop_reasons": {}},
        "columns": {},
        "stages": {
            "ingest": _stage({"read": 10, "kept": 7, "dropped": {}, "quarantined": {"bad_json": 2, "no_text": 1}}),
            "preprocess": _stage({"read": 7, "kept": 7, "dropped": {}, "quarantined": {}}),
        },
    }
    page = render_html(report)
    table = page[page.index("Stages, shards and timings") :]
    assert "<th>quarantined</th>" in table
    assert "3 <span class=meta>(bad_json=2, no_text=1)</span>" in table
    assert "Quarantined rows (ingest)" in page and "Quarantined rows (preprocess)" not in page
