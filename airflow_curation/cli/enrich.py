"""``curation enrich``: model outputs as additive columns, on a lake or on plain Parquet files.

Plain files (``id`` and ``text`` columns)::

    curation enrich a.parquet b.parquet --task embed --model PATH --output DIR

writes ``DIR/a.parquet`` and ``DIR/b.parquet`` with ``id`` and the task's columns. On a lake::

    curation enrich --lake L --dataset D --input-manifest L/D/_manifests/RUN/dedup.json --task score --model PATH
"""

from __future__ import annotations

import argparse
import json

from airflow_curation.cli.common import files_or_lake, print_summary, run_id_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "enrich", help="classify, score, generate or embed documents with a model (vLLM or transformers)",
        description="Run a model over every kept document and write its outputs as additive columns keyed "
                    "by id: attrs/enrich-<name>/ in a lake, or DIR/<file>.parquet for plain Parquet inputs. "
                    "Progress is checkpointed every --checkpoint-rows rows; a rerun resumes.")
    p.add_argument("files", nargs="*", metavar="FILE", help="plain Parquet files with id and text columns")
    p.add_argument("--output", help="plain files: folder for the results")
    p.add_argument("--lake", help="lake root (instead of FILEs)")
    p.add_argument("--dataset", help="dataset name inside the lake")
    p.add_argument("--snapshot", help="snapshot partition")
    p.add_argument("--input-manifest", help="lake: the upstream stage's manifest URI (default: the newest complete dedup or preprocess or ingest manifest)")
    p.add_argument("--run-id", help="names the manifest; default: cli-<timestamp>")
    p.add_argument("--task", required=True, choices=["embed", "classify", "score", "generate"])
    p.add_argument("--model", required=True, help="model folder (Hugging Face layout)")
    p.add_argument("--name", help="output name, attrs/enrich-<name>/ (default: the task)")
    p.add_argument("--engine", default="vllm", choices=["vllm", "transformers"])
    p.add_argument("--executor", default="ray", choices=["ray", "local"],
                   help="ray: Ray Data with engine actors (default); local: the engine in this process")
    p.add_argument("--ray-address", help="an existing Ray cluster; default: a local Ray")
    p.add_argument("--ray-num-cpus", type=int, help="CPUs of the local Ray")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--replicas", type=int, default=1, help="engine replicas (data parallel)")
    p.add_argument("--tensor-parallel-size", type=int, default=1)
    p.add_argument("--gpus-per-replica", type=float, default=0)
    p.add_argument("--cpus-per-replica", type=float, default=1)
    p.add_argument("--max-input-tokens", type=int, default=512, help="longer documents are cut and flagged")
    p.add_argument("--max-tokens", type=int, default=256, help="generate: max new tokens")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--prompt-template", help="generate: prompt with {text}; @FILE reads it from a file")
    p.add_argument("--structured-output", action="store_true", help="generate: constrain output to the JSON schema")
    p.add_argument("--labels", help="classify/score: comma-separated label names")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--engine-kwargs", default="{}", help="JSON of extra engine arguments")
    p.add_argument("--checkpoint-rows", type=int, default=1000)
    p.add_argument("--all-rows", action="store_true", help="also enrich rows that preprocess/dedup dropped")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from airflow_curation.jobs import run_spec
    from airflow_curation.jobs.spec import JobSpec

    template = args.prompt_template
    if template and template.startswith("@"):
        with open(template[1:]) as f:
            template = f.read()
    config = {
        "task": args.task, "model": args.model, "name": args.name, "engine": args.engine,
        "executor": args.executor, "ray_address": args.ray_address, "ray_num_cpus": args.ray_num_cpus,
        "batch_size": args.batch_size, "replicas": args.replicas, "tensor_parallel_size": args.tensor_parallel_size,
        "gpus_per_replica": args.gpus_per_replica, "cpus_per_replica": args.cpus_per_replica,
        "max_input_tokens": args.max_input_tokens, "max_tokens": args.max_tokens, "temperature": args.temperature,
        "top_p": args.top_p, "prompt_template": template, "structured_output": args.structured_output,
        "labels": args.labels.split(",") if args.labels else None, "dtype": args.dtype,
        "max_model_len": args.max_model_len, "engine_kwargs": json.loads(args.engine_kwargs),
        "checkpoint_rows": args.checkpoint_rows, "only_kept": not args.all_rows,
    }
    lake, source = files_or_lake(args, "enrich", ["dedup", "preprocess", "ingest"])
    config.update(source)
    spec = JobSpec(stage="enrich", lake=lake.to_dict(), run_id=run_id_from_args(args), config=config)
    print_summary(run_spec(spec))
    return 0
