"""Tokenize + write a Megatron-LM indexed dataset: tokens per CPU second against datatrove, same text, same tokenizer.

- ours: the ``tokenize`` stage (a zstd Parquet shard in: tokenize, EOS after every document, pack into
  2,048-token sequences, packed + attrs Parquet out) then the ``export`` stage (``formats=megatron``: the
  seeded global shuffle, ``.bin``/``.idx`` and the ``order/`` lineage files), both timed, one worker;
- datatrove 0.10.1 ``MegatronDocumentTokenizer`` (documents in memory, ``encode_batch``, EOS appended, one
  Megatron sequence per document, no shuffle), in the oracle venv (``scripts/setup_oracles.sh``).

Each run is a fresh process (``python -P``, ``RAYON_NUM_THREADS=1``: one tokenizer thread), timed by CPU
time of the timed part (user + sys of the process); ours and datatrove alternate, ``--runs`` each, every run
kept, the load average recorded before each. Both write the same number of tokens (document tokens + one
EOS each): the script checks it. Text: the Python 3.11 documentation sources (Debian ``python3.11-doc``)
repeated ``--repeat`` times; tokenizer: a byte-level BPE (8k vocab) trained in the run on 50 of the documents.

usage: .venv/bin/python benchmarks/bench_tokenize_megatron.py [--runs 5] [--repeat 2] | --render
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench_tokenize import ORACLE_PY, load_corpus, mb, train_tokenizer  # noqa: E402
from results import RESULTS, replace_block  # noqa: E402

OUT = os.path.join(REPO, "benchmarks", "results", "tokenize_megatron.json")
ENV = {**os.environ, "RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": REPO}

OURS = r"""
import json, os, sys, time, tempfile
import pyarrow as pa
from airflow_curation.core.layout import Lake
from airflow_curation.core.shards import write_parquet
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.export.stage import ExportStage
from airflow_curation.stages.tokenize.stage import TokenizeStage
texts = json.load(open(sys.argv[1]))
tmp = tempfile.mkdtemp()
shard = tmp + "/shard.parquet"
write_parquet(shard, pa.table({"id": [f"d{i}" for i in range(len(texts))], "text": texts}), row_group_rows=512)
lake = Lake(tmp + "/out", "_curation")  # a plain-file run keeps its manifest beside its output
tok = TokenizeStage(lake, {"inputs": [shard], "output_dir": tmp + "/out", "tokenizer": sys.argv[2], "seq_len": 2048, "eos_token": "<|endoftext|>"}, "b")
tok.tokenizer.encode_batch(texts[:10])
t0, w0 = time.process_time(), time.perf_counter()
m = StageRunner(tok).run()
e = StageRunner(ExportStage(lake, {"input_manifest": lake.manifest_uri("b", "tokenize"), "formats": ["megatron"]}, "b")).run()
cpu, wall = time.process_time() - t0, time.perf_counter() - w0
print(json.dumps({"cpu": cpu, "wall": wall, "tokens": e.config["export"]["tokens"], "documents": m.config["tokens"]["documents"]}))
"""

DATATROVE = r"""
import json, sys, time, tempfile
from datatrove.data import Document
from datatrove.pipeline.tokens.megatron_tokenizer import MegatronDocumentTokenizer
texts = json.load(open(sys.argv[1]))
step = MegatronDocumentTokenizer(output_folder=tempfile.mkdtemp(), tokenizer_name_or_path=sys.argv[2],
                                 eos_token="<|endoftext|>", batch_size=1000)
