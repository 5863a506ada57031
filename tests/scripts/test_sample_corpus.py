"""The demo corpus script: deterministic, and what its README says was planted is really there."""

import gzip
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "make_sample_corpus.py"


def _build(out: Path) -> dict:
    subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--modules", "80"], check=True, capture_output=True)
    return json.loads((out / "planted.json").read_text())


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus") / "sample_corpus"
    return out, _build(out)


def _records(data: Path) -> dict[str, dict]:
    recs = {}
    for f in sorted(data.iterdir()):
        if f.suffix == ".jsonl":
            lines = f.read_bytes().splitlines()
        elif f.name.endswith(".jsonl.gz"):
            lines = gzip.decompress(f.read_bytes()).splitlines()
        elif f.suffix == ".parquet":
            for r in pq.read_table(f).to_pylist():
                recs[r["id"]] = r
            continue
        else:
            continue
        for line in lines:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if isinstance(r, dict) and isinstance(r.get("text"), str) and r.get("id", "").startswith("doc-"):
                recs[r["id"]] = r
    return recs


def test_planted_duplicates_and_junk_are_where_the_readme_says(corpus):
    out, info = corpus
    data = out / "data"
    recs = _records(data)
    texts = {f.name: f.read_text() for f in data.glob("*.txt")}
    assert set(texts) == set(info["text_files"])
    for name, doc_id in info["text_files"].items():
        recs[doc_id] = {"id": doc_id, "text": texts[name]}
    p = info["planted"]
    for d in p["exact_duplicates"]:
        assert recs[d["id"]]["text"] == recs[d["duplicate_of"]]["text"]
    for d in p["near_duplicates"]:
        a, b = recs[d["id"]]["text"], recs[d["near_duplicate_of"]]["text"]
        assert a != b and abs(len(a) - len(b)) < 0.2 * len(b) + 60
    assert {j["junk"] for j in p["junk"]} >= {"very_short", "boilerplate", "repeated_lines"}
    assert len(p["exact_duplicates"]) >= 40 and len(p["near_duplicates"]) >= 40
    # Every document is somewhere: records + text files + the bad lines are the whole corpus.
    assert len(recs) == info["documents"]
    assert "## Exact duplicates" in (out / "README.md").read_text()


def test_bad_records_are_at_their_lines(corpus):
    out, info = corpus
    reasons = {}
    for b in info["planted"]["bad_records"]:
        line = (out / "data" / b["file"]).read_bytes().splitlines()[b["line"] - 1]
        reasons[b["reason"]] = line
    with pytest.raises(ValueError):
        json.loads(reasons["invalid_json"])
    with pytest.raises(UnicodeDecodeError):
        reasons["invalid_utf8"].decode("utf-8")
    assert "text" not in json.loads(reasons["missing_text"])
    assert json.loads(reasons["empty_text"])["text"] == ""


def test_deterministic(corpus, tmp_path):
    out, _ = corpus
    again = tmp_path / "again"
    _build(again)

    def digest(root: Path) -> dict:
        return {
            p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))
            if p.is_file()
        }

    assert digest(out) == digest(again)
