"""benchmarks/scale_corpus.py: later passes re-visit earlier documents, so near duplicates keep growing."""

from __future__ import annotations

import importlib.util
import json
import sysconfig
from collections import defaultdict
from pathlib import Path

import pytest

from airflow_curation.core.minhash import MinHasher, jaccard

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "scale_corpus.py"


@pytest.fixture
def corpus():
    spec = importlib.util.spec_from_file_location("scale_corpus", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pool(workdir: Path) -> int:
    """A small pool of real text (standard library sources cut at blank lines), as ``write_pool`` leaves it."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    docs = []
    for name in ("argparse.py", "difflib.py", "textwrap.py", "shlex.py", "typing.py", "inspect.py"):
        docs += [p for p in (stdlib / name).read_text().split("\n\n") if len(p.split()) >= 40]
    docs = docs[:400]
    pool = workdir / "pool.jsonl"
    with open(pool, "w", encoding="utf-8") as f:
        for i, text in enumerate(docs):
            f.write(json.dumps({"text": text, "url": f"doc{i}"}) + "\n")
    (workdir / "pool.jsonl.done").write_text(json.dumps({"documents": len(docs), "bytes": pool.stat().st_size}))
    return pool.stat().st_size


def _near_duplicate_share(files: list[Path]) -> dict[int, float]:
    """Per pass r >= 1: the share of its documents whose 5-gram shingles reach Jaccard 0.8 with the same pool
    document in an earlier pass (the dedup stage's shingling and threshold)."""
    hasher = MinHasher()
    seen: dict[str, list] = defaultdict(list)
    near: dict[int, list[bool]] = defaultdict(list)
    for f in files:
        for line in f.read_text(encoding="utf-8").splitlines():
            d = json.loads(line)
            base, _, p = d["url"].partition("?pass=")
            r = int(p.partition("&")[0] or 0)  # "&copy=1": the stationary structure's near duplicate
            sh = hasher.shingles(d["text"])
            if r:
                near[r].append(any(jaccard(sh, old) >= 0.8 for old in seen[base]))
            seen[base].append(sh)
    return {r: sum(v) / len(v) for r, v in sorted(near.items())}


def test_near_duplicates_grow_across_passes(corpus, tmp_path):
    pool_bytes = _pool(tmp_path)
    # the same pool under two workdirs: 3 passes, then 6 passes of it
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        for name in ("pool.jsonl", "pool.jsonl.done"):
            (tmp_path / d / name).write_bytes((tmp_path / name).read_bytes())
    three = corpus.generate(tmp_path / "a", 3 * pool_bytes / 1e9, file_bytes=pool_bytes // 2)
    six = corpus.generate(tmp_path / "b", 6 * pool_bytes / 1e9, file_bytes=pool_bytes // 2)
    # the sizes share their data: the smaller corpus is the start of the larger
    assert [f.read_bytes() for f in three] == [f.read_bytes() for f in six[: len(three)]]
    share = _near_duplicate_share(six)
    assert len(share) >= 5
    passes = list(share.values())
    assert passes[0] > 0.05  # pass 1 already re-visits part of pass 0
    # the share re-visited grows pass after pass (up to its cap, from pass 4 on), seen over pairs of passes
    assert (passes[0] + passes[1]) / 2 < (passes[2] + passes[3]) / 2 < (passes[4] + passes[5]) / 2
    assert passes[-1] > 2 * passes[0]
    # and the corpus-level share of near duplicates grows with its size
    total = {n: _near_duplicate_share(files) for n, files in (("three", three), ("six", six))}
    mean = {n: sum(v.values()) / len(v) for n, v in total.items()}
    assert mean["six"] > mean["three"]


def test_stationary_structure_keeps_the_near_duplicate_share_flat(corpus, tmp_path):
    """The control corpus: the same share of near duplicates in every pass, each in a cluster of two."""
    pool_bytes = _pool(tmp_path)
    # past 14 passes: letter rotations alone repeat there (pass 15 was pass 1 again)
    files = corpus.generate(tmp_path, 20 * pool_bytes / 1e9, file_bytes=pool_bytes // 2, structure="stationary")
    assert all("stationary" in f.parent.name for f in files)  # apart from the growing corpus's inputs
    share = _near_duplicate_share(files)
    assert len(share) >= 15
    expected = corpus.STATIONARY_SHARE / (1 + corpus.STATIONARY_SHARE)  # a pass's documents that are copies
    for r, s in share.items():
        assert abs(s - expected) < 0.08, (r, s)
    # clusters of two: a document is near only the previous pass's fresh copy, never a chain of passes
    hasher = MinHasher()
    by_base: dict[str, list] = defaultdict(list)
    for f in files:
        for line in f.read_text(encoding="utf-8").splitlines():
            d = json.loads(line)
            by_base[d["url"].partition("?")[0]].append(hasher.shingles(d["text"]))
    for docs in list(by_base.values())[:100]:
        for k, sh in enumerate(docs):
            assert sum(jaccard(sh, other) >= 0.8 for j, other in enumerate(docs) if j != k) <= 1
    with pytest.raises(ValueError, match="structure"):
        corpus.generate(tmp_path, 0.001, structure="shuffled")


def test_no_pass_repeats_an_earlier_one(corpus):
    """Every pass's fresh copy of a document is its own text: no two of 200 passes share a cipher, and no copy
    comes near another (5-gram Jaccard under 0.8). Rotations of 14 letters repeated every 14 passes."""
    ciphers = [tuple(sorted(corpus.cipher(r).items())) for r in range(1, 200)]
    assert len(set(ciphers)) == len(ciphers)
    text = Path(json.__file__).read_text(encoding="utf-8")[:4000]
    hasher = MinHasher()
    copies = [hasher.shingles(text.translate(corpus.cipher(r))) for r in range(0, 60)]
    for a in range(len(copies)):
        for b in range(a):
            assert jaccard(copies[a], copies[b]) < 0.8, (a, b)
