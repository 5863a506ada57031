"""Text normalisation and line-level cleaning: mojibake repair, Unicode normalisation, C4's and FineWeb's
line rules, lines of symbols.

Stages never rewrite shards: preprocess writes the cleaned text as a column of its attrs file
(:data:`~airflow_curation.core.schema.CLEAN_TEXT`) with a count per rule of the lines each removed, and
later stages read it in place of the shard's text (``stages/text.py``).

The line rules are C4's as datatrove's ``C4QualityFilter`` states them (Raffel et al. 2020), in its order;
a line is stripped, then the first rule that matches it decides:

============== ===================================================================== ==============
rule           matches                                                               effect
============== ===================================================================== ==============
long_word      a word longer than 1,000 characters                                   line removed
citation       Wikipedia citation marks (``[1]``, ``[edit]``, ``[citation needed]``) marks removed
terminal_punct the line does not end in ``. ? ! " '`` (or ends in ``...``)             line removed
min_words      fewer than ``min_words`` (3) words                                    line removed
lorem_ipsum    "lorem ipsum" (any case)                                              document dropped
javascript     "javascript" (any case)                                               line removed
curly_bracket  ``{``                                                                 document dropped
policy         "terms of use", "privacy policy", "cookie policy", "uses cookies",    line removed
               "use of cookies", "use cookies" (any case)
============== ===================================================================== ==============

``fineweb`` is the same without ``terminal_punct`` (FineWeb runs ``C4QualityFilter(filter_no_terminal_punct=
False)``); ``symbols`` (ours) removes a line with no letter and no digit (``-----``, ``| | |``, ``» »``),
checked first. Blank lines are removed without being counted (C4 joins the kept lines with one newline).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

import pyarrow as pa

from airflow_curation.core.schema import CLEAN_TEXT

C4_RULES = (
    "long_word",
    "citation",
    "terminal_punct",
    "min_words",
    "lorem_ipsum",
    "javascript",
    "curly_bracket",
    "policy",
)
LINE_PRESETS = {"c4": C4_RULES, "fineweb": tuple(r for r in C4_RULES if r != "terminal_punct")}
RULES = ("symbols", *C4_RULES)
DOC_RULES = frozenset({"lorem_ipsum", "curly_bracket"})  # a match drops the document
LINE_RULES = tuple(r for r in RULES if r not in DOC_RULES and r != "citation")  # those counting removed lines
NORMALIZATIONS = ("none", "NFC", "NFKC")
DROP_PREFIX = "lines_"  # drop_reason of a document a rule drops: lines_lorem_ipsum, lines_curly_bracket
ALL_REMOVED = "lines_all_removed"  # every line of a non-blank text removed

END_PUNCTUATION = (".", "?", "!", '"', "'")
ELLIPSIS = "..."
POLICY_SUBSTRINGS = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")
_POLICY = re.compile("|".join(map(re.escape, POLICY_SUBSTRINGS)))
CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")


REMOVED_PREFIX = "lines_removed_"  # the attrs column of a rule's count of removed lines, per row


def removed_column(rule: str) -> str:
    return REMOVED_PREFIX + rule


def resolve_line_rules(spec: str | Iterable[str] | None) -> tuple[str, ...]:
    """Rule names, in :data:`RULES` order, from preset names (``c4``, ``fineweb``) and rule names."""
    names = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec or ()) if s.strip()]
    chosen: set[str] = set()
    for name in names:
        if name == "none":
            continue
        if name in LINE_PRESETS:
            chosen.update(LINE_PRESETS[name])
        elif name in RULES:
            chosen.add(name)
        else:
            known = ", ".join([*LINE_PRESETS, *RULES])
            raise ValueError(f"unknown line rule or preset {name!r}; choose from none, {known}")
    return tuple(r for r in RULES if r in chosen)


def _has_alnum(line: str) -> bool:
    return any(ch.isalnum() for ch in line)


class LineCleaner:
    """Normalise and clean texts.

    :param rules: line rules or presets (see :func:`resolve_line_rules`).
    :param fix_text: repair mojibake and other encoding damage with ftfy (``fix_text``, its defaults but
        no NFC/NFKC, which ``normalization`` does).
    :param normalization: ``NFC``, ``NFKC`` or ``none``, after the repair.
    :param min_words: ``min_words``: lines with fewer words are removed.
    :param max_word_length: ``long_word``: lines with a longer word are removed.
    """

    def __init__(
        self,
        rules: str | Iterable[str] | None = None,
        fix_text: bool = False,
        normalization: str = "none",
        min_words: int = 3,
        max_word_length: int = 1000,
    ) -> None:
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {', '.join(NORMALIZATIONS)}, not {normalization!r}")
        self.rules = resolve_line_rules(rules)
        self.fix_text = bool(fix_text)
        self.normalization = normalization
        self.min_words = int(min_words)
        self.max_word_length = int(max_word_length)
        self.counted = tuple(r for r in LINE_RULES if r in self.rules)
        self._ftfy_config = None

    def __bool__(self) -> bool:
        return bool(self.rules or self.fix_text or self.normalization != "none")

    def _normalize(self, text: str) -> str:
        if self.fix_text:
            if self._ftfy_config is None:
                import ftfy

                # Mojibake and encoding damage only: curly quotes, full-width forms, ligatures and HTML
                # entities are text, not damage, and stay as they are.
                self._ftfy_config = ftfy.TextFixerConfig(
                    unescape_html=False,
                    uncurl_quotes=False,
                    fix_character_width=False,
                    fix_latin_ligatures=False,
                    normalization=None,
                    explain=False,
                )
            text = _ftfy_fix(text, self._ftfy_config)
        if self.normalization != "none" and not (text.isascii()):
            text = unicodedata.normalize(self.normalization, text)
        return text

    def clean(self, text: str) -> tuple[str, dict[str, int], str | None]:
        """``(cleaned text, lines removed per counted rule, drop reason or None)``."""
        return self._clean_lines(self._normalize(text))

    def _clean_lines(self, text: str) -> tuple[str, dict[str, int], str | None]:
        """The line rules over an already normalised text (:meth:`clean`'s result)."""
        removed = dict.fromkeys(self.counted, 0)
        if not self.rules:
            return text, removed, None
        r = self.rules
        symbols, long_word, citation = "symbols" in r, "long_word" in r, "citation" in r
        punct, min_words, lorem = "terminal_punct" in r, "min_words" in r, "lorem_ipsum" in r
        javascript, curly, policy = "javascript" in r, "curly_bracket" in r, "policy" in r
        kept: list[str] = []
        any_line = False
        for line in text.splitlines():
            line = line.strip()
            if not line:
                continue
            any_line = True
            if symbols and not _has_alnum(line):
                removed["symbols"] += 1
                continue
            words = line.split()
            if long_word and len(line) > self.max_word_length and any(len(w) > self.max_word_length for w in words):
                removed["long_word"] += 1
                continue
            if citation and "[" in line:
                line = CITATION.sub("", line)
            if punct and (not line.endswith(END_PUNCTUATION) or line.endswith(ELLIPSIS)):
                removed["terminal_punct"] += 1
                continue
            if min_words and len(words) < self.min_words:
                removed["min_words"] += 1
                continue
            lower = line.lower()
            if lorem and "lorem ipsum" in lower:
                return "", removed, DROP_PREFIX + "lorem_ipsum"
            if javascript and "javascript" in lower:
                removed["javascript"] += 1
                continue
            if curly and "{" in line:
                return "", removed, DROP_PREFIX + "curly_bracket"
            if policy and _POLICY.search(lower):
                removed["policy"] += 1
                continue
            kept.append(line)
        if any_line and not kept:
            return "", removed, ALL_REMOVED
        return "\n".join(kept).strip(), removed, None

    def process(
        self, texts: pa.ChunkedArray | pa.Array, normalized: list[str] | None = None
    ) -> tuple[pa.Table, pa.Array]:
        """The cleaned text and per-rule counts as columns, and the drop reason per row (null: none).

        :param normalized: a list that gets each text as the line rules read it (normalised and repaired, no
            line removed; nulls as empty text): what the rules placed before line cleaning read.
        """
        out: list[str] = []
        reasons: list[str | None] = []
        counts: dict[str, list[int]] = {rule: [] for rule in self.counted}
        for text in texts.to_pylist():
            text = self._normalize(text or "")
            if normalized is not None:
                normalized.append(text)
            cleaned, removed, reason = self._clean_lines(text)
            out.append(cleaned)
            reasons.append(reason)
            for rule, n in removed.items():
                counts[rule].append(n)
        arrays = [pa.array(out, pa.string())] + [pa.array(counts[r], pa.int32()) for r in self.counted]
        names = [CLEAN_TEXT] + [removed_column(r) for r in self.counted]
        return pa.Table.from_arrays(arrays, names=names), pa.array(reasons, pa.string())


# A character that UTF-8 read as Latin-1 or Windows-1252 always produces: a lead byte (0xC2-0xF4) or a C1
# control. Text without one has no mojibake of that kind (by far the commonest), and ftfy leaves it as it is.
_MOJIBAKE_LEAD = re.compile("[\u0080-\u009f\u00c2-\u00f4]")


def _ftfy_fix(text: str, config) -> str:
    """ftfy's repair, on texts that can hold UTF-8-as-Latin-1/Windows-1252 mojibake only: ftfy's own pass
    (per line, its badness regex) costs ~15x the C4 line rules (``benchmarks/bench_clean.py``), and most
    web text (ASCII, or curly quotes and dashes only) has nothing for it to fix. Mojibake through other
    code pages (Mac Roman, cp437) in a text without such a character is left as it is."""
    import ftfy

    if text.isascii() or not _MOJIBAKE_LEAD.search(text):
        return text
    return ftfy.fix_text(text, config)
