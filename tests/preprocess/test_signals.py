"""Signals: the compiled kernel against its pure-Python statement, edge cases, and the code signals."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_curation.core import signals as sig
from airflow_curation.core.code_signals import compute_code_signals
from airflow_curation.core.signals import SIGNALS, compute_signals, reference_signals

from . import corpus

EDGE = [
    "",
    " ",
    "\n",
    "\n\n\n",
    "a",
    "word",
    "Hello world.",
    "\t \u3000 \u00a0",
    "the cat and the dog ...\n\nthe cat and the dog ...\n",
    "a\n\nb\n\na\n",
    "abc \n",
    "a\n \nb",
    "  lead\n\n\n  lead\n",
    "a. . .\nb...\nc…",
    "{ Lorem IPSUM }",
    "The the THE, of. to! and? with that have be",
    "• item one\n• item two\n- three...\n* four",
    "x" * 5000,
    "a_b c_d __ _",
    "wait!!! really?? yes.",
    "\r\nwindows\r\nlines\r\n",
    "# a\n## b\n### c",
    "😀 emoji 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 text",
    "Ünïcödé Wörds ÄÖÜ ß",
    "مرحبا بالعالم. هذا نص عربي.",
    "Привет мир. Это русский текст!",
    "一 二 三 一 二 三 一 二 三 一 二 三",
    # has_lorem_ipsum: ASCII case-insensitive, one space, inside words, at the edges; near misses
    "lorem ipsum",
    "xLoReM IpSuMx dolor",
    "(LOREM IPSUM.)",
    "lorem  ipsum\nlorem\tipsum\nlorem\nipsum\norem ipsum\nlorem ipsu",
    "lorem ipſum dolor",  # a long s: lower() keeps it, so no match (as the reference)
    "ipsum lorem",
    # the line's first word: list numbers and URLs after the fast path
    "1. one\n12) two\n6.2.1. three\n1a. four\nabc123. five\n123\n2.x\n",
    "HTTPS://Example.com/path\nwww.python.org\nhttp://x\nWWW9.x\nhttps2://y\nhttpsabc\n",
    "word\r\n\r\nWORD\r\nword\r\n",
    "a\n" * 200 + "b " * 300,
]


def _assert_same(a: pa.Table, b: pa.Table, texts: list[str]) -> None:
    assert a.column_names == b.column_names == list(SIGNALS)
    for name in SIGNALS:
        x, y = a.column(name).to_pylist(), b.column(name).to_pylist()
        for i, (u, v) in enumerate(zip(x, y)):
            ok = math.isclose(u, v, rel_tol=1e-12, abs_tol=1e-12) if isinstance(u, float) else u == v
            assert ok, f"{name} differs on doc {i} {texts[i][:60]!r}: kernel {u!r}, reference {v!r}"


def test_kernel_equals_reference_on_edge_cases(warm_signals):
    _assert_same(compute_signals(EDGE), reference_signals(EDGE), EDGE)


def test_kernel_equals_reference_on_real_text(warm_signals, prose, code):
    texts = prose[:80] + [t for _, t in code[:20]] + corpus.cjk_docs()
    _assert_same(compute_signals(texts), reference_signals(texts), texts)


def test_string_and_large_string_and_slices_give_the_same_signals(warm_signals):
    texts = EDGE + [None]
    want = compute_signals(pa.array(texts, type=pa.large_string()))
    assert compute_signals(pa.array(texts, type=pa.string())).equals(want)
    sliced = pa.array(["skip me", *texts, "and me"], type=pa.string()).slice(1, len(texts))
    assert compute_signals(sliced).equals(want)
    assert compute_signals(pa.chunked_array([pa.array(texts[:5]), pa.array(texts[5:])])).equals(want)


def test_empty_text_gives_zeros_not_errors(warm_signals):
    row = compute_signals(["", None]).to_pylist()
    for r in row:
        assert r["n_chars"] == r["n_words"] == r["n_lines"] == 0
        assert all(v in (0, 0.0, False) for v in r.values())


def test_known_values(warm_signals):
    r = compute_signals(["The cat sat.\nThe cat sat.\n\nA dog #1 ran...\n- a bullet"]).to_pylist()[0]
    assert r["n_words"] == 13
    assert r["n_lines"] == 5 and r["max_line_len"] == 15
    assert r["dup_line_frac"] == pytest.approx(1 / 4)  # 4 non-blank lines, one repeat
    assert r["dup_line_char_frac"] == pytest.approx(12 / r["n_chars"])
    assert r["n_stop_words"] == 2  # "The", "The" (Gopher's list)
    assert r["hash_word_ratio"] == pytest.approx(1 / 13)
    assert r["ellipsis_line_frac"] == pytest.approx(1 / 4)
    assert r["bullet_line_frac"] == pytest.approx(1 / 4)
    assert r["terminal_punct_line_frac"] == pytest.approx(3 / 4)  # "sat." twice and "ran..."
    assert r["n_sentences"] == 3
    rep = compute_signals(["one two three four five " * 4]).to_pylist()[0]
    # three repeats of the 5-gram cover 15 of 20 words; 5-grams start repeating at the 6th word
    assert rep["dup_5gram_char_frac"] == pytest.approx((3 + 3 + 5 + 4 + 4) * 3 / rep["n_chars"])
    # four 2-grams occur 4 times; the tie goes to the longest, "three four"
    assert rep["top_2gram_char_frac"] == pytest.approx(4 * len("threefour") / rep["n_chars"])


def test_class_table_is_pythons_predicates_at_every_code_point():
    """The kernel's per-code-point classes (built with numpy's string ufuncs) are str.isalpha, isalnum,
    isdigit and isspace of each of the 0x110000 code points, surrogates and NUL included."""
    table = sig.class_table()
    for cp in range(0x110000):
        c = chr(cp)
        want = sig._ALPHA * c.isalpha() | sig._ALNUM * c.isalnum() | sig._DIGIT * c.isdigit() | sig._SPACE * c.isspace()
        assert table[cp] & (sig._ALPHA | sig._ALNUM | sig._DIGIT | sig._SPACE) == want, hex(cp)


def test_non_latin_scripts_count_letters(warm_signals):
    rows = compute_signals(corpus.cjk_docs()).to_pylist()
    assert rows and all(r["alpha_frac"] > 0.3 for r in rows)
    ru = compute_signals(["Привет мир. Это русский текст!"]).to_pylist()[0]
    assert ru["n_words"] == 5 and ru["alpha_frac"] == pytest.approx(24 / 30)


def test_one_token_and_huge_document(warm_signals):
    one = compute_signals(["token"]).to_pylist()[0]
    assert one["n_words"] == 1 and one["top_2gram_char_frac"] == 0.0 and one["dup_5gram_char_frac"] == 0.0
    para = "The quick brown fox jumps over the lazy dog near the river bank.\n"
    huge = para * (50 * 1024 * 1024 // len(para))  # a 50 MB document of one repeated line
    r = compute_signals([huge, "small doc"]).to_pylist()
    assert r[0]["n_chars"] == len(huge) and r[0]["n_lines"] == huge.count("\n")
    assert r[0]["dup_line_frac"] == pytest.approx(1 - 1 / r[0]["n_lines"])
    assert r[0]["dup_10gram_char_frac"] > 0.75  # all words but the first line's; spaces are the rest
    assert r[1]["n_words"] == 2


def test_large_ngram_tables_equal_the_reference(warm_signals, prose):
    """A document of more than 8,192 words counts its 2-grams in a table of at least ``PREFETCH_SLOTS`` slots, whose
    probes prefetch slots ahead; one that repeats throughout keeps that many candidates for longer n-grams too.
    Every n-gram signal equals the reference's, on both sides of the threshold."""
    import random

    rng = random.Random(20)
    words = " ".join(prose).split()
    vocab = sorted(set(words))[:60]
    passage = " ".join(words[:400])
    texts = [
        # prose in pieces that recur: repeats of every length, candidates down to n = 10
        "\n".join(
            " ".join(words[s : s + rng.randint(3, 40)]) for s in (rng.randrange(len(words) - 40) for _ in range(2000))
        ),
        # 60 words drawn at random: nearly every 2-gram repeats, few 5-grams do
        " ".join(rng.choice(vocab) for _ in range(30_000)),
        # unique words around one passage written three times: few repeats, all of them long
        " ".join(f"w{k}" for k in range(12_000)) + f" {passage} x {passage} y {passage}",
        # just under the threshold and just over it
        " ".join(rng.choice(vocab) for _ in range(sig.PREFETCH_SLOTS // 4)),
        " ".join(rng.choice(vocab) for _ in range(sig.PREFETCH_SLOTS // 4 + 2)),
    ]
    assert max(len(t.split()) for t in texts) - 1 >= sig.PREFETCH_SLOTS // 2  # a 2-gram table past the threshold
    _assert_same(compute_signals(texts), reference_signals(texts), texts)
    rows = compute_signals(texts).to_pylist()
    assert (
        rows[0]["dup_10gram_char_frac"] > 0
        and rows[1]["top_2gram_char_frac"] > 0
        and rows[2]["dup_10gram_char_frac"] > 0
    )


def test_batches_are_independent_of_slicing(warm_signals, prose):
    arr = pa.array(prose[:40])
    whole = compute_signals(arr)
    parts = pa.concat_tables([compute_signals(arr.slice(0, 17)), compute_signals(arr.slice(17))])
    assert whole.equals(parts)
    assert compute_signals(pa.chunked_array([arr.slice(0, 5), arr.slice(5)])).equals(whole)


def test_one_computer_gives_each_batch_what_a_fresh_one_does(warm_signals, prose):
    """The kernel's scratch is kept from batch to batch: a batch after others (larger documents, more
    repeats, scratch grown or kept from a larger batch) gets exactly the signals a fresh computer gives it."""
    from airflow_curation.core.signals import SignalComputer

    line = "the same line of words again and again.\n"
    big = line * 125_000  # 1 M separators: scratch grown again (~100 B each) and kept
    mid = line * 20_000 + "\n".join(prose[:20])  # 160 k separators: scratch grown (~18 MB) and kept
    batches = [pa.array(prose[:30]), pa.array([mid, "x"]), pa.array([big]), pa.array(prose[30:60]), pa.array([mid])]
    shared = SignalComputer()
    kept = []
    for batch in batches:
        assert shared.compute(batch).equals(SignalComputer().compute(batch))
        kept.append(shared._scratch_rows)
    assert kept[0] < kept[1] < kept[2] == kept[3] == kept[4]  # grown for mid, then for big; never shrunk


def test_stop_words_are_configurable(warm_signals):
    r = compute_signals(["Der Hund und die Katze"], {"stop_words": ["der", "die", "und"]}).to_pylist()[0]
    assert r["n_stop_words"] == 3
    with pytest.raises(ValueError, match="unknown signal settings"):
        compute_signals(["x"], {"stopwords": ["x"]})


def test_long_stop_lists_probe_past_the_home_slot(warm_signals, prose):
    """A list too long for a collision-free sparse table: displaced keys take the probing path."""
    from airflow_curation.core.signals import SignalConfig

    words = sorted({w.strip(".,;:()`'\"").lower() for t in prose[:200] for w in t.split()} - {""})[:5000]
    table = SignalConfig(stop_words=tuple(words)).stop_hashes()
    assert table[-2] == 1  # some key sits past its home slot
    texts = [*prose[:60], *EDGE]
    cfg = {"stop_words": words}
    _assert_same(compute_signals(texts, cfg), reference_signals(texts, cfg), texts)
    assert sum(compute_signals(texts, cfg).column("n_stop_words").to_pylist()) > 0
    short = {"stop_words": ["der", "die", "und", "the"]}
    _assert_same(compute_signals(texts, short), reference_signals(texts, short), texts)


def test_letter_and_digit_runs_of_every_length(warm_signals):
    """The kernel takes a run of ASCII letters and digits 8 bytes at a time: runs of every length across the 8-byte
    steps, at a document's end (the last document's at the end of the batch's bytes), beside punctuation and
    non-ASCII letters, and stop words of 8, 9 and 16 bytes, with digits, an apostrophe or a capital, counted as the
    reference counts them (and each once: a run's split into pieces never makes a key equal another's)."""
    alnum = "aZ9bY8cX7dW6eV5fU4gT3hS2iR1jQ0kPlOmN"
    runs = [alnum[:n] for n in range(1, 34)]
    stop = ["whatever", "whatevers", "abcdefghijklmnop", "x2y", "don't", "o'clock", "über", "the"]
    texts = [
        " ".join(runs),
        "\n".join(runs),
        *runs,  # each run the whole document: it ends where the document does
        "Whatever whatevers WHATEVER. (whatever) whatever's abcdefghijklmnop abcdefghijklmnopq x2y X2Y don't DON'T",
        "o'clock über Über the The THE abcdefgh abcdefghi wHaTeVeR whatevers.",
        "é" + alnum + "é" + alnum[:8] + "…" + alnum[:16] + "_" + alnum[:7],
        "ends with a stop word: whatever",
        "abcdefghijklmnop",
    ]
    cfg = {"stop_words": stop}
    _assert_same(compute_signals(texts, cfg), reference_signals(texts, cfg), texts)
    counts = compute_signals(texts, cfg).column("n_stop_words").to_pylist()
    # Whatever whatevers WHATEVER. (whatever) abcdefghijklmnop x2y X2Y don't DON'T (not whatever's, ...mnopq);
    # o'clock über the The THE wHaTeVeR whatevers. (not Über: only ASCII is lowercased)
    assert counts[-5:] == [9, 7, 0, 1, 1]
    words = [w for t in texts for w in t.split()]
    keys = {sig.stop_word_key(w) for w in words} - {b""}
    assert len({sig.stop_key_hash(k) for k in keys}) == len(keys)


def test_python_code_signals(code):
    texts = [t for _, t in code[:30]]
    table = compute_code_signals(texts + ["def broken(:\n    pass\n"], "python").to_pylist()
    assert all(r["syntax_ok"] for r in table[:-1])
    assert table[-1]["syntax_ok"] is False and table[-1]["syntax_nodes"] is None
    assert all(r["syntax_nodes"] > 10 and r["syntax_depth"] >= 3 for r in table[:-1])
    r = compute_code_signals(["# one\nx = 1  # not a comment line\ns = '# in a string'\n"], "python").to_pylist()[0]
    assert r["comment_line_frac"] == pytest.approx(1 / 3) and r["comment_code_ratio"] == pytest.approx(1 / 2)


@pytest.mark.parametrize(
    "language,good,bad",
    [
        ("c", "int main(void) {\n  // entry\n  return 0;\n}\n", "int main( {\n"),
        ("javascript", "function f(x) {\n  /* twice */\n  return 2 * x;\n}\n", "function (\n"),
        ("rust", "fn main() {\n    // hi\n    let x = 1;\n}\n", "fn main( {\n"),
    ],
)
def test_tree_sitter_code_signals(language, good, bad):
    ok, broken = compute_code_signals([good, bad], language).to_pylist()
    assert ok["syntax_ok"] is True and ok["syntax_nodes"] > 5 and ok["comment_line_frac"] == pytest.approx(1 / 4)
    assert broken["syntax_ok"] is False


def test_unknown_language_gives_null_syntax_signals():
    r = compute_code_signals(["x := 1\n-- c\n"], "cobol").to_pylist()[0]
    assert r["syntax_ok"] is None and r["syntax_nodes"] is None


def test_a_hugging_face_tokenizer_file_counts_tokens(tmp_path, warm_signals):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "the": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    texts = ["the cat sat on the mat", "", "one"]
    r = compute_signals(texts, {"tokenizer": f"hf:{path}"}).to_pylist()
    assert [x["n_tokens"] for x in r] == [6, 0, 1]
    assert r[0]["char_token_ratio"] == pytest.approx(22 / 6) and r[1]["char_token_ratio"] == 0.0
    default = compute_signals(texts).to_pylist()
    assert [x["n_words"] for x in r] == [x["n_words"] for x in default]  # only the token count changes
    with pytest.raises(ValueError, match="tokenizer must be"):
        compute_signals(texts, {"tokenizer": "gpt2"})


_PIECES = [
    "the",
    "The",
    "of",
    "and",
    "cat",
    "cat.",
    "...",
    "…",
    "•",
    "-",
    "#",
    "{",
    "_",
    "a_b",
    "ß",
    "日本",
    "мир",
    "😀",
    "1984",
    "lorem ipsum",
    "?",
    "!",
    "'",
    '"',
    "”",
]


@settings(
    max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(_PIECES),
            st.sampled_from([" ", "  ", "\n", "\n\n", "\t", "\r\n", "\u3000"]),
            st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8),
        ),
        max_size=60,
    ).map("".join)
)
def test_kernel_equals_reference_on_generated_text(warm_signals, text):
    _assert_same(compute_signals([text]), reference_signals([text]), [text])


_ALNUM_ASCII = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_RUN_STOP = ["the", "whatever", "abcdefghi", "x9", "don't", "a1b2c3d4e5f6g7h8", "é1"]


@settings(
    max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.lists(
            st.one_of(
                st.text(alphabet=_ALNUM_ASCII, min_size=1, max_size=20),  # runs across the 8-byte steps
                st.sampled_from(
                    _RUN_STOP + ["THE", "The", "X9", "ABCDEFGHI", "Whatever", "(the)", "é", "'", ".", "_", "…"]
                ),
                st.sampled_from([" ", "\n", "\t", "\u3000"]),
            ),
            max_size=30,
        ).map("".join),
        min_size=1,
        max_size=4,
    )
)
def test_runs_in_a_batch_equal_the_reference(warm_signals, texts):
    """Several documents a batch (a run at a document's end meets the next document's letters in the buffer), with
    a stop list of keys shorter and longer than 8 bytes: the 8-byte steps count what the reference counts."""
    cfg = {"stop_words": _RUN_STOP}
    _assert_same(compute_signals(texts, cfg), reference_signals(texts, cfg), texts)
