"""GPU settings of enrich: refused up front when they cannot work, ``auto`` resolved, a cluster without the
GPUs refused before any actor waits, the docs' worked examples, and the dtype each runtime runs.

No GPU on the test machine: the examples are checked on what they produce (each replica's Ray resources
and the ``vllm.LLM`` arguments), against a cluster described by :class:`Available`.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace

import pytest
import yaml
from enrich_helpers import make_docs, run_enrich, write_lake

from airflow_curation.core.layout import Lake
from airflow_curation.stages.base import StageFailed
from airflow_curation.stages.enrich.model_runtimes import (
    EngineSpec,
    TransformersEngine,
    transformers_dtype,
    vllm_engine_args,
)
from airflow_curation.stages.enrich.resources import Available, place
from airflow_curation.stages.enrich.stage import EnrichStage

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "enrich.md")


def stage(tmp_path, **config) -> EnrichStage:
    config = {"input_manifest": str(tmp_path / "m.json"), "task": "score", "model": "/models/m", **config}
    return EnrichStage(Lake(root=str(tmp_path), dataset="ds"), config, "r")


def docs_example(name: str) -> dict:
    with open(DOCS) as f:
        text = f.read()
    m = re.search(rf"<!-- example: {name} -->\n```yaml\n(.*?)```", text, re.S)
    assert m, f"docs/enrich.md has no example {name}"
    return yaml.safe_load(m.group(1))


def produced(tmp_path, config: dict, available: Available) -> tuple[dict, dict]:
    """What a Ray run of ``config`` asks for: each actor's resources (and how many), and the vLLM arguments."""
    s = stage(tmp_path, **config)
    placement = place(s.config, available)
    spec = replace(s.engine_spec, device=placement.device)
    return {**placement.ray_map_args(), "replicas": placement.replicas}, vllm_engine_args(spec, on_cpu=False)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"tensor_parallel_size": 8, "gpus_per_replica": 1}, "each replica needs gpus_per_replica 8"),
        ({"tensor_parallel_size": 0}, "tensor_parallel_size must be at least 1"),
        ({"gpus_per_replica": -1}, "gpus_per_replica must be auto, 0"),
        ({"gpus_per_replica": 2}, "leaves 1 GPUs of each replica idle"),
        ({"gpus_per_replica": 1.5}, "whole number of GPUs"),
        ({"tensor_parallel_size": 4, "gpus_per_replica": 0}, "each replica needs gpus_per_replica 4"),
        ({"tensor_parallel_size": 2, "model_runtime": "transformers"}, "needs model_runtime vllm"),
        ({"replicas": 0}, "replicas must be at least 1"),
        ({"gpus_per_replica": "many"}, "expected 'auto' or a number of GPUs"),
        ({"dtype": "half"}, "dtype must be one of auto, float32, bfloat16, float16"),
    ],
)
def test_settings_that_cannot_work_are_refused_when_the_stage_is_built(tmp_path, settings, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        stage(tmp_path, **settings)


def test_auto_uses_the_gpus_when_there_are_some_and_the_cpu_otherwise(tmp_path):
    cfg = stage(tmp_path).config
    assert cfg["gpus_per_replica"] == "auto"
    cpu = place(cfg, Available(gpus=0, cpus=4, node_gpus=0, where="here"))
    gpu = place(cfg, Available(gpus=2, cpus=4, node_gpus=2, where="here"))
    assert (cpu.gpus_per_replica, cpu.device, cpu.ray_map_args()) == (0, "cpu", {"num_cpus": 1.0, "num_gpus": None})
    assert (gpu.gpus_per_replica, gpu.device, gpu.ray_map_args()) == (1, "cuda", {"num_cpus": 1.0, "num_gpus": 1.0})
    tp4 = stage(tmp_path, tensor_parallel_size=4).config
    assert place(tp4, Available(gpus=8, cpus=16, node_gpus=8, where="here")).gpus_per_replica == 4
    with pytest.raises(ValueError, match="tensor_parallel_size 4 needs 4 GPUs per replica, and here has no GPU"):
        place(tp4, Available(gpus=0, cpus=16, node_gpus=0, where="here"))


def test_a_cluster_too_small_is_refused_with_what_it_has(tmp_path):
    two_nodes = Available(gpus=8, cpus=64, node_gpus=4, where="the Ray cluster X")
    with pytest.raises(
        ValueError, match="a replica needs 8 GPUs on one node .* the largest node of the Ray cluster X has 4"
    ):
        place(stage(tmp_path, tensor_parallel_size=8).config, two_nodes)
    with pytest.raises(
        ValueError, match=re.escape("replicas 3 x gpus_per_replica 4 = 12 GPUs; the Ray cluster X has 8")
    ):
        place(stage(tmp_path, tensor_parallel_size=4, replicas=3).config, two_nodes)
    with pytest.raises(ValueError, match=re.escape("replicas 2 x cpus_per_replica 40 = 80 CPUs")):
        place(stage(tmp_path, replicas=2, cpus_per_replica=40).config, two_nodes)


def test_docs_example_reward_model_on_4_gpus(tmp_path):
    resources, args = produced(
        tmp_path, docs_example("reward-4gpu"), Available(gpus=4, cpus=32, node_gpus=4, where="a 4-GPU node")
    )
    assert resources == {"num_cpus": 4.0, "num_gpus": 1.0, "replicas": 4}
    assert args == {
        "model": "/models/reward-model-7b",
        "runner": "pooling",
        "dtype": "bfloat16",
        "seed": 0,
        "tensor_parallel_size": 1,
    }
    # the same 4 replicas on 4 one-GPU nodes: data parallel needs no GPU neighbours
    assert place(stage(tmp_path, **docs_example("reward-4gpu")).config, Available(4, 32, 1, "4 nodes")).replicas == 4


def test_docs_example_generator_tensor_parallel_over_8_gpus(tmp_path):
    config = docs_example("generator-tp8")
    resources, args = produced(tmp_path, config, Available(gpus=8, cpus=96, node_gpus=8, where="an 8-GPU node"))
    assert resources == {"num_cpus": 8.0, "num_gpus": 8.0, "replicas": 1}
    assert args == {
        "model": "/models/llama-3-70b-instruct",
        "runner": "generate",
        "dtype": "bfloat16",
        "seed": 0,
        "tensor_parallel_size": 8,
        "distributed_executor_backend": "mp",
        "max_model_len": 8192,
    }
    with pytest.raises(ValueError, match="needs 8 GPUs on one node"):
        produced(tmp_path, config, Available(gpus=8, cpus=96, node_gpus=4, where="two 4-GPU nodes"))


@pytest.mark.timeout(600)  # the old code waited forever for the GPU ("may hang forever")
def test_ray_without_gpus_fails_fast_instead_of_waiting_for_one(tmp_path):
    import ray

    ray.init(address="local", num_cpus=1, num_gpus=0, include_dashboard=False)  # this test's own Ray
    try:
        lake, uri = write_lake(str(tmp_path), {"a": make_docs(3, "a"), "b": make_docs(3, "b")})
        with pytest.raises(StageFailed) as err:
            run_enrich(lake, uri, task="score", model="/no/model/needed", mapper="ray", gpus_per_replica=1)
        assert "gpus_per_replica 1 asks for GPUs, and the local Ray has none" in str(err.value)
        assert ray.is_initialized()  # not this job's Ray: left running for its owner
    finally:
        ray.shutdown()


def test_what_a_ray_cluster_has_is_read_from_its_live_nodes(tmp_path):
    import ray

    from airflow_curation.stages.enrich.resources import ray_available

    ray.init(address="local", num_cpus=1, num_gpus=2, include_dashboard=False)  # GPUs declared, none used
    try:
        have = ray_available(None)
        assert (have.gpus, have.node_gpus, have.cpus, have.where) == (2, 2, 1, "the local Ray")
        assert place(stage(tmp_path).config, have).gpus_per_replica == 1  # auto: the cluster has GPUs
        with pytest.raises(ValueError, match="a replica needs 4 GPUs on one node .* the largest node of the local Ray"):
            place(stage(tmp_path, tensor_parallel_size=4).config, have)
    finally:
        ray.shutdown()


def test_dtype_auto_differs_between_runtimes_and_dtype_pins_both(llama_causal):
    from vllm.config import ModelConfig

    def vllm_dtype(dtype: str):
        args = vllm_engine_args(EngineSpec("vllm", llama_causal, "generate", dtype=dtype, device="cpu"), on_cpu=True)
        assert args["dtype"] == dtype
        return ModelConfig(model=args["model"], runner=args["runner"], dtype=args["dtype"]).dtype

    import torch

    # auto: vLLM casts the float32 checkpoint down, transformers keeps float32 on CPU
    assert vllm_dtype("auto") in (torch.bfloat16, torch.float16)
    assert transformers_dtype("auto", "cpu") == "float32"
    assert transformers_dtype("auto", "cuda") == "bfloat16"
    # pinned: the same dtype in both runtimes
    assert vllm_dtype("float32") == torch.float32
    engine = TransformersEngine(EngineSpec("transformers", llama_causal, "generate", dtype="bfloat16", device="cpu"))
    assert engine.model.dtype == torch.bfloat16
    assert vllm_dtype("bfloat16") == torch.bfloat16
