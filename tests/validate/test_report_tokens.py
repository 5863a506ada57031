"""Token counts in validate's report: a manifest's totals, or its checkpoints' sum while it is not final."""

from __future__ import annotations

from airflow_curation.core.manifest import Manifest
from airflow_curation.stages.validate.report import render_html, token_counts


def _manifest(stage: str, status: str, config: dict) -> Manifest:
    return Manifest(dataset="d", stage=stage, run_id="r", fingerprint="f", lake={}, status=status, config=config)


def test_totals_from_the_manifest_or_from_checkpoints_while_it_is_planned():
    final = _manifest("tokenize", "complete", {"tokens": {"tokens": 30, "sequences": 2, "shards": {"s0": {}}}})
    planned = _manifest("tokenize2", "planned", {})
    other = _manifest("dedup", "complete", {})
    stages = {"tokenize2": {"timings": [{"tokens": 5}, {"tokens": 7}, {"status": "failed"}]}, "dedup": {"timings": []}}
    out = token_counts({"tokenize": ("u1", final), "tokenize2": ("u2", planned), "dedup": ("u3", other)}, stages)
    assert out == {
        "tokenize": {"tokens": 30, "sequences": 2},  # the per-shard figures stay in the manifest
        "tokenize2": {"tokens": 12, "shards_counted": 2, "manifest_status": "planned"},
    }


def test_the_html_shows_a_tokens_section_only_when_there_are_tokens():
    base = {
        "dataset": "d",
        "snapshot": None,
        "status": "passed",
        "run_id": "r",
        "created_at": 0.0,
        "seconds": 0.0,
        "input_manifest": "m",
        "summary": "",
        "checks": [],
        "metrics": {"query_engine": "duckdb"},
    }
    assert "<h2>Tokens</h2>" not in render_html(base)
    page = render_html({**base, "tokens": {"tokenize": {"documents": 3, "tokens": 1234567, "seq_len": 2048}}})
    assert "<h2>Tokens</h2>" in page and "1,234,567" in page
