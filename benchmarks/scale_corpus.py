"""Real text for the scale benchmark: Debian documentation and source files, 1 to 10+ GB of JSONL.

    .venv/bin/python benchmarks/scale_corpus.py --gb 10 [--workdir benchmarks/data/scale]

The **pool** is every distinct text file this machine's Debian packages ship, read in sorted path
order: ``/usr/share/doc`` (HTML stripped the way ``bench_minhash`` does, ``.gz`` decompressed),
``/usr/share/man`` and ``/usr/share/info`` (roff/info sources), ``/usr/include`` (C headers of the
``-dev`` packages), and Python sources (the standard library and the project venv's site-packages,
as ``bench_ingest`` uses the stdlib). Files that are not UTF-8 or hold NUL bytes are skipped, and so
are symlinks (they would be free exact duplicates). Each file is cut at blank lines into documents
of log-normal length (median ~1.5 KB, as ``bench_ingest``), never across files. That pool is about
1 GB here, with the duplicates real distributions have (licence texts, translated handbook pages).

Beyond the pool (2, 5, 10 GB) the disk holds no more distinct real text, so the input continues with
**passes** over the pool, as a crawl re-visits pages: in pass ``r >= 1`` each document is either **fresh**,
a deterministic letter substitution of its pool text (the 14 letters that occur in no Gopher stop word,
``c g j k l m p q r s u x y z``, both cases, rotated by ``r`` places within that set: nearly every word
changes, so it shares no 5-gram shingles with any other pass, while stop words, word lengths,
punctuation and line structure stay), or, with probability ``min(MUTATE_MAX, MUTATE_STEP x r)``, a
**near duplicate of its own previous pass** (a few words substituted, one short line appended: 5-gram
Jaccard >= 0.8 with it). The near-duplicate chains span passes, so the clusters grow with the corpus and
the near-duplicate fraction rises pass after pass (``tests/scripts/test_scale_corpus.py``): dedup's
work per GB is measured with the structure a growing crawl has, not with disjoint copies. Text with no
ASCII letters (CJK or Arabic pages, digits) is unchanged by a substitution, so its fresh copies are
exact duplicates across passes. ``--pool-mb`` caps the pool so that small sizes hold several passes.

``--structure stationary`` is the control for that design: in every pass ``r >= 1`` each document is fresh
(the cipher of pass ``r``), and a fixed share (``STATIONARY_SHARE``) of them is followed by a near duplicate
of the *previous* pass's fresh copy (``mutate`` of it). Every near-duplicate cluster then has two documents,
and the near-duplicate share per GB is the same at every size past the first pass: a dedup cost per GB that
still rises on it is the algorithm's, not the data's. Its inputs go to a ``-stationary`` folder.

Inputs are ``input-NNN.jsonl`` files of 100 MB (``{"text", "url"}``; the url names the pass); size ``s``
GB uses the first ``10 s`` files, so the sizes share their data. Made once; a ``.done`` marker says a
file is complete. A capped pool's inputs go to ``pool<MB>/`` under the workdir (other file sizes: ``-f<bytes>``).
"""

from __future__ import annotations

import argparse
import gzip
import html
import json
import math
import os
import random
import re
import sysconfig
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FILE_BYTES = 100 * 1000 * 1000
SEED = 13
ROTATED = "cgjklmpqrsuxyz"  # no letter of "the be to of and that have with"
MUTATE_STEP = 0.15  # pass r re-visits (mutates) this share x r of the pool's documents ...
MUTATE_MAX = 0.6  # ... up to this share
CORPUS_VERSION = 2  # 2: passes past 14 no longer repeat earlier passes (cipher)
STATIONARY_SHARE = 0.3  # --structure stationary: documents of a pass followed by a near duplicate of the last
WORD_EDITS = 150  # one substituted word per this many words (none in shorter documents)
_WORD = re.compile(r"[A-Za-z]{4,}")
_TAG = re.compile(r"<[^>]+>")
_DROP = re.compile(r"<(script|style|head)\b.*?</\1>", re.S | re.I)
_BLANK = re.compile(r"\n\s*\n")


def sources() -> list[Path]:
    """The pool's files, in a fixed order."""
    venv_site = Path(sysconfig.get_paths()["purelib"])
    roots = [
        (Path("/usr/share/doc"), "*"),
        (Path("/usr/share/man"), "*.gz"),
        (Path("/usr/share/info"), "*.gz"),
        (Path("/usr/include"), "*.h"),
        (Path(sysconfig.get_paths()["stdlib"]), "*.py"),
        (venv_site, "*.py"),
    ]
    out: list[Path] = []
    seen: set[Path] = set()
    for root, pattern in roots:
        if not root.is_dir():
            continue
        for p in sorted(root.rglob(pattern), key=lambda q: q.as_posix()):
            if p in seen or p.is_symlink() or not p.is_file():
                continue
            if root == Path(sysconfig.get_paths()["stdlib"]) and "site-packages" in p.parts:
                continue
            seen.add(p)
            out.append(p)
    return out


