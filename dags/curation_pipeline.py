"""The curation pipeline: one logical date = one snapshot partition of the lake.

Every stage is two tasks: a launch (submits the stage's job, durable, returns at once) and a gate
(:class:`ShardCheckpointSensor`, deferred, done when every shard of that run's manifest has a
checkpoint). A later stage is a few lines: an operator that reads the previous gate's
``manifest_uri``, passed through :func:`launch_and_gate`.

Because the snapshot is ``{{ ds }}``, a backfill from the UI (or ``POST /api/v2/backfills``) writes
each date to its own ``<lake>/<dataset>/snapshot=<date>/`` partition, and rerunning a date skips every
shard whose checkpoint already matches.

Params (also settable per run from the UI's "Trigger Dag w/ config"):

* ``input``: files, folders or globs, comma-separated (default ``$CURATION_SAMPLE_INPUT`` or the bundled
  ``sample_corpus/data``);
* ``lake``: the lake root, a folder or ``s3://...`` (default ``$CURATION_LAKE`` or ``<repo>/.demo/lake``);
* ``dataset``: the dataset's name in the lake;
* ``backend``: ``local``, ``slurm`` or ``kubernetes``;
* ``max_failed_fraction``: failure budget of every stage, a fraction of its shards.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, Asset, Param

from airflow_curation.operators.base import CurationStageOperator
from airflow_curation.operators.dedup import DedupOperator
from airflow_curation.operators.enrich import EnrichOperator
from airflow_curation.operators.ingest import IngestOperator
from airflow_curation.operators.preprocess import PreprocessOperator
from airflow_curation.operators.validate import ValidateOperator
from airflow_curation.sensors.shard_checkpoint import ShardCheckpointSensor

REPO = Path(__file__).resolve().parent.parent
DEFAULT_INPUT = os.environ.get("CURATION_SAMPLE_INPUT", str(REPO / "sample_corpus" / "data"))
DEFAULT_LAKE = os.environ.get("CURATION_LAKE", str(REPO / ".demo" / "lake"))
DEFAULT_DATASET = os.environ.get("CURATION_DATASET", "sample")
POLL = float(os.environ.get("CURATION_POLL_INTERVAL", "5"))

# The curated dataset, for Asset-scheduled consumers (a training-data export, an eval DAG...).
CURATED = Asset(name="curated_dataset", uri=f"file://{DEFAULT_LAKE}/{DEFAULT_DATASET}"
                if "://" not in DEFAULT_LAKE else f"{DEFAULT_LAKE}/{DEFAULT_DATASET}",
                group="curation")

# Every stage task shares these; templated, so they follow the run's params and logical date.
COMMON = dict(
    lake="{{ params.lake }}",
    dataset="{{ params.dataset }}",
    snapshot="{{ ds }}",
    backend="{{ params.backend }}",
)


def launch_and_gate(launch: CurationStageOperator, **sensor_kwargs) -> ShardCheckpointSensor:
    """Gate on the launched stage's checkpoints; the gate's XCom is the next stage's input."""
    gate = ShardCheckpointSensor(
        task_id=f"{launch.task_id}_checkpoints",
        manifest_uri=launch.output["manifest_uri"],
        job=launch.output["job"],
        max_failed_fraction="{{ params.max_failed_fraction }}",
        poll_interval=POLL,
        **sensor_kwargs,
    )
    launch >> gate
    return gate


