"""The Ray Data path: a vLLM engine actor behind map_batches, on a real local Ray.

One shard of several chunks and batches (each shard is one Ray dataset, whose actor loads the engine:
~40 s on this machine, so one shard keeps the test short); ordering and parts are what it checks.
"""

from __future__ import annotations

import numpy as np
import pytest
from enrich_helpers import make_docs, read_attrs, record, run_enrich, write_lake

pytestmark = pytest.mark.usefixtures("release_engines_after")


def test_ray_data_vllm_actors_enrich_shards_in_order(tmp_path, llama_classify):
    shards = {"a": make_docs(22, "a")}
    lake, uri = write_lake(str(tmp_path), shards, keep={"a": {"a00004"}})
    common = {
        "task": "classify",
        "model": llama_classify,
        "dtype": "float32",
        "max_input_tokens": 40,
        "max_model_len": 256,
        "checkpoint_rows": 5,
    }
    stage, manifest = run_enrich(
        lake,
        uri,
        run_id="ray",
        mapper="ray",
        ray_num_cpus=2,
        replicas=1,
        cpus_per_replica=1,
        batch_size=4,
        model_runtime="vllm",
        **common,
    )
    stage.close()
    _, ref = run_enrich(lake, uri, run_id="ref", model_runtime="transformers", name="ref", batch_size=8, **common)
    assert manifest.accounting == {"read": 22, "kept": 21, "dropped": {"not_kept": 1}, "quarantined": {}}
    for got, want in zip(manifest.shards, ref.shards):
        g = read_attrs(got.attrs["enrich-classify"]).to_pydict()
        w = read_attrs(want.attrs["enrich-ref"]).to_pydict()
        assert g["id"] == [d["id"] for d in shards[got.shard_id]]
        assert g["enriched"] == w["enriched"]
        for pg, pw in zip(g["probs"], w["probs"]):
            assert (pg is None) == (pw is None)
            if pg is not None:
                assert np.allclose(pg, pw, atol=2e-3)
        assert record(stage, got.shard_id).extra["rows_computed"] == sum(g["enriched"])