def read_text(path: Path) -> str | None:
    """The file as text (decompressed, HTML stripped), or None when it is not UTF-8 text."""
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
        return None
    if "\x00" in text:
        return None
    if path.suffix in (".html", ".htm", ".xhtml"):
        text = html.unescape(_TAG.sub(" ", _DROP.sub(" ", text)))
    return text


def pool_documents() -> Iterator[tuple[str, str]]:
    """``(url, text)`` of every pool document, in a fixed order."""
    rng = random.Random(SEED)
    for path in sources():
        text = read_text(path)
        if not text or len(text.strip()) < 50:
            continue
        paras = [p for p in _BLANK.split(text) if p.strip()]
        k = 0
        while paras:
            want = min(200_000, max(200, int(rng.lognormvariate(math.log(1500), 1.0))))
            take, n = 0, 0
            while take < len(paras) and (n < want or take == 0):
                n += len(paras[take]) + 2
                take += 1
            yield f"file://{path}#{k}", "\n\n".join(paras[:take])
            paras = paras[take:]
            k += 1


def cipher(r: int) -> dict[int, int]:
    """Pass ``r``: rotate the letters of ROTATED by ``r`` places within the set (both cases); from pass
    ``len(ROTATED)`` on, a permutation of them drawn for the pass, with no letter left in place. (Rotations
    alone repeat every 14 passes: past ~4 GB of a 250 MB pool, pass 15 was pass 1 again, so the stationary
    control's duplicate share rose from 18% to 45% at 16 GB, exact duplicates among them.)"""
    if r < len(ROTATED):
        to = ROTATED[r:] + ROTATED[:r]
    else:
        rng = random.Random(f"{SEED}:cipher:{r}")
        letters = list(ROTATED)
        while any(a == b for a, b in zip(letters, ROTATED)):
            rng.shuffle(letters)
        to = "".join(letters)
    return str.maketrans(ROTATED + ROTATED.upper(), to + to.upper())


def _uniform(r: int, i: int) -> random.Random:
    """The generator of document ``i``'s choices in pass ``r`` (the same on every run)."""
    return random.Random(f"{SEED}:{r}:{i}")


def revisit_share(r: int) -> float:
    """The share of pass ``r``'s documents that are near duplicates of their previous pass."""
    return min(MUTATE_MAX, MUTATE_STEP * r) if r > 0 else 0.0


