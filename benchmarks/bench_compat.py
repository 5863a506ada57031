"""Reference-compatible presets against datatrove 0.10.1: decisions per class, and speed per core.

    .venv/bin/python benchmarks/bench_compat.py agree --split heldout     # agreement table (per class)
    .venv/bin/python benchmarks/bench_compat.py speed --rounds 5          # MB/s per core, side by side
    .venv/bin/python benchmarks/bench_compat.py --render                  # RESULTS.md block from the JSON
    .venv/bin/python benchmarks/bench_compat.py kernel --file F --baseline DIR  # the compiled pass alone, A/B

Documents: ``benchmarks/compat_corpus.py`` (documentation pages, the Debian handbook in 25 languages,
READMEs/changelogs/NEWS and man pages), split once by a hash of each name into ``tune`` (looked at while the
word splitter and the rules were written) and ``heldout`` (only measured, after).

``agree``: datatrove's ``GopherQualityFilter`` + ``GopherRepetitionFilter`` (as one decision: kept by both),
``C4QualityFilter`` and ``FineWebQualityFilter``, at their defaults, run once per split in the oracle venv
(``.venv-oracles``, scripts/setup_oracles.sh; cached under ``benchmarks/data/compat/``), against the
``*_compat`` presets and, for the record, the project's own ``gopher``, ``c4`` and ``fineweb``. A document
agrees when both keep it or both drop it; the reason is compared too (``reason``: same first failing rule,
over the documents both drop).

``speed``: one fresh process per contender (``python -P``), CPU seconds of the filtering loop only
(``time.process_time``), contenders alternated within each round, median and spread of ``--rounds``:
datatrove's four filters (one ``Document`` per filter, as a pipeline would pass it on), the three ``*_compat``
presets (``dt_*`` signals + rules), and the project's ``gopher,c4,fineweb`` (the compiled kernel); with
``--baseline DIR``, the ``*_compat`` presets of another source tree too (``git archive COMMIT airflow_curation |
tar -x -C DIR``: the pure-Python version before the compiled pass). The text is the held-out split's first
``--mb`` MB. Each process times two passes over it: ``cold``, the first (what a fresh worker pays: the compat
presets split every whitespace piece they have not seen into words once per process), and ``warm``, the
second (every piece known). Load averages are recorded per round.

``kernel``: the compat signals alone (``compat._kernel_signals``, every ``dt_*`` group) on the texts of one
Parquet file (``--file``, e.g. a scale-corpus part), this tree against ``--baseline DIR``: one fresh process per
tree and round (alternated), each timing three passes after two warm-up passes (tables full), CPU seconds
(``time.process_time``), every pass kept in ``benchmarks/results/compat_kernel.json`` (runs appended).

``words``: per language of the Debian handbook (its HTML pages as the ingest extractor gives their text), the pages
whose words are exactly datatrove's English word tokenizer's (spaCy's, run in the oracle venv), for this tree's
``compat_words.words`` and, with ``--baseline DIR``, another tree's: the word splitter against the reference
itself (some of these pages are in ``compat_corpus``'s tune split too).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import compat_corpus  # noqa: E402
from results import RESULTS, replace_block  # noqa: E402

OUT = HERE / "results" / "compat.json"
DATA = HERE / "data" / "compat"
ORACLE = ROOT / ".venv-oracles" / "bin" / "python"
PAIRS = {  # ours -> datatrove filter(s) it reproduces
    "gopher_compat": ("gopher_quality", "gopher_repetition"),
    "c4_compat": ("c4",),
    "c4_compat_fineweb": ("c4_fineweb",),
    "fineweb_compat": ("fineweb",),
    "gopher": ("gopher_quality", "gopher_repetition"),
    "c4": ("c4",),
    "fineweb": ("fineweb",),
}


def oracle(split: str, texts: list[str]) -> list[dict]:
    path = DATA / f"datatrove_{split}.json"
    if not path.exists():
        src = DATA / f"texts_{split}.json"
        src.write_text(json.dumps(texts))
        cmd = [str(ORACLE), "-P", str(HERE / "compat_oracle.py"), str(src), str(path)]
        subprocess.run(cmd, check=True)
    got = json.loads(path.read_text())["results"]
    if len(got) != len(texts):
        raise RuntimeError(f"{path}: {len(got)} results for {len(texts)} texts; delete it to rerun the oracle")
    return got


def ours(texts: list[str]) -> dict[str, list[tuple[bool, str | None]]]:
    import pyarrow as pa

    from airflow_curation.core.line_clean import LineCleaner
    from airflow_curation.stages.preprocess.stage import Preprocessor

    out = {}
    table = pa.table({"id": [str(i) for i in range(len(texts))], "text": texts})
    for preset in PAIRS:
        # the project's c4 removes lines with line_rules="c4" and applies the document rules to what is left
        cleaner = {"line_rules": "c4"} if preset == "c4" else {}
        res = Preprocessor(preset=preset, **cleaner).process(table)
        out[preset] = list(zip(res.column("keep").to_pylist(), res.column("drop_reason").to_pylist()))
    del LineCleaner
    return out


def _kappa(a: list[bool], b: list[bool]) -> float:
    n = len(a)
    po = sum(x == y for x, y in zip(a, b)) / n
    pa_, pb = sum(a) / n, sum(b) / n
    pe = pa_ * pb + (1 - pa_) * (1 - pb)
    return round((po - pe) / (1 - pe), 4) if pe < 1 else 1.0


def agree(split: str) -> dict:
    docs = [d for d in compat_corpus.load() if d["split"] == split]
    texts = [d["text"] for d in docs]
    theirs = oracle(split, texts)
    mine = ours(texts)
    table: dict = {}
    for preset, filters in PAIRS.items():
        per_class = {}
        for cls in (*compat_corpus.CLASSES, "all"):
            idx = [i for i, d in enumerate(docs) if cls == "all" or d["cls"] == cls]
            ref = [all(theirs[i][f][0] for f in filters) for i in idx]
            ref_reason = [next((theirs[i][f][1] for f in filters if not theirs[i][f][0]), None) for i in idx]
            got = [mine[preset][i][0] for i in idx]
            got_reason = [mine[preset][i][1] for i in idx]
            both_drop = [(a, b) for a, b, x, y in zip(ref_reason, got_reason, ref, got) if not x and not y]
            per_class[cls] = {
                "documents": len(idx),
                "agreement": round(sum(a == b for a, b in zip(ref, got)) / len(idx), 4),
                "kappa": _kappa(ref, got),
                "kept_datatrove": sum(ref),
                "kept_ours": sum(got),
                "same_reason": round(sum(a == b for a, b in both_drop) / len(both_drop), 4) if both_drop else None,
                "disagreements": dict(
                    Counter(
                        f"{b or 'kept'} / datatrove {a or 'kept'}"
                        for a, b, x, y in zip(ref_reason, got_reason, ref, got)
                        if x != y
                    ).most_common(8)
                ),
            }
        table[preset] = per_class
    return {
        "split": split,
        "documents": len(docs),
        "mb": round(sum(len(t.encode()) for t in texts) / 1e6, 2),
        "presets": table,
    }


DATATROVE_RUN = """
import json, sys, time
from datatrove.data import Document
from datatrove.pipeline.filters import C4QualityFilter, FineWebQualityFilter, GopherQualityFilter, GopherRepetitionFilter
texts = json.load(open(sys.argv[1]))
filters = [GopherQualityFilter(), GopherRepetitionFilter(), C4QualityFilter(), FineWebQualityFilter()]
filters[0].filter(Document(text="warm up the tokenizer. " * 20, id="w"))
seconds = []
for _ in range(2):
    t = time.process_time()
    kept = 0
    for i, x in enumerate(texts):
        kept += all(f.filter(Document(text=x, id=str(i))) is True for f in filters)
    seconds.append(time.process_time() - t)
