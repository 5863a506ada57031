"""Declared checks: small dicts (from Python, DAG params or a YAML file) evaluated against the metrics.

```yaml
checks:
  - type: min_rows            # rows in the view (scope: all) or surviving curation (scope: curated)
    min: 1000
  - type: null_rate
    columns: [text, source]   # or "*"
    max: 0.0
  - type: bounds              # a statistic of a signal: min max mean p01 p05 p50 p95 p99
    column: preprocess.alpha_frac   # a signal preprocess computes
    stat: mean
    min: 0.6
  - type: duplicate_rate
    max: 0.3
  - type: kept_fraction       # curated rows / all rows
    min: 0.2
  - type: schema
    columns: {id: string, text: string, word_count: int}
  - type: sql                 # one read query over docs, curated, shards, attrs_<stage> (sandbox.py),
                              # curated_redacted (curated, text with the pii stage's redactions)
    query: SELECT count(*) FROM curated WHERE length(text) < 10
    max: 0
  - type: accounting          # every manifest's books close; attrs cover every row
  - type: unique_ids
  - type: mixture             # the mix stage's achieved share per key within its declared tolerance
    tolerance: 0.01           # (default: the tolerance the mix run declared); added by itself when mix ran
```

Every check may carry ``name``, ``severity`` (``error``, the default, fails the stage; ``warn``
only reports) and ``timeout_s`` (default: the stage's ``check_timeout_s``, 5 minutes; what a ``sql``
check's query may take before it is stopped and the check fails).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_curation.core import redact, storage
from airflow_curation.core.accounting import RowAccounting
from airflow_curation.core.integrity import chain_problem, input_manifest_uris
from airflow_curation.core.manifest import Manifest, ManifestError, ManifestHead
from airflow_curation.core.schema import ID, SOURCE, TEXT
from airflow_curation.stages.validate import limits, sandbox
from airflow_curation.stages.validate.view import CuratedView

SEVERITIES = ("error", "warn")


class CheckSpecError(ValueError):
    """A declared check is malformed."""


class ValidationFailed(RuntimeError):
    """At least one check of severity ``error`` failed."""


@dataclass
class CheckResult:
    name: str
    type: str
    passed: bool
    severity: str
    observed: Any
    expected: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        if self.passed:
            return "pass"
        return "fail" if self.severity == "error" else "warn"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status}


@dataclass
class Context:
    view: CuratedView
    metrics: dict[str, Any]
    manifests: dict[str, Manifest]  # stage -> manifest of this run (or of the input's run)
    input_manifest: Manifest
    engine: Any = None
    timeout_s: float = limits.DEFAULT_TIMEOUT_S  # a check's own timeout_s wins


def load_checks(source: Any) -> list[dict[str, Any]]:
    """A list of dicts, a dict with ``checks``, YAML/JSON text, or the URL of a YAML/JSON file."""
    if source is None or source == "":
        return []
    if isinstance(source, str):
        text = source
        if "\n" not in source and (source.endswith((".yaml", ".yml", ".json")) or storage.exists(source)):
            text = storage.read_bytes(source).decode()
        import yaml

        source = yaml.safe_load(text)
    if isinstance(source, dict):
        source = source.get("checks", [])
    if not isinstance(source, list) or not all(isinstance(c, dict) for c in source):
        raise CheckSpecError(f"checks must be a list of mappings, got {type(source).__name__}")
    for i, c in enumerate(source):
        t = c.get("type", c.get("check"))
        if t not in CHECKS:
            raise CheckSpecError(f"check #{i} ({c.get('name', '?')}): unknown type {t!r}; known: {sorted(CHECKS)}")
        if c.get("severity", "error") not in SEVERITIES:
            raise CheckSpecError(f"check #{i}: severity must be one of {SEVERITIES}")
        try:
            limits.check_timeout(c, limits.DEFAULT_TIMEOUT_S)
        except ValueError as e:
            raise CheckSpecError(f"check #{i} ({c.get('name', t)}): {e}") from None
    return [dict(c) for c in source]


def inline(source: Any) -> bool:
    """Whether ``source`` (what :func:`load_checks` takes) holds the checks themselves, not a file's URL."""
    if isinstance(source, str):
        return "\n" in source or source.lstrip().startswith(("[", "{", "-"))
    return source is not None


