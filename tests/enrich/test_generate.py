"""generate with real vLLM on CPU (tiny random Llama): invalid output is recorded, never a crash."""

from __future__ import annotations

import json

import pytest
from enrich_helpers import make_docs, read_attrs, record, run_enrich, write_lake

pytestmark = pytest.mark.usefixtures("release_engines_after")

COMMON = {
    "task": "generate",
    "model_runtime": "vllm",
    "dtype": "float32",
    "max_input_tokens": 32,
    "max_tokens": 24,
    "batch_size": 5,
    "checkpoint_rows": 8,
    "max_model_len": 256,
    "temperature": 0.0,
}


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    docs = make_docs(14)
    docs[1]["text"] = ""
    docs[9]["text"] = "tokens " * 200
    return (*write_lake(str(tmp_path_factory.mktemp("lake")), {"g0": docs}), docs)


def test_random_model_output_is_recorded_as_invalid_with_reason(lake, llama_causal):
    l, uri, docs = lake
    stage, manifest = run_enrich(l, uri, model=llama_causal, **COMMON)
    attrs = read_attrs(manifest.shards[0].attrs["enrich-generate"]).to_pydict()
    assert attrs["id"] == [d["id"] for d in docs]
    assert attrs["skip_reason"][1] == "empty" and attrs["valid"][1] is None
    rows = [i for i in range(14) if i != 1]
    for i in rows:
        assert attrs["valid"][i] is False  # random weights do not write JSON
        assert attrs["error"][i].split("_truncated")[0] in {
            "empty_output",
            "no_json",
            "invalid_json",
            "not_an_object",
        } or attrs["error"][i].startswith(("missing_", "empty_"))
        assert attrs["raw"][i] is not None and 0 < attrs["output_tokens"][i] <= 24
        assert attrs["instruction"][i] is None
    assert attrs["truncated"][9] is True and attrs["input_tokens"][9] > 32
    assert manifest.accounting == {
        "read": 14,
        "kept": 0,
        "dropped": {"empty": 1, "invalid_generation": 13},
        "quarantined": {},
    }
    # Greedy decoding is deterministic: the same prompt gives the same text in another batch layout.
    _, again = run_enrich(l, uri, run_id="g2", model=llama_causal, **{**COMMON, "name": "again", "batch_size": 3})
    attrs2 = read_attrs(again.shards[0].attrs["enrich-again"]).to_pydict()
    assert attrs2["raw"] == attrs["raw"]
    assert record(stage, "g0").extra["rows_computed"] == 13


def test_structured_output_gives_valid_pairs(lake, llama_causal):
    l, uri, docs = lake
    template = "Turn into a task: {text}\nJSON:"
    _, manifest = run_enrich(
        l,
        uri,
        run_id="g3",
        model=llama_causal,
        **{
            **COMMON,
            "name": "structured",
            "structured_output": True,
            "max_tokens": 120,
            "max_field_chars": 30,
            "prompt_template": template,
        },
    )
    attrs = read_attrs(manifest.shards[0].attrs["enrich-structured"]).to_pydict()
    valid = [i for i in range(14) if attrs["valid"][i]]
    # Constrained decoding forces the schema; a pair can still be cut by max_tokens, and is then reported so.
    assert valid, attrs["error"]
    for i in valid:
        obj = json.loads(attrs["raw"][i])  # the whole output is the JSON object, nothing around it
        assert obj["instruction"].strip() == attrs["instruction"][i] and attrs["response"][i]
    for i in range(14):
        if i != 1 and not attrs["valid"][i]:
            assert attrs["error"][i].endswith("_truncated")
    assert manifest.accounting["kept"] == len(valid)


def test_transformers_engine_generates_the_same_greedy_text(lake, llama_causal):
    l, uri, docs = lake
    _, v = run_enrich(l, uri, run_id="g4", model=llama_causal, **{**COMMON, "name": "hf-ref"})
    _, t = run_enrich(
        l, uri, run_id="g5", model=llama_causal, **{**COMMON, "name": "hf", "model_runtime": "transformers"}
    )
    rv = read_attrs(v.shards[0].attrs["enrich-hf-ref"]).to_pydict()
    rt = read_attrs(t.shards[0].attrs["enrich-hf"]).to_pydict()
    assert rv["raw"] == rt["raw"]  # both decode greedily in float32
    assert rv["output_tokens"] == rt["output_tokens"]
    assert rt["valid"][1] is None and all(x is False for i, x in enumerate(rt["valid"]) if i != 1)
