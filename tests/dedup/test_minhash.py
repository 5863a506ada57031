"""MinHash signatures, exact keys and LSH parameters against independent references on real text."""

from __future__ import annotations

import unicodedata

import numpy as np
import pyarrow as pa
import pytest

from airflow_curation.core.minhash import (
    EMPTY,
    MinHasher,
    MinHashParams,
    band_hashes,
    exact_keys,
    jaccard,
    lsh_params,
    normalize,
)

from .corpus import handbook_docs, shingle_set


@pytest.fixture(scope="module")
def hasher() -> MinHasher:
    return MinHasher()


def test_shingles_match_python_re_on_every_script(hasher):
    """Our tokens are exactly ``re``'s ``\\w+`` after NFKC + lowercase, in all 26 locales (Latin, Greek,
    Cyrillic, Arabic, Persian, CJK, Vietnamese...)."""
    docs = handbook_docs(["apt.html", "sect.syslog.html"])
    locales = {i.split("/")[0] for i, _ in docs}
    assert len(locales) >= 20
    for doc_id, text in docs:
        assert len(hasher.shingles(text)) == len(shingle_set(text)), doc_id


def test_estimates_within_three_sigma_of_exact_jaccard(nd_corpus, hasher):
    ids, texts, jac = nd_corpus
    sig, counts = hasher.signatures(texts)
    i, j = np.triu_indices(len(texts), 1)
    sel = jac[i, j] > 0.05
    i, j, true = i[sel], j[sel], jac[i[sel], j[sel]]
    assert len(true) > 1000
    est = (sig[i] == sig[j]).mean(axis=1)
    sigma = np.sqrt(true * (1 - true) / hasher.params.num_perm)
    within = np.abs(est - true) <= 3 * sigma + 1e-9
    assert within.mean() >= 0.99, f"only {within.mean():.4f} of {len(true)} pairs within 3 sigma"
    assert abs(float(np.mean(est - true))) < 0.01  # unbiased


def test_exact_jaccard_of_our_shingles_equals_python(nd_corpus, hasher):
    ids, texts, jac = nd_corpus
    rng = np.random.default_rng(0)
    i, j = np.nonzero(np.triu(jac > 0.3))
    for k in rng.choice(len(i), 50, replace=False):
        a, b = texts[i[k]], texts[j[k]]
        assert jaccard(hasher.shingles(a), hasher.shingles(b)) == pytest.approx(jac[i[k], j[k]], abs=1e-9)


def test_exact_keys_equal_exactly_when_normalised_texts_are():
    docs = [t for _, t in handbook_docs(["sect.syslog.html"])]
    variants = []
    for t in docs[:5]:
        variants += [t, t.upper(), "  " + t.replace(" ", " \u00a0\t ") + "\n\n", unicodedata.normalize("NFKD", t)]
    keys = exact_keys(docs + variants)
    ref = [" ".join(unicodedata.normalize("NFKC", t).lower().split()) for t in docs + variants]
    for a in range(len(ref)):
        for b in range(a + 1, len(ref)):
            assert (tuple(keys[a]) == tuple(keys[b])) == (ref[a] == ref[b])


