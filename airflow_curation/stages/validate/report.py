"""The curation report: one JSON document and one self-contained HTML page (inline SVG, no CDN).

Both are written beside the run's manifests, ``_manifests/<run_id>/report.{json,html}``, so that the
Airflow UI plugin, the CLI and a person with only the bucket all find them in the same place.
"""

from __future__ import annotations

import html
import json
import math
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from airflow_curation.core import storage, storage_map
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest

FORMAT = "airflow-curation/report"
FORMAT_VERSION = 1


def stage_timings(lake: Lake, manifest: Manifest, limit: int = 5000) -> dict[str, Any]:
    """Per-unit timings and failures of one stage run, from its checkpoint records."""
    store = lake.checkpoints(manifest.stage, manifest.fingerprint)
    units = []
    wanted = manifest.units[:limit]
    # Many small reads (object stores: one request each): overlap them.
    with ThreadPoolExecutor(max_workers=16) as pool:
        records = list(pool.map(storage_map.carried(lambda u: store.load(u.unit_id)), wanted))
    for u, rec in zip(wanted, records):
        row: dict[str, Any] = {"unit_id": u.unit_id, "status": u.status, "error": u.error}
        if rec is not None and rec.fingerprint == manifest.fingerprint:
            row.update(
                started_at=rec.started_at,
                finished_at=rec.finished_at,
                # processed by this run (a unit done while streaming shows as "skipped" in the final manifest)
                this_run=u.status == "done" or (rec.extra or {}).get("run_id") == manifest.run_id,
                seconds=round(rec.seconds, 4),
                attempt=rec.attempt,
                host=rec.host,
                rows_in=rec.accounting.get("read"),
                rows_out=rec.accounting.get("kept"),
            )
            if "tokens" in rec.extra:  # a stage that counts tokens (tokenize): per shard
                row["tokens"] = rec.extra["tokens"]
        else:
            fail = store.failure(u.unit_id)
            if fail:
                row.update(status="failed", error=fail.get("error"), attempt=fail.get("attempt"))
        units.append(row)
    secs = [u["seconds"] for u in units if u.get("seconds") is not None]
    out: dict[str, Any] = {
        "stage": manifest.stage,
        "status": manifest.status,
        "fingerprint": manifest.fingerprint,
        "shards": len(manifest.shards),
        "rows": manifest.rows,
        "bytes": manifest.bytes,
        "accounting": manifest.accounting,
        "units": {
            "total": len(manifest.units),
            "done": sum(u["status"] in ("done", "skipped") for u in units),
            "failed": sum(u["status"] == "failed" for u in units),
        },
        "seconds": {
            "total": round(sum(secs), 3),
            "max": max(secs, default=0.0),
            "mean": (sum(secs) / len(secs)) if secs else 0.0,
        },
        "timings": units,
        "truncated": len(manifest.units) > limit,
    }
    counts = unit_counts(manifest, records)
    if counts:
        out["counts"] = counts
    return out


def unit_counts(manifest: Manifest, records: list) -> dict[str, int]:
    """A stage's counts summed over its units: what each checkpoint's ``extra["counts"]`` holds (the pii
    stage's finds per kind, say)."""
    total: dict[str, int] = {}
    for rec in records:
        if rec is None or rec.fingerprint != manifest.fingerprint:
            continue
        for key, n in ((rec.extra or {}).get("counts") or {}).items():
            total[key] = total.get(key, 0) + int(n)
    return total