def refuse_unsafe_sql(checks: list[dict[str, Any]], query_engine: str) -> None:
    """Refuse, before any work, a sql check that the query engine's sandbox would refuse to run."""
    gate = sandbox.duckdb_statement if query_engine == "duckdb" else sandbox.daft_query
    for i, c in enumerate(checks):
        if c.get("type", c.get("check")) == "sql" and "query" in c:
            try:
                gate(str(c["query"]))
            except sandbox.SqlRefused as e:
                raise CheckSpecError(redact.scrub(f"check #{i} ({c.get('name', 'sql')}): query refused: {e}")) from None


def default_checks(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The checks every run gets, their thresholds from the stage config (so from DAG params)."""
    checks: list[dict[str, Any]] = [
        {"type": "accounting"},
        {"type": "schema", "columns": {ID: "string", TEXT: "string", SOURCE: "string"}},
        {"type": "unique_ids"},
        {"type": "null_rate", "columns": [ID, TEXT], "max": float(config.get("max_null_rate") or 0.0)},
        {"type": "min_rows", "min": int(config.get("min_rows") or 0), "scope": "curated"},
    ]
    if config.get("max_duplicate_rate") is not None:
        checks.append({"type": "duplicate_rate", "max": float(config["max_duplicate_rate"])})
    if config.get("min_kept_fraction") is not None:
        checks.append({"type": "kept_fraction", "min": float(config["min_kept_fraction"])})
    for column, bounds in (config.get("signal_bounds") or {}).items():
        checks.append({"type": "bounds", "column": column, **bounds})
    return checks


def curated_signal_columns(checks: list[dict[str, Any]], view: CuratedView) -> list[str]:
    """Signals whose statistics some check wants over the curated rows."""
    out = []
    for c in checks:
        if c.get("type", c.get("check")) == "bounds" and c.get("scope") == "curated":
            col = view.column(c["column"])
            if col and col not in out:
                out.append(col)
    return out


def run_checks(checks: list[dict[str, Any]], ctx: Context) -> list[CheckResult]:
    results = []
    for c in checks:
        t = c.get("type", c.get("check"))
        name = c.get("name") or _default_name(t, c)
        sev = c.get("severity", "error")
        try:
            passed, observed, expected, message, details = CHECKS[t](c, ctx)
        except CheckSpecError as e:
            passed, observed, expected, message, details = False, None, "a valid check", str(e), {}
        results.append(
            CheckResult(
                name=name,
                type=t,
                passed=bool(passed),
                severity=sev,
                observed=observed,
                expected=expected,
                message=message,
                details=details,
            )
        )
    return results


def summary(results: list[CheckResult]) -> str:
    """One readable block: the failed checks first, then a count."""
    failed = [r for r in results if r.status == "fail"]
    warned = [r for r in results if r.status == "warn"]
    lines = [
        f"{len(results) - len(failed) - len(warned)} of {len(results)} checks passed"
        + (f", {len(failed)} failed" if failed else "")
        + (f", {len(warned)} warned" if warned else "")
    ]
    for r in failed + warned:
        lines.append(
            f"  [{r.status.upper()}] {r.name}: {r.message} (observed {_fmt(r.observed)}, expected {r.expected})"
        )
    return "\n".join(lines)


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


def _default_name(t: str, c: dict) -> str:
    if t == "bounds":
        return f"{c.get('stat', 'mean')} of {c.get('column')}"
    if t == "null_rate":
        cols = c.get("columns", "*")
        return f"null rate of {','.join(cols) if isinstance(cols, list) else cols}"
    return t


def _range(c: dict) -> tuple[float | None, float | None, str]:
    lo, hi = c.get("min"), c.get("max")
    if lo is None and hi is None:
        raise CheckSpecError(f"check {c.get('type')} needs min and/or max")
    text = " and ".join(p for p in ([f">= {lo}"] if lo is not None else []) + ([f"<= {hi}"] if hi is not None else []))
    return (None if lo is None else float(lo)), (None if hi is None else float(hi)), text


def _within(x: float | None, lo: float | None, hi: float | None) -> bool:
    if x is None:
        return False
    return (lo is None or x >= lo) and (hi is None or x <= hi)


def _check_min_rows(c, ctx):
    scope = c.get("scope", "all")
    rows = ctx.metrics["funnel"][-1]["rows"] if scope == "curated" else ctx.metrics["rows"]
    lo = int(c.get("min", 1))
    return rows >= lo, rows, f">= {lo}", f"{rows} rows ({scope})", {}


def _check_null_rate(c, ctx):
    cols = c.get("columns", "*")
    nulls = ctx.metrics["null_counts"]
    if cols == "*":
        cols = list(nulls)
    if isinstance(cols, str):
        cols = [cols]
    rows = max(ctx.metrics["rows"], 1)
    hi = float(c.get("max", 0.0))
    rates, missing = {}, []
    for name in cols:
        col = ctx.view.column(name)
        if col is None or col not in nulls:
            missing.append(name)
            continue
        rates[col] = nulls[col] / rows
    bad = {k: v for k, v in rates.items() if v > hi}
    worst = max(rates.values(), default=0.0)
    if missing:
        return False, worst, f"<= {hi}", f"columns not in the view: {missing}", {"rates": rates}
    msg = (
        "null rates within bound"
        if not bad
        else "too many nulls in " + ", ".join(f"{k} ({v:.4%})" for k, v in bad.items())
    )
    return not bad, worst, f"<= {hi}", msg, {"rates": rates}


def _check_bounds(c, ctx):
    if "column" not in c:
        raise CheckSpecError("bounds check needs 'column'")
    stat = c.get("stat", "mean")
    scope = c.get("scope", "all")
    col = ctx.view.column(c["column"])
    lo, hi, text = _range(c)
    table = ctx.metrics.get("curated_signals" if scope == "curated" else "signals") or {}
    if col is None or col not in table:
        return False, None, text, f"signal {c['column']!r} not found (present: {sorted(ctx.metrics['signals'])})", {}
    stats = table[col]
    if stat not in stats or stat == "hist":
        raise CheckSpecError(f"unknown stat {stat!r} for {col}; use one of min max mean p01 p05 p50 p95 p99")
    x = stats[stat]
    ok = _within(x, lo, hi)
    return ok, x, text, f"{stat} of {col} ({scope}) is {_fmt(x)}", {}


def _check_duplicate_rate(c, ctx):
    dup = ctx.metrics.get("duplicates")
    lo, hi, text = _range(c)
    if dup is None:
        return False, None, text, "no dedup attrs in this run (no is_duplicate column)", {}
    return (
        _within(dup["rate"], lo, hi),
        dup["rate"],
        text,
        f"{dup['duplicates']} of {dup['assessed']} rows are duplicates",
        {},
    )


def _check_kept_fraction(c, ctx):
    lo, hi, text = _range(c)
    rows = ctx.metrics["rows"]
    kept = ctx.metrics["funnel"][-1]["rows"]
    frac = kept / rows if rows else 0.0
    return _within(frac, lo, hi), frac, text, f"{kept} of {rows} rows survive curation", {}


def _check_schema(c, ctx):
    want = c.get("columns") or {}
    if not isinstance(want, dict):
        raise CheckSpecError("schema check needs 'columns' as a mapping of column -> type")
    from airflow_curation.stages.validate.view import type_family

    schema = ctx.view.schema()
    have = {f.name: type_family(f.type) for f in schema}
    problems = []
    for name, family in want.items():
        col = ctx.view.column(name)
        if col is None:
            problems.append(f"{name} missing")
        elif family and have[col] != family:
            problems.append(f"{name} is {have[col]}, not {family}")
    return (
        not problems,
        "; ".join(problems) or "ok",
        f"columns {want}",
        "schema as declared" if not problems else "; ".join(problems),
        {"schema": have},
    )


def _check_sql(c, ctx):
    if "query" not in c:
        raise CheckSpecError("sql check needs 'query'")
    lo, hi, text = _range(c)
    timeout = limits.check_timeout(c, ctx.timeout_s)
    name = c.get("name") or _default_name("sql", c)
    try:
        row = ctx.engine.sql(str(c["query"]), timeout_s=timeout)
    except sandbox.SqlRefused as e:
        return False, None, text, redact.scrub(f"query refused: {e}"), {}
    except sandbox.SqlFailed as e:
        return False, None, text, redact.scrub(f"query failed: {e}"), {}
    except limits.CheckTimedOut:
        return False, None, text, f"check {name} exceeded its {limits.duration(timeout)} timeout", {}
    except limits.CheckOverBudget as e:
        return False, None, text, f"check {name} was stopped: {e}", {}
    if not row or row[0] is None:
        return False, None, text, "query returned no value", {}
    x = _number(row[0])
    if x is None:  # the value itself is not shown: it could be any text the query read
        return False, None, text, f"query must return a number, not {type(row[0]).__name__}", {}
    return _within(x, lo, hi), x, text, f"query returned {_fmt(x)}", {}


def _number(v: Any) -> float | None:
    if isinstance(v, (str, bytes)) or not hasattr(v, "__float__"):
        return None
    return float(v)


def _check_unique_ids(c, ctx):
    rows, distinct = ctx.metrics["rows"], ctx.metrics["distinct_ids"]
    return rows == distinct, rows - distinct, "0", f"{rows - distinct} repeated ids among {rows} rows", {}


def _upstreams_of(m: Manifest) -> list[ManifestHead]:
    # Heads only: the row check needs their totals, not their shard pages.
    uris = input_manifest_uris(m.config)
    if not uris or m.status != "complete":
        return []
    try:
        return [ManifestHead.read(u) for u in uris]
    except ManifestError:
        return []  # its own problem is reported by the stage that reads it


def _check_accounting(c, ctx):
    problems = []
    per_stage = {}
    for stage, m in ctx.manifests.items():
        if not m.accounting:
            continue
        acc = RowAccounting.from_dict(m.accounting)
        per_stage[stage] = acc.to_dict()
        if not acc.closes:
            problems.append(
                f"{stage}: read {acc.read} != kept {acc.kept} + dropped {sum(acc.dropped.values())} "
                f"+ quarantined {sum(acc.quarantined.values())}"
            )
        if stage == "ingest" and m.status == "complete" and acc.kept != m.rows:
            problems.append(f"ingest: kept {acc.kept} rows but its shards hold {m.rows}")
        upstreams = _upstreams_of(m)
        if upstreams and (broken := chain_problem(m, *upstreams)):
            problems.append(broken)
    rows, manifest_rows = ctx.metrics["rows"], ctx.input_manifest.rows
    if rows != manifest_rows:
        problems.append(f"the view has {rows} rows but the manifest's shards claim {manifest_rows}")
    for stage, n in ctx.metrics.get("attrs_rows", {}).items():
        if n != rows:
            problems.append(f"{stage}: its attrs files hold {n} rows for {rows} shard rows")
    for stage, missing in ctx.metrics.get("missing_attrs", {}).items():
        if missing:
            problems.append(f"{stage}: {missing} rows have no attrs (a shard not processed, or ids that do not join)")
    return (
        not problems,
        len(problems),
        "0 discrepancies",
        "books close across " + ", ".join(per_stage) if not problems else "; ".join(problems),
        {"accounting": per_stage},
    )


def _check_mixture(c, ctx):
    m = ctx.manifests.get("mix")
    mixture = (m.config.get("mixture") if m is not None and m.status == "complete" else None) or {}
    if not mixture:
        return False, None, "a complete mix run", "no complete mix manifest in this run", {}
    tol = float(c["tolerance"]) if c.get("tolerance") is not None else float(mixture["tolerance"])
    by_key = mixture["by_key"]
    missed = {k: v for k, v in by_key.items() if v.get("error") is not None and v["error"] > tol + 1e-12}
    worst = max((v["error"] for v in by_key.values() if v.get("error") is not None), default=0.0)
    message = (
        f"every key within {tol:g} of its target ({mixture['unit']} by {mixture['key']})"
        if not missed
        else "; ".join(f"{k}: {v['achieved']:.4g} for target {v['target']:.4g}" for k, v in sorted(missed.items()))
    )
    details = {k: {f: v.get(f) for f in ("target", "achieved", "error", "epochs")} for k, v in by_key.items()}
    return not missed, worst, f"<= {tol:g} per key", message, {"mixture": details}


CHECKS = {
    "accounting": _check_accounting,
    "mixture": _check_mixture,
    "min_rows": _check_min_rows,
    "null_rate": _check_null_rate,
    "bounds": _check_bounds,
    "signal_bounds": _check_bounds,
    "duplicate_rate": _check_duplicate_rate,
    "kept_fraction": _check_kept_fraction,
    "schema": _check_schema,
    "sql": _check_sql,
    "unique_ids": _check_unique_ids,
}
