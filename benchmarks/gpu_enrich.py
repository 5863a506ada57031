"""Enrich on one GPU with the ``transformers`` engine (no vLLM there): rows/s and GPU busy time.

Made for a machine that has PyTorch and transformers and nothing else that can be relied on: no vLLM,
no network, maybe no Ray, no model files. So it builds random-weight models of real shapes (compute
cost does not depend on the weights): a MiniLM-L6-shaped BERT for ``embed``, a ~0.2B Llama with a
one-output head for ``score`` and the same body as a causal LM for ``generate``, with a BPE tokenizer
trained on the spot, and runs the enrich stage (plain-Parquet mode, ``mapper=local`` unless Ray is
importable and ``--ray`` is given) on docstrings of the Python standard library.

GPU busy time is sampled from ``nvidia-smi`` (utilization.gpu every 100 ms): busy seconds =
sum(utilization x interval). Finishes well within 8 minutes on one H200; each phase has a row budget.

Needs pyarrow, fsspec, numpy, xxhash and zstandard besides torch and transformers (the package's
core); where they are missing it tries ``pip install`` (from ``--wheels DIR`` first) and says what to
carry when that fails.

Usage: ``python benchmarks/gpu_enrich.py [--quick] [--ray] [--out DIR]`` (``$OUT`` is used when set).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

CORE = ["pyarrow", "fsspec", "numpy", "xxhash", "zstandard"]


def ensure_core(wheels: str | None) -> None:
    missing = [m for m in CORE if importlib.util.find_spec(m) is None]
    if not missing:
        return
    cmd = [sys.executable, "-m", "pip", "install", "-q", *missing]
    if wheels:
        cmd[4:4] = ["--no-index", "--find-links", wheels]
    print(f"installing {missing}: {' '.join(cmd)}", flush=True)
    rc = subprocess.run(cmd).returncode
    still = [m for m in missing if importlib.util.find_spec(m) is None]
    if rc or still:
        sys.exit(
            f"gpu_enrich: missing {still or missing} and pip could not install them; carry wheels "
            f"(pip download {' '.join(missing)} -d wheels) and pass --wheels wheels"
        )


class GpuSampler:
    """utilization.gpu from nvidia-smi every 100 ms, in a background thread."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float]] = []  # (time, util %, memory MiB)
        self._proc = None
        self._thread = None

    def __enter__(self):
        try:
            self._proc = subprocess.Popen(
                [
                    "nvidia-smi",
                    "--query-gpu=utilization.gpu,memory.used",
                    "--format=csv,noheader,nounits",
                    "-lms",
                    "100",
                    "-i",
                    "0",
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
        except FileNotFoundError:
            self._proc = None
            return self
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        for line in self._proc.stdout:
            try:
                util, mem = (float(x) for x in line.strip().split(","))
            except ValueError:
                continue
            self.samples.append((time.time(), util, mem))

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=5)

    def busy_seconds(self, start: float, end: float) -> tuple[float | None, float | None, float | None]:
        pts = [s for s in self.samples if start <= s[0] <= end]
        if len(pts) < 2:
            return None, None, None
        busy = sum((b[0] - a[0]) * a[1] / 100.0 for a, b in zip(pts, pts[1:]))
        return busy, sum(p[1] for p in pts) / len(pts), max(p[2] for p in pts)


def stdlib_docs(n: int) -> list[str]:
    docs: list[str] = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= 200:
                    docs.append(doc[:4000])
    if not docs:
        docs = ["Curating training data means filtering, deduplicating and enriching documents. " * 8]
    out = []
    while len(out) < n:  # repeat the corpus to the row budget (compute does not care)
        out.extend(docs[: n - len(out)])
    return out


def build_models(root: Path, corpus: list[str], small: bool = False) -> dict[str, str]:
    import torch
    from tokenizers import ByteLevelBPETokenizer, Tokenizer, models, normalizers, pre_tokenizers, trainers
    from tokenizers.processors import TemplateProcessing
    from transformers import (
        BertConfig,
        BertModel,
        LlamaConfig,
        LlamaForCausalLM,
        LlamaForSequenceClassification,
        PreTrainedTokenizerFast,
    )

    torch.manual_seed(0)
    paths = {}
    # BERT-style WordPiece tokenizer + MiniLM-L6 shapes (hidden 384, 6 layers, 12 heads).
    wp = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wp.normalizer = normalizers.BertNormalizer(lowercase=True)
    wp.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wp.train_from_iterator(
        corpus[:5000],
        trainers.WordPieceTrainer(vocab_size=30522, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]),
    )
    cls, sep = wp.token_to_id("[CLS]"), wp.token_to_id("[SEP]")
    wp.post_processor = TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    bert_tok = PreTrainedTokenizerFast(
        tokenizer_object=wp,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=256,
    )
    p = root / "minilm-shaped"
    bert_tok.save_pretrained(p)
    BertModel(
        BertConfig(
            vocab_size=len(bert_tok),
            hidden_size=384,
            num_hidden_layers=6,
            num_attention_heads=12,
            intermediate_size=1536,
            max_position_embeddings=512,
            pad_token_id=bert_tok.pad_token_id,
        )
    ).save_pretrained(p)
    paths["embed"] = str(p)

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus[:5000], vocab_size=32000, special_tokens=["<s>", "</s>", "<pad>", "<unk>"])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        model_max_length=2048,
    )
    h, layers = (128, 2) if small else (1024, 12)
    cfg = dict(
        vocab_size=len(tok),
        hidden_size=h,
        intermediate_size=h * 11 // 4,
        num_hidden_layers=layers,
        num_attention_heads=h // 64,
        num_key_value_heads=h // 64,
        max_position_embeddings=2048,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    for name, model in (
        ("score", LlamaForSequenceClassification(LlamaConfig(**cfg, num_labels=1))),
        ("generate", LlamaForCausalLM(LlamaConfig(**cfg))),
    ):
        p = root / f"llama-{name}"
        tok.save_pretrained(p)
        model.save_pretrained(p)
        paths[name] = str(p)
    return paths


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def run_phase(name: str, model: str, docs: list[str], work: Path, sampler: GpuSampler, use_ray: bool, **config) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_curation.core.layout import Lake
    from airflow_curation.stages.base import StageRunner
    from airflow_curation.stages.enrich.stage import EnrichStage

    inp = work / f"{name}.parquet"
    pq.write_table(
        pa.table({"id": [f"{name}{i:07d}" for i in range(len(docs))], "text": docs}), inp, row_group_size=4096
    )
    out = work / f"out-{name}"
    stage = EnrichStage(
        Lake(str(out), "_curation"),
        {
            "inputs": [str(inp)],
            "output_dir": str(out),
            "task": name,
            "model": model,
            "model_runtime": "transformers",
            "mapper": "ray" if use_ray else "local",
            "gpus_per_replica": 1 if _cuda() else 0,
            "replicas": 1,
            "dtype": "bfloat16" if _cuda() else "float32",
            "checkpoint_rows": 4096,
            **({"ray_num_gpus": 1} if use_ray and _cuda() else {}),
            **config,
        },
        f"gpu-{name}",
    )
    from airflow_curation.stages.enrich.model_runtimes import get_engine

    t0 = time.time()
    if not use_ray:
        get_engine(stage.engine_spec)  # load apart: the rate is for rows, the load is reported alone
    t1 = time.time()
    manifest = StageRunner(stage).run()
    t2 = time.time()
    stage.close()
    table = pq.read_table(out / f"{name}.parquet")
    busy, util, mem = sampler.busy_seconds(t1, t2)
    res = {
        "task": name,
        "rows": len(docs),
        "kept": manifest.accounting["kept"],
        "load_s": round(t1 - t0, 2),
        "run_s": round(t2 - t1, 2),
        "rows_per_s": round(len(docs) / (t2 - t1), 1),
        "gpu_busy_s": None if busy is None else round(busy, 2),
        "gpu_busy_fraction": None if busy is None else round(busy / (t2 - t1), 3),
        "mean_util_pct": None if util is None else round(util, 1),
        "peak_mem_mib": mem,
        **{k: config[k] for k in ("batch_size", "max_input_tokens", "max_tokens") if k in config},
    }
    if "output_tokens" in table.column_names:
        new = sum(x or 0 for x in table.column("output_tokens").to_pylist())
        res["new_tokens_per_s"] = round(new / (t2 - t1), 1)
    if "input_tokens" in table.column_names:
        res["input_tokens_per_s"] = round(sum(x or 0 for x in table.column("input_tokens").to_pylist()) / (t2 - t1), 1)
    print(json.dumps(res), flush=True)
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small row budgets (a smoke run)")
    ap.add_argument("--smoke-cpu", action="store_true", help="tiny models and rows, on CPU: checks the script")
    ap.add_argument("--ray", action="store_true", help="run on a local Ray (Ray Data engine actor) if importable")
    ap.add_argument("--wheels", help="folder of wheels for missing core packages")
    ap.add_argument("--out", default=os.environ.get("OUT"), help="write gpu_enrich.json / .md here")
    args = ap.parse_args()
    ensure_core(args.wheels)
    import torch

    if not torch.cuda.is_available() and not args.smoke_cpu:
        sys.exit("gpu_enrich: no CUDA device visible to torch")
    use_ray = args.ray and importlib.util.find_spec("ray") is not None
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (CPU smoke run)"
    scale = 0.005 if args.smoke_cpu else 0.1 if args.quick else 1.0
    started = time.time()
    results = []
    with tempfile.TemporaryDirectory(prefix="gpu-enrich-") as tmp, GpuSampler() as sampler:
        work = Path(tmp)
        corpus = stdlib_docs(int(40_000 * scale))
        t = time.time()
        models = build_models(work / "models", corpus, small=args.smoke_cpu)
        print(f"models built in {time.time() - t:.1f} s on {gpu}; {len(corpus)} docs", flush=True)
        results.append(
            run_phase("embed", models["embed"], corpus, work, sampler, use_ray, batch_size=512, max_input_tokens=256)
        )
        results.append(
            run_phase(
                "score",
                models["score"],
                corpus[: int(20_000 * scale)],
                work,
                sampler,
                use_ray,
                batch_size=128,
                max_input_tokens=512,
            )
        )
        results.append(
            run_phase(
                "generate",
                models["generate"],
                corpus[: int(2_048 * scale)],
                work,
                sampler,
                use_ray,
                batch_size=256,
                max_input_tokens=256,
                max_tokens=128,
                prompt_template="Rewrite as an instruction and a response:\n{text}\nJSON:",
            )
        )
    summary = {
        "gpu": gpu,
        "torch": torch.__version__,
        "model_runtime": "transformers",
        "mapper": "ray" if use_ray else "local",
        "total_s": round(time.time() - started, 1),
        "phases": results,
    }
    lines = [
        f"GPU: {gpu}, torch {torch.__version__}, transformers model runtime, mapper {summary['mapper']}",
        "| task | rows | batch | load s | run s | rows/s | tokens/s | GPU busy s | busy fraction | peak MiB |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        toks = r.get("new_tokens_per_s") or r.get("input_tokens_per_s")
        lines.append(
            f"| {r['task']} | {r['rows']} | {r.get('batch_size')} | {r['load_s']} | {r['run_s']} | "
            f"{r['rows_per_s']} | {toks} | {r['gpu_busy_s']} | {r['gpu_busy_fraction']} | {r['peak_mem_mib']} |"
        )
    md = "\n".join(lines)
    print(md)
    print(json.dumps(summary, indent=1))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        Path(args.out, "gpu_enrich.json").write_text(json.dumps(summary, indent=1))
        Path(args.out, "gpu_enrich.md").write_text(md + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
