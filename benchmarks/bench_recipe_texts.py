"""Preprocess throughput when the compat presets read the text their reference reads, against the tree before.

    .venv/bin/python benchmarks/bench_recipe_texts.py --baseline DIR --baseline-commit COMMIT [--rounds 5]
    .venv/bin/python benchmarks/bench_recipe_texts.py --render      # RESULTS.md block from the JSON

With line rules, ``gopher_compat`` and ``c4_compat_fineweb`` read the extracted text and ``fineweb_compat`` the
cleaned text (docs/preprocess.md, "Which text a preset reads"): two compat passes, one per text, where the tree
before made one pass over the cleaned text. ``DIR`` is that tree (``git archive COMMIT airflow_curation | tar -x
-C DIR``). Contenders, each a fresh ``python -P`` process, alternated within each round (order reversed every
other round): the FineWeb recipe's preprocess (``gopher_compat,c4_compat_fineweb,fineweb_compat``, ``--line-rules
fineweb``, ``--lang en --lang-min-score 0.65``) and the project's own ``gopher,c4,fineweb`` with the same line
rules and language ID, each on this tree and on ``DIR``. CPU seconds of ``Preprocessor.process`` only
(``time.process_time``; imports and model loads outside), two passes per process: ``cold`` (a fresh worker's
first batch) and ``warm``. Text: our trafilatura text of the web recipe's pages (``bench_web_recipe.py`` writes it
to ``benchmarks/data/web_recipe/decisions.json``). Load averages recorded per round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from results import RESULTS, replace_block  # noqa: E402

OUT = HERE / "results" / "recipe_texts.json"
DECISIONS = HERE / "data" / "web_recipe" / "decisions.json"
TEXTS = HERE / "data" / "recipe_texts.json"
CONFIGS = {
    "compat recipe": {"preset": "gopher_compat,c4_compat_fineweb,fineweb_compat"},
    "gopher,c4,fineweb": {"preset": "gopher,c4,fineweb"},
}
COMMON = {"line_rules": "fineweb", "lang": "en", "lang_min_score": 0.65}

RUN = """
import json, sys, time
texts_path, config, root = sys.argv[1:4]
sys.path.insert(0, root)
import pyarrow as pa
from airflow_curation.stages.preprocess.stage import Preprocessor
texts = json.load(open(texts_path))
table = pa.table({"id": [str(i) for i in range(len(texts))], "text": texts})
pre = Preprocessor(**json.loads(config))
pre.process(pa.table({"id": ["w"], "text": ["Warm up the imports and the language model. It has words."]}))
seconds = []
for _ in range(2):
    t = time.process_time()
    out = pre.process(table)
    seconds.append(time.process_time() - t)
print(json.dumps({"seconds": seconds, "kept": sum(out.column("keep").to_pylist())}))
"""


def texts() -> list[str]:
    if not DECISIONS.exists():
        raise SystemExit(f"{DECISIONS} missing: run benchmarks/bench_web_recipe.py first")
    d = json.loads(DECISIONS.read_text())
    return list(d["ours_by_variant"]["compat_fw_lines"]["texts"].values())


def run(rounds: int, baseline: str) -> dict:
    docs = texts()
    TEXTS.parent.mkdir(parents=True, exist_ok=True)
    TEXTS.write_text(json.dumps(docs))
    mb = sum(len(t.encode()) for t in docs) / 1e6
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    contenders = [
        (f"{c} ({tree})", c, root) for c in CONFIGS for tree, root in (("this tree", str(ROOT)), ("before", baseline))
    ]
    cold: dict[str, list[float]] = {n: [] for n, _, _ in contenders}
    warm: dict[str, list[float]] = {n: [] for n, _, _ in contenders}
    kept: dict[str, int] = {}
    # one unrecorded run each first: numba caches its compiled functions per source tree, and a tree's first
    # process would time the compiler
    for _, config, root in contenders:
        cmd = [sys.executable, "-P", "-c", RUN, str(TEXTS), json.dumps({**CONFIGS[config], **COMMON}), root]
        subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    load = [[round(x, 2) for x in os.getloadavg()]]
    for r in range(rounds):
        for name, config, root in contenders if r % 2 == 0 else contenders[::-1]:
            cmd = [sys.executable, "-P", "-c", RUN, str(TEXTS), json.dumps({**CONFIGS[config], **COMMON}), root]
            got = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout)
            cold[name].append(round(got["seconds"][0], 3))
            warm[name].append(round(got["seconds"][1], 3))
            kept[name] = got["kept"]
        load.append([round(x, 2) for x in os.getloadavg()])

    def stats(xs: list[float]) -> dict:
        return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "runs": xs}

    return {
        "documents": len(docs),
        "mb": round(mb, 3),
        "rounds": rounds,
        "cpu": os.cpu_count(),
        "baseline": baseline,
        "settings": COMMON,
        "configs": CONFIGS,
        "load_avg_1_5_15": load,
        "kept": kept,
        "cold": {n: stats(s) for n, s in cold.items()},
        "warm": {n: stats(s) for n, s in warm.items()},
    }


def render(r: dict) -> str:
    loads = [x[0] for x in r["load_avg_1_5_15"]]
    lines = [
        "## Compat presets reading the extracted and the cleaned text (`bench_recipe_texts.py`)",
        "",
        f"Command: `.venv/bin/python benchmarks/bench_recipe_texts.py --baseline DIR --rounds {r['rounds']}` (DIR: "
        f"the tree before the change, `git archive {r.get('baseline_commit', 'COMMIT')} airflow_curation`). "
        "JSON: `benchmarks/results/recipe_texts.json`.",
        "",
        f"{r['documents']} texts ({r['mb']} MB: our trafilatura text of the web recipe's pages), one "
        "`Preprocessor.process` batch, `--line-rules fineweb --lang en --lang-min-score 0.65`; CPU seconds of the "
        f"call only, median (min-max) of {r['rounds']} alternated rounds, each contender a fresh process. "
        f"**Load: 1-minute load average {min(loads)}-{max(loads)} on {r['cpu']} cores shared with other "
        "helpers' test suites.** Kept documents equal between the trees for `gopher,c4,fineweb` (the project's "
        "presets read the cleaned text as before); the compat recipe's differ (it now reads the extracted text "
        "where datatrove does).",
        "",
        "| contender | kept | CPU s cold | MB/s cold | CPU s warm | MB/s warm |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, c in r["cold"].items():
        w = r["warm"][name]
        lines.append(
            f"| {name} | {r['kept'][name]} | {c['median']:.3f} ({c['min']:.3f}-{c['max']:.3f}) | "
            f"{r['mb'] / c['median']:.2f} | {w['median']:.3f} ({w['min']:.3f}-{w['max']:.3f}) | "
            f"{r['mb'] / w['median']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--baseline", help="the source tree before the change (git archive COMMIT airflow_curation)")
    ap.add_argument("--baseline-commit", help="the commit DIR was archived from, for the record")
    ap.add_argument("--render", action="store_true", help="only rewrite the RESULTS.md block from the JSON")
    args = ap.parse_args()
    if not args.render:
        if not args.baseline:
            raise SystemExit("--baseline DIR is needed for a run")
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(
            json.dumps({**run(args.rounds, args.baseline), "baseline_commit": args.baseline_commit}, indent=1) + "\n"
        )
    replace_block(RESULTS, "bench_recipe_texts", render(json.loads(OUT.read_text())), after="bench_web_recipe")


if __name__ == "__main__":
    main()
