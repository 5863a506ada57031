"""sql checks run in a sandbox: a declared query (YAML, dict, DAG param) may read the curated view and
nothing else, on both engines, and no error text carries a secret or a file's contents anywhere.

Every hostile query must be refused with a clear error (``SqlRefused``, ``SqlFailed``) and leave no
file behind, the views intact, and the bait secret unseen. Real DuckDB and Daft, real files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.jobs.spec import JobSpec
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.validate import ValidateStage, ValidationFailed
from airflow_curation.stages.validate.checks import CheckSpecError
from airflow_curation.stages.validate.query_engines import make_engine
from airflow_curation.stages.validate.view import CuratedView

from .synth import build_run

SECRET = "baitSecret-4f1d9e7c2a6b"  # not secret-shaped: only the sandbox can keep it out, not the scrubber
ENGINES = ["duckdb", "daft"]


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("lake"))
    return root, build_run(root, shards=2, rows=30)


@pytest.fixture(scope="module")
def bait(tmp_path_factory) -> Path:
    """Files holding the secret in every format an engine reads, and ``out/``, which must stay empty."""
    d = tmp_path_factory.mktemp("bait")
    (d / "secret.csv").write_text(f"name,value\nAWS_SECRET_ACCESS_KEY,{SECRET}\n")
    (d / "secret.txt").write_text(f"AWS_SECRET_ACCESS_KEY={SECRET}\n")
    (d / "secret.json").write_text(json.dumps({"token": SECRET}))
    (d / "secret.jsonl").write_text(json.dumps({"token": SECRET}) + "\n")
    pq.write_table(pa.table({"token": [SECRET]}), d / "secret.parquet")
    (d / "out").mkdir()
    return d


@pytest.fixture(scope="module", params=ENGINES)
def engine(request, lake):
    root, uris = lake
    eng = make_engine(CuratedView.from_manifest(Manifest.read(uris["dedup"])), {"query_engine": request.param})
    eng.name = request.param
    eng.curated_rows = eng.sql("SELECT count(*) FROM curated")[0]
    yield eng
    eng.close()


def _outcome(engine, query: str) -> tuple[str, str]:
    """``("ok", first row)`` or ``(exception name, message)``."""
    try:
        return "ok", repr(engine.sql(query))
    except Exception as e:  # noqa: BLE001 - the test classifies it
        return type(e).__name__, str(e)


def _assert_contained(engine, bait: Path, outcome: tuple[str, str]) -> None:
    kind, text = outcome
    assert SECRET not in text and "root:x:0:0" not in text, outcome
    assert not list((bait / "out").iterdir()), f"a file was written: {list((bait / 'out').iterdir())}"
    assert engine.sql("SELECT count(*) FROM curated")[0] == engine.curated_rows, "the curated view changed"


HOSTILE = {
    "read_csv": "SELECT count(*) FROM read_csv('{bait}/secret.csv')",
    "read_csv_value": "SELECT value FROM read_csv('{bait}/secret.csv')",
    "read_text": "SELECT length(content) FROM read_text('{bait}/secret.txt')",
    "read_blob": "SELECT octet_length(content) FROM read_blob('{bait}/secret.txt')",
    "read_json": "SELECT count(*) FROM read_json('{bait}/secret.json')",
    "read_parquet_elsewhere": "SELECT count(*) FROM read_parquet('{bait}/secret.parquet')",
    "file_as_table": "SELECT count(*) FROM '{bait}/secret.csv'",
    "file_as_table_in_join": "SELECT count(*) FROM curated, '{bait}/secret.jsonl'",
    "etc_passwd": "SELECT count(*) FROM read_csv('/etc/passwd')",
    "environ_cast": "SELECT CAST(content AS INTEGER) FROM read_text('/proc/self/environ')",
    "glob": "SELECT count(*) FROM glob('/etc/*')",
    "url_download": "SELECT length(url_download('file://{bait}/secret.txt'))",
    "url_upload": "SELECT count(url_upload(text, 'file://{bait}/out/up')) FROM curated",
    "copy_to": "COPY (SELECT 1) TO '{bait}/out/copy.csv'",
    "copy_view_to": "COPY curated TO '{bait}/out/curated.parquet' (FORMAT parquet)",
    "export": "EXPORT DATABASE '{bait}/out/export'",
    "attach": "ATTACH '{bait}/out/attached.db' AS x",
    "install": "INSTALL httpfs",
    "load": "LOAD httpfs",
    "drop_view": "DROP VIEW curated",
    "replace_view": "CREATE OR REPLACE VIEW curated AS SELECT 1 AS x",
    "create_table": "CREATE TABLE t AS SELECT * FROM curated",
    "two_statements": "SELECT 1; DROP VIEW curated",
    "select_then_copy": "SELECT 1; COPY (SELECT 1) TO '{bait}/out/two.csv'",
    "set": "SET enable_external_access = true",
    "unlock": "SET lock_configuration = false",
    "reset": "RESET enable_external_access",
    "use": "USE memory",
    "pragma": "PRAGMA version",
    "call": "CALL pragma_version()",
    "query_function": "SELECT * FROM query('DROP VIEW curated')",
    "commented_statement": "/* SELECT */ DROP VIEW curated",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_query_is_refused_and_contained(engine, bait, name):
    outcome = _outcome(engine, HOSTILE[name].format(bait=bait))
    assert outcome[0] in ("SqlRefused", "SqlFailed"), outcome
    assert outcome[1].strip(), "the refusal says why"
    _assert_contained(engine, bait, outcome)


def test_refusals_say_why(engine, bait):
    kind, text = _outcome(engine, "DROP VIEW curated")
    assert kind == "SqlRefused" and "only a read query" in text
    kind, text = _outcome(engine, "SELECT 1; SELECT 2")
    assert kind == "SqlRefused"
    kind, text = _outcome(engine, "SELECT count(*) FROM read_csv('/etc/passwd')")
    assert kind in ("SqlRefused", "SqlFailed")
    if engine.name == "duckdb":  # DuckDB parses it as a read; its locked connection refuses the file
        assert "disabled by configuration" in text or "Permission" in text, text
    else:
        assert "read files" in text, text


# The Daft gate decides before Daft parses anything: where a table could go, Daft reads a string as
# a file and calls a function as a table function, however the query hides it.
DAFT_GATE_REFUSES = [
    "SELECT count(*) FROM curated AS where, 'x.csv'",  # a keyword after AS is an alias: still FROM
    "SELECT count(*) FROM curated c JOIN docs d ON c.id = d.id, 'x.csv'",
    "SELECT count(*) FROM (curated, 'x.csv')",
    "SELECT count(*) FROM ((('x.csv')))",
    "SELECT count(*) FROM curated WHERE (SELECT count(*) FROM docs, 'x.csv') > 0",
    "SELECT count(*) FROM curated UNION SELECT count(*) FROM docs, (('x.csv'))",
    "SELECT count(*) FROM curated.'x.parquet'",
    "SELECT count(*) FROM E'x.parquet'",
    "SELECT count(*) FROM (SELECT 1) t, glob('x')",
    "SELECT count(*) FROM \"read_csv\"('x.csv')",
    "SELECT URL_DOWNLOAD('file:///etc/passwd')",
    "SELECT 1url_download('file:///etc/passwd')",
    "SELECT count(*) FROM curated -- c",
    "SELECT /* /* */ 1 */ 2",
    "SELECT count(*) FROM curated WHERE text = 'a\\'",
    "SELECT count(*) FROM curated\u00a0WHERE 1 = 1",
    "SELECT 1; SET x = 1",
    "SET x = 1",
    "DESCRIBE curated",
    "(SELECT 1))",
]
DAFT_GATE_ACCEPTS = [
    "SELECT count(*), max(word_count) FROM curated",
    "SELECT count(*) FROM curated GROUP BY source, lower(text)",
    "SELECT count(*) FROM curated WHERE source IN ('a', 'b') AND coalesce(drop_reason, 'none') = 'none'",
    "SELECT count(*) FROM curated WHERE text LIKE '%--%;%/*%' AND source = 'read_csv(''x.csv'')'",
    "SELECT count(*) FROM curated WHERE xfile = 1 AND source <> 'file'",  # 'file' is a Daft function
    "SELECT count(*) FROM (SELECT id, 'c' AS c FROM curated) t",
    "WITH a AS (SELECT * FROM curated) SELECT count(*) FROM a JOIN docs d ON a.id = d.id;",
]


@pytest.mark.parametrize("query", DAFT_GATE_REFUSES)
def test_daft_gate_refuses(query):
    from airflow_curation.stages.validate.sandbox import SqlRefused, daft_query

    with pytest.raises(SqlRefused):
        daft_query(query)


@pytest.mark.parametrize("query", DAFT_GATE_ACCEPTS)
def test_daft_gate_accepts_plain_read_queries(query):
    from airflow_curation.stages.validate.sandbox import daft_query

    assert daft_query(query) == query.rstrip(";")


READ_QUERIES = {
    "count": "SELECT count(*) FROM curated",
    "filtered": "SELECT count(*) FROM curated WHERE word_count < 8",
    "with": "WITH short AS (SELECT id FROM docs WHERE word_count < 8) SELECT count(*) FROM short",
    "trailing_semicolon": "SELECT count(*) FROM docs;",
    "attrs": "SELECT count(*) FROM attrs_dedup WHERE is_duplicate",
    "shards": "SELECT count(*) FROM shards WHERE source = 'in.jsonl'",
    "join": "SELECT count(*) FROM shards s JOIN attrs_preprocess p ON s.id = p.id WHERE p.keep",
    "in_list": "SELECT count(*) FROM docs WHERE drop_reason IN ('too_short', 'other')",
    "aggregate": "SELECT max(length(text)) FROM curated",
}


def test_read_queries_run_on_both_engines_and_agree(lake):
    root, uris = lake
    view = CuratedView.from_manifest(Manifest.read(uris["dedup"]))
    results = {}
    for name in ENGINES:
        eng = make_engine(view, {"query_engine": name})
        try:
            results[name] = {q: eng.sql(sql)[0] for q, sql in READ_QUERIES.items()}
        finally:
            eng.close()
    assert results["duckdb"] == results["daft"]
    assert results["duckdb"]["count"] > 0 and results["duckdb"]["filtered"] == 0
    assert results["duckdb"]["shards"] == 60


@pytest.mark.parametrize("engine_name", ENGINES)
def test_the_view_still_reads_its_files_after_lockdown(lake, engine_name):
    """The metrics (every view, every attrs file) are computed on the locked connection."""
    root, uris = lake
    stage, manifest = _validate(
        root,
        uris["dedup"],
        f"locked-{engine_name}",
        query_engine=engine_name,
        checks=[{"type": "sql", "name": "curated rows", "query": "SELECT count(*) FROM curated", "min": 1}],
    )
    report = json.loads(Path(root, "demo", "_manifests", f"locked-{engine_name}", "report.json").read_text())
    assert report["status"] == "passed", report["summary"]
    assert report["metrics"]["rows"] == 60 and report["metrics"]["attrs_rows"] == {"preprocess": 60, "dedup": 60}


def _validate(root, input_manifest, run_id, **config):
    stage = ValidateStage(Lake(root, "demo"), {"input_manifest": input_manifest, **config}, run_id)
    return stage, StageRunner(stage).run()


@pytest.mark.parametrize("engine_name", ENGINES)
def test_a_declared_statement_is_refused_before_any_work(lake, bait, engine_name):
    root, uris = lake
    checks = [{"type": "sql", "name": "exfil", "query": f"COPY (SELECT 1) TO '{bait}/out/plan.csv'", "max": 1}]
    with pytest.raises(CheckSpecError, match=r"check #\d+ \(exfil\): query refused"):
        _validate(root, uris["dedup"], f"plan-{engine_name}", query_engine=engine_name, checks=checks)
    assert not list((bait / "out").iterdir())
    assert not Path(root, "demo", "_manifests", f"plan-{engine_name}").exists()


def test_a_text_result_fails_the_check_without_showing_the_text(lake):
    root, uris = lake
    checks = [{"type": "sql", "name": "text", "query": "SELECT text FROM curated", "max": 1}]
    with pytest.raises(ValidationFailed) as e:
        _validate(root, uris["dedup"], "text-result", checks=checks)
    assert "query must return a number, not str" in str(e.value)
    first_text = pq.read_table(Manifest.read(uris["ingest"]).shards[0].uri).column("text")[0].as_py()
    assert first_text not in str(e.value)


# --- secrets in the job's environment: /proc/self/environ ----------------------------------------

ENVIRON_QUERIES = {
    "duckdb": [
        "SELECT CAST(content AS INTEGER) FROM read_text('/proc/self/environ')",
        "SELECT content FROM read_text('/proc/self/environ')",
        "SELECT count(*) FROM read_csv('/proc/self/environ', sep='=', header=false)",
    ],
    "daft": ["SELECT length(url_download('file:///proc/self/environ'))"],
}


@pytest.mark.parametrize("engine_name", ENGINES)
def test_environ_secrets_reach_no_manifest_report_record_or_log(lake, tmp_path, engine_name):
    """A job (as every backend runs it) with secrets in its environment: whatever the checks try,
    the secrets appear in no file of the lake (manifests, report, checkpoint and failure records),
    not in the job's result and not in its log."""
    root, uris = lake
    run_id = f"environ-{engine_name}"
    checks = [
        {"type": "sql", "name": f"environ {i}", "query": q, "max": 0}
        for i, q in enumerate(ENVIRON_QUERIES[engine_name])
    ]
    spec = JobSpec(
        stage="validate",
        lake={"root": root, "dataset": "demo", "snapshot": None},
        run_id=run_id,
        config={"input_manifest": uris["dedup"], "query_engine": engine_name, "checks": checks, "max_attempts": 1},
    )
    spec_path, result_path = tmp_path / "spec.json", tmp_path / "result.json"
    spec_path.write_text(spec.to_json())
    env = {**os.environ, "CURATION_TEST_BAIT": SECRET, "AWS_SECRET_ACCESS_KEY": SECRET + "-aws"}
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_curation.jobs", "run", str(spec_path), "--result", str(result_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    log = proc.stdout + proc.stderr
    published = [result_path] + [p for p in Path(root, "demo").rglob("*") if p.is_file()]
    for path in published + [None]:
        text = log if path is None else path.read_bytes().decode("utf-8", "replace")
        assert SECRET not in text, f"the secret leaked into {path or 'the job log'}"
    assert proc.returncode != 0  # every check is refused or fails: the run fails, readably
    assert "refused" in log or "Permission" in log, log[-3000:]