def mutate(text: str, rng: random.Random, r: int) -> str:
    """A near duplicate of ``text``: one word in WORD_EDITS letter-substituted, a short line appended; its
    5-gram shingle set keeps Jaccard >= 0.8 with the original's at every length (the pool's shortest
    documents, ~30 words, get only the line)."""
    words = list(_WORD.finditer(text))
    if len(words) >= WORD_EDITS:
        out, last = [], 0
        picks = sorted(rng.sample(range(len(words)), len(words) // WORD_EDITS))
        table = cipher(1 + rng.randrange(len(ROTATED) - 1))
        for k in picks:
            m = words[k]
            out += [text[last : m.start()], m.group().translate(table)]
            last = m.end()
        text = "".join(out) + text[last:]
    return f"{text}\n\nRetrieved again, visit {r}."


def pass_text(text: str, i: int, r: int) -> str:
    """Pool document ``i`` (``text``) as pass ``r`` has it: back to the last pass that had it fresh, then its
    near-duplicate chain forward."""
    s = r
    while s > 0 and _uniform(s, i).random() < revisit_share(s):
        s -= 1
    out = text.translate(cipher(s)) if s else text
    for t in range(s + 1, r + 1):
        rng = _uniform(t, i)
        rng.random()  # the revisit draw
        out = mutate(out, rng, t)
    return out


def pool_lines(pool: Path, pool_bytes: int | None = None) -> Iterator[str]:
    """The pool's lines, the first ``pool_bytes`` of them (whole lines) when capped."""
    seen = 0
    with open(pool, encoding="utf-8") as f:
        for line in f:
            seen += len(line.encode("utf-8"))
            if pool_bytes is not None and seen > pool_bytes and seen > len(line.encode("utf-8")):
                return
            yield line


def stationary_texts(text: str, i: int, r: int) -> list[str]:
    """Pool document ``i`` in pass ``r`` of the stationary structure: its fresh copy, then (a fixed share of
    documents) a near duplicate of pass ``r - 1``'s fresh copy: clusters of two, whatever the pass."""
    out = [text.translate(cipher(r))]
    rng = _uniform(r, i)
    if rng.random() < STATIONARY_SHARE:
        out.append(mutate(text.translate(cipher(r - 1)) if r > 1 else text, rng, r))
    return out


def passes(pool: Path, pool_bytes: int | None = None, structure: str = "growing") -> Iterator[str]:
    """The input's JSONL lines, pass after pass over the (capped) pool, without end."""
    r = 0
    while True:
        for i, line in enumerate(pool_lines(pool, pool_bytes)):
            if r == 0:
                yield line
                continue
            d = json.loads(line)
            texts = stationary_texts(d["text"], i, r) if structure == "stationary" else [pass_text(d["text"], i, r)]
            for k, text in enumerate(texts):
                url = f"{d['url']}?pass={r}" + (f"&copy={k}" if k else "")
                yield json.dumps({"text": text, "url": url}, ensure_ascii=False) + "\n"
        r += 1


def write_pool(workdir: Path) -> Path:
    """``pool.jsonl`` under ``workdir`` (made once)."""
    workdir.mkdir(parents=True, exist_ok=True)
    pool = workdir / "pool.jsonl"
    if not (workdir / "pool.jsonl.done").exists():
        n = 0
        tmp = pool.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as out:
            for url, text in pool_documents():
                out.write(json.dumps({"text": text, "url": url}, ensure_ascii=False) + "\n")
                n += 1
        os.replace(tmp, pool)
        (workdir / "pool.jsonl.done").write_text(json.dumps({"documents": n, "bytes": pool.stat().st_size}))
        print(f"pool: {n} documents, {pool.stat().st_size / 1e6:.0f} MB", flush=True)
    return pool


def generate(
    workdir: Path,
    gigabytes: float,
    pool_mb: float | None = None,
    file_bytes: int = FILE_BYTES,
    structure: str = "growing",
) -> list[Path]:
    """The input files for ``gigabytes`` of JSONL (made once). The pool is written first
    (``pool.jsonl``); the inputs stream it, pass after pass (over its first ``pool_mb`` MB when capped),
    with near duplicates that grow across passes, or (``structure="stationary"``) a fixed share of them."""
    if structure not in ("growing", "stationary"):
        raise ValueError(f"structure {structure!r}: 'growing' or 'stationary'")
    pool = write_pool(workdir)
    pool_bytes = None if pool_mb is None else int(pool_mb * 1e6)
    key = ("" if pool_mb is None else f"pool{pool_mb:g}") + ("" if file_bytes == FILE_BYTES else f"-f{file_bytes}")
    key += "" if structure == "growing" else f"-{structure}"
    key += f"-v{CORPUS_VERSION}"  # files made by an earlier generator are never mixed with these
    key = key.lstrip("-")
    out_dir = workdir / key if key else workdir
    out_dir.mkdir(parents=True, exist_ok=True)
    n_files = max(1, math.ceil(gigabytes * 1e9 / file_bytes))
    files = [out_dir / f"input-{k:03d}.jsonl" for k in range(n_files)]
    if all((f.parent / (f.name + ".done")).exists() for f in files):
        return files
    stream = passes(pool, pool_bytes, structure)
    for f in files:
        done = f.parent / (f.name + ".done")
        written = 0
        if done.exists():  # the stream is deterministic: consume this file's lines, keep the file
            while written < file_bytes:
                written += len(next(stream).encode("utf-8"))
            continue
        tmp = f.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as out:
            while written < file_bytes:
                line = next(stream)
                out.write(line)
                written += len(line.encode("utf-8"))
        os.replace(tmp, f)
        done.write_text(str(written))
        print(f"wrote {f.name}", flush=True)
    return files


def parquet_inputs(workdir: Path, megabytes: float, out_dir: Path, shard_mb: float = 32.0) -> tuple[list[Path], float]:
    """The first ``megabytes`` of the corpus's text (documents in input order) as zstd Parquet files of
    ``id`` and ``text``, about ``shard_mb`` MB of text each (what a stage-level benchmark feeds a stage
    directly); made once per folder. Returns the files and the MB of UTF-8 text in them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    marker = out_dir / ".done"
    if marker.exists():
        return sorted(out_dir.glob("part-*.parquet")), float(marker.read_text())
    out_dir.mkdir(parents=True, exist_ok=True)
    limit, total, files, batch, batch_bytes = megabytes * 1e6, 0, [], [], 0

    def flush() -> None:
        f = out_dir / f"part-{len(files):04d}.parquet"
        ids = [f"{len(files)}-{k}" for k in range(len(batch))]
        pq.write_table(pa.table({"id": ids, "text": batch}), f, compression="zstd", row_group_size=1024)
        files.append(f)

    for f in generate(workdir, megabytes / 1000):
        with open(f, encoding="utf-8") as lines:
            for line in lines:
                text = json.loads(line)["text"]
                size = len(text.encode("utf-8"))
                batch.append(text)
                batch_bytes += size
                total += size
                if batch_bytes >= shard_mb * 1e6:
                    flush()
                    batch, batch_bytes = [], 0
                if total >= limit:
                    break
        if total >= limit:
            break
    if batch:
        flush()
    marker.write_text(str(total / 1e6))
    return files, total / 1e6


def pool_info(workdir: Path) -> dict:
    return json.loads((workdir / "pool.jsonl.done").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=10)
    ap.add_argument("--pool-mb", type=float, help="cap the pool (more passes at small sizes)")
    ap.add_argument("--workdir", default=str(REPO / "benchmarks" / "data" / "scale"))
    ap.add_argument("--structure", choices=("growing", "stationary"), default="growing", help="near duplicates")
    args = ap.parse_args()
    files = generate(Path(args.workdir), args.gb, args.pool_mb, structure=args.structure)
    print(f"{len(files)} files, pool {pool_info(Path(args.workdir))}")


if __name__ == "__main__":
    main()
