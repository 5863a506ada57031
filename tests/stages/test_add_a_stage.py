"""Adding a stage touches its module and its operator, nothing else (issue 11, item 5).

The toy ``text_length`` stage (``text_length.py``) and its operator (``text_length_operator.py``) are
registered the three ways a plugin can be: in this process (``register_stage``), through the environment
for job processes (``CURATION_STAGES``), and through the ``airflow_curation.stages`` entry points of an
installed distribution (a dist-info folder on the path of a subprocess). It runs through the
StageRunner, the jobs entry point and the CLI, and validate shows its column and its funnel step, in the
order the manifests give.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.core.schema import KEEP, TEXT
from airflow_curation.stages import STAGES, register_stage, stage_class
from airflow_curation.stages.attrs import AttrsStage
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.validate import ValidateStage

from .text_length import TextLengthStage

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TEXTS = ["short", "a somewhat longer document", "x", "another document of some length 42", "tiny 7"]


class HasDigitsStage(AttrsStage):
    """A second toy stage, whose name sorts before text_length's: the funnel must follow the pipeline."""

    name = "has_digits"

    def compute(self, table: pa.Table) -> pa.Table:
        return pa.table({"has_digits": pc.match_substring_regex(table.column(TEXT), r"\d")})


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(STAGES, "text_length", TextLengthStage)
    monkeypatch.setitem(STAGES, "has_digits", HasDigitsStage)


@pytest.fixture
def ingested(ingest_texts) -> tuple[Lake, str]:
    lake, uri, rows = ingest_texts(TEXTS, "toy")
    assert rows == 2 * len(TEXTS)
    return lake, uri


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(REPO)]), **extra}


def test_register_stage_refuses_a_name_the_class_does_not_have(monkeypatch):
    monkeypatch.setattr("airflow_curation.stages.STAGES", {})
    with pytest.raises(ValueError, match="is named 'text_length', not 'other'"):
        register_stage("other", TextLengthStage)
    register_stage("text_length", TextLengthStage)
    assert stage_class("text_length") is TextLengthStage


def test_toy_stage_runs_and_validate_shows_it_in_pipeline_order(registered, ingested):
    lake, ingest_uri = ingested
    toy = stage_class("text_length")(lake, {"input_manifest": ingest_uri, "min_chars": 8}, "r1")
    manifest = StageRunner(toy).run()
    kept = sum(len(t) >= 8 for t in TEXTS) * 2
    assert manifest.status == "complete" and manifest.accounting["kept"] == kept
    assert manifest.accounting["dropped"] == {"too_short": 2 * len(TEXTS) - kept}
    for shard in manifest.shards:
        attrs = pq.read_table(shard.attrs["text_length"])
        assert attrs.column_names == ["id", "text_length", KEEP, "drop_reason"]
        assert attrs.column("text_length").to_pylist() == [len(t) for t in TEXTS]
        assert toy.fingerprint in shard.attrs["text_length"]
    # A rerun skips every shard; another min_chars is another configuration (another fingerprint).
    assert {
        u.status
        for u in StageRunner(stage_class("text_length")(lake, {"input_manifest": ingest_uri, "min_chars": 8}, "r1"))
        .run()
        .units
    } == {"skipped"}
    digits = StageRunner(HasDigitsStage(lake, {"input_manifest": toy.manifest_uri}, "r1")).run()
    assert set(digits.shards[0].attrs) == {"text_length", "has_digits"}

    StageRunner(ValidateStage(lake, {"input_manifest": lake.manifest_uri("r1", "has_digits")}, "r1")).run()
    report = json.loads(Path(lake.path("_manifests", "r1", "report.json")).read_text())
    funnel = report["metrics"]["funnel"]
    # Pipeline order from the manifests (text_length ran first), though "has_digits" sorts first.
    assert [(f["label"], f["rows"]) for f in funnel] == [("ingested", 10), ("text_length", kept), ("has_digits", kept)]
    assert report["columns"]["text_length"] == ["text_length", KEEP, "drop_reason"]
    assert report["columns"]["has_digits"] == ["has_digits"]
    assert report["status"] == "passed"


def test_operator_coerces_templated_settings_once(registered):
    from .text_length_operator import TextLengthOperator

    op = TextLengthOperator(
        task_id="toy",
        dataset="toy",
        lake="/tmp/lake",
        input_manifest="/tmp/m.json",
        min_chars="12",
        config={"max_failed_fraction": "0.5"},
    )
    assert op.build_config({}) == {"input_manifest": "/tmp/m.json", "min_chars": 12, "max_failed_fraction": 0.5}
    assert "min_chars" in op.template_fields
    default = TextLengthOperator(task_id="toy2", dataset="toy", lake="/tmp/lake", input_manifest="/m", min_chars="None")
    assert default.build_config({}) == {"input_manifest": "/m"}  # rendered "nothing": the stage's default
    with pytest.raises(ValueError, match="setting 'min_chars': .*integer"):
        TextLengthOperator(task_id="t3", dataset="toy", lake="/l", input_manifest="/m", min_chars="many").build_config(
            {}
        )
    with pytest.raises(ValueError, match=r"unknown settings \['min_words'\]"):
        TextLengthOperator(
            task_id="t4", dataset="toy", lake="/l", input_manifest="/m", config={"min_words": 3}
        ).build_config({})