step.tokenizer.encode_batch(texts[:10])
docs = [Document(text=t, id=str(i)) for i, t in enumerate(texts)]
t0, w0 = time.process_time(), time.perf_counter()
step.run(iter(docs), rank=0, world_size=1)
cpu, wall = time.process_time() - t0, time.perf_counter() - w0
print(json.dumps({"cpu": cpu, "wall": wall, "tokens": step.stats["tokens"].total, "documents": len(texts)}))
"""

CONTENDERS = {
    "ours": ("tokenize + export (megatron)", OURS),
    "datatrove": ("datatrove MegatronDocumentTokenizer", DATATROVE),
}


def run(python: str, code: str, *args: str) -> dict:
    proc = subprocess.run([python, "-P", "-c", code, *args], capture_output=True, text=True, env=ENV, check=False)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(runs: int, repeat: int) -> dict:
    texts, what = load_corpus()
    texts = texts * repeat
    if not os.path.exists(ORACLE_PY):
        subprocess.run(["bash", os.path.join(REPO, "scripts", "setup_oracles.sh")], check=True)
    result: dict = {"text": what, "repeat": repeat, "text_mb": mb(texts), "documents": len(texts), "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        tok = os.path.join(tmp, "tokenizer.json")
        train_tokenizer(tok, texts)
        corpus = os.path.join(tmp, "texts.json")
        with open(corpus, "w") as f:
            json.dump(texts, f)
        for i in range(runs):
            order = ["ours", "datatrove"] if i % 2 == 0 else ["datatrove", "ours"]  # alternated
            for name in order:
                python = sys.executable if name == "ours" else ORACLE_PY
                load = os.getloadavg()[0]
                r = run(python, CONTENDERS[name][1], corpus, tok)
                result["runs"].append({"contender": name, "round": i, "load": round(load, 2), **r})
                print(json.dumps(result["runs"][-1]), flush=True)
    tokens = {r["contender"]: r["tokens"] for r in result["runs"]}
    if tokens["ours"] != tokens["datatrove"]:
        raise RuntimeError(f"the two wrote different token counts: {tokens}")
    result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return result


def render(result: dict) -> str:
    rows = []
    rates = {}
    for name, (label, _) in CONTENDERS.items():
        mine = [r for r in result["runs"] if r["contender"] == name]
        per_cpu = [r["tokens"] / r["cpu"] for r in mine]
        rates[name] = statistics.median(per_cpu)
        rows.append(
            f"| {label} | {len(mine)} | {mine[0]['tokens']:,} | **{rates[name] / 1e6:.2f} M** | "
            f"{min(per_cpu) / 1e6:.2f}-{max(per_cpu) / 1e6:.2f} M | {statistics.median(r['wall'] for r in mine):.1f} |"
        )
    loads = [r["load"] for r in result["runs"]]
    runs = ", ".join(
        f"{r['contender']} {r['tokens'] / r['cpu'] / 1e6:.2f}" for r in result["runs"]
    )  # every run, in the order run
    return "\n".join(
        [
            "## Tokenize + Megatron format: tokens per CPU second against datatrove (`benchmarks/bench_tokenize_megatron.py`)",
            "",
            f"Text: {result['text']} x{result['repeat']} = {result['text_mb']:.1f} MB, {result['documents']:,} documents; one",
            "byte-level BPE tokenizer (8k vocab, trained in the run) for both; one tokenizer thread; a fresh process per",
            "run, ours and datatrove alternated; CPU time of the timed part. Ours: tokenize stage (Parquet in, packed",
            "2,048-token sequences) + export stage (seeded global shuffle, Megatron `.bin`/`.idx` + lineage files);",
            "datatrove: `MegatronDocumentTokenizer` (documents in memory, one sequence per document, no shuffle). Both",
            "write the same tokens (document tokens + one EOS each; checked).",
            "",
            "| contender | runs | tokens written | median tokens / CPU s | spread (min-max) | median wall s |",
            "| --- | ---: | ---: | ---: | --- | ---: |",
            *rows,
            "",
            f"**Ours is {rates['ours'] / rates['datatrove']:.2f}x datatrove per core** (ratio of medians). Every run, in order "
            f"(M tokens / CPU s): {runs}. Load average before the runs: {min(loads):.1f}-{max(loads):.1f} on 2 cores "
            "(other engineers' work on the machine).",
            "",
            f"Run {result['date']}. JSON: `benchmarks/results/tokenize_megatron.json`. Command: "
            f"`.venv/bin/python benchmarks/bench_tokenize_megatron.py --runs {len(loads) // 2} --repeat {result['repeat']}` "
            "(`--render` rebuilds this table from the JSON).",
        ]
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="runs of each contender, alternated (default 5)")
    ap.add_argument("--repeat", type=int, default=2, help="the corpus repeated this many times (default 2)")
    ap.add_argument("--render", action="store_true", help="rebuild the RESULTS.md section from the committed JSON")
    args = ap.parse_args()
    if args.render:
        with open(OUT) as f:
            result = json.load(f)
    else:
        result = measure(args.runs, args.repeat)
        with open(OUT, "w") as f:
            json.dump(result, f, indent=1)
    text = render(result)
    print(text)
    replace_block(RESULTS, "bench_tokenize_megatron", text, after="bench_tokenize")
    return 0


if __name__ == "__main__":
    sys.exit(main())