print(json.dumps({"seconds": seconds, "kept": kept}))
"""
OURS_RUN = """
import json, sys, time
sys.path.insert(0, sys.argv[3])
import pyarrow as pa
from airflow_curation.stages.preprocess.stage import Preprocessor
texts = json.load(open(sys.argv[1]))
p = Preprocessor(preset=sys.argv[2])
table = pa.table({"id": [str(i) for i in range(len(texts))], "text": texts})
p.process(table.slice(0, 8))  # warm up: the kernel's compile cache, the regexes
seconds = []
for _ in range(2):
    t = time.process_time()
    res = p.process(table)
    seconds.append(time.process_time() - t)
print(json.dumps({"seconds": seconds, "kept": sum(res.column("keep").to_pylist())}))
"""
CONTENDERS = {
    "datatrove (4 filters)": None,
    "ours gopher_compat,c4_compat,fineweb_compat": "gopher_compat,c4_compat,fineweb_compat",
    "ours gopher,c4,fineweb (kernel)": "gopher,c4,fineweb",
}


BASELINE = "ours gopher_compat,c4_compat,fineweb_compat, baseline tree"
KERNEL_OUT = HERE / "results" / "compat_kernel.json"
KERNEL_RUN = """
import json, sys, time
sys.path.insert(0, sys.argv[2])
import pyarrow.parquet as pq
from airflow_curation.core.compat import COMPAT_SIGNALS, _kernel_signals
texts = [t or "" for t in pq.read_table(sys.argv[1], columns=["text"]).column("text").to_pylist()]
names = frozenset(COMPAT_SIGNALS)
_kernel_signals(texts, names)  # the piece and word tables filled
_kernel_signals(texts, names)
seconds = []
for _ in range(3):
    t = time.process_time()
    _kernel_signals(texts, names)
    seconds.append(time.process_time() - t)
