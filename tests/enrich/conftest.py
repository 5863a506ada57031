"""Shared fixtures of the enrich tests: tiny offline models, built once per session.

vLLM engines load in ~25 s on CPU, so each model's engine is loaded once per session (the engine cache
in ``model_runtimes.py``) and released when the test module that uses it ends (``release_engines_after``),
so that no more than one or two engines hold memory at any time.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from enrich_models import build_llama, minilm_path  # noqa: E402


@pytest.fixture(scope="session")
def model_root(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def llama_causal(model_root):
    return build_llama(str(model_root / "llama-causal"), "causal")


@pytest.fixture(scope="session")
def llama_classify(model_root):
    return build_llama(str(model_root / "llama-classify"), "classify")


@pytest.fixture(scope="session")
def llama_score(model_root):
    return build_llama(str(model_root / "llama-score"), "score")


@pytest.fixture(scope="session")
def minilm():
    return minilm_path()


@pytest.fixture(scope="module")
def release_engines_after():
    """Close every cached engine when the module ends (one model's engine alive at a time)."""
    yield
    from airflow_curation.stages.enrich.model_runtimes import release_engines

    release_engines()
