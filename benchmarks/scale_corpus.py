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
**passes** over the pool, each pass ``r >= 1`` a deterministic letter substitution of it: the 14
letters that occur in no Gopher stop word (``c g j k l m p q r s u x y z``, both cases) are rotated
by ``r`` places within that set. Nearly every word changes, so a pass shares no 5-gram shingles with
the original or with another pass (no cross-pass near duplicates), while the stop words, word
lengths, punctuation and line structure that preprocess measures are untouched and every pass
keeps the pool's own duplicate structure; text with no ASCII letters (CJK or Arabic pages, digits)
is unchanged, so its copies are real exact duplicates across passes. Dedup work per GB therefore
stays comparable across sizes, and dedup is neither trivially all-duplicate nor duplicate-free.

Inputs are ``input-NNN.jsonl`` files of 100 MB (``{"text", "url"}``); size ``s`` GB uses the first
``10 s`` files, so the sizes share their data. Made once; a ``.done`` marker says a file is complete.
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
    """Pass ``r``: rotate the letters of ROTATED by ``r`` places within the set (both cases)."""
    r %= len(ROTATED)
    to = ROTATED[r:] + ROTATED[:r]
    return str.maketrans(ROTATED + ROTATED.upper(), to + to.upper())


def generate(workdir: Path, gigabytes: float) -> list[Path]:
    """The input files for ``gigabytes`` of JSONL (made once). The pool is written first
    (``pool.jsonl``); the inputs stream it, pass after pass."""
    workdir.mkdir(parents=True, exist_ok=True)
    n_files = max(1, math.ceil(gigabytes * 1e9 / FILE_BYTES))
    files = [workdir / f"input-{k:03d}.jsonl" for k in range(n_files)]
    if all((f.parent / (f.name + ".done")).exists() for f in files):
        return files
    pool = workdir / "pool.jsonl"
    if not (workdir / "pool.jsonl.done").exists():
        n = 0
        with open(pool, "w", encoding="utf-8") as out:
            for url, text in pool_documents():
                out.write(json.dumps({"text": text, "url": url}, ensure_ascii=False) + "\n")
                n += 1
        (workdir / "pool.jsonl.done").write_text(json.dumps({"documents": n, "bytes": pool.stat().st_size}))
        print(f"pool: {n} documents, {pool.stat().st_size / 1e6:.0f} MB", flush=True)

    def lines() -> Iterator[str]:
        r = 0
        while True:
            table = cipher(r)
            with open(pool, encoding="utf-8") as f:
                for line in f:
                    if r == 0:
                        yield line
                    else:
                        d = json.loads(line)
                        yield (
                            json.dumps(
                                {"text": d["text"].translate(table), "url": f"{d['url']}?pass={r}"}, ensure_ascii=False
                            )
                            + "\n"
                        )
            r += 1

    stream = lines()
    for f in files:
        done = f.parent / (f.name + ".done")
        written = 0
        if done.exists():  # the stream is deterministic: consume this file's lines, keep the file
            while written < FILE_BYTES:
                written += len(next(stream).encode("utf-8"))
            continue
        tmp = f.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as out:
            while written < FILE_BYTES:
                line = next(stream)
                out.write(line)
                written += len(line.encode("utf-8"))
        os.replace(tmp, f)
        done.write_text(str(written))
        print(f"wrote {f.name}", flush=True)
    return files


def pool_info(workdir: Path) -> dict:
    return json.loads((workdir / "pool.jsonl.done").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=10)
    ap.add_argument("--workdir", default=str(REPO / "benchmarks" / "data" / "scale"))
    args = ap.parse_args()
    files = generate(Path(args.workdir), args.gb)
    print(f"{len(files)} files, pool {pool_info(Path(args.workdir))}")


if __name__ == "__main__":
    main()