print(json.dumps(seconds))
"""


def kernel(path: str, rounds: int, baseline: str) -> dict:
    trees = {"ours": str(ROOT), "baseline": baseline}
    runs = []
    for r in range(rounds):
        for who in list(trees) if r % 2 == 0 else list(trees)[::-1]:
            cmd = [sys.executable, "-P", "-c", KERNEL_RUN, path, trees[who]]
            got = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
            runs.append({"round": r, "who": who, "seconds": got, "load": os.getloadavg()[0]})
            print(json.dumps(runs[-1]), flush=True)
    best = {w: sorted(min(x["seconds"]) for x in runs if x["who"] == w) for w in trees}
    return {"file": path, "rounds": rounds, "baseline": baseline, "runs": runs, "min_per_process": best}


HANDBOOK = Path("/usr/share/doc/debian-handbook/html")


def _handbook(lang: str) -> list[str]:
    """The Debian handbook's pages in one language (``ru-RU``...), as the ingest extractor gives their text."""
    from airflow_curation.core.html_text import html_to_text

    pages = (html_to_text(f.read_bytes()) for f in sorted((HANDBOOK / lang).glob("*.html")))
    return [t for t in pages if t]


# Word sets beside the handbook (whose pages the splitter's rules were checked on): what each is
OTHER_WORD_SETS = {
    "compat held-out split": "the compat corpus's held-out split (not used to tune the presets; its last "
    "differing documents were read on 2026-12-07 to find the splitter's last three rules)",
    "other packages' pages": "the HTML pages of every other package under /usr/share/doc (libxslt, Node.js, "
    "Valgrind, libffi...; the handbook and Python's docs left out; 3-150 kB, at most 400), extracted as ingest does, "
    "not read while the splitter was written (its last 3 differing pages were read on 2026-12-07: spaCy's symbol "
    "and currency lists)",
}


def _other_word_sets() -> dict[str, list[str]]:
    from airflow_curation.core.html_text import html_to_text

    sys.path.insert(0, str(ROOT / "scripts"))
    from make_sample_corpus import html_candidates

    left_out = ("debian-handbook", "python3")  # the pages the rules were checked on, and Python's (compat corpus)
    pool = [p for p in html_candidates()["other"] if not p.relative_to("/usr/share/doc").parts[0].startswith(left_out)]
    chosen = sorted(random.Random(20261207).sample(pool, min(400, len(pool))))
    fresh = [t for t in (html_to_text(p.read_bytes()) for p in chosen) if t]
    heldout = [d["text"] for d in compat_corpus.load() if d["split"] == "heldout"]
    return dict(zip(OTHER_WORD_SETS, (heldout, fresh)))


