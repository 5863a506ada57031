"""The batch normalisation that MinHash and exact keys share: Python's NFKC + lower on exactly the lines
that need it, whatever their number (the line list grows past its first allocation)."""

from __future__ import annotations

import unicodedata

import pyarrow as pa
import pytest

from airflow_curation.core.minhash import prepare


def _python(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower()


@pytest.mark.parametrize("lines", [1, 40, 500])
def test_many_lines_needing_python_in_one_document(lines):
    # every other line holds a ligature and a fullwidth letter (NFKC changes both), the rest plain ASCII
    doc = "\n".join(f"Line {i}: ﬁle Ｗord ΣΟΦΙΑ" if i % 2 else f"Plain line {i} Here" for i in range(lines))
    texts = ["", "ASCII Only", doc, "x\n\nＡ\n", None, doc[: len(doc) // 2]]
    got = prepare(pa.array(texts)).to_pylist()
    want = [_python(t or "") for t in texts]
    # prepare leaves safe lines to the kernels' per-character lowercase: compare after lowering them too
    assert [g.lower() for g in got] == want
    assert got[2].count("\n") == doc.count("\n")


def _unsafe_lines_walk(data: bytes, offsets: list[int], classes, bits: int) -> list[tuple[int, int, int]]:
    """The definition, byte by byte: a line (between line feeds) is flagged when it holds a decoded code
    point with one of ``bits``; a malformed lead byte takes its width, whatever follows."""
    out = []
    for d in range(len(offsets) - 1):
        i, end = offsets[d], offsets[d + 1]
        start, flagged = i, False
        while i < end:
            b = data[i]
            if b == 10:
                if flagged:
                    out.append((d, start, i))
                flagged, start, i = False, i + 1, i + 1
                continue
            if b < 0x80 or flagged:
                i += 1
                continue
            if b >= 0xF0 and i + 3 < end:
                cp = ((b & 7) << 18) | ((data[i + 1] & 63) << 12) | ((data[i + 2] & 63) << 6) | (data[i + 3] & 63)
                w = 4
            elif b >= 0xE0 and i + 2 < end:
                cp, w = ((b & 15) << 12) | ((data[i + 1] & 63) << 6) | (data[i + 2] & 63), 3
            elif b >= 0xC0 and i + 1 < end:
                cp, w = ((b & 31) << 6) | (data[i + 1] & 63), 2
            else:
                cp, w = b, 1
            flagged = cp >= len(classes) or bool(classes[cp] & bits)
            i += w
        if flagged:
            out.append((d, start, end))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_unsafe_line_spans_match_a_byte_by_byte_walk(seed):
    # The kernel skips ASCII eight bytes at a time and finds a flagged line's start by looking back:
    # same spans as the walk on ASCII runs of every length, line feeds anywhere, flagged and harmless
    # characters, and malformed bytes (a lead byte whose width swallows a line feed).
    import numpy as np

    from airflow_curation.core.minhash import _UNSAFE_NFKC, _UNSAFE_WORD, _unsafe_lines_kernel, char_classes

    rng = np.random.default_rng(seed)
    pieces = [
        b"a",
        b"word ",
        b"\n",
        b"\n\n",
        b"x" * 9,
        b"\xef\xac\x81",
        b"\xc3\xa9",
        b"\xe4\xb8\xad",
        b"\xc3",
        b"\xe2\n\n",
    ]
    pieces += [b"\xef\xbc\xa1", b"\xf0\x9f\x98\x80", b"\xff", b"Plain ASCII line of some length. "]
    docs = [b"".join(pieces[k] for k in rng.integers(0, len(pieces), rng.integers(0, 60))) for _ in range(3000)]
    data = np.frombuffer(b"".join(docs) + b"\0", np.uint8)
    offsets = np.cumsum([0] + [len(d) for d in docs]).astype(np.int64)
    classes = char_classes()
    for bits in (_UNSAFE_NFKC, _UNSAFE_WORD):
        got = list(zip(*(a.tolist() for a in _unsafe_lines_kernel(data, offsets, classes, np.uint8(bits)))))
        assert got == _unsafe_lines_walk(bytes(data), offsets.tolist(), classes, int(bits))
        assert got  # the corpus has flagged lines