with DAG(
    dag_id="curation_pipeline",
    description="Curate LLM training data: ingest (then preprocess, dedup, enrich, validate) per snapshot",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=2,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
    params={
        "input": Param(DEFAULT_INPUT, type="string", description="input files/folders/globs, comma-separated"),
        "lake": Param(DEFAULT_LAKE, type="string", description="lake root: a folder or s3://bucket/prefix"),
        "dataset": Param(DEFAULT_DATASET, type="string", pattern=r"^[A-Za-z0-9_.=:+@-]+$"),
        "backend": Param("local", enum=["local", "slurm", "kubernetes", "ray"]),
        "max_failed_fraction": Param(0.0, type="number", minimum=0, maximum=1,
                                     description="failure budget: fraction of shards a stage may lose"),
        "dedup_threshold": Param(0.8, type="number", exclusiveMinimum=0, exclusiveMaximum=1,
                                 description="Jaccard similarity at which documents are near duplicates"),
        "preset": Param("gopher", type="string",
                        description="preprocess filter preset(s): gopher, c4, fineweb, code, comma-separated"),
        "min_rows": Param(1, type="integer", minimum=0, description="validate: fewest curated rows a run may have"),
        "max_duplicate_rate": Param(0.5, type="number", minimum=0, maximum=1,
                                    description="validate: highest fraction of rows dedup may mark duplicate"),
        "enrich_model": Param(os.environ.get("CURATION_ENRICH_MODEL", ""), type="string",
                              description="model folder for enrich; empty: the enrich step is skipped"),
        "enrich_task": Param("embed", enum=["embed", "classify", "score", "generate"]),
        "enrich_model_runtime": Param("vllm", enum=["vllm", "transformers"],
                                      description="what runs the enrich model: vLLM, or Hugging Face transformers"),
        "enrich_mapper": Param("ray", enum=["ray", "local"],
                               description="where the enrich model runs: ray (Ray Data actors) or local (the job "
                                           "process)"),
    },
    tags=["curation"],
) as dag:
    ingest = IngestOperator(
        task_id="ingest",
        inputs="{{ params.input }}",
        max_failed_fraction="{{ params.max_failed_fraction }}",
        wait=False,
        poll_interval=POLL,
        **COMMON,
    )
    ingested = launch_and_gate(ingest)

    preprocess = PreprocessOperator(
        task_id="preprocess",
        input_manifest=ingested.output["manifest_uri"],
        preset="{{ params.preset }}",
        max_failed_fraction="{{ params.max_failed_fraction }}",
        wait=False,
        poll_interval=POLL,
        **COMMON,
    )
    preprocessed = launch_and_gate(preprocess)

    # Global exact + near dedup: a barrier over every preprocessed shard (rows preprocess dropped are
    # not considered), then per-shard attrs/dedup/ that the gate counts as they land.
    dedup = DedupOperator(
        task_id="dedup",
        input_manifest=preprocessed.output["manifest_uri"],
        threshold="{{ params.dedup_threshold }}",
        max_failed_fraction="{{ params.max_failed_fraction }}",
        wait=False,
        poll_interval=POLL,
        **COMMON,
    )
    deduped = launch_and_gate(dedup)

    # Model outputs (embeddings, labels, scores, instruction pairs) for the rows dedup kept; skipped when no
    # model is configured, so the pipeline runs on machines without one.
    enrich = EnrichOperator(
        task_id="enrich",
        input_manifest=deduped.output["manifest_uri"],
        task="{{ params.enrich_task }}",
        model="{{ params.enrich_model }}",
        model_runtime="{{ params.enrich_model_runtime }}",
        mapper="{{ params.enrich_mapper }}",
        skip_without_model=True,
        max_failed_fraction="{{ params.max_failed_fraction }}",
        wait=False,
        poll_interval=POLL,
        **COMMON,
    )
    enriched = launch_and_gate(enrich)

    # Declared checks gate the run and write the report (JSON + HTML, shown in the run's "Curation report"
    # tab). It reads enrich's manifest when enrich ran, else dedup's; the curated Asset is its outlet.
    validate = ValidateOperator(
        task_id="validate",
        input_manifest="{{ ti.xcom_pull(task_ids='enrich_checkpoints', key='manifest_uri') "
                       "or ti.xcom_pull(task_ids='dedup_checkpoints', key='manifest_uri') }}",
        min_rows="{{ params.min_rows }}",
        max_duplicate_rate="{{ params.max_duplicate_rate }}",
        trigger_rule="none_failed",
        poll_interval=POLL,
        outlets=[CURATED],
        **COMMON,
    )
    [deduped, enriched] >> validate
