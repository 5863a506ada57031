#!/usr/bin/env python3
"""Build the demo corpus from text every Python installation has: the standard library's sources.

Deterministic (sorted module list, seeded RNG, gzip mtime 0) and offline. Plants exact duplicates,
near duplicates and junk so that every later stage has something to show, and writes a README that
lists what was planted where. The output is a few MB:

```
sample_corpus/
    README.md                 what was planted (ids, files, lines)
    planted.json              the same, machine-readable (for tests and the demo report)
    data/stdlib-000.jsonl ... JSONL, one document per line: id, text, url, kind, module
    data/stdlib-004.jsonl.gz  gzip-compressed JSONL
    data/stdlib-005.parquet   Parquet with id and text columns (plus url, kind, module)
    data/notes-*.txt          plain text files, one document each
    data/web-000.warc.gz      a small gzipped WARC of HTML pages found on this machine (see web_pages)
```

The WARC is what a crawler writes (warcinfo, then a request and a response per page), so the demo runs the
web path end to end: ingest extracts each HTML response's main text; the planted copy of one page under
another URL is dropped by dedup; the 404 and the image are counted as records that are not documents.

Usage: ``python scripts/make_sample_corpus.py [--out sample_corpus] [--modules 300]``
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import html
import json
import os
import random
import shutil
import sys
import sysconfig
from pathlib import Path

SEED = 20261130
MIN_CHARS = 400  # real documents are at least this long (~60 words); shorter pieces are skipped
MAX_CHARS = 12_000  # keep single documents readable and the corpus small
MAX_DOCS_PER_MODULE = 12

BOILERPLATE = (
    "Cookie policy: We use cookies to improve your experience. By continuing to browse this site you "
    "agree to our use of cookies. Accept all cookies. Manage preferences. Privacy policy. Terms of "
    "service. All rights reserved. Subscribe to our newsletter. Sign in. Register. Contact us."
)


# HTML pages for the WARC: documentation Debian ships (python3.11-doc, debian-handbook; both installed by
# scripts/install_system_deps.sh) and any other package's HTML under /usr/share/doc.
WEB_ROOT = Path("/usr/share/doc")
WEB_SOURCES = ("python3.11/html", "debian-handbook/html/en-US")
WEB_MIN_BYTES, WEB_MAX_BYTES = 3_000, 150_000
WARC_DATE = "2026-11-30T00:00:00Z"

SKIP_DIRS = {
    "test",
    "tests",
    "idlelib",
    "lib2to3",
    "site-packages",
    "dist-packages",
    "ensurepip",
    "turtledemo",
    "__pycache__",
    "config-3.11-x86_64-linux-gnu",
}


def stdlib_modules(limit: int) -> list[Path]:
    """Pure-Python stdlib modules (packages included, tests excluded), sorted by path, ``limit`` of them."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        (
            p
            for p in root.rglob("*.py")
            if not p.name.startswith(("_", "test")) and not SKIP_DIRS & set(p.relative_to(root).parts)
        ),
        key=lambda p: p.relative_to(root).as_posix(),
    )
    if len(files) < 20:
        raise SystemExit(f"found only {len(files)} modules under {root}: is this a full Python install?")
    return files[:limit]


def module_documents(path: Path) -> list[dict]:
    """A module's docstring (prose) and its top-level functions and classes (code), as documents."""
    source = path.read_text(encoding="utf-8", errors="replace")
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    root = Path(sysconfig.get_paths()["stdlib"])
    name = ".".join(path.relative_to(root).with_suffix("").parts)
    docs: list[dict] = []
    module_doc = ast.get_docstring(tree)
    if module_doc and len(module_doc) >= MIN_CHARS:
        docs.append(
            {"kind": "docstring", "module": name, "text": module_doc[:MAX_CHARS], "url": f"python-stdlib://{name}"}
        )
    for node in tree.body:
        if len(docs) >= MAX_DOCS_PER_MODULE:
            break
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            seg = ast.get_source_segment(source, node)
            if seg and MIN_CHARS <= len(seg) <= MAX_CHARS:
                docs.append({"kind": "code", "module": name, "text": seg, "url": f"python-stdlib://{name}#{node.name}"})
            doc = ast.get_docstring(node)
            if doc and len(doc) >= MIN_CHARS:
                docs.append(
                    {
                        "kind": "docstring",
                        "module": name,
                        "text": doc[:MAX_CHARS],
                        "url": f"python-stdlib://{name}#{node.name}.__doc__",
                    }
                )
    return docs