def test_bad_input_empty_one_token_null_and_huge(hasher):
    sig, counts = hasher.signatures(["", "   \n", "!!! ...", None, "word", "two words"])
    assert counts.tolist() == [0, 0, 0, 0, 1, 1]
    assert (sig[:4] == EMPTY).all() and (sig[4:] != EMPTY).all()
    assert exact_keys(["", "   ", None]).tolist()[0] == exact_keys(["\t"]).tolist()[0]
    # a 50 MB document: one real page repeated; its shingles are the page's plus the seams
    page = handbook_docs(["apt.html"])[0][1]
    huge = (page + "\n") * (50_000_000 // len(page) + 1)
    assert len(huge) >= 50_000_000
    big_sig, big_counts = hasher.signatures(pa.array([huge, page], pa.large_string()))
    assert big_counts[0] > 50 * big_counts[1]
    assert (big_sig[0] == big_sig[1]).mean() >= 0.9
    assert exact_keys([huge]).shape == (1, 2)


@pytest.mark.parametrize("tokenizer", ["space", "char"])
def test_other_tokenizers(tokenizer):
    h = MinHasher(MinHashParams(tokenizer=tokenizer, ngram=3))
    text = "Ab,c  d-e  ÉF"
    tokens = text.lower().split() if tokenizer == "space" else [c for c in text.lower() if not c.isspace()]
    expected = {tuple(tokens[i : i + 3]) for i in range(len(tokens) - 2)}
    assert len(h.shingles(text)) == len(expected)


def test_normalize_only_touches_non_ascii_rows_correctly():
    out = normalize(["ABC", "ＡＢＣ Déjà", None, "ǅ"]).to_pylist()
    assert out == ["abc", "abc déjà", "", unicodedata.normalize("NFKC", "ǅ").lower()]


@pytest.mark.parametrize("threshold,num_perm", [(0.8, 128), (0.5, 128), (0.9, 256), (0.7, 64), (0.85, 128)])
def test_lsh_params_match_datasketch(threshold, num_perm):
    from datasketch.lsh import _optimal_param

    assert lsh_params(threshold, num_perm) == tuple(_optimal_param(threshold, num_perm, 0.5, 0.5))


def test_band_hashes_collide_exactly_on_equal_bands():
    sig = np.array([[1, 2, 3, 4], [1, 2, 9, 9], [9, 9, 3, 4]], np.uint32)
    b = band_hashes(sig, 2, 2)
    assert b[0, 0] == b[1, 0] and b[0, 1] == b[2, 1]
    assert b[0, 0] != b[2, 0] and b[0, 1] != b[1, 1]
    # equal values in different bands never share a bucket
    assert (
        band_hashes(np.array([[5, 5, 5, 5]], np.uint32), 2, 2)[0, 0]
        != band_hashes(np.array([[5, 5, 5, 5]], np.uint32), 2, 2)[0, 1]
    )
    with pytest.raises(ValueError):
        band_hashes(sig, 3, 2)


def test_params_are_validated():
    with pytest.raises(ValueError):
        MinHashParams(tokenizer="bpe")
    with pytest.raises(ValueError):
        MinHashParams(num_perm=0)
    with pytest.raises(ValueError):
        lsh_params(1.0, 128)


TRICKY = [
    "cafe\u0301 au lait",
    "\u01c4 digraph",
    "\u0130stanbul \u0130",
    "wait\u2026 what\u2026 ok",
    "Brand\u2122 name",
    "\ufb01ne \ufb02ow",
    "\u216b and \u2460 and x\u00b2",
    "\u1100\u1161\u11a8 \ud55c\uad6d\uc5b4",
    "\u0643\u064e\u062a\u064e\u0628\u064e \u0627\u0654 \u0644\u0625",
    "\uff21\uff22\uff23 \u212a\u212b",
    "STRASSE Stra\u00dfe",
    "\u039f\u0394\u039f\u03a3 \u03a3\u039f\u03a6\u0399\u0391\u03a3",
    "tab\tand\u00a0nbsp\u3000ideographic",
    "\u1e9b\u0323 \u0041\u030a\u0301",
]


@pytest.mark.parametrize("tokenizer", ["word", "space", "char"])
def test_fast_path_equals_python_normalisation(tokenizer):
    """Documents that skip Python's NFKC/lower (per-character lowercasing in the kernel) hash exactly
    as their Python-normalised text does."""
    fast = MinHasher(MinHashParams(tokenizer=tokenizer, ngram=2))
    plain = MinHasher(MinHashParams(tokenizer=tokenizer, ngram=2, normalization=None, lowercase=False))
    multi_line = ["\n".join(TRICKY), "ΟΔΟΣ\nΣΟΦΙΑ\nplain line\nΑΣ\n", "e\n\u0301x\n", "\n\n\u2026\n"]
    for text in TRICKY + multi_line + [t for _, t in handbook_docs(["sect.syslog.html"])]:
        ref = unicodedata.normalize("NFKC", text).lower()
        assert np.array_equal(fast.shingles(text), plain.shingles(ref)), text[:40]
        assert tuple(exact_keys([text])[0]) == tuple(exact_keys([ref], normalization=None, lowercase=False)[0])


def test_permutation_family_is_unbiased_on_random_sets():
    """Over many random pairs with a known Jaccard, the mean estimate and the rate at which a whole
    band of 13 values agrees match the ideal MinHash (J and J^13) within 4 standard errors."""
    rng = np.random.default_rng(11)
    hasher = MinHasher(MinHashParams(ngram=1))
    n, common, trials = 400, 368, 1000  # J = 368 / (368 + 2 * 32) = 0.852
    j = common / (common + 2 * (n - common))
    texts = []
    for _ in range(trials):
        words = rng.integers(0, 2**62, n + (n - common))
        shared, a_only, b_only = words[:common], words[common:n], words[n:]
        texts.append(" ".join(f"w{w}" for w in np.r_[shared, a_only]))
        texts.append(" ".join(f"w{w}" for w in np.r_[shared, b_only]))
    sig, counts = hasher.signatures(texts)
    assert (counts == n).all()
    agree = sig[0::2] == sig[1::2]
    est = agree.mean(axis=1)
    assert abs(est.mean() - j) < 4 * est.std() / np.sqrt(trials)
    band = agree[:, :117].reshape(trials, 9, 13).all(axis=2).ravel()
    assert abs(band.mean() - j**13) < 4 * np.sqrt(j**13 * (1 - j**13) / band.size)


def test_one_prepare_pass_serves_both_kernels():
    from airflow_curation.core.minhash import prepare

    texts = TRICKY + [t for _, t in handbook_docs(["sect.syslog.html"])]
    h = MinHasher()
    p = prepare(texts)
    assert np.array_equal(h.signatures(p, prepared=True)[0], h.signatures(texts)[0])
    assert np.array_equal(exact_keys(p, prepared=True), exact_keys(texts))


def _reference_signature(text: str, h: MinHasher) -> np.ndarray:
    """The signature from its definition, in plain Python: ``\\w+`` tokens of the NFKC + lowercase text,
    each token's UTF-8 bytes packed eight to a word and folded FNV-style, then mixed with its length;
    a shingle = the position-weighted sum of its tokens' hashes, mixed; permutation k = the high 32 bits
    of ``a_k x + b_k`` (mod 2^64), minimised over the shingles."""
    import re

    m64 = (1 << 64) - 1

    def fmix(x: int) -> int:
        x ^= x >> 33
        x = (x * 0xFF51AFD7ED558CCD) & m64
        x ^= x >> 33
        x = (x * 0xC4CEB9FE1A85EC53) & m64
        return x ^ (x >> 33)

    prime, gold = 0x100000001B3, 0x9E3779B97F4A7C15
    hashes = []
    for token in re.findall(r"\w+", unicodedata.normalize("NFKC", text).lower()):
        th, word, nb = 0xCBF29CE484222325, 0, 0
        for byte in token.encode():
            word, nb = ((word << 8) | byte) & m64, nb + 1
            if nb % 8 == 0:
                th, word = ((th ^ word) * prime) & m64, 0
        hashes.append(fmix((((th ^ word) * prime) + nb) & m64))
    n, mul = h.params.ngram, [int(x) for x in h.mul]

    def shingle(tokens: list[int]) -> int:
        k = len(tokens)
        return fmix((k * gold + sum(t * mul[j] for j, t in enumerate(tokens))) & m64)

    if not hashes:
        shingles = []
    elif len(hashes) < n:
        shingles = [shingle(hashes)]
    else:
        shingles = [shingle(hashes[i : i + n]) for i in range(len(hashes) - n + 1)]
    sig = np.full(h.params.num_perm, 0xFFFFFFFF, np.uint64)
    for x in shingles:
        sig = np.minimum(sig, (h.a * np.uint64(x) + h.b) >> np.uint64(32))
    return sig.astype(np.uint32)


def test_signatures_equal_their_plain_python_definition():
    """Bit for bit on a generated corpus: ASCII words of every length around the 8-byte packing (the
    kernel's ASCII run loop), punctuation runs, digits and underscores, mixed-case and non-ASCII words,
    text that needs Python's NFKC, short and empty documents; and on real handbook pages."""
    rng = np.random.default_rng(5)
    words = ["a", "Ab", "the", "WORD_7", "1234567", "abcdefgh", "ABCDEFGHI", "x" * 17, "naïve", "Straße"]
    words += ["ΣΟΦΙΑ", "中文字", "ﬁle", "Ｗord", "e\u0301", "--", "...", " ", "\n", "\t", "(", "'s", "_", "٣٤"]
    texts = ["", "   ", "one", "two words", "a b c d"]
    for _ in range(400):
        k = rng.integers(0, 40)
        texts.append("".join(words[i] + (" " if rng.random() < 0.6 else "") for i in rng.integers(0, len(words), k)))
    texts += [t for _, t in handbook_docs(["sect.syslog.html"])][:20]
    h = MinHasher()
    sig, _ = h.signatures(texts)
    for text, row in zip(texts, sig):
        assert np.array_equal(row, _reference_signature(text, h)), text[:60]
    assert np.array_equal(h.signatures(texts, perms=117)[0], sig[:, :117])  # what LSH reads at 0.8