WORD_LANGS = "ru-RU el-GR de-DE fr-FR pl-PL cs-CZ tr-TR vi-VN ar-MA fa-IR ja-JP ko-KR zh-CN en-US".split()
DATATROVE_WORDS = """
import json, sys
from datatrove.utils.word_tokenizers import load_word_tokenizer
tok = load_word_tokenizer("eng")
print(json.dumps({k: [tok.word_tokenize(t) for t in v] for k, v in json.load(open(sys.argv[1])).items()}))
"""
OURS_WORDS = """
import json, sys
sys.path.insert(0, sys.argv[3])
from airflow_curation.core.compat_words import words
pages, want = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
print(json.dumps({k: sum(words(t) == w for t, w in zip(v, want[k])) for k, v in pages.items()}))
"""


def word_parity(baseline: str | None) -> dict:
    """Pages whose words are datatrove's tokenizer's, per handbook language, per tree."""
    DATA.mkdir(parents=True, exist_ok=True)
    pages_path, want_path = DATA / "words_pages.json", DATA / "words_datatrove.json"
    pages = {lang: _handbook(lang) for lang in WORD_LANGS}
    pages.update(_other_word_sets())
    pages_path.write_text(json.dumps(pages))
    got = subprocess.run([str(ORACLE), "-P", "-c", DATATROVE_WORDS, str(pages_path)], capture_output=True, check=True)
    want_path.write_bytes(got.stdout)
    trees = {"this tree": str(ROOT), **({f"baseline {baseline}": baseline} if baseline else {})}
    same = {}
    for name, root in trees.items():
        cmd = [sys.executable, "-P", "-c", OURS_WORDS, str(pages_path), str(want_path), root]
        same[name] = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    others = {
        name: {"docs": len(pages.pop(name)), "same": {t: v.pop(name) for t, v in same.items()}}
        for name in OTHER_WORD_SETS
    }
    return {"pages": {k: len(v) for k, v in pages.items()}, "same": same, "other_sets": others}


def speed(rounds: int, mb: float, baseline: str | None = None, lang: str | None = None) -> dict:
    docs = _handbook(lang) if lang else [d["text"] for d in compat_corpus.load() if d["split"] == "heldout"]
    texts, size = [], 0
    for t in docs:
        texts.append(t)
        size += len(t.encode())
        if size >= mb * 1e6:
            break
    DATA.mkdir(parents=True, exist_ok=True)
    path = DATA / "speed_texts.json"
    path.write_text(json.dumps(texts))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    contenders = dict(CONTENDERS)
    if baseline:
        contenders[BASELINE] = CONTENDERS["ours gopher_compat,c4_compat,fineweb_compat"]
    names = list(contenders)
    seconds: dict[str, list[float]] = {n: [] for n in names}
    warm: dict[str, list[float]] = {n: [] for n in names}
    kept: dict[str, int] = {}
    load = []
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            preset = contenders[name]
            if preset is None:
                cmd = [str(ORACLE), "-P", "-c", DATATROVE_RUN, str(path)]
            else:
                root = baseline if name == BASELINE else str(ROOT)
                cmd = [sys.executable, "-P", "-c", OURS_RUN, str(path), preset, root]
            got = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout)
            seconds[name].append(round(got["seconds"][0], 3))
            warm[name].append(round(got["seconds"][1], 3))
            kept[name] = got["kept"]
        load.append([round(x, 2) for x in os.getloadavg()])
    return {
        "documents": len(texts),
        "mb": round(size / 1e6, 2),
        "rounds": rounds,
        "load_avg_1_5_15": load,
        "kept": kept,
        "seconds": {
            n: {"median": statistics.median(s), "min": min(s), "max": max(s), "runs": s} for n, s in seconds.items()
        },
        "mb_per_s": {n: round(size / 1e6 / statistics.median(s), 3) for n, s in seconds.items()},
        "seconds_warm": {
            n: {"median": statistics.median(s), "min": min(s), "max": max(s), "runs": s} for n, s in warm.items()
        },
        "mb_per_s_warm": {n: round(size / 1e6 / statistics.median(s), 3) for n, s in warm.items()},
        "baseline": baseline,
        "texts": f"the Debian handbook's {lang} pages" if lang else "held-out documents",
    }