def timeline(manifests: dict[str, tuple[str, Manifest]], stages: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """When each stage worked, from its units' checkpoint records (this run's units only), and how long each
    stage overlapped the stage it reads from (per-shard streaming): ``overlap_s`` is the time both were
    processing units, ``started_before_upstream_ended`` whether its first unit began before its upstream's
    last unit ended."""
    spans: dict[str, dict[str, Any]] = {}
    for st, s in stages.items():
        units = [u for u in s.get("timings", []) if u.get("this_run") and u.get("started_at") is not None]
        if units:
            spans[st] = {
                "start": min(u["started_at"] for u in units),
                "end": max(u["finished_at"] for u in units),
                "units": len(units),
                "units_timeline": sorted(
                    ({"unit_id": u["unit_id"], "start": u["started_at"], "end": u["finished_at"]} for u in units),
                    key=lambda x: x["start"],
                ),
            }
    by_uri = {uri: st for st, (uri, _) in manifests.items()}
    overlaps = []
    for st, (_, m) in manifests.items():
        up = by_uri.get(m.config.get("input_manifest") or "")
        if up is None or st not in spans or up not in spans:
            continue
        a, b = spans[up], spans[st]
        overlaps.append(
            {
                "upstream": up,
                "stage": st,
                "overlap_s": round(max(0.0, min(a["end"], b["end"]) - max(a["start"], b["start"])), 3),
                "started_before_upstream_ended": b["start"] < a["end"],
            }
        )
    t0 = min((s["start"] for s in spans.values()), default=0.0)
    return {"t0": t0, "stages": spans, "overlaps": overlaps}


def build_report(
    *,
    lake: Lake,
    run_id: str,
    input_manifest_uri: str,
    manifests: dict[str, tuple[str, Manifest]],
    metrics: dict[str, Any],
    checks: list[dict[str, Any]],
    summary: str,
    columns: dict[str, list[str]],
    seconds: float,
    run_context: dict[str, Any] | None = None,
    verdict_of: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The report of run ``run_id``. :param run_context: what the run was launched with (params,
    connection: the operator's record). :param verdict_of: when the metrics and checks are another run's
    (same shards, manifests and checks: its checkpoint was reused), which run computed them."""
    failed = any(c["status"] == "fail" for c in checks)
    stages = {
        st: {"manifest_uri": uri, **stage_timings(lake, m), "config": stage_settings(m)}
        for st, (uri, m) in manifests.items()
    }
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "dataset": lake.dataset,
        "snapshot": lake.snapshot,
        "lake": lake.to_dict(),
        "run_id": run_id,
        "created_at": time.time(),
        "seconds": round(seconds, 3),
        "input_manifest": input_manifest_uri,
        "status": "failed" if failed else "passed",
        "summary": summary,
        "checks": checks,
        "metrics": metrics,
        "columns": columns,
        "stages": stages,
        "tokens": token_counts(manifests, stages),
        "mixture": mixture_of(manifests),
        "timeline": timeline(manifests, stages),
        "run_context": run_context or {},
        "verdict_of": verdict_of,
    }


def stage_settings(manifest: Manifest) -> dict[str, Any]:
    """The settings of a stage run that enter its fingerprint (runtime ones left out), for the report and
    the dataset card; a stage not installed here gives its manifest's config as it is."""
    from airflow_curation.stages import stage_class

    try:
        cls = stage_class(manifest.stage)
    except ValueError:
        return {}
    names = {s.name for s in cls.SETTINGS} - set(cls.RUNTIME_KEYS)
    settings = {k: v for k, v in manifest.config.items() if k in names}
    if manifest.stage == "ingest":  # where the data came from: a runtime setting, but the card's first line
        settings["inputs"] = manifest.config.get("inputs")
    return settings


def token_counts(manifests: dict[str, tuple[str, Manifest]], stages: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per stage that packed tokens: the totals of its manifest's ``config["tokens"]`` (not the shards: those
    are in the manifest, and per unit in the stage's timings). A manifest not final yet (its job writes it
    just after the gate opens) gives the sum of its units' checkpoints so far."""
    out = {}
    for st, (_, m) in manifests.items():
        tokens = m.config.get("tokens")
        if isinstance(tokens, dict):
            out[st] = {k: v for k, v in tokens.items() if k != "shards"}
            continue
        counted = [u["tokens"] for u in stages.get(st, {}).get("timings", []) if u.get("tokens") is not None]
        if counted:
            out[st] = {"tokens": sum(counted), "shards_counted": len(counted), "manifest_status": m.status}
    return out


def mixture_of(manifests: dict[str, tuple[str, Manifest]]) -> dict[str, Any] | None:
    """The mix stage's mixture manifest (per key: target, available, selected, epochs, achieved), or None."""
    m = manifests.get("mix", (None, None))[1]
    mixture = m.config.get("mixture") if m is not None else None
    return {k: v for k, v in mixture.items() if k != "plans"} if isinstance(mixture, dict) else None


def report_uris(lake: Lake, run_id: str) -> tuple[str, str]:
    base = lake.manifest_uri(run_id, "report")[: -len(".json")]
    return base + ".json", base + ".html"


def card_uri(lake: Lake, run_id: str) -> str:
    """The dataset card beside the report: ``README.md``, the name a Hugging Face dataset repository reads."""
    return storage.join(report_uris(lake, run_id)[0].rsplit("/", 1)[0], "README.md")


def write_report(report: dict[str, Any], lake: Lake, run_id: str) -> tuple[str, str]:
    """The report (JSON and HTML) and the dataset card built from it."""
    from airflow_curation.stages.validate.card import render_card

    json_uri, html_uri = report_uris(lake, run_id)
    storage.write_json(json_uri, report)
    storage.write_bytes(html_uri, render_html(report).encode())
    storage.write_bytes(card_uri(lake, run_id), render_card(report).encode())
    return json_uri, html_uri


# ----------------------------------------------------------------------------------------- HTML

_CSS = """
body{font:14px/1.45 -apple-system,Segoe UI,Roboto,Helvetica,Arial,sans-serif;margin:24px;color:#1d2433;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #e3e7ee;padding-bottom:4px}
.meta{color:#5b6475}.badge{display:inline-block;padding:2px 10px;border-radius:12px;color:#fff;font-weight:600}
.passed,.pass{background:#1a7f37}.failed,.fail{background:#cf222e}.warn{background:#bf8700}
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #e3e7ee;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}.num{text-align:right;font-variant-numeric:tabular-nums}
.grid{display:flex;flex-wrap:wrap;gap:14px}.card{border:1px solid #e3e7ee;border-radius:6px;padding:8px}
pre{background:#f6f8fa;padding:8px;white-space:pre-wrap}svg text{font-size:11px;fill:#1d2433}
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _num(x: Any) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.4g}"
    if isinstance(x, int):
        return f"{x:,}"
    return _e(x)


def _bytes(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "–"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return str(n)


def _funnel_svg(funnel: list[dict[str, Any]]) -> str:
    if not funnel:
        return "<p>No rows.</p>"
    width, bar_h, gap, label_w = 640, 26, 8, 110
    top = max(f["rows"] for f in funnel) or 1
    h = len(funnel) * (bar_h + gap) + gap
    parts = [f'<svg role="img" aria-label="curation funnel" width="{width + label_w + 260}" height="{h}">']
    for i, f in enumerate(funnel):
        y = gap + i * (bar_h + gap)
        w = max(1.0, width * f["rows"] / top)
        pct = 100.0 * f["rows"] / top
        parts.append(f'<text x="0" y="{y + bar_h * 0.68}">{_e(f["label"])}</text>')
        parts.append(f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="#3b6fd4" rx="3"/>')
        parts.append(
            f'<text x="{label_w + w + 6:.1f}" y="{y + bar_h * 0.68}">{f["rows"]:,} rows · '
            f"{_e(_bytes(f.get('bytes')))} · {pct:.1f}%</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _bars_svg(
    labels: list[str],
    values: list[float],
    title: str,
    color: str = "#3b6fd4",
    width: int = 300,
    height: int = 150,
    log: bool = False,
) -> str:
    n = len(values)
    if not n:
        return ""
    top = max(values) or 1
    scale = (lambda v: math.log10(1 + v) / math.log10(1 + top)) if log else (lambda v: v / top)
    plot_h, base = height - 34, height - 20
    bw = (width - 10) / n
    parts = [
        f'<svg role="img" aria-label="{_e(title)}" width="{width}" height="{height}">',
        f'<text x="4" y="11" font-weight="600">{_e(title)}</text>',
    ]
    for i, v in enumerate(values):
        bh = plot_h * scale(v) if v else 0
        x = 5 + i * bw
        parts.append(
            f'<rect x="{x:.1f}" y="{base - bh:.1f}" width="{max(bw - 1, 1):.1f}" height="{bh:.1f}" '
            f'fill="{color}"><title>{_e(labels[i])}: {v:,}</title></rect>'
        )
    parts.append(f'<text x="4" y="{height - 5}">{_e(labels[0])}</text>')
    parts.append(f'<text x="{width - 4}" y="{height - 5}" text-anchor="end">{_e(labels[-1])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _hist_svg(name: str, stats: dict[str, Any]) -> str:
    hist = stats.get("hist") or {}
    edges, counts = hist.get("edges") or [], hist.get("counts") or []
    if not counts:
        return ""
    labels = [f"[{edges[i]:.4g}, {edges[i + 1]:.4g})" for i in range(len(counts))]
    svg = _bars_svg(labels, counts, name)
    return (
        f'<div class="card">{svg}<div class="meta">mean {_num(stats.get("mean"))} · p50 {_num(stats.get("p50"))}'
        f" · p05–p95 {_num(stats.get('p05'))}–{_num(stats.get('p95'))}</div></div>"
    )


def _table(headers: list[str], rows: list[list[str]], num_cols: set[int] = frozenset()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td{' class=num' if i in num_cols else ''}>{c}</td>" for i, c in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _quarantined_cell(acc: dict[str, Any]) -> str:
    """Rows a stage set aside (unparseable, no text...), their total then each reason's count."""
    reasons = acc.get("quarantined") or {}
    if not reasons:
        return _num(0) if "quarantined" in acc else "–"
    detail = ", ".join(f"{k}={v}" for k, v in reasons.items())
    return f"{_num(sum(reasons.values()))} <span class=meta>({_e(detail)})</span>"


def render_html(r: dict[str, Any]) -> str:
    m = r["metrics"]
    title = f"Curation report: {r['dataset']}" + (f" / snapshot={r['snapshot']}" if r.get("snapshot") else "")
    out = [
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{_e(title)}</title>"
        f"<style>{_CSS}</style></head><body>",
        f'<h1>{_e(title)} <span class="badge {_e(r["status"])}" id="status">{_e(r["status"].upper())}</span></h1>',
        f'<div class="meta">run <code>{_e(r["run_id"])}</code> · query engine {_e(m.get("query_engine"))} · '
        f"{_e(time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(r['created_at'])))} · "
        f"{r['seconds']:.2f} s · input <code>{_e(r['input_manifest'])}</code></div>",
    ]

    if r.get("verdict_of"):
        v = r["verdict_of"]
        out.append(
            f'<p class="meta" id="verdict-of">Metrics and checks computed by run <code>{_e(v["run_id"])}</code> '
            f"at {_e(time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(v['created_at'])))} over the same shards, "
            "manifests and checks; this run reused its verdict.</p>"
        )
    out.append("<h2>Checks</h2>")
    out.append(f"<pre>{_e(r['summary'])}</pre>")
    out.append(
        _table(
            ["check", "status", "observed", "expected", "message"],
            [
                [
                    _e(c["name"]),
                    f'<span class="badge {_e(c["status"])}">{_e(c["status"])}</span>',
                    _num(c["observed"]),
                    _e(c["expected"]),
                    _e(c["message"]),
                ]
                for c in r["checks"]
            ],
        )
    )

    out.append("<h2>Curation funnel</h2>")
    out.append(_funnel_svg(m.get("funnel", [])))
    out.append(
        _table(
            ["step", "stage", "rows", "text bytes"],
            [
                [_e(f["label"]), _e(f["stage"]), _num(f["rows"]), _e(_bytes(f.get("bytes")))]
                for f in m.get("funnel", [])
            ],
            {2, 3},
        )
    )
    for stage, reasons in (m.get("drop_reasons") or {}).items():
        if reasons:
            out.append(f"<h3>Drop reasons ({_e(stage)})</h3>")
            out.append(_table(["reason", "rows"], [[_e(k), _num(v)] for k, v in reasons.items()], {1}))
    for st, s in r.get("stages", {}).items():
        quarantined = (s.get("accounting") or {}).get("quarantined") or {}
        if quarantined:
            out.append(f"<h3>Quarantined rows ({_e(st)})</h3>")
            out.append(_table(["reason", "rows"], [[_e(k), _num(v)] for k, v in quarantined.items()], {1}))

    for st, s in r.get("stages", {}).items():
        notes = (s.get("accounting") or {}).get("notes") or {}
        if notes:  # events that are not rows: e.g. the lines each cleaning rule removed (lines_removed:<rule>)
            out.append(f"<h3>Notes ({_e(st)})</h3>")
            out.append(_table(["note", "count"], [[_e(k), _num(v)] for k, v in notes.items()], {1}))

    for st, s in r.get("stages", {}).items():
        if s.get("counts"):
            out.append(f"<h3>Counts ({_e(st)})</h3>")
            out.append(_table(["count", "value"], [[_e(k), _num(v)] for k, v in s["counts"].items()], {1}))
    if r.get("tokens"):
        out.append("<h2>Tokens</h2>")
        out.append(
            _table(
                ["stage", "documents", "tokens (EOS included)", "document tokens", "sequences", "seq_len", "padding"],
                [
                    [
                        _e(st),
                        *(_num(t.get(k)) for k in ("documents", "tokens", "doc_tokens", "sequences", "seq_len")),
                        _num(t.get("padding")),
                    ]
                    for st, t in r["tokens"].items()
                ],
                {1, 2, 3, 4, 5, 6},
            )
        )

    mix = r.get("mixture")
    if mix:
        out.append(f"<h2>Mixture</h2><p>{_e(mix['unit'])} by {_e(mix['key'])}, seed {_num(mix['seed'])}, "
                   f"tolerance {_e(mix['tolerance'])}</p>")  # fmt: skip
        cols = ("target", "available_rows", "available", "selected_rows", "selected", "epochs", "achieved")
        out.append(
            _table(
                ["key", *cols],
                [[_e(k), *(_e(v.get(c)) for c in cols)] for k, v in mix["by_key"].items()],
                set(range(1, len(cols) + 1)),
            )
        )

    out.append("<h2>Signals</h2>")
    sig = m.get("signals") or {}
    if sig:
        out.append('<div class="grid">' + "".join(_hist_svg(k, v) for k, v in sig.items()) + "</div>")
    else:
        out.append("<p>No signal columns yet (no preprocess or enrich attrs in this run).</p>")

    out.append("<h2>Deduplication</h2>")
    dup, cl = m.get("duplicates"), m.get("clusters")
    if dup:
        out.append(f"<p>{dup['duplicates']:,} of {dup['assessed']:,} rows are duplicates (rate {dup['rate']:.2%}).</p>")
    if cl and cl.get("sizes"):
        sizes = sorted((int(k), v) for k, v in cl["sizes"].items())
        out.append(f"<p>{cl['clusters']:,} clusters, largest {cl['largest']:,} documents.</p>")
        out.append(
            '<div class="card">'
            + _bars_svg(
                [f"size {k}" for k, _ in sizes],
                [v for _, v in sizes],
                "clusters by size (log scale)",
                "#8250df",
                420,
                160,
                log=True,
            )
            + "</div>"
        )
    if not dup and not cl:
        out.append("<p>No dedup attrs in this run.</p>")

    tl = r.get("timeline") or {}
    if tl.get("stages"):
        out.append("<h2>Timeline</h2>")
        t0 = tl["t0"]
        out.append(
            _table(
                ["stage", "first unit started (s)", "last unit ended (s)", "units this run"],
                [
                    [_e(st), f"{sp['start'] - t0:.2f}", f"{sp['end'] - t0:.2f}", _num(sp["units"])]
                    for st, sp in sorted(tl["stages"].items(), key=lambda kv: kv[1]["start"])
                ],
                {1, 2, 3},
            )
        )
        if tl.get("overlaps"):
            out.append(
                _table(
                    ["upstream", "stage", "overlap s", "started before upstream ended"],
                    [
                        [
                            _e(o["upstream"]),
                            _e(o["stage"]),
                            f"{o['overlap_s']:.2f}",
                            "yes" if o["started_before_upstream_ended"] else "no",
                        ]
                        for o in tl["overlaps"]
                    ],
                    {2},
                )
            )
    out.append("<h2>Stages, shards and timings</h2>")
    rows = []
    for st, s in r.get("stages", {}).items():
        acc = s.get("accounting") or {}
        rows.append(
            [
                _e(st),
                f'<span class="badge {"pass" if s["status"] == "complete" else "fail"}">{_e(s["status"])}</span>',
                _num(s["units"]["done"]),
                _num(s["units"]["failed"]),
                _num(s["rows"]),
                _e(_bytes(s["bytes"])),
                _num(acc.get("read")),
                _num(acc.get("kept")),
                _e(", ".join(f"{k}={v}" for k, v in (acc.get("dropped") or {}).items()) or "–"),
                _quarantined_cell(acc),
                _num(s["seconds"]["total"]),
                _num(s["seconds"]["max"]),
            ]
        )
    out.append(
        _table(
            [
                "stage",
                "status",
                "units done",
                "failed",
                "rows",
                "bytes",
                "read",
                "kept",
                "dropped",
                "quarantined",
                "unit seconds (sum)",
                "slowest unit s",
            ],
            rows,
            {2, 3, 4, 5, 6, 7, 10, 11},
        )
    )
    for st, s in r.get("stages", {}).items():
        t = [u for u in s["timings"] if u.get("seconds") is not None]
        if len(t) > 1:
            out.append(
                '<div class="card">'
                + _bars_svg(
                    [u["unit_id"] for u in t],
                    [u["seconds"] for u in t],
                    f"{st}: seconds per shard",
                    "#1a7f37",
                    520,
                    130,
                )
                + "</div>"
            )
        failures = [u for u in s["timings"] if u["status"] == "failed"]
        if failures:
            out.append(f"<h3>Failed units ({_e(st)})</h3>")
            out.append(
                _table(
                    ["unit", "attempts", "error"],
                    [[_e(u["unit_id"]), _num(u.get("attempt")), _e(u.get("error"))] for u in failures],
                )
            )

    out.append("<h2>Columns</h2>")
    out.append(_table(["source", "columns"], [[_e(k), _e(", ".join(v))] for k, v in r.get("columns", {}).items()]))
    out.extend(_run_context_html(r.get("run_context") or {}))
    out.append("</body></html>")
    return "\n".join(out)


def _run_context_html(rc: dict[str, Any]) -> list[str]:
    """What the run was launched with: its params (as applied), the conf values Airflow did not apply,
    and the connection's non-secret values."""
    if not rc:
        return []
    out = ['<h2 id="run-context">Run parameters</h2>']
    out.append(
        f'<div class="meta">DAG <code>{_e(rc.get("dag_id"))}</code> · run <code>{_e(rc.get("airflow_run_id"))}</code>'
        f" ({_e(rc.get('run_type'))}) · logical date {_e(rc.get('logical_date'))} · backend {_e(rc.get('backend'))}"
        "</div>"
    )
    params = rc.get("params") or {}
    if params:
        out.append(_table(["param", "value used"], [[_e(k), _e(json.dumps(v))] for k, v in sorted(params.items())]))
    ignored = rc.get("conf_not_applied") or {}
    if ignored:
        out.append(
            '<p id="conf-not-applied"><span class="badge warn">conf not applied</span> these values of the '
            "run's conf were not used (Airflow keeps the params unless 'override parameters' is ticked):</p>"
        )
        out.append(
            _table(
                ["param", "conf", "used"],
                [[_e(k), _e(json.dumps(v["conf"])), _e(json.dumps(v["used"]))] for k, v in sorted(ignored.items())],
            )
        )
    conn = rc.get("connection") or {}
    if conn.get("conn_id"):
        out.append(
            f'<div class="meta">connection <code>{_e(conn["conn_id"])}</code>: lake {_e(conn.get("lake"))}, '
            f"backend {_e(conn.get('backend'))}, backend options {_e(', '.join(conn.get('backend_options') or []))}"
            "</div>"
        )
    return out
