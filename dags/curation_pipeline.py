"""The curation pipeline: one logical date = one snapshot partition of the lake.

Every stage is a TaskGroup named after it: ``<stage>.launch`` (submits the stage's job, durable, returns
at once) and ``<stage>.checkpoints`` (:class:`ShardCheckpointSensor`, deferred, done when every shard of
that run's manifest has a checkpoint), plus ``<stage>.first_shards`` where a later stage streams on it.
Their order and inputs follow from each stage's declarations (:mod:`airflow_curation.pipeline`): a new
stage is one ``pipeline.add(...)`` line.

Nothing here depends on where this file lies: the defaults come from the deployment, at run time,
so the file can be copied into any dags folder. The lake (and backend, and the lake's storage
credentials) come from the ``curation_default`` connection; the input, dataset and models from the
Airflow Variables ``curation_input``, ``curation_dataset``, ``curation_boilerplate_min_documents``,
``curation_quality_model``, ``curation_enrich_model`` and ``curation_tokenizer``. A param given in the
trigger form wins over both.
The full guide is ``DOC_MD`` below (the DAG's Docs tab).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, AssetAlias, Param

from airflow_curation.operators.boilerplate import BoilerplateOperator
from airflow_curation.operators.decontaminate import DecontaminateOperator
from airflow_curation.operators.dedup import DedupOperator
from airflow_curation.operators.enrich import EnrichOperator
from airflow_curation.operators.export import ExportOperator
from airflow_curation.operators.ingest import IngestOperator
from airflow_curation.operators.mix import MixOperator
from airflow_curation.operators.pii import PiiOperator
from airflow_curation.operators.preprocess import PreprocessOperator
from airflow_curation.operators.quality import QualityOperator
from airflow_curation.operators.retry import CONFIG_ERRORS_FAIL
from airflow_curation.operators.tokenize import TokenizeOperator
from airflow_curation.operators.validate import ValidateOperator
from airflow_curation.params import setting_param
from airflow_curation.pipeline import Pipeline

CONN_ID = "curation_default"
POLL = float(os.environ.get("CURATION_POLL_INTERVAL", "5"))

# Validate adds one asset event per run to the Asset of the lake and dataset that run wrote
# (``<lake>/<dataset>``, URI resolved at run time); downstream DAGs schedule on this alias.
CURATED = AssetAlias("curated_dataset")

DOC_MD = """
# Curation pipeline

One **logical date = one snapshot partition**: every stage writes `<lake>/<dataset>/snapshot=<ds>/`.
Stages: `ingest` → `preprocess` → `boilerplate` (only with `boilerplate_min_documents`: lines held by that
many pages, menus and footers, removed before dedup, which then reads the cleaned text) → `dedup` → `quality`
(only with a quality model) → `decontaminate` (only with evaluation sets) → `pii` → `enrich` (only with a
model) → `validate`; `tokenize` (only with a tokenizer file) packs the kept rows into training sequences
beside pii and enrich, and `export` (only with a tokenizer and `export_formats`) shuffles them across shards
into the trainers' formats. `pii` and `tokenize` read the manifest of the last of dedup, quality and
decontaminate that ran (so that tokenize and enrich skip the rows the classifier or the decontamination
dropped). Each stage is a group named after it: `<stage>.launch` (submits a job to the backend and returns;
its log says where the job runs and where to follow it) and `<stage>.checkpoints` (deferred, done when every
shard of the run has a checkpoint; it streams the job's log and per-shard progress into its own log). An
optional stage left unconfigured is one skipped group.

## Streaming between stages

Preprocess does not wait for the whole of ingest: `ingest.first_shards` opens once `stream_quorum` of
ingest's units are checkpointed, preprocess's job starts on those shards and takes the rest as their
checkpoints appear; `ingest.checkpoints` still fails the run if ingest does. Dedup is a barrier (a shard's
clusters depend on every other shard), but its per-shard results land one by one after its global phase:
`dedup.first_shards` starts quality (or pii, without a quality model) on them the same way, and pii and
enrich follow on their upstream's first shards. The report's *timeline* shows each stage's
first start and last end and how many seconds the stages overlapped. `stream_quorum = 1` turns it off.

## Where the defaults come from

Leave a param empty to use the deployment's setting, resolved when the run starts:

| param | when empty |
| --- | --- |
| `input` | Airflow Variable `curation_input` |
| `snapshot` | the run's logical date (`ds`) |
| `lake` | the `curation_default` connection's lake (its host, or `lake` in its extra) |
| `dataset` | Airflow Variable `curation_dataset`, else `sample` |
| `backend` (`connection`) | the connection's `backend`, else `local` |
| `boilerplate_min_documents` | Airflow Variable `curation_boilerplate_min_documents`; none: boilerplate is skipped |
| `quality_model` | Airflow Variable `curation_quality_model`; none: quality is skipped |
| `enrich_model` | Airflow Variable `curation_enrich_model`; none: enrich is skipped |
| `tokenizer` | Airflow Variable `curation_tokenizer`; none: tokenize is skipped |
| `eval_sets` | Airflow Variable `curation_eval_sets`; none: decontaminate is skipped |
| `export_formats` | none: export is skipped (it also is when tokenize is) |
| `mix_targets` | none: mix is skipped |

A missing input or lake fails the `ingest` task at once, with a one-line message, without retries.

## Backfill

*Trigger* → *Backfill*: pick the date range; each date becomes its own run and partition
(`snapshot=<date>`), and re-running a date skips every shard whose checkpoint matches. Airflow 3.3
applies the params typed in the dialog **only** when *Override parameters on existing runs* is
ticked; otherwise backfilled runs use the defaults above, which is why they come from the
deployment. The REST equivalent is `POST /api/v2/backfills`.

## Run ids

A run's manifests, report and dataset card lie in `snapshot=<snapshot>/_manifests/<run id>/`, and the run id
starts with the snapshot it curates: `2026-11-30__scheduled`, `2026-11-30__backfill`, or, for a manual run
(or any other run of a snapshot), `2026-11-30__manual-1a2b3c4d` (a digest of the Airflow run id, so that two
runs never share a folder). Clearing or retrying a run keeps its id: it resumes where it stopped. To curate a
given snapshot by hand, trigger with the `snapshot` param (empty: the logical date).

## Where the results are

* The run's **Curation report** tab (checks, funnel, quarantined rows, signals, dedup clusters,
  per-stage timings); the `validate` task links to it.
