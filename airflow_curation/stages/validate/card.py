"""The dataset card of a curation run: Markdown in the Hugging Face dataset-card layout, from the report.

Written beside the report (``_manifests/<run>/README.md``, the file name a Hugging Face dataset repository
reads), from the report's numbers only: no query of its own, so it says exactly what the report says.
Sections follow the Hugging Face template (YAML metadata, Dataset Details, Dataset Structure, Dataset
Creation with Source Data and Data Collection and Processing, Personal and Sensitive Information) plus
the curation's own: the funnel, tokens per source, decontamination and the checks that gated the run.
"""

from __future__ import annotations

import json
from typing import Any

# Hugging Face's size_categories buckets, by row count.
_SIZES = [
    (1_000, "n<1K"),
    (10_000, "1K<n<10K"),
    (100_000, "10K<n<100K"),
    (1_000_000, "100K<n<1M"),
    (10_000_000, "1M<n<10M"),
    (100_000_000, "10M<n<100M"),
    (1_000_000_000, "100M<n<1B"),
    (10_000_000_000, "1B<n<10B"),
    (100_000_000_000, "10B<n<100B"),
    (1_000_000_000_000, "100B<n<1T"),
]


def size_category(rows: int) -> str:
    return next((name for bound, name in _SIZES if rows < bound), "n>1T")


def curated(report: dict[str, Any]) -> dict[str, Any]:
    """The last step of the funnel: the rows (and text bytes) the run keeps."""
    funnel = report.get("metrics", {}).get("funnel") or []
    return funnel[-1] if funnel else {"rows": report.get("metrics", {}).get("rows", 0), "bytes": None}


def _n(x: Any) -> str:
    return f"{x:,}" if isinstance(x, int) else ("" if x is None else str(x))


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    out += ["| " + " | ".join(_n(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return out


def render_card(report: dict[str, Any]) -> str:
    """The card of one report (:func:`..report.build_report`)."""
    stages: dict[str, Any] = report.get("stages", {})
    kept = curated(report)
    name = report["dataset"] + (f" ({report['snapshot']})" if report.get("snapshot") else "")
    out = [
        "---",
        f"pretty_name: {json.dumps(name)}",
        "size_categories:",
        f"- {size_category(int(kept['rows'] or 0))}",
        "tags:",
        "- airflow-curation",
        "---",
        "",
        f"# Dataset Card for {name}",
        "",
        "## Dataset Details",
        "",
        f"Curated by airflow-curation, run `{report['run_id']}`; validation **{report['status']}** "
        f"({report.get('summary', '')}).",
        "",
        f"- Curated rows: {_n(kept['rows'])}"
        + (f" ({_n(kept.get('bytes'))} bytes of text)" if kept.get("bytes") else ""),
        f"- Lake: `{report.get('lake', {}).get('root', '')}`, dataset `{report['dataset']}`",
        "- Report: `report.html` (and `report.json`) beside this card",
        "",
        "## Dataset Structure",
        "",
    ]
    out += _table(["stage", "columns"], [[st, ", ".join(cols)] for st, cols in (report.get("columns") or {}).items()])
    out += ["", "## Dataset Creation", "", "### Source Data", ""]
    ingest = stages.get("ingest", {})
    inputs = (ingest.get("config") or {}).get("inputs") or []
    if inputs:
        out += [f"Read from {len(inputs)} input path(s):", ""] + [f"- `{p}`" for p in inputs[:20]]
        out += [f"- ... and {len(inputs) - 20} more"] if len(inputs) > 20 else []
    acc = ingest.get("accounting") or {}
    if acc:
        out += ["", f"Ingest read {_n(acc.get('read'))} records and kept {_n(acc.get('kept'))}."]
        lost = [["dropped", r, n] for r, n in sorted((acc.get("dropped") or {}).items())]
        lost += [["quarantined", r, n] for r, n in sorted((acc.get("quarantined") or {}).items())]
        if lost:
            out += ["", *_table(["not kept at ingest", "reason", "records"], lost)]
    out += [
        "",
        "### Data Collection and Processing",
        "",
        "Each stage ran with these settings (the fingerprint names them):",
        "",
    ]
    out += _table(
        ["stage", "fingerprint", "rows", "settings"],
        [
            [st, f"`{s.get('fingerprint', '')}`", s.get("rows"), _settings(s.get("config") or {})]
            for st, s in stages.items()
        ],
    )
    funnel = report.get("metrics", {}).get("funnel") or []
    if funnel:
        out += ["", "Rows at each step:", ""]
        out += _table(
            ["step", "stage", "rows", "text bytes"],
            [[f["label"], f["stage"], f["rows"], f.get("bytes")] for f in funnel],
        )
    out += _tokens(report)
    out += _mixture(report)
    out += _counts_section(stages, "decontaminate", "### Decontamination", "Documents matching evaluation sets")
    out += _counts_section(stages, "pii", "## Personal and Sensitive Information", "PII found (counts per kind)")
    checks = report.get("checks") or []
    if checks:
        out += ["", "## Validation", ""]
        out += _table(
            ["check", "status", "detail"], [[c.get("name"), c.get("status"), c.get("message", "")] for c in checks]
        )
    return "\n".join(out) + "\n"


def _settings(config: dict[str, Any]) -> str:
    text = ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in sorted(config.items()) if v not in (None, [], {}))
    return f"`{text}`" if text else ""


def _tokens(report: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for st, t in (report.get("tokens") or {}).items():
        out += ["", f"Tokens ({st}): {_n(t.get('doc_tokens', t.get('tokens')))} in {_n(t.get('documents'))} documents."]
        by_source = t.get("by_source") or {}
        if by_source:
            out += [
                "",
                *_table(
                    ["source", "documents", "tokens"],
                    [[s, c["documents"], c["doc_tokens"]] for s, c in by_source.items()],
                ),
            ]
    return out


def _mixture(report: dict[str, Any]) -> list[str]:
    mix = report.get("mixture")
    if not mix:
        return []
    lead = f"Sampled to target proportions of {mix['unit']} by `{mix['key']}` (seed {mix['seed']}):"
    rows = [
        [k, v.get("target"), v.get("available"), v.get("selected"), v.get("epochs"), v.get("achieved")]
        for k, v in mix["by_key"].items()
    ]
    return [
        "",
        "### Mixture",
        "",
        lead,
        "",
        *_table(["key", "target", "available", "selected", "epochs", "achieved"], rows),
    ]


def _counts_section(stages: dict[str, Any], stage: str, title: str, lead: str) -> list[str]:
    counts = (stages.get(stage) or {}).get("counts")
    if not counts:
        return []
    return ["", title, "", f"{lead}:", "", *_table(["count", "value"], sorted(counts.items()))]