def render(r: dict) -> str:
    lines = ["## Reference-compatible presets (datatrove 0.10.1)", ""]
    for split in ("heldout", "tune"):
        a = r.get("agree", {}).get(split)
        if not a:
            continue
        lines += [
            f"`{a['command']}` ({a['when']}): {a['documents']} documents ({a['mb']} MB) of the **{split}** split "
            f"({'never looked at while tuning' if split == 'heldout' else 'looked at while tuning'}). Agreement of "
            "keep/drop with datatrove at its default thresholds (kappa in brackets); `same reason`: over the "
            "documents both drop, the same first failing rule.",
            "",
            "| preset | "
            + " | ".join(
                f"{c} ({a['presets']['gopher']['all' if c == 'all' else c]['documents']})"
                for c in (*compat_corpus.CLASSES, "all")
            )
            + " | same reason (all) |",
            "| --- | " + " | ".join("---:" for _ in (*compat_corpus.CLASSES, "all")) + " | ---: |",
        ]
        for preset, per in a["presets"].items():
            cells = [f"{per[c]['agreement']:.2%} ({per[c]['kappa']:.2f})" for c in (*compat_corpus.CLASSES, "all")]
            same = per["all"]["same_reason"]
            shown = "own names" if "_compat" not in preset else "-" if same is None else f"{same:.2%}"
            lines.append(f"| `{preset}` | " + " | ".join(cells) + f" | {shown} |")
        lines.append("")
        worst = [
            (p, c, per[c]["disagreements"])
            for p, per in a["presets"].items()
            if "_compat" in p
            for c in compat_corpus.CLASSES
            if per[c]["disagreements"]
        ]
        if worst:
            lines.append("Disagreements of the compat presets (ours / datatrove):")
            lines += [f"- `{p}`, {c}: " + "; ".join(f"{k}: {v}" for k, v in d.items()) for p, c, d in worst]
            lines.append("")
    for s in [r.get("speed"), *r.get("speed_lang", {}).values()]:
        if not s:
            continue
        lines += [
            f"Speed: `{s['command']}` ({s['when']}), {s['documents']} {s.get('texts', 'held-out documents')}, "
            f"{s['mb']} MB, one core per "
            f"process, CPU seconds of the filtering loop, {s['rounds']} rounds alternated; load averages per round "
            f"{s['load_avg_1_5_15']}.",
            "",
        ]
        if "seconds_warm" in s:
            lines += [
                "`cold`: the process's first pass over the text (the compat presets split each whitespace piece they "
                "have not seen into words, once per process); `warm`: its second pass (every piece known)."
                + (f" Baseline tree: `{s['baseline']}`." if s.get("baseline") else ""),
                "",
                "| contender | MB/s per core, cold | CPU s cold, median (min-max) | MB/s per core, warm "
                "| CPU s warm, median (min-max) | kept |",
                "| --- | ---: | ---: | ---: | ---: | ---: |",
            ]
            for n, v in s["seconds"].items():
                w = s["seconds_warm"][n]
                lines.append(
                    f"| {n} | {s['mb_per_s'][n]} | {v['median']} ({v['min']}-{v['max']}) | {s['mb_per_s_warm'][n]} "
                    f"| {w['median']} ({w['min']}-{w['max']}) | {s['kept'][n]} |"
                )
        else:
            lines += ["| contender | MB/s per core | CPU s median (min-max) | kept |", "| --- | ---: | ---: | ---: |"]
            for n, v in s["seconds"].items():
                lines.append(f"| {n} | {s['mb_per_s'][n]} | {v['median']} ({v['min']}-{v['max']}) | {s['kept'][n]} |")
        lines.append("")
    for h in r.get("speed_history", []):
        lines.append(
            f"Earlier: `{h['command']}` ({h['when']}): "
            + ", ".join(
                f"{n} {v} MB/s cold" + (f" / {h['mb_per_s_warm'][n]} warm" if "mb_per_s_warm" in h else "")
                for n, v in h["mb_per_s"].items()
            )
            + "."
        )
    if r.get("speed_history"):
        lines.append("")
    w = r.get("words")
    if w:
        trees = list(w["same"])
        lines += [
            f"Words: `{w['command']}` ({w['when']}): Debian handbook pages (the ingest extractor's text) whose words are "
            "exactly datatrove's English word tokenizer's (spaCy's), per language.",
            "",
            "| language | pages | " + " | ".join(trees) + " |",
            "| --- | ---: | " + " | ".join("---:" for _ in trees) + " |",
        ]
        for lang, n in w["pages"].items():
            lines.append(f"| {lang} | {n} | " + " | ".join(str(w["same"][t][lang]) for t in trees) + " |")
        total = sum(w["pages"].values())
        lines.append(
            f"| all | {total} | "
            + " | ".join(f"{sum(w['same'][t].values())} ({sum(w['same'][t].values()) / total:.1%})" for t in trees)
            + " |"
        )
        for name, h in w.get("other_sets", {}).items():
            lines += [
                "",
                f"{name.capitalize()}: {OTHER_WORD_SETS[name]}, {h['docs']} documents with exactly datatrove's words: "
                + ", ".join(f"{t} {k} ({k / h['docs']:.1%})" for t, k in h["same"].items())
                + ".",
            ]
        lines.append("")
    for h in r.get("words_history", []):
        total = sum(h["pages"].values())
        lines.append(
            f"Earlier: `{h['command']}` ({h['when']}): "
            + ", ".join(f"{t} {sum(v.values())} of {total} pages" for t, v in h["same"].items())
            + "."
        )
    if r.get("words_history"):
        lines.append("")
    lines.append("JSON: `benchmarks/results/compat.json`.")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", nargs="?", choices=("agree", "speed", "words", "kernel"))
    ap.add_argument("--file", help="kernel: the Parquet file whose texts are timed")
    ap.add_argument("--split", default="heldout", choices=("tune", "heldout"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mb", type=float, default=2.0)
    ap.add_argument("--baseline", help="another source tree whose *_compat presets run as one more contender")
    ap.add_argument("--lang", help="speed: the Debian handbook's pages in this language (ru-RU...), not held-out text")
    ap.add_argument("--render", action="store_true")
    args = ap.parse_args()
    r = json.loads(OUT.read_text()) if OUT.exists() else {}
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if args.what == "agree":
        got = agree(args.split)
        got.update(command=f".venv/bin/python benchmarks/bench_compat.py agree --split {args.split}", when=when)
        r.setdefault("agree", {})[args.split] = got
        print(
            json.dumps({p: {c: v["agreement"] for c, v in per.items()} for p, per in got["presets"].items()}, indent=1)
        )
    elif args.what == "kernel":
        got = kernel(args.file, args.rounds, args.baseline)
        got.update(
            command=f".venv/bin/python benchmarks/bench_compat.py kernel --file {args.file} --rounds {args.rounds} "
            f"--baseline {args.baseline}",
            when=when,
        )
        done = json.loads(KERNEL_OUT.read_text()) if KERNEL_OUT.exists() else []
        KERNEL_OUT.write_text(json.dumps([*done, got], indent=1) + "\n")
        print(json.dumps(got["min_per_process"]))
        return
    elif args.what == "words":
        got = word_parity(args.baseline)
        base = f" --baseline {args.baseline}" if args.baseline else ""
        got.update(command=f".venv/bin/python benchmarks/bench_compat.py words{base}", when=when)
        if "words" in r:  # every run is kept
            r.setdefault("words_history", []).append(r["words"])
        r["words"] = got
        print(json.dumps(got["same"], indent=1))
    elif args.what == "speed":
        got = speed(args.rounds, args.mb, args.baseline, args.lang)
        base = f" --baseline {args.baseline}" if args.baseline else ""
        base += f" --lang {args.lang}" if args.lang else ""
        got.update(
            command=f".venv/bin/python benchmarks/bench_compat.py speed --rounds {args.rounds} --mb {args.mb}{base}",
            when=when,
        )
        slots = r.setdefault("speed_lang", {}) if args.lang else r
        key = args.lang or "speed"
        if key in slots:  # every run is kept: the earlier ones move to the history
            r.setdefault("speed_history", []).append(slots[key])
        slots[key] = got
        print(json.dumps(got["mb_per_s"], indent=1))
    if args.what:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(r, indent=1))
    if args.render or args.what:
        replace_block(RESULTS, "bench_compat", render(r))


if __name__ == "__main__":
    main()
