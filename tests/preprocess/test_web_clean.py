"""Web pages in: URL block lists (UT1 layout), banned URL sub-words, line cleaning and Unicode repair, as
preprocess columns that later stages read. Real stages on real files built here; no network."""

from __future__ import annotations

import json
import socket

import pyarrow.parquet as pq
import pytest

from airflow_curation.core.line_clean import LineCleaner, removed_column, resolve_line_rules
from airflow_curation.core.url_filter import UrlFilter, host_of, parent_domains
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.dedup.stage import DedupStage
from airflow_curation.stages.ingest.stage import IngestStage
from airflow_curation.stages.preprocess.stage import PreprocessStage
from airflow_curation.stages.text import ShardText


@pytest.fixture
def no_network(monkeypatch):
    """Any connection attempt fails the test (tldextract must use its bundled suffix list)."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def _ut1(root):
    """A block list in the UT1 layout: a folder per category with domains and urls files."""
    (root / "gambling").mkdir(parents=True)
    (root / "gambling" / "domains").write_text("# UT1 gambling\nbet-now.co.uk\nWWW.Casino-Royal.com\n")
    (root / "adult").mkdir()
    (root / "adult" / "domains").write_text("casino-royal.com\n")  # listed twice: the first category wins
    (root / "adult" / "urls").write_text("example.org/private/page.html\n")
    (root / "empty").mkdir()  # a category folder without lists is not a category
    return root


# -- URL filter ---------------------------------------------------------------------------------------
def test_hosts_are_normalised_and_parents_stop_at_the_registered_domain(no_network):
    assert host_of("HTTPS://user:pw@WWW.Example.COM:8080/a?b") == "example.com"
    assert parent_domains("a.b.bet-now.co.uk") == ["a.b.bet-now.co.uk", "b.bet-now.co.uk", "bet-now.co.uk"]
    assert parent_domains("10.0.0.1") == ["10.0.0.1"]


def test_a_blocked_domain_blocks_its_subdomains_and_urls_and_subwords(tmp_path, no_network):
    f = UrlFilter(str(_ut1(tmp_path / "ut1")), subwords=["porn", "xxx"])
    assert f.reason("https://shop.bet-now.co.uk/odds") == "url_blocklist:gambling"  # via its parent domain
    assert f.reason("http://casino-royal.com") == "url_blocklist:adult"  # adult < gambling by name
    assert f.reason("https://other.co.uk/") is None  # co.uk is a public suffix, never a blocked parent
    assert f.reason("https://example.org/private/page.html/") == "url_blocklist:adult"
    assert f.reason("https://example.org/private/other.html") is None
    assert f.reason("https://news.example.com/XXX-files") == "url_subword"
    assert f.reason(None) is None and f.reason("") is None
    only = UrlFilter(str(tmp_path / "ut1"), categories=["gambling"])
    assert only.reason("http://casino-royal.com") == "url_blocklist:gambling"
    with pytest.raises(ValueError, match="categories \\['nope'\\]"):
        UrlFilter(str(tmp_path / "ut1"), categories=["nope"])
    with pytest.raises(ValueError, match="UT1 layout"):
        UrlFilter(str(tmp_path / "ut1" / "empty"))


# -- line cleaning ------------------------------------------------------------------------------------
PAGE = "\n".join(
    [
        "Home | About | Contact",  # terminal_punct
        "-----------------------",  # symbols
        "The river rose three metres overnight and flooded the lower town.",
        "Please enable JavaScript to view the comments.",  # javascript
        "We use cookies to improve your experience.",  # policy
        "Read our privacy policy and terms of use.",  # policy
        "",
        "Ok.",  # min_words
        "Residents were moved to the school gym [1] before dawn.",  # citation marks removed, line kept
        "» » »",  # symbols
        "More rain is expected on Friday, the forecasters said.",
    ]
)


def test_c4_rules_count_what_each_removed_and_keep_the_rest():
    text, removed, reason = LineCleaner("c4,symbols").clean(PAGE)
    assert reason is None
    assert text.split("\n") == [
        "The river rose three metres overnight and flooded the lower town.",
        "Residents were moved to the school gym  before dawn.",
        "More rain is expected on Friday, the forecasters said.",
    ]
    assert removed == {"symbols": 2, "long_word": 0, "terminal_punct": 1, "min_words": 1, "javascript": 1, "policy": 2}
    # FineWeb's rules are C4's without terminal punctuation: the menu line stays (3 words, no full stop), and
    # without the symbols rule so does "» » »" (3 words); the dashes fall to min_words with "Ok."
    text, removed, _ = LineCleaner("fineweb").clean(PAGE)
    assert "Home | About | Contact" in text and "» » »" in text and "terminal_punct" not in removed
    assert removed["min_words"] == 2 and removed["policy"] == 2


@pytest.mark.parametrize(
    "line,reason",
    [
        ("Lorem ipsum dolor sit amet, consectetur.", "lines_lorem_ipsum"),
        ("function f() { return 1; }.", "lines_curly_bracket"),
    ],
)
def test_lorem_ipsum_and_a_curly_bracket_drop_the_document(line, reason):
    assert LineCleaner("c4").clean("A first sentence that is fine.\n" + line) == ("", {**_zero("c4")}, reason)


def _zero(spec):
    return dict.fromkeys(LineCleaner(spec).counted, 0)


def test_mojibake_is_repaired_and_text_nfc_normalised():
    cleaner = LineCleaner(fix_text=True, normalization="NFC")
    assert cleaner.clean("CafÃ© crÃ¨me â€” the best in town.")[0] == "Café crème — the best in town."
    assert cleaner.clean("Cafe\u0301 au lait.")[0] == "Caf\u00e9 au lait."  # combining accent composed
    assert LineCleaner().clean("Cafe\u0301")[0] == "Cafe\u0301" and not LineCleaner()


def test_unknown_line_rules_are_refused_by_name():
    assert resolve_line_rules("fineweb,symbols")[0] == "symbols"
    with pytest.raises(ValueError, match="'c5'"):
        resolve_line_rules("c5")


# -- the stages ---------------------------------------------------------------------------------------
def _html(title: str, body: list[str], nav: str) -> str:
    paras = "".join(f"<p>{p}</p>" for p in body)
    return (
        f"<html><head><title>{title}</title></head><body><nav><ul><li>{nav}</li></ul></nav>"
        f"<main><article><h1>{title}</h1>{paras}</article></main>"
        "<footer><p>We use cookies to improve your experience.</p><p>Copyright 2026</p></footer></body></html>"
    )


STORY = [
    "The river rose three metres overnight and flooded the lower part of the old town.",
    "Residents were moved to the school gym before dawn, and nobody was hurt.",
    "More rain is expected on Friday, the forecasters said in their evening bulletin.",
    "Please enable JavaScript to view the comments on this article.",
    "Cookie policy: this site uses cookies to count its visitors every day.",
]


RUN = "web-1"


def test_url_filter_and_line_cleaning_through_ingest_preprocess_and_dedup(tmp_path, no_network):
    blocklist = _ut1(tmp_path / "ut1")
    rows = [
        # the same story on two sites: only their cleaned texts are the same
        {"url": "https://news.example.com/flood", "text": _html("Flood", STORY + ["Share this | Tweet"], "Home")},
        {"url": "https://mirror.example.net/f", "text": _html("Flood", STORY + ["Related: Weather | Maps"], "Start")},
        {"url": "https://live.bet-now.co.uk/flood", "text": _html("Flood odds", STORY, "Bets")},  # subdomain
        {"url": "https://example.org/xxx/1", "text": _html("Other", STORY[:3], "Menu")},  # sub-word
        {"url": "https://blog.example.com/x", "text": _html("Lorem", ["Lorem ipsum dolor sit amet, it says."], "M")},
    ]
    src = tmp_path / "in" / "pages.jsonl"
    src.parent.mkdir()
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    from airflow_curation.core.layout import Lake

    lake = Lake(str(tmp_path / "lake"), "web")
    ingest = StageRunner(IngestStage(lake, {"inputs": [str(src)], "text_format": "html"}, RUN)).run()
    assert ingest.accounting["kept"] == 5
    uri = lake.manifest_uri(RUN, "ingest")
    cfg = {
        "input_manifest": uri,
        "preset": "none",
        "mapper": "local",
        "url_blocklist": str(blocklist),
        "url_subwords": "xxx",
        "line_rules": "c4,symbols",
        "fix_text": True,
        "normalization": "NFC",
    }
    pre = StageRunner(PreprocessStage(lake, cfg, RUN)).run()
    acc = pre.accounting
    assert acc["read"] == 5 == acc["kept"] + sum(acc["dropped"].values())
    assert acc["dropped"] == {"url_blocklist:gambling": 1, "url_subword": 1, "lines_lorem_ipsum": 1}
    # per rule, the lines removed from every page (the extractor already left the footers out): each page's
    # title (5, the lorem page's before its lorem line dropped it) and the two share/related lines end in no
    # punctuation; the JavaScript and cookie lines of the 3 full stories
    notes = {k: v for k, v in acc["notes"].items() if k.startswith("lines_removed:")}
    assert notes == {"lines_removed:terminal_punct": 7, "lines_removed:javascript": 3, "lines_removed:policy": 3}
    (entry,) = pre.shards
    attrs = pq.read_table(entry.attrs["preprocess"]).to_pylist()
    kept = [a for a in attrs if a["keep"]]
    assert len(kept) == 2 and kept[0]["clean_text"] == kept[1]["clean_text"]  # menus, shares, banners gone
    assert all(a[removed_column("javascript")] == 1 and a[removed_column("policy")] == 1 for a in kept)
    assert all(a[removed_column("terminal_punct")] == 2 and a[removed_column("symbols")] == 0 for a in kept)
    # later stages read the cleaned text through one reader, keyed by id row for row
    text = ShardText(entry.uri, entry.attrs["preprocess"]).read(["id", "text"]).to_pylist()
    assert [t["text"] for t in text] == [a["clean_text"] for a in attrs]
    # dedup: the two kept pages are exact duplicates only as cleaned text (their shard texts differ)
    raw = {r["id"]: r["text"] for r in ShardText(entry.uri).read(["id", "text"]).to_pylist()}
    assert raw[kept[0]["id"]] != raw[kept[1]["id"]]
    dd = StageRunner(DedupStage(lake, {"input_manifest": lake.manifest_uri(RUN, "preprocess")}, RUN)).run()
    (d,) = dd.shards
    dup = pq.read_table(d.attrs["dedup"]).to_pylist()
    assert sum(r["is_duplicate"] for r in dup) == 1
    assert dd.accounting["dropped"] == {"exact_duplicate": 1, "not_kept_upstream": 3}
    # validate: the curated rows' text is the cleaned text, and the report shows what each rule removed
    from airflow_curation.stages.validate import ValidateStage

    checks = [
        {"type": "sql", "name": "no banner", "query": "SELECT count(*) FROM curated WHERE text LIKE '%cookies%'"},
        {"type": "sql", "name": "curated", "query": "SELECT count(*) FROM curated WHERE text LIKE 'The river%'"},
    ]
    checks[0]["max"], checks[1]["min"] = 0, 1
    cfg = {"input_manifest": lake.manifest_uri(RUN, "dedup"), "checks": checks}
    StageRunner(ValidateStage(lake, cfg, RUN)).run()  # one run id, as a DAG run gives every stage
    report = json.loads(open(lake.path("_manifests", RUN, "report.json")).read())
    by_name = {c["name"]: c for c in report["checks"]}
    assert by_name["no banner"]["status"] == "pass" and by_name["curated"]["observed"] == 1
    html = open(lake.path("_manifests", RUN, "report.html")).read()
    assert "lines_removed:policy" in html and "url_blocklist:gambling" in html


def test_cli_flags_on_plain_parquet(tmp_path, no_network):
    import os
    import subprocess
    import sys

    import pyarrow as pa

    from .conftest import REPO

    src = tmp_path / "pages.parquet"
    texts = ["Menu\nThe river rose three metres overnight.\nWe use cookies here.", "Fine text that stays here."]
    metas = [json.dumps({"url": "https://a.b.bet-now.co.uk/x"}), json.dumps({"url": "https://ok.example.com/"})]
    pq.write_table(pa.table({"id": ["p0", "p1"], "text": texts, "meta": metas}), src)
    args = ["preprocess", str(src), "--output", str(tmp_path / "out"), "--preset", "none", "--line-rules", "c4"]
    args += ["--url-blocklist", str(_ut1(tmp_path / "ut1")), "--url-categories", "gambling", "--fix-text"]
    code = "import sys; from airflow_curation.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": REPO},
        cwd=REPO,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = pq.read_table(tmp_path / "out" / "pages.parquet").to_pylist()
    assert [r["drop_reason"] for r in out] == ["url_blocklist:gambling", None]
    assert out[0]["clean_text"] == "The river rose three metres overnight." and out[0][removed_column("policy")] == 1