def near_duplicate(text: str, rng: random.Random) -> tuple[str, str]:
    """A small edit of ``text`` and a description of it."""
    lines = text.split("\n")
    choice = rng.randrange(4)
    if choice == 0 and len(lines) > 3:
        i = rng.randrange(1, len(lines))
        del lines[i]
        return "\n".join(lines), f"deleted line {i + 1}"
    if choice == 1:
        words = text.split(" ")
        for _ in range(3):
            i = rng.randrange(len(words))
            words[i] = words[i].upper() if words[i].islower() else words[i] + "s"
        return " ".join(words), "changed 3 words"
    if choice == 2:
        return text + "\n\nSee also: the Python documentation.", "appended a sentence"
    return "  " + text.replace("\n", "\n ").rstrip() + "\n", "whitespace changed (indentation)"


def build(out: Path, modules: int, web: int = 30) -> dict:
    rng = random.Random(SEED)
    originals: list[dict] = []
    for path in stdlib_modules(modules):
        originals.extend(module_documents(path))
    for i, d in enumerate(originals):
        d["id"] = f"doc-{i:06d}"

    planted: dict[str, list] = {"exact_duplicates": [], "near_duplicates": [], "junk": [], "bad_records": []}
    extra: list[dict] = []
    n = len(originals)

    def add(doc: dict) -> dict:
        doc["id"] = f"doc-{n + len(extra):06d}"
        extra.append(doc)
        return doc

    # Exact duplicates: the same text under a new id (and url), like a page crawled twice.
    for src in rng.sample(originals, 40):
        dup = add({**src, "url": src["url"] + "?mirror=1"})
        planted["exact_duplicates"].append({"id": dup["id"], "duplicate_of": src["id"]})
    # A cluster: one document copied four times.
    cluster_src = originals[rng.randrange(n)]
    for _ in range(4):
        dup = add({**cluster_src, "url": cluster_src["url"] + "?cluster=1"})
        planted["exact_duplicates"].append({"id": dup["id"], "duplicate_of": cluster_src["id"]})
    # Near duplicates: small edits that exact hashing misses and MinHash finds.
    for src in rng.sample([d for d in originals if len(d["text"]) > 600], 40):
        text, how = near_duplicate(src["text"], rng)
        dup = add({**src, "text": text, "url": src["url"] + "?edited=1"})
        planted["near_duplicates"].append({"id": dup["id"], "near_duplicate_of": src["id"], "edit": how})
    # Junk documents: valid records that quality filters should drop.
    junk_texts = [
        ("very_short", "ok"),
        ("very_short", "See above."),
        ("very_short", "TODO"),
        ("boilerplate", BOILERPLATE),
        ("boilerplate", BOILERPLATE.upper()),
        ("repeated_lines", "\n".join(["Click here to download the file."] * 60)),
        ("repeated_lines", "\n".join(["import os", "import sys"] * 40)),
        ("symbols", "#### $$$$ %%%% &&&& **** ++++ ==== #### $$$$ %%%% &&&& **** ++++ ==== " * 5),
        ("whitespace_only", " \n\t \n  "),
        ("numbers", " ".join(str(rng.randrange(10**6)) for _ in range(120))),
    ]
    for kind, text in junk_texts:
        doc = add({"kind": "junk", "module": "", "text": text, "url": f"junk://{kind}"})
        planted["junk"].append({"id": doc["id"], "junk": kind})

    docs = originals + extra
    rng.shuffle(docs)  # planted documents end up spread over every file

    data = out / "data"
    data.mkdir(parents=True)
    # 7 parts: 0-3 plain JSONL, 4 gzip JSONL, 5 Parquet, 6 plain text files.
    parts: list[list[dict]] = [[] for _ in range(7)]
    for i, d in enumerate(docs):
        parts[i % 7].append(d)
    # Plain text: a handful of documents, one per file (the rest of part 6 joins part 0).
    for j, d in enumerate(parts[6][12:]):
        parts[j % 4].append(d)
    text_docs = parts[6][:12]

    fields = ("id", "text", "url", "kind", "module")
    files: dict[str, int] = {}
    for k in range(4):
        name = f"stdlib-{k:03d}.jsonl"
        lines = [json.dumps({f: d[f] for f in fields}, ensure_ascii=False) for d in parts[k]]
        payload = ("\n".join(lines) + "\n").encode()
        if k == 1:
            payload = _plant_bad_lines(payload, planted, name)
        (data / name).write_bytes(payload)
        files[name] = len(parts[k])
    name = "stdlib-004.jsonl.gz"
    with open(data / name, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
        for d in parts[4]:
            gz.write((json.dumps({f: d[f] for f in fields}, ensure_ascii=False) + "\n").encode())
    files[name] = len(parts[4])

    import pyarrow as pa
    import pyarrow.parquet as pq

    name = "stdlib-005.parquet"
    table = pa.table({f: [d[f] for d in parts[5]] for f in fields})
    pq.write_table(table, data / name, compression="zstd", row_group_size=500)
    files[name] = len(parts[5])
    for j, d in enumerate(text_docs):
        name = f"notes-{j:02d}.txt"
        (data / name).write_text(d["text"], encoding="utf-8")
        files[name] = 1
        d["file"] = name

    # The WARC: its own seeded choice, so the JSONL, Parquet and text parts do not depend on it.
    warc = write_warc(data / "web-000.warc.gz", web_pages(web, originals, random.Random(SEED + 1))) if web else {}
    if warc:
        files[warc["file"]] = len(warc["pages"]) + 1  # the pages and the planted copy (the empty page: quarantined)

    where = {}
    for k, part in enumerate(parts[:6]):
        fname = [
            "stdlib-000.jsonl",
            "stdlib-001.jsonl",
            "stdlib-002.jsonl",
            "stdlib-003.jsonl",
            "stdlib-004.jsonl.gz",
            "stdlib-005.parquet",
        ][k]
        for d in part:
            where[d["id"]] = fname
    for d in text_docs:
        where[d["id"]] = d["file"]
    for group in ("exact_duplicates", "near_duplicates", "junk"):
        for item in planted[group]:
            item["file"] = where[item["id"]]

    summary = {
        "seed": SEED,
        "python": sys.version.split()[0],
        "modules": modules,
        "documents": len(docs),
        "original_documents": n,
        "files": files,
        "bytes": sum(p.stat().st_size for p in data.iterdir()),
        "planted": planted,
        "text_files": {d["file"]: d["id"] for d in text_docs},
        "warc": warc,
    }
    (out / "planted.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / "README.md").write_text(_readme(summary))
    return summary


def html_candidates(root: Path = WEB_ROOT) -> dict[str, list[Path]]:
    """The HTML pages under ``root`` that could go into the WARC, per source, sorted: each of
    :data:`WEB_SOURCES`, then ``other`` (every other package's pages). Each file once, links resolved."""
    seen: set[Path] = set()
    found: dict[str, list[Path]] = {}
    for source in (*WEB_SOURCES, ""):
        pages = []
        for p in sorted((root / source).rglob("*.htm*")) if (root / source).is_dir() else []:
            real = p.resolve()
            if real in seen or not real.is_file() or not WEB_MIN_BYTES <= real.stat().st_size <= WEB_MAX_BYTES:
                continue
            seen.add(real)
            pages.append(p)
        found[source or "other"] = pages
    return found


def web_pages(n: int, originals: list[dict], rng: random.Random) -> list[dict]:
    """``n`` pages for the WARC: a seeded choice spread over the sources found on this machine; where it has
    too few, pages rendered from the corpus's own docstrings make up the number (so the WARC always has
    ``n`` pages, and the same ones on the same machine)."""
    found = html_candidates()
    share = -(-n // len(found))
    chosen: list[Path] = []
    for pages in found.values():
        chosen += sorted(rng.sample(pages, min(share, len(pages))))
    spare = sorted(set(p for pages in found.values() for p in pages) - set(chosen))
    chosen += sorted(rng.sample(spare, min(n - len(chosen), len(spare)))) if len(chosen) < n else []
    out = []
    for p in chosen[:n]:
        rel = p.relative_to(WEB_ROOT).as_posix()
        host, _, path = rel.partition("/")
        out.append({"url": f"https://{host}.doc.example/{path}", "source": str(p), "body": p.read_bytes()})
    prose = [d for d in originals if d["kind"] == "docstring"]
    for d in prose[: max(0, n - len(out))]:
        out.append({"url": f"https://{d['module']}.doc.example/index.html", "source": d["url"], "body": _page(d)})
    return out


def _page(doc: dict) -> bytes:
    """A docstring as a web page, with the navigation and footer a real page has around its text."""
    paras = "".join(f"<p>{html.escape(p)}</p>\n" for p in doc["text"].split("\n\n") if p.strip())
    return (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{doc['module']}</title></head><body>\n"
        f"<nav><a href='/'>Home</a> | <a href='/modules'>Modules</a> | <a href='/search'>Search</a></nav>\n"
        f"<main><h1>{html.escape(doc['module'])}</h1>\n{paras}</main>\n"
        "<footer>Copyright the Python Software Foundation. All rights reserved.</footer></body></html>\n"
    ).encode()


def _warc_record(kind: str, url: str | None, block: bytes, content_type: str, *extra: tuple[str, str]) -> bytes:
    """One gzip member holding one WARC/1.0 record; ids and dates fixed, so the file is the same every build."""
    import base64
    import uuid

    headers = [
        ("WARC-Type", kind),
        ("WARC-Record-ID", f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'{kind} {url}')}>"),
        ("WARC-Date", WARC_DATE),
        *([("WARC-Target-URI", url)] if url else []),
        *extra,
        ("WARC-Block-Digest", "sha1:" + base64.b32encode(hashlib.sha1(block).digest()).decode()),
        ("Content-Type", content_type),
        ("Content-Length", str(len(block))),
    ]
    head = "WARC/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
    return gzip.compress(head.encode() + block + b"\r\n\r\n", mtime=0)


def _http(status: str, content_type: str, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def write_warc(path: Path, pages: list[dict], extras: bool = True) -> dict:
    """A gzipped WARC as a crawler writes it: a warcinfo record, then a request and a response per page.

    :param pages: ``url`` and ``body`` (HTML bytes) each; a body that is not UTF-8 gets no declared charset.
    :param extras: also plant a copy of the page with the most paragraphs under another URL (dedup drops it), a 404, an image
        and a page with no main text (ingest quarantines it), and say so in the returned summary.
    :return: what is in the file: urls of the pages and of each planted record.
    """
    recs = [_warc_record("warcinfo", None, b"software: airflow-curation sample corpus\r\n", "application/warc-fields")]

    def fetch(url: str, status: str, content_type: str, body: bytes) -> None:
        host, _, rest = url.partition("://")[2].partition("/")
        req = f"GET /{rest} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: sample-crawler\r\n\r\n".encode()
        recs.append(_warc_record("request", url, req, "application/http; msgtype=request"))
        # WARC-Identified-Payload-Type: the sniffed media type Common Crawl adds (datatrove's reader uses it)
        media = ("WARC-Identified-Payload-Type", content_type.split(";")[0])
        recs.append(
            _warc_record(
                "response", url, _http(status, content_type, body), "application/http; msgtype=response", media
            )
        )

    for p in pages:
        try:
            p["body"].decode("utf-8")
            ctype = "text/html; charset=utf-8"
        except UnicodeDecodeError:
            ctype = "text/html"
        fetch(p["url"], "200 OK", ctype, p["body"])
    info: dict = {"file": path.name, "pages": [p["url"] for p in pages]}
    if extras and pages:
        src = max(pages, key=lambda p: (p["body"].count(b"<p"), p["url"]))  # prose: most paragraphs
        info["duplicate"] = {"url": src["url"] + "?utm_source=mirror", "duplicate_of": src["url"]}
        fetch(info["duplicate"]["url"], "200 OK", "text/html; charset=utf-8", src["body"])
        info["no_text"] = "https://empty.doc.example/app.html"
        fetch(info["no_text"], "200 OK", "text/html", b"<html><body><script>render()</script></body></html>")
        info["not_documents"] = {
            "response 404": "https://gone.doc.example/",
            "response image/png": "https://img.doc.example/x.png",
        }
        fetch("https://gone.doc.example/", "404 Not Found", "text/html", b"<html><body>Not found</body></html>")
        fetch("https://img.doc.example/x.png", "200 OK", "image/png", b"\x89PNG\r\n\x1a\n" + bytes(32))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(b"".join(recs))
    os.replace(tmp, path)
    info["records"] = len(recs)
    return info


def _plant_bad_lines(payload: bytes, planted: dict, name: str) -> bytes:
    """Records that ingest must quarantine (and count), placed at known line numbers."""
    lines = payload.rstrip(b"\n").split(b"\n")
    bad = [
        (b'{"id": "bad-json", "text": "an unterminated string}', "invalid_json"),
        (b'{"id": "bad-utf8", "text": "caf\xe9 au lait \xff\xfe not UTF-8"}', "invalid_utf8"),
        (b'{"id": "no-text", "title": "a record without a text field"}', "missing_text"),
        (b'{"id": "int-text", "text": 12345}', "non_string_text"),
        (b'{"id": "empty-text", "text": ""}', "empty_text"),
        (b'["not", "an", "object"]', "not_an_object"),
    ]
    step = max(1, len(lines) // (len(bad) + 1))
    for i, (line, reason) in enumerate(bad):
        at = step * (i + 1) + i  # 0-based index after the earlier insertions
        lines.insert(at, line)
        planted["bad_records"].append({"file": name, "line": at + 1, "reason": reason})
    return b"\n".join(lines) + b"\n"


def _readme(s: dict) -> str:
    p = s["planted"]
    rows = "\n".join(f"| `{f}` | {k} |" for f, k in s["files"].items())
    ex = "\n".join(f"| `{d['id']}` | `{d['duplicate_of']}` | `{d['file']}` |" for d in p["exact_duplicates"])
    near = "\n".join(
        f"| `{d['id']}` | `{d['near_duplicate_of']}` | {d['edit']} | `{d['file']}` |" for d in p["near_duplicates"]
    )
    junk = "\n".join(f"| `{d['id']}` | {d['junk']} | `{d['file']}` |" for d in p["junk"])
    bad = "\n".join(f"| `{d['file']}` | {d['line']} | {d['reason']} |" for d in p["bad_records"])
    w = s.get("warc") or {}
    web = (
        f"""
## Web pages: `{w["file"]}` ({len(w["pages"])} HTML pages, {w["records"]} WARC records)

HTML pages found on this machine (a seeded choice from the documentation under /usr/share/doc; pages
rendered from the corpus's docstrings make up the number where there are too few), each as a request and an
HTTP 200 response. Ingest extracts each page's main text (`meta.url` is the page's URL). Planted:

| record | what happens |
| --- | --- |
| `{w["duplicate"]["url"]}` | the page `{w["duplicate"]["duplicate_of"]}` again: dedup drops one of them |
| `{w["no_text"]}` | a page with no main text: quarantined as `no_text_extracted` |
| {", ".join(f"`{u}` ({k})" for k, u in w["not_documents"].items())} | not documents: counted in the file's `records_not_documents` note |
"""
        if w
        else ""
    )
    return f"""# Sample corpus (generated: do not edit, do not commit)

Built by `scripts/make_sample_corpus.py` from the standard library of Python {s["python"]}
({s["modules"]} modules at most, sorted by path; seed {s["seed"]}). Module docstrings and top-level
functions and classes become documents. {s["documents"]} documents ({s["original_documents"]} original),
{s["bytes"] / 1e6:.1f} MB in `data/`. The same facts are in `planted.json`.

Each JSONL record has `id`, `text`, `url`, `kind` (`docstring`, `code` or `junk`) and `module`.

| file | documents |
| --- | --- |
{rows}

## Exact duplicates (same text, new id; the first four share one source)
| id | duplicate of | file |
| --- | --- | --- |
{ex}

## Near duplicates (small edits)
| id | near duplicate of | edit | file |
| --- | --- | --- | --- |
{near}

## Junk documents (valid records that quality filters should drop)
| id | kind | file |
| --- | --- | --- |
{junk}

## Bad records (ingest quarantines them, with file and line)
| file | line | reason |
| --- | --- | --- |
{bad}
{web}"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="sample_corpus", help="output folder (replaced if it exists)")
    ap.add_argument("--modules", type=int, default=600, help="how many stdlib modules to read")
    ap.add_argument("--web-pages", type=int, default=30, help="HTML pages in the WARC (0: no WARC)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    summary = build(tmp, args.modules, args.web_pages)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)  # a half-built corpus never looks finished
    print(
        f"sample corpus: {out}/data ({summary['documents']} documents, {summary['bytes'] / 1e6:.1f} MB); "
        f"planted: see {out}/README.md"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
