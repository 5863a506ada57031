"""``curation warm``: compile the stages' numba kernels once, into numba's on-disk cache, so that no task
compiles them.

A process whose kernels are not in the cache compiles them before its first batch: 8.5-11 CPU-s for a
preprocess or dedup process, where a cached one starts in ~1 (benchmarks/RESULTS.md, *Compiled kernels*).
On a local install or a shared Slurm venv the first task pays it and the rest load the cache; a Kubernetes
pod starts from its image every time, so an image built without a warm cache pays it in every pod. The
command runs the numba stages (ingest, preprocess with every preset family, boilerplate, dedup,
decontaminate, mix) on a small generated lake in a temporary folder, so that the kernels are compiled for the
argument types the stages really pass, then reports each kernel: loaded from the cache, or compiled (and
whether numba could save it). ``--check`` fails when any kernel had to be compiled: run it after a warm in
a fresh process (an image build) to prove the cache serves every stage.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import random
import sys
import tempfile
import time
from pathlib import Path

# The presets whose signals are computed by different kernels: the project's (signals), the datatrove
# definitions (compat_kernel, compat_split, compat_vocab) and FineWeb's line rules.
PRESETS = "gopher,structure,c4,fineweb,gopher_compat,c4_compat,fineweb_compat"

WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which but have an they "
    "you were their one all we can her has there been if more when will would who so no data model corpus shard "
    "training document signal quality language token sentence paragraph filter pipeline dataset curation web page"
).split()
EXTRA = (
    "Café déjà vu, naïve façade; Straße über Ärger. 数据质量很重要。 Ceci n'est pas une pipe :) don't won't "
    "e.g. i.e. Dr. Smith, see https://example.org/a?b=c or mail me at someone@example.org 🙂 — «quoted» …"
)
CODE = "def f(x):\n    # add one\n    return x + 1\n\nfor i in range(10):\n    print(f(i))  # {braces}\n"
FOOTER = "Copyright 2026 Example Corp. All rights reserved. | Privacy policy | Cookie settings"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "warm",
        help="compile the stages' numba kernels into numba's cache (once per install or image build)",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--check", action="store_true", help="exit 1 when any kernel had to be compiled (a cold cache)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_warm)


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(6, 18))]
    return " ".join(words).capitalize() + rng.choice(".!?.")


def _document(rng: random.Random, paragraphs: int) -> str:
    parts = []
    for _ in range(paragraphs):
        parts.append(" ".join(_sentence(rng) for _ in range(rng.randint(2, 6))))
        if rng.random() < 0.3:
            parts.append("- " + _sentence(rng) + "\n- " + _sentence(rng))
    return "\n\n".join(parts)


def sample_documents(seed: int = 0) -> list[dict]:
    """Documents that reach every kernel: prose, non-ASCII text, code, exact and near duplicates (so dedup's
    components run), a footer on many pages (boilerplate) and one document past 64 KiB (the signal kernel
    counts its separators)."""
    rng = random.Random(seed)
    docs = []
    for i in range(60):
        text = _document(rng, rng.randint(3, 8))
        if i % 5 == 0:
            text += "\n\n" + EXTRA
        if i % 7 == 0:
            text += "\n\n" + CODE
        if i % 2 == 0:
            text += "\n\n" + FOOTER
        docs.append(text)
    docs += [docs[3], docs[4] + " One more sentence at the end.", docs[10].replace("the", "a", 1)]
    docs.append(_document(rng, 400))  # > 64 KiB
    docs.append(CODE * 5)
    return [{"id": f"warm-{i}", "text": t} for i, t in enumerate(docs)]


def _run(argv: list[str]) -> dict:
    from airflow_curation.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    if code:
        raise RuntimeError(f"curation warm: `curation {' '.join(argv)}` exited {code}")
    return json.loads(out.getvalue() or "{}")


def warm(folder: str) -> None:
    """Run the numba stages on a generated lake in ``folder``."""
    docs = sample_documents()
    raw = Path(folder) / "raw.jsonl"
    raw.write_text("".join(json.dumps(d) + "\n" for d in docs))
    evals = Path(folder) / "eval.jsonl"
    evals.write_text(json.dumps({"text": docs[3]["text"]}) + "\n")
    lake = ["--lake", str(Path(folder) / "lake"), "--dataset", "warm", "--run-id", "warm"]
    _run(["ingest", str(raw), *lake])
    # every stage in this process (no Dask workers): the report reads this process's kernels
    local = ["--mapper", "local", "--workers", "1"]
    _run(["preprocess", *lake, *local, "--preset", PRESETS, "--line-rules", "fineweb", "--lang-id", "false"])
    # dedup before boilerplate: it reads preprocess's text, where the near duplicates below stay near ones
    _run(["dedup", *lake, *local, "--all-rows", "--exact", "--verify"])
    _run(["boilerplate", *lake, "--workers", "1", "--min-documents", "2"])
    _run(["decontaminate", *lake, "--eval-sets", f"warm={evals}", "--ngram", "8"])
    _run(["mix", *lake, "--targets", ".=1"])  # every document under the one input's folder


def _warm(args: argparse.Namespace) -> int:
    from airflow_curation.core.jit import kernel_caches

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.WARNING)  # the stages' progress lines are not this command's output
    t0, c0 = time.monotonic(), time.process_time()
    try:
        with tempfile.TemporaryDirectory(prefix="curation-warm-") as folder:
            warm(folder)
    finally:
        root.setLevel(level)
    kernels = kernel_caches()
    compiled = [k for k in kernels if k.compiled]
    unsaved = [k.name for k in compiled if not k.saved]
    report = {
        "kernels": len(kernels),
        "loaded": sum(1 for k in kernels if k.loaded and not k.compiled),
        "compiled": len(compiled),
        "not_saved": unsaved,
        "cache_paths": sorted({k.cache_path for k in kernels}),
        "cpu_s": round(time.process_time() - c0, 2),
        "wall_s": round(time.monotonic() - t0, 2),
        "by_kernel": {k.name: {"loaded": k.loaded, "compiled": k.compiled} for k in kernels},
    }
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(
            f"{report['kernels']} cached kernels: {report['compiled']} compiled, {report['loaded']} loaded from the "
            f"cache, in {report['cpu_s']} CPU-s; cache: {', '.join(report['cache_paths'])}"
        )
    if unsaved:
        print(
            f"curation warm: numba could not save {', '.join(unsaved)}: make the cache folder writable or set NUMBA_CACHE_DIR",
            file=sys.stderr,
        )
        return 1
    if args.check and compiled:
        print(
            f"curation warm --check: {len(compiled)} kernels were not in the cache: {', '.join(k.name for k in compiled)}",
            file=sys.stderr,
        )
        return 1
    return 0