def test_jobs_entry_point_runs_it_in_a_job_process_named_by_the_environment(ingested, tmp_path):
    """A backend's job process has not run this test's register_stage: CURATION_STAGES names the stage."""
    from airflow_curation.jobs.spec import JobSpec

    lake, ingest_uri = ingested
    spec = JobSpec(
        stage="text_length", lake=lake.to_dict(), run_id="job", config={"input_manifest": ingest_uri, "min_chars": "3"}
    )
    (tmp_path / "spec.json").write_text(spec.to_json())
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_curation.jobs",
            "run",
            str(tmp_path / "spec.json"),
            "--result",
            str(tmp_path / "result.json"),
        ],
        capture_output=True,
        text=True,
        env=_env(CURATION_STAGES="text_length=text_length:TextLengthStage"),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["status"] == "succeeded" and result["accounting"]["kept"] == 8  # "x" is too short
    assert Manifest.read(result["manifest_uri"]).config["min_chars"] == 3


def _plugin_site(tmp_path: Path) -> Path:
    """An installed distribution that declares the stage as an entry point (what pip would write)."""
    info = tmp_path / "site" / "text_length_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: text-length-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[airflow_curation.stages]\ntext_length = text_length:TextLengthStage\n")
    return info.parent


def test_cli_finds_it_through_an_entry_point(ingested, tmp_path):
    lake, ingest_uri = ingested
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join([str(_plugin_site(tmp_path)), env["PYTHONPATH"]])
    code = "import sys; from airflow_curation.cli import main; sys.exit(main(sys.argv[1:]))"

    def curation(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300)

    helped = curation("text_length", "--help")
    assert helped.returncode == 0 and "--min-chars" in helped.stdout and "shortest text kept" in helped.stdout
    # On the lake: the newest complete manifest of its UPSTREAM (ingest's, here) when none is named.
    done = curation(
        "text_length", "--lake", lake.root, "--dataset", lake.dataset, "--run-id", "cli", "--min-chars", "6"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    manifest = Manifest.read(json.loads(done.stdout)["manifest_uri"])
    assert manifest.config["input_manifest"] == ingest_uri and manifest.accounting["kept"] == 6
    # On plain Parquet files.
    src = tmp_path / "mine.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "text": ["hello world", "hi"]}), src)
    files = curation("text_length", str(src), "--output", str(tmp_path / "out"), "--min-chars", "5")
    assert files.returncode == 0, files.stderr[-2000:]
    out = pq.read_table(tmp_path / "out" / "mine.parquet")
    assert out.column("text_length").to_pylist() == [11, 2] and out.column(KEEP).to_pylist() == [True, False]
    bad = curation("text_length", str(src), "--output", str(tmp_path / "out2"), "--min-chars", "lots")
    assert bad.returncode == 2 and "integer" in bad.stderr


def test_an_installed_stage_lands_in_the_pipeline_where_its_upstream_says(tmp_path, monkeypatch):
    """Registered only through an entry point of an installed distribution, the stage is one ``pipeline.add``:
    its group streams on dedup's first shards (its UPSTREAM), dedup's full gate waits for it to start, and
    validate waits for its gate; the order it was added in does not matter."""
    from datetime import datetime

    from airflow.sdk import DAG

    import airflow_curation.stages as registry
    from airflow_curation.operators.dedup import DedupOperator
    from airflow_curation.operators.ingest import IngestOperator
    from airflow_curation.operators.pii import PiiOperator
    from airflow_curation.operators.preprocess import PreprocessOperator
    from airflow_curation.operators.validate import ValidateOperator
    from airflow_curation.pipeline import Pipeline

    from .text_length_operator import TextLengthOperator

    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.syspath_prepend(str(_plugin_site(tmp_path)))
    monkeypatch.delitem(STAGES, "text_length", raising=False)
    registry._entry_points.cache_clear()
    try:
        assert "text_length" in registry._entry_points()  # found as an installed plugin, nothing else
        with DAG("toy_pipeline", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
            pipeline = Pipeline(common={"dataset": "toy", "lake": "/l"}, launch={"wait": False})
            pipeline.add(TextLengthOperator, min_chars=200)  # before its upstream: the declarations order it
            for op in (IngestOperator, PreprocessOperator, DedupOperator, PiiOperator, ValidateOperator):
                pipeline.add(op, **({"inputs": "/in"} if op is IngestOperator else {}))
            built = pipeline.build()
    finally:
        registry._entry_points.cache_clear()
    order = list(built)
    assert order.index("dedup") < order.index("text_length") < order.index("validate")
    tasks = dag.task_dict
    launch = tasks["text_length.launch"]
    assert dag.task_group_dict["text_length"].children.keys() == {"text_length.launch", "text_length.checkpoints"}
    assert launch.upstream_task_ids == {"dedup.first_shards"}
    assert launch.input_manifest == "{{ ti.xcom_pull(task_ids='dedup.first_shards', key='manifest_uri') }}"
    assert launch.min_chars == 200 and not launch.optional
    assert "text_length.launch" in tasks["dedup.checkpoints"].upstream_task_ids
    assert "text_length.checkpoints" in tasks["validate"].upstream_task_ids