# --- fuzz ------------------------------------------------------------------------------------------

_READERS = [
    "read_csv",
    "read_csv_auto",
    "read_text",
    "read_blob",
    "read_json",
    "read_json_auto",
    "read_parquet",
    "parquet_scan",
    "glob",
    "sniff_csv",
    "parquet_metadata",
    "url_download",
    "file",
    "file_size",
    "url_upload",
]
_PATHS = [
    "/etc/passwd",
    "/proc/self/environ",
    "{bait}/secret.csv",
    "{bait}/secret.json",
    "{bait}/secret.txt",
    "{bait}/secret.parquet",
    "file://{bait}/secret.txt",
    "{bait}/out/new.csv",
    "~/.aws/credentials",
]
_STATEMENTS = [
    "COPY (SELECT 1) TO '{bait}/out/c.csv'",
    "COPY curated TO '{bait}/out/c.parquet' (FORMAT parquet)",
    "ATTACH '{bait}/out/a.db' AS a",
    "INSTALL httpfs",
    "LOAD httpfs",
    "DROP VIEW curated",
    "DROP VIEW IF EXISTS docs",
    "CREATE OR REPLACE VIEW curated AS SELECT 1 AS x",
    "CREATE TABLE t AS SELECT 1",
    "SET enable_external_access = true",
    "SET lock_configuration = false",
    "RESET enable_external_access",
    "PRAGMA version",
    "EXPORT DATABASE '{bait}/out/exp'",
    "CALL pragma_version()",
    "DETACH memory",
    "USE memory",
    "SET x = 1",
    "INSERT INTO t VALUES (1)",
]
_SHAPES = [
    "SELECT count(*) FROM {fn}('{path}')",
    "SELECT {fn}('{path}')",
    "SELECT count(*) FROM '{path}'",
    "SELECT count(*) FROM curated, {fn}('{path}')",
    "{stmt}",
    "SELECT 1; {stmt}",
    "{stmt}; SELECT 1",
    "SELECT count(*) FROM curated WHERE id IN (SELECT {fn}('{path}'))",
    "WITH x AS (SELECT * FROM {fn}('{path}')) SELECT count(*) FROM x",
    "SELECT count(*) FROM query('{stmt_quoted}')",
    "SELECT count({fn}(text, 'file://{path}')) FROM curated",
    "SELECT count(*) FROM curated WHERE text = '{path}'",
    "SELECT count(*) FROM curated WHERE length({fn}('{path}')) > 0",
    "SELECT count(*) FROM curated c JOIN {fn}('{path}') f ON c.id = f.id",
]
# Comment tricks are drawn about a third of the time, so most queries reach past the Daft gate's
# first rule (no comments) to the others.
_SEPARATORS = [" ", " ", " ", "  ", "\t", "\n", "/**/", " /* x */ ", " --c\n", " /* /* */ */ "]
_PREFIXES = ["", "", "", "  \n", "/* SELECT */ ", "-- SELECT\n"]
_SUFFIXES = ["", "", "", ";", " ;", " -- tail", "; -- tail", "/*"]
_CASES = [str, str.upper, str.lower, str.swapcase]


@st.composite
def hostile_sql(draw, bait: Path) -> str:
    stmt = draw(st.sampled_from(_STATEMENTS)).format(bait=bait)
    fn = draw(st.sampled_from(_READERS))
    fn = f'"{fn}"' if draw(st.booleans()) else fn  # a quoted function name
    q = draw(st.sampled_from(_SHAPES)).format(
        fn=fn, stmt=stmt, stmt_quoted=stmt.replace("'", "''"), path=draw(st.sampled_from(_PATHS)).format(bait=bait)
    )
    q = draw(st.sampled_from(_CASES))(q)
    q = q.replace(" ", draw(st.sampled_from(_SEPARATORS)))
    return draw(st.sampled_from(_PREFIXES)) + q + draw(st.sampled_from(_SUFFIXES))


def test_fuzz_hostile_sql_is_refused_or_read_only(engine, bait):
    @settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(hostile_sql(bait))
    def check(query):
        outcome = _outcome(engine, query)
        assert outcome[0] in ("ok", "SqlRefused", "SqlFailed"), (query, outcome)
        _assert_contained(engine, bait, outcome)

    check()
