"""A process that imported Flask (any that ran Airflow's API code) or numba's llvmlite (our signal and
MinHash kernels) can still start a vLLM engine.

vLLM's CPU platform scans every module's globals at engine start; Flask's context proxies raise there, and
llvmlite's ``_lib_fn_wrapper`` has a ``__dict__`` without ``.get``.
"""

from __future__ import annotations

import pytest

from airflow_curation.stages.enrich.model_runtimes import EngineSpec, get_engine

pytestmark = pytest.mark.usefixtures("release_engines_after")


def test_vllm_engine_starts_with_flask_proxies_loaded(llama_score):
    import flask  # noqa: F401 - its module globals hold the LocalProxy objects that broke engine start
    import llvmlite.binding  # noqa: F401 - its _lib_fn_wrapper globals broke engine start too

    import airflow_curation.core.minhash  # noqa: F401 - loads numba, as the dedup tests do before these

    assert flask.g is not None
    engine = get_engine(
        EngineSpec(engine="vllm", model=llama_score, runner="pooling", dtype="float32", max_model_len=128, device="cpu")
    )
    ids, _ = engine.encode(["a document", "another one"], 64)
    assert engine.classify(ids).shape == (2, 1)
    import sys

    assert "flask" in sys.modules and "llvmlite.binding" in sys.modules  # put back after the engine started