* Each launch task links its **Curation manifest** and **Curation job log** (served by Airflow).
* The asset alias `curated_dataset` gets one event per validated run, on the Asset `<lake>/<dataset>`,
  with the snapshot and curated row count in its extra.

## Backends

`local` (a process on the worker), `slurm`, `kubernetes`, or `ray` (the whole job submitted to a
Ray cluster through the Ray Job Submission API; `RAY_ADDRESS` or the connection's
`backend_options`). `enrich_mapper=ray` runs the model on Ray Data actors inside the job.

The connection's `backend_options` apply to every stage; the `backend_options` param sets them per stage
(keyed by stage), merged over the connection's: `{"preprocess": {"shard_groups": 8}, "dedup":
{"cpus_per_task": 16}, "enrich": {"partition": "gpu"}}` runs preprocess as an 8-task array, dedup on one
wide allocation and enrich on the GPU partition. An object-store lake needs no `work_dir` (see
docs/backends/slurm.md).
"""

# Every stage task shares these; templated, so they follow the run's params and logical date.
COMMON = dict(
    lake="{{ params.lake or '' }}",
    dataset="{{ params.dataset or var.value.get('curation_dataset', 'sample') }}",
    # The snapshot this run curates: the one the user names, else the logical date (a backfill's dates).
    snapshot="{{ params.snapshot or ds }}",
    backend="{{ '' if params.backend in (None, 'connection') else params.backend }}",
    # This stage's entry of params.backend_options (keyed by stage), merged over the connection's.
    backend_options="{{ (params.backend_options or {}).get(task.stage, {}) | tojson }}",
    curation_conn_id=CONN_ID,
    retry_policy=CONFIG_ERRORS_FAIL,
)
# Every stage's launch submits its job and returns (wait=False); its gates wait, in the stage's TaskGroup.
GATE = dict(max_failed_fraction="{{ params.max_failed_fraction }}", poll_interval=POLL)
LAUNCH = dict(GATE, wait=False)


def _optional(description: str, **kwargs) -> Param:
    # Nullable: the trigger form accepts an empty field (a "string" param would be a required field).
    return Param(None, type=["null", "string"], description=description, **kwargs)


with DAG(
    dag_id="curation_pipeline",
    description="Curate LLM training data per snapshot: ingest, preprocess, dedup, quality, pii, enrich, validate",
    doc_md=DOC_MD,
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=2,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
    params={
        "input": _optional(
            "Input files, folders or globs, comma-separated. Empty: the Airflow Variable curation_input."
        ),
        "lake": _optional("Lake root, a folder or s3://bucket/prefix. Empty: the curation_default connection's lake."),
        "snapshot": _optional(
            "Snapshot partition this run curates (snapshot=<name>/, and the run id's first part). Empty: the "
            "run's logical date (YYYY-MM-DD): a scheduled run or each date of a backfill curates its own.",
            pattern=r"^[A-Za-z0-9_.=:+@-]+$",
        ),
        "dataset": _optional(
            "Dataset name in the lake. Empty: the Airflow Variable curation_dataset, else 'sample'.",
            pattern=r"^[A-Za-z0-9_.=:+@-]+$",
        ),
        "backend": Param(
            "connection",
            enum=["connection", "local", "slurm", "kubernetes", "ray"],
            description="Where stage jobs run. connection: the curation_default connection's "
            "backend (local when it names none); ray: the whole job is submitted "
            "to a Ray cluster (Ray Job Submission API).",
        ),
        "backend_options": Param(
            {},
            type="object",
            description="Backend options per stage, merged over the connection's backend_options: e.g. "
            '{"preprocess": {"shard_groups": 8}, "dedup": {"cpus_per_task": 16}, '
            '"enrich": {"partition": "gpu", "extra_args": "--gres=gpu:1"}}.',
        ),
        "max_failed_fraction": setting_param(
            "preprocess",
            "max_failed_fraction",
            description="Failure budget of every stage: the fraction of its shards that may fail without failing "
            "the run.",
        ),
        "ingest_unit_size": _optional(
            "Ingest: input bytes per unit, e.g. 256MB (units are ingest's parallelism and the steps preprocess "
            "streams by). Empty: sized by expected output, whole shards and at least 64 MiB a unit."
        ),
        "stream_quorum": Param(
            0.01,
            type="number",
            exclusiveMinimum=0,
            maximum=1,
            description="Streaming between stages: the fraction of ingest's (and dedup's) units whose checkpoints "
            "start preprocess (and enrich); they process the rest as it is checkpointed. 1: no overlap.",
        ),
        "preset": Param(
            "gopher,structure",
            type="string",
            description="Preprocess quality filter preset(s): gopher, structure, c4, fineweb, code, comma-separated.",
        ),
        "boilerplate_min_documents": setting_param(
            "boilerplate",
            "min_documents",
            default=None,
            description="Boilerplate: a line held by at least this many documents (menus, footers, cookie banners) "
            "is removed before dedup. Empty: the Airflow Variable curation_boilerplate_min_documents; none: "
            "boilerplate is skipped.",
        ),
        "dedup_threshold": setting_param("dedup", "threshold", exclusiveMinimum=0, exclusiveMaximum=1),
        "dedup_across_snapshots": setting_param(
            "dedup",
            "across_snapshots",
            description="Dedup: also mark documents already seen in an earlier date's snapshot (each snapshot "
            "persists its buckets; this probes them). Run the dates in order (max_active_runs=1 for backfills).",
        ),
        "quality_model": _optional(
            "Quality classifier folder (written by curation quality-train) for the quality stage. Empty: the "
            "Airflow Variable curation_quality_model; none: quality is skipped."
        ),
        "quality_min_score": setting_param(
            "quality",
            "min_score",
            description="Quality: lowest quality_score kept. Empty: the quality preset's threshold (0.5).",
        ),
        "eval_sets": _optional(
            "Decontaminate: evaluation sets as BENCHMARK=FILE, comma-separated (JSONL or Parquet with a text "
            "column, e.g. a benchmark's test split). Empty: the Airflow Variable curation_eval_sets; none: "
            "decontaminate is skipped."
        ),
        "decontaminate_ngram": setting_param(
            "decontaminate", "ngram", description="Decontaminate: words per shared n-gram that flags a document."
        ),
        "enrich_model": _optional(
            "Model folder (Hugging Face layout) for enrich. Empty: the Airflow "
            "Variable curation_enrich_model; none: enrich is skipped."
        ),
        "enrich_task": setting_param("enrich", "task", default="embed"),
        "enrich_model_runtime": setting_param("enrich", "model_runtime"),
        "enrich_mapper": setting_param("enrich", "mapper"),
        "enrich_gpus_per_replica": Param(
            "auto",
            type=["string", "number"],
            pattern="^auto$",
            minimum=0,
            description="GPUs per enrich model replica: auto (tensor_parallel_size when the machine or Ray "
            "cluster has GPUs, else CPU), 0 (CPU), a number, or a fraction of one GPU.",
        ),
        "enrich_tensor_parallel_size": setting_param("enrich", "tensor_parallel_size"),
        "enrich_replicas": setting_param("enrich", "replicas"),
        "mix_targets": _optional(
            "Mix: target proportions by mix_key, KEY=PROPORTION comma-separated (summing to 1) or JSON: the kept "
            "rows down- and up-sampled to them from mix_seed (tokenize then reads the selection). Empty: mix is "
            "skipped."
        ),
        "mix_key": Param(
            "source_dir",
            type="string",
            description="Mix: what the targets are keyed by: a column, STAGE.COLUMN (an attrs column), input or "
            "source_dir (the source file's first folder).",
        ),
        "mix_unit": setting_param("mix", "unit"),
        "mix_seed": setting_param("mix", "seed", minimum=0),
        "mix_manifests": _optional(
            "Mix: more input manifests (other datasets' or snapshots' final manifests), comma-separated URIs, mixed "
            "with this run's rows (mix_key input keys by them)."
        ),
        "tokenizer": _optional(
            "tokenizer.json for tokenize (packed training sequences). Empty: the Airflow Variable "
            "curation_tokenizer; none: tokenize is skipped."
        ),
        "seq_len": setting_param("tokenize", "seq_len"),
        "export_formats": _optional(
            "Export: megatron, mds and/or parquet (comma-separated): tokenize's sequences globally shuffled in "
            "those formats. Empty: export is skipped."
        ),
        "export_seed": setting_param("export", "seed", minimum=0),
        "min_rows": setting_param("validate", "min_rows"),
        "max_duplicate_rate": setting_param("validate", "max_duplicate_rate", default=0.5),
    },
    tags=["curation"],
) as dag:
    # Where each stage sits, what it reads and when it is skipped come from its stage's declarations (UPSTREAM,
    # STREAMS, OPTIONAL_WITHOUT: airflow_curation/pipeline.py); here only what each stage is given.
    pipeline = Pipeline(common=COMMON, launch=LAUNCH, gate=GATE, quorum="{{ params.stream_quorum }}")
    pipeline.add(
        IngestOperator,
        inputs="{{ params.input or var.value.get('curation_input', '') }}",
        config={"unit_bytes": "{{ params.ingest_unit_size or '' }}"},
    )
    pipeline.add(PreprocessOperator, preset="{{ params.preset }}")
    # Lines repeated across many pages removed before dedup, which reads the cleaned text (docs/boilerplate.md).
    pipeline.add(
        BoilerplateOperator,
        min_documents="{{ params.boilerplate_min_documents or var.value.get('curation_boilerplate_min_documents', '') }}",
    )
    # Global exact + near dedup: a barrier over every preprocessed shard, then per-shard attrs that land one by
    # one after its global phase (the later stages stream on them). See docs/dedup.md.
    pipeline.add(
        DedupOperator,
        threshold="{{ params.dedup_threshold }}",
        config={"across_snapshots": "{{ params.dedup_across_snapshots }}"},
    )
    pipeline.add(
        QualityOperator,
        model="{{ params.quality_model or var.value.get('curation_quality_model', '') }}",
        min_score="{{ '' if params.quality_min_score is none else params.quality_min_score }}",
    )
    pipeline.add(
        DecontaminateOperator,
        eval_sets="{{ params.eval_sets or var.value.get('curation_eval_sets', '') }}",
        ngram="{{ params.decontaminate_ngram }}",
    )
    pipeline.add(PiiOperator)
    pipeline.add(
        MixOperator,
        targets="{{ params.mix_targets or '' }}",
        key="{{ params.mix_key }}",
        unit="{{ params.mix_unit }}",
        seed="{{ params.mix_seed }}",
        manifests="{{ params.mix_manifests or '' }}",
    )
    pipeline.add(
        EnrichOperator,
        task="{{ params.enrich_task }}",
        model="{{ params.enrich_model or var.value.get('curation_enrich_model', '') }}",
        model_runtime="{{ params.enrich_model_runtime }}",
        mapper="{{ params.enrich_mapper }}",
        gpus_per_replica="{{ params.enrich_gpus_per_replica }}",
        tensor_parallel_size="{{ params.enrich_tensor_parallel_size }}",
        replicas="{{ params.enrich_replicas }}",
    )
    pipeline.add(
        TokenizeOperator,
        tokenizer="{{ params.tokenizer or var.value.get('curation_tokenizer', '') }}",
        seq_len="{{ params.seq_len }}",
    )
    pipeline.add(ExportOperator, formats="{{ params.export_formats or '' }}", seed="{{ params.export_seed }}")
    # Declared checks gate the run and write the report (the run's "Curation report" tab); the curated asset
    # alias is its outlet.
    pipeline.add(
        ValidateOperator,
        min_rows="{{ params.min_rows }}",
        max_duplicate_rate="{{ params.max_duplicate_rate }}",
        poll_interval=POLL,
        outlets=[CURATED],
    )
    STAGES = pipeline.build()
