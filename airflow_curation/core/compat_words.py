"""English words and sentences as datatrove 0.10.1 counts them, without spaCy.

datatrove's filters split text with spaCy's blank English tokenizer: whitespace first, then each piece
loses its prefixes (opening brackets and quotes, currency signs, ``§ % = — –``, ellipses) and suffixes
(closing punctuation, quotes, ``'s``, units and currency after a number, a period after a lower-case letter,
a digit or punctuation, or after two capitals), then splits at infixes (ellipses, a hyphen or ``: < > = /``
between letters, a comma between letters, a period between a lower-case and an upper-case letter, an
operator between digits). Special cases keep English contractions apart (``don't`` -> ``do n't``, ``dont`` ->
``do nt``, ``I'm`` -> ``I 'm``), abbreviations and emoticons whole, and URLs whole. This module states those
rules on its own terms, over spaCy's character classes (its currency signs and symbols as it lists them; its
letters and their case as the scripts it lists): the words match spaCy's on the Debian handbook's pages in 14
languages, the compat held-out split and other packages' pages (``bench_compat.py words``), and the decisions
they feed match datatrove's on >= 99% (docs/preprocess.md, *Reference-compatible presets*), which is what they
are for.

Sentences are counted as spaCy's sentencizer cuts them: a sentence starts at the first token that is not
punctuation after a token that is a sentence terminal.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import NamedTuple

# Unicode's Sentence_Terminal characters as datatrove's TERMINAL_PUNCTUATION lists them (the property as of
# its Unicode version, plus three Khmer signs): FineWeb's line-end rule and the sentence cuts read it.
SENTENCE_TERMINALS = frozenset(
    "!.?\u0589\u061d\u061e\u061f\u06d4\u0700\u0701\u0702\u07f9\u0837\u0839\u083d\u083e\u0964\u0965\u104a"
    "\u104b\u1362\u1367\u1368\u166e\u1735\u1736\u17d4\u17d5\u17d6\u17d9\u17da\u1803\u1809\u1944\u1945\u1aa8"
    "\u1aa9\u1aaa\u1aab\u1b5a\u1b5b\u1b5e\u1b5f\u1b7d\u1b7e\u1c3b\u1c3c\u1c7e\u1c7f\u203c\u203d\u2047\u2048"
    "\u2049\u2e2e\u2e3c\u2e53\u2e54\u3002\ua4ff\ua60e\ua60f\ua6f3\ua6f7\ua876\ua877\ua8ce\ua8cf\ua92f\ua9c8"
    "\ua9c9\uaa5d\uaa5e\uaa5f\uaaf0\uaaf1\uabeb\ufe52\ufe56\ufe57\uff01\uff0e\uff1f\uff61\U00010a56\U00010a57"
    "\U00010f55\U00010f56\U00010f57\U00010f58\U00010f59\U00010f86\U00010f87\U00010f88\U00010f89\U00011047"
    "\U00011048\U000110be\U000110bf\U000110c0\U000110c1\U00011141\U00011142\U00011143\U000111c5\U000111c6"
    "\U000111cd\U000111de\U000111df\U00011238\U00011239\U0001123b\U0001123c\U000112a9\U0001144b\U0001144c"
    "\U000115c2\U000115c3\U000115c9\U000115ca\U000115cb\U000115cc\U000115cd\U000115ce\U000115cf\U000115d0"
    "\U000115d1\U000115d2\U000115d3\U000115d4\U000115d5\U000115d6\U000115d7\U00011641\U00011642\U0001173c"
    "\U0001173d\U0001173e\U00011944\U00011946\U00011a42\U00011a43\U00011a9b\U00011a9c\U00011c41\U00011c42"
    "\U00011ef7\U00011ef8\U00011f43\U00011f44\U00016a6e\U00016a6f\U00016af5\U00016b37\U00016b38\U00016b44"
    "\U00016e98\U0001bc9f\U0001da88"
)

# Marks split off the edges of a piece (spaCy's punctuation and quote lists, written out here).
_PUNCT = "…,:;!?¿؟¡()[]{}<>_#*&。？！，、；：～·।،۔؛٪"
_QUOTES = "'\"”“`‘´’‚,„»«「」『』（）〔〕【】《》〈〉〈〉⟦⟧"
_HYPHENS = ("---", "--", "——", "-", "–", "—", "~")
_UNITS = (
    "km km² km³ m m² m³ dm dm² dm³ cm cm² cm³ mm mm² mm³ ha µm nm yd in ft kg g mg µg t lb oz m/s km/h kmh mph "
    "hPa Pa mbar mb MB kb KB gb GB tb TB T G M K %"
).split()


def _cls(chars: str) -> str:
    return "".join("\\" + c if c in "\\]^-[" else c for c in chars)


_P, _Q = _cls(_PUNCT), _cls(_QUOTES)


def _hex_chars(spec: str) -> str:
    """The characters of ``spec``: space-separated hexadecimal code points and inclusive ranges ``A-B``."""
    out = []
    for item in spec.split():
        a, _, b = item.partition("-")
        out.extend(map(chr, range(int(a, 16), int(b or a, 16) + 1)))
    return "".join(out)


# spaCy's currency signs and other symbols (spacy/lang/char_classes.py CURRENCY and ICONS, spaCy 3.8): lists of
# its own, not Unicode's Sc and So. Its currency is $ £ ¥ ฿ ﷼ and U+20A0-U+20BF (no ¢, no U+07FE: those stay in
# their word), and its symbols are 5,984 So characters of an older Unicode (U+1F971 and all past U+1FA6D are not
# among them), where this Python's So has 6,605. tests/preprocess/test_compat.py compares both with spaCy's, code
# point by code point.
_SC = "$£¥฿\ufdfc" + "".join(map(chr, range(0x20A0, 0x20C0)))
_SPACY_SYMBOLS = (  # hexadecimal code points and inclusive ranges
    "A6 A9 AE B0 482 58D-58E 60E-60F 6DE 6E9 6FD-6FE 7F6 9FA B70 BF3-BF8 BFA C7F D4F D79 F01-F03 F13 F15-F17 "
    "F1A-F1F F34 F36 F38 FBE-FC5 FC7-FCC FCE-FCF FD5-FD8 109E-109F 1390-1399 1940 19DE-19FF 1B61-1B6A 1B74-1B7C "
    "2100-2101 2103-2106 2108-2109 2114 2116-2117 211E-2123 2125 2127 2129 212E 213A-213B 214A 214C-214D 214F "
    "218A-218B 2195-2199 219C-219F 21A1-21A2 21A4-21A5 21A7-21AD 21AF-21CD 21D0-21D1 21D3 21D5-21F3 2300-2307 "
    "230C-231F 2322-2328 232B-237B 237D-239A 23B4-23DB 23E2-2426 2440-244A 249C-24E9 2500-25B6 25B8-25C0 "
    "25C2-25F7 2600-266E 2670-2767 2794-27BF 2800-28FF 2B00-2B2F 2B45-2B46 2B4D-2B73 2B76-2B95 2B98-2BC8 "
    "2BCA-2BFE 2CE5-2CEA 2E80-2E99 2E9B-2EF3 2F00-2FD5 2FF0-2FFB 3004 3012-3013 3020 3036-3037 303E-303F "
    "3190-3191 3196-319F 31C0-31E3 3200-321E 322A-3247 3250 3260-327F 328A-32B0 32C0-32FE 3300-33FF 4DC0-4DFF "
    "A490-A4C6 A828-A82B A836-A837 A839 AA77-AA79 FDFD FFE4 FFE8 FFED-FFEE FFFC-FFFD 10137-1013F 10179-10189 "
    "1018C-1018E 10190-1019B 101A0 101D0-101FC 10877-10878 10AC8 1173F 16B3C-16B3F 16B45 1BC9C 1D000-1D0F5 "
    "1D100-1D126 1D129-1D164 1D16A-1D16C 1D183-1D184 1D18C-1D1A9 1D1AE-1D1E8 1D200-1D241 1D245 1D300-1D356 "
    "1D800-1D9FF 1DA37-1DA3A 1DA6D-1DA74 1DA76-1DA83 1DA85-1DA86 1ECAC 1F000-1F02B 1F030-1F093 1F0A0-1F0AE "
    "1F0B1-1F0BF 1F0C1-1F0CF 1F0D1-1F0F5 1F110-1F16B 1F170-1F1AC 1F1E6-1F202 1F210-1F23B 1F240-1F248 "
    "1F250-1F251 1F260-1F265 1F300-1F3FA 1F400-1F6D4 1F6E0-1F6EC 1F6F0-1F6F9 1F700-1F773 1F780-1F7D8 "
    "1F800-1F80B 1F810-1F847 1F850-1F859 1F860-1F887 1F890-1F8AD 1F900-1F90B 1F910-1F93E 1F940-1F970 "
    "1F973-1F976 1F97A 1F97C-1F9A2 1F9B0-1F9B9 1F9C0-1F9C2 1F9D0-1F9FF 1FA60-1FA6D"
)
_SO = _hex_chars(_SPACY_SYMBOLS)


def _ranges(chars: str) -> str:
    out, cps = [], sorted(map(ord, chars))
    i = 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        a, b = cps[i], cps[j]
        out.append(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}")
        i = j + 1
    return "".join(out)


_SC_CLS, _SO_CLS = _ranges(_SC), _ranges(_SO)
# spaCy's letters (spacy/lang/char_classes.py ALPHA, ALPHA_LOWER, ALPHA_UPPER, spaCy 3.8), which its suffix and infix
# rules read: the scripts it lists, not every Unicode letter. Latin (its blocks as spaCy lists them), cased by
# Unicode case, and the glottal stop, which spaCy counts lower; the Russian, Tatar, Greek, Ukrainian and Macedonian
# letters it lists; the scripts without case (Hebrew, Arabic and Persian, Indic, Sinhala, Ethiopic, Hangul, kana,
# CJK with its symbols and punctuation), which count as both. tests/preprocess/test_compat.py holds the three
# classes equal to spaCy's.
_LATIN_BLOCKS = (
    (0x41, 0x5A), (0x61, 0x7A), (0xFF21, 0xFF3A), (0xFF41, 0xFF5A), (0xC0, 0xD6), (0xD8, 0xF6), (0xF8, 0x1BF),
    (0x1C4, 0x24F), (0x2C60, 0x2C7B), (0x2C7E, 0x2C7F), (0xA722, 0xA76F), (0xA771, 0xA787), (0xA78B, 0xA78E),
    (0xA790, 0xA7B9), (0xA7FA, 0xA7FA), (0xAB30, 0xAB5A), (0xAB60, 0xAB64), (0x250, 0x2AF), (0x1D00, 0x1D25),
    (0x1D6B, 0x1D77), (0x1D79, 0x1D9A), (0x1E00, 0x1EFF),
)  # fmt: skip
_LATIN = "".join(chr(c) for a, b in _LATIN_BLOCKS for c in range(a, b + 1))
_CASED_LOWER = "ёа-яәөүҗңһα-ωάέίόώήύа-щюяіїєґѓѕјљњќѐѝ"
_CASED_UPPER = "ЁА-ЯӘӨҮҖҢҺΑ-ΩΆΈΊΌΏΉΎА-ЩЮЯІЇЄҐЃЅЈЉЊЌЀЍ"
_UNCASED = (
    r"\u0591-\u05f4\u0620-\u064a\u066e-\u06d5\u06e5-\u06ff\u0750-\u077f\u08a0-\u08bd\u0900-\u09ff\u0b80-\u0cff"
    r"\u0d80-\u0dff\u1100-\u137f\u2e80-\u2fdf\u2ff0-\u30ff\u31c0-\u31ef\u3200-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
    r"\uf900-\ufaff\ufb1d-\ufbb1\ufbd3-\ufd3d\ufd50-\ufdc7\ufdf0-\ufdfb\ufe30-\ufe4f\ufe70-\ufefc"
    r"\U0001ee00-\U0001eebb\U0001f200-\U0001f2ff\U00020000-\U0002a6df\U0002a700-\U0002ebef\U0002f800-\U0002fa1f"
)
_ALPHA = _ranges(_LATIN) + _CASED_LOWER + _CASED_UPPER + _UNCASED
_LOWER = _ranges("".join(c for c in _LATIN if unicodedata.category(c) == "Ll" or c == "ʔ")) + _CASED_LOWER + _UNCASED
_UPPER = _ranges("".join(c for c in _LATIN if unicodedata.category(c) == "Lu")) + _CASED_UPPER + _UNCASED
_LETTER = f"[{_ALPHA}]"
_LETTER_OR_DIGIT = f"(?<=[{_ALPHA}0-9])"  # lookbehind: a letter or an ASCII digit before


# An IPv4 address that a URL may hold, as spaCy's URL match states it: not in a private or link-local network
# (10/8, 127/8, 169.254/16, 192.168/16, 172.16/12: those prefixes followed by dotted numbers), the first number
# 1-223, the middle two 0-255, the last 1-254. Any other four numbers are not a host: "192.168.0.0/24-Netzwerk"
# splits at its hyphen as text does.
_IPV4 = (
    r"(?!(?:10|127)(?:\.[0-9]{1,3}){3})(?!(?:169\.254|192\.168)(?:\.[0-9]{1,3}){2})"
    r"(?!172\.(?:1[6-9]|2[0-9]|3[0-1])(?:\.[0-9]{1,3}){2})"
    r"(?:[1-9][0-9]?|1[0-9][0-9]|2[01][0-9]|22[0-3])(?:\.(?:1?[0-9]{1,2}|2[0-4][0-9]|25[0-5])){2}"
    r"\.(?:[1-9][0-9]?|1[0-9][0-9]|2[0-4][0-9]|25[0-4])"
)


class _Rules(NamedTuple):
    """The prefix, suffix, infix and URL patterns, stated over some character classes."""

    prefix: re.Pattern
    suffix: re.Pattern
    infix: re.Pattern
    url: re.Pattern


def _rules(sc: str, so: str | None, lower: str, upper: str, host_end: str, label_chars: str) -> _Rules:
    """The patterns over the given classes (``so`` None: no symbol alternatives at all).

    :param sc: currency signs (class body).
    :param so: other symbols (class body), or None where no such character can occur.
    :param lower: lower-case letters (class body).
    :param upper: upper-case letters (class body).
    :param host_end: what the last label of a host is made of (class body).
    :param label_chars: what the other labels of a host are made of (class body; ``-`` and ``_`` inside too).
    """
    sym = [f"[{so}]"] if so else []
    label = f"[{label_chars}]"
    unit_alt = "|".join(re.escape(u) for u in _UNITS)
    hyph = "|".join(re.escape(h) for h in _HYPHENS)
    prefix = "|".join(["§", "%", "=", "—", "–", r"\+(?![0-9])", f"[{_P}]", r"\.\.+", f"[{_Q}]", r"US\$|C\$|A\$"])
    prefix += f"|[{sc}]" + "".join(f"|{x}" for x in sym)
    suffix = [
        f"[{_P}]",
        "……",  # one of spaCy's punctuation marks of its own: a piece ending in it loses both at once
        r"\.\.+",
        "…",
        f"[{_Q}]",
        *sym,
        "'s|'S|’s|’S",
        "—|–",
        r"(?<=[0-9])\+",
        r"(?<=°[FfCcKk])\.",
        rf"(?<=[0-9])(?:US\$|C\$|A\$|[{sc}])",
        rf"(?<=[0-9])(?:{unit_alt})",
        # spaCy writes its punctuation here as the alternation "…|……|,|..." inside a class: "|" is one of them
        rf"(?<=[0-9{lower}%²\-+|{_P}{_Q}])\.",
        rf"(?<=[{upper}][{upper}])\.",
    ]
    infix = [
        r"\.\.+",
        "…",
        *sym,
        r"(?<=[0-9])[+\-*^](?=[0-9-])",
        rf"(?<=[{lower}{_Q}])\.(?=[{upper}{_Q}])",
        rf"(?<={_LETTER}),(?={_LETTER})",
        rf"{_LETTER_OR_DIGIT}(?:{hyph})(?={_LETTER})",
        rf"{_LETTER_OR_DIGIT}[:<>=/](?={_LETTER})",
    ]
    # A URL, a bare domain or an e-mail address stays one token (spaCy's URL match): an optional scheme (2+ word
    # characters, "+", "-" or "."), an optional user (anything up to an "@"), a dotted host whose labels have 1-64
    # characters and whose last is 2+ lower-case letters, or an IPv4 address as _IPV4 states it; a port, a path.
    url = (
        r"(?:[\w+.-]{2,}://)?(?:\S+@)?"
        rf"(?:{_IPV4}|(?:{label}(?:[{label_chars}_-]{{0,62}}{label})?\.)+[{host_end}]{{2,63}})"
        r"(?::[0-9]{2,5})?(?:[/?#]\S*)?"
    )
    return _Rules(
        re.compile(prefix),
        re.compile("|".join(f"(?:{p})$" for p in suffix)),
        re.compile("|".join(infix)),
        re.compile(url),
    )


# A host ends in lower-case letters, and its other labels are ASCII letters and digits and every character from
# U+00A1 to U+FFFF (CJK text with its full-width punctuation, a zero-width non-joiner...), as spaCy's URL match.
_UNICODE = _rules(_SC_CLS, _SO_CLS, _LOWER, _UPPER, _LOWER, "A-Za-z0-9\u00a1-\uffff")
# The same patterns on a piece that is all ASCII: each class cut to its ASCII members (the only ones such a
# piece can match) gives the same matches, without testing every character against hundreds of ranges.
_ASCII = _rules(r"\$", None, "a-z", "A-Z", "a-z", "A-Za-z0-9")

# Special cases: English contractions (split), abbreviations and emoticons (kept whole).
_NEG_BASES = {
    "do": "do", "does": "does", "did": "did", "is": "is", "are": "are", "was": "was", "were": "were",
    "have": "have", "has": "has", "had": "had", "could": "could", "would": "would", "should": "should",
    "must": "must", "might": "might", "need": "need", "ai": "ai", "ca": "ca", "wo": "wo", "sha": "sha",
    "dare": "dare", "ought": "ought", "may": "may",
}  # fmt: skip
_PRONOUN_CLITICS = {
    "i": ("m", "ll", "ve", "d"), "you": ("re", "ll", "ve", "d"), "he": ("s", "ll", "d"), "she": ("s", "ll", "d"),
    "it": ("s", "ll", "d"), "we": ("re", "ll", "ve", "d"), "they": ("re", "ll", "ve", "d"),
    "who": ("s", "ll", "ve", "d", "re"), "what": ("s", "ll", "ve", "d", "re"), "there": ("s", "ll", "ve", "d", "re"),
    "that": ("s", "ll", "d"), "where": ("s", "ll", "ve", "d", "re"), "when": ("s", "ll", "ve", "d", "re"),
    "why": ("s", "ll", "ve", "d", "re"), "how": ("s", "ll", "ve", "d", "re"), "could": ("ve",), "would": ("ve",),
    "should": ("ve",), "might": ("ve",), "must": ("ve",), "let": ("s",), "not": ("ve",),
    "this": ("s", "ll", "d"), "these": ("ll", "ve", "d", "re"), "those": ("ll", "ve", "d", "re"),
}  # fmt: skip
_WHOLE = set(
    (
        "e.g. i.e. vs. Mr. Mrs. Ms. Dr. Prof. Jr. St. Mt. Inc. Ltd. Co. Corp. a.m. p.m. U.S. Jan. Feb. Mar. "
        "Apr. Jun. Jul. Aug. Sep. Sept. Oct. Nov. Dec. Ala. Ariz. Ark. Calif. Colo. Conn. Del. Fla. Ga. Ill. Ind. "
        "Kan. Ky. La. Md. Mass. Mich. Minn. Miss. Mo. Mont. Neb. Nev. N.C. N.D. N.H. N.J. N.M. N.Y. Okla. Ore. Pa. "
        "Tenn. Va. Wash. Wis. Gen. Gov. Rep. Sen. Rev. vs e.g i.e o'clock ma'am 'em 'Cause 'cause 'bout "
        ":) :-) :( :-( ;) ;-) =) =( :P :p :-P :D :-D xD XD ^_^ ^__^ :/ :-/ 8) 8-) <3 </3 :o :O :-O :'( :') :| :-| "
        "(: ): (; =D =| :] :> <33 V_V o.O O.O o_o O_O -_- o.0 :3 :* (= :’) '' E.G. I.E. E.g. I.e. and/or w/o w/ "
        "'s 'S 'd 'll 're n't N'T ’s ’d ’ll ’re n’t"
    ).split()
    + [f"{c}." for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"]
)
# the rest of spaCy's emoticons and of its exceptions for every language that stay one word
# (spacy/lang/tokenizer_exceptions.py): ``[:``, ``:1``, ``C++``, ``ü.``
_WHOLE |= set(
    r"""
    (*_*) (-8 (-: (-; (-_-) (._.) (>_<) (^_^) (o: (¬_¬) (ಠ_ಠ) (╯°□°）╯︵┻━┻ )-: -__- ._. 0.0 0.o 0_0 0_o
    8-D 8D :'-( :'-) :(( :((( :() :)) :))) :-(( :-((( :-)) :-))) :-* :-0 :-3 :-> :-X :-] :-o :-p :-x
    :-} :0 :1 :X :o) :x :} ;-D ;D ;_; <.< <333 =/ =3 =[ =] >.< >.> >:( >:o ><(((*> @_@ O.o O_o V.V XDD
    [-: [: [= ]= ^___^ o.o o_0 o_O v.v v_v xDD ¯\(ツ)/¯ ಠ_ಠ ಠ︵ಠ <space> C++ \") \n \t ä. ö. ü. —
    """.split()
)
# spaCy's other English exceptions kept whole: abbreviations, dropped letters (``'cos``, ``doin'``) with either
# apostrophe, and emoticons with a typographic one
_WHOLE |= set(
    "Adm. Ak. Bros. Ia. Id. Kans. Messrs. Nebr. Ph.D. co. v.s. ’’ ‘s ‘S ’S :’( :’-( :’-) ’Cause ’cause ’bout ’em".split()
)
_WHOLE |= {apo + w for apo in "'’" for w in ("cos", "Cos", "coz", "Coz", "cuz", "Cuz", "nuff")}
_WHOLE |= {
    w + apo
    for apo in "'’"
    for base in ("doin", "goin", "havin", "lovin", "nothin", "nuthin", "ol", "somethin")
    for w in (base, base.capitalize())
}
_SPLIT_WHOLE = {
    "cannot": ("can", "not"), "Cannot": ("Can", "not"), "gonna": ("gon", "na"), "Gonna": ("Gon", "na"),
    "gotta": ("got", "ta"), "Gotta": ("Got", "ta"), "y'all": ("y'", "all"),
    "y’all": ("y’", "all"), "yall": ("y", "all"),
    "c'mon": ("c'm", "on"), "C'mon": ("C'm", "on"), "c’mon": ("c’m", "on"), "C’mon": ("C’m", "on"),
}  # fmt: skip
# a time of day: an hour and am/pm (a.m./p.m.), two words
_SPLIT_WHOLE |= {f"{h}{m}": (str(h), m) for h in range(1, 13) for m in ("am", "pm", "a.m.", "p.m.")}


def _chains() -> dict[str, tuple[str, str, str]]:
    """spaCy's special cases of three words, in lower and title case, with ``'``, ``’`` or no apostrophe: a modal's
    negation with ``'ve`` (``couldn't've``), a pronoun's ``'d``/``'ll`` with ``'ve`` (``you'd've``), ``how'd'y``,
    ``i'ma``; and a temperature's unit with its period (``°C.``)."""
    out: dict[str, tuple[str, str, str]] = {}

    def add(parts: tuple[str, str, str]) -> None:
        for head in {parts[0], parts[0][0].upper() + parts[0][1:]}:
            out[head + parts[1] + parts[2]] = (head, parts[1], parts[2])

    modals = sorted(set(_NEG_BASES) - {"ai", "are", "dare", "has", "have", "is", "was", "were"})
    pronouns = [head for head, tails in _PRONOUN_CLITICS.items() if {"d", "ll"} <= set(tails)]
    for apo in ("'", "’", ""):
        for base in modals:
            add((base, f"n{apo}t" if apo else "nt", f"{apo}ve"))
        for head in pronouns:
            for t in ("d", "ll"):
                add((head, apo + t, f"{apo}ve"))
        add(("i", f"{apo}m", "a"))
        if apo:
            add(("how", f"{apo}d", f"{apo}y"))
    for unit in "CcFfKk":
        out[f"°{unit}."] = ("°", unit, ".")
    return out


_SPLIT_WHOLE |= _chains()
# without the apostrophe (lower or title case only) every such pair splits but where the joined form is a
# common word of its own
_NOT_CONTRACTIONS = {"shed", "were", "well", "ill", "hell", "shell", "its", "lets", "whore"}


def _special(s: str) -> tuple[str, ...] | None:
    """The tokens of a special case, or None."""
    return _special_in(s, 0, len(s))


@lru_cache(maxsize=65536)
def _special_case(s: str) -> tuple[str, ...] | None:
    if s in _WHOLE:
        return (s,)
    if s in _SPLIT_WHOLE:
        return _SPLIT_WHOLE[s]
    low = s.lower()
    if "’" not in s and not low.isascii():
        return None  # past the two sets, every case below is an ASCII word in lower case (with ' or ’)
    if not (s == low or s == s[0].upper() + s[1:].lower()):
        return None  # spaCy's contractions are in lower and title case: "DON'T" stays one word
    for apo in ("'", "’"):
        neg = "n" + apo + "t"
        if low.endswith(neg) and low[:-3] in _NEG_BASES:
            return (s[:-3], s[-3:])
        if apo in s:
            head, _, tail = s.partition(apo)
            if tail and head.lower() in _PRONOUN_CLITICS and tail.lower() in _PRONOUN_CLITICS[head.lower()]:
                if tail.lower() != "s":  # 's is a suffix rule for every word
                    return (head, apo + tail)
    if low in _NOT_CONTRACTIONS:
        return None
    if low.endswith("nt") and low[:-2] in _NEG_BASES:
        return (s[:-2], s[-2:])
    for k in range(1, len(low)):
        head, tail = low[:k], low[k:]
        if head in _PRONOUN_CLITICS and tail in _PRONOUN_CLITICS[head]:
            return (s[:k], s[k:])
    return None


# The longest string _special_case can answer (str.lower never shortens a string): a kept-whole or split-whole
# string, a negation (base + n't), a pronoun and its clitic with the apostrophe.
_LONGEST_SPECIAL = max(
    *map(len, _WHOLE),
    *map(len, _SPLIT_WHOLE),
    max(map(len, _NEG_BASES)) + 3,
    max(len(h) + 1 + len(t) for h, ts in _PRONOUN_CLITICS.items() for t in ts),
)
# Every suffix alternative but the run of dots matches at most this many characters (a unit, US$, 's).
_SUFFIX_SPAN = max(3, *map(len, _UNITS))


def _special_in(t: str, a: int, b: int) -> tuple[str, ...] | None:
    """:func:`_special` of ``t[a:b]``, sliced only when it can be one (at once None for a rest longer than any
    special case: the splitter asks once per edge it strips, so hashing a long rest each time was quadratic)."""
    return _special_case(t[a:b]) if b - a <= _LONGEST_SPECIAL else None


def _suffix_len(t: str, a: int, b: int, suffix: re.Pattern) -> int:
    """Length of ``suffix``'s leftmost match in ``t[a:b]`` (0: none), as ``suffix.search(t[a:b])`` finds it.

    A long rest is searched in its last :data:`_SUFFIX_SPAN` characters only (a search of the whole rest at
    every edge stripped was quadratic): there a match's lookbehind sees what the slice shows, and only a run
    of dots, the one unbounded alternative, can start before them.
    """
    if b - a <= _SUFFIX_SPAN + 1:
        m = suffix.search(t[a:b])
        return b - a - m.start() if m else 0
    window = b - _SUFFIX_SPAN - 1
    dots = b
    while dots > a and t[dots - 1] == ".":
        dots -= 1
    if dots < window:  # a run of dots reaching before the window: its whole run within t[a:b] is the match
        return b - dots
    m = suffix.search(t, window, b)
    return b - m.start() if m else 0


def _infix_split(s: str, infix: re.Pattern) -> list[str]:
    out, start = [], 0
    for m in infix.finditer(s):
        if m.start() == 0 and m.end() == 0:
            continue
        if m.start() > start:
            out.append(s[start : m.start()])
        if m.end() > m.start():
            out.append(m.group())
        start = m.end()
    if start < len(s):
        out.append(s[start:])
    return out


_TRAILING = frozenset(",;:)!?")


@lru_cache(maxsize=262144)
def _piece_tokens(s: str) -> tuple[str, ...]:
    return _split(s, _ASCII if s.isascii() else _UNICODE)


def _split(s: str, rules: _Rules, specials: bool = True) -> tuple[str, ...]:
    """The words of one whitespace piece, matched with ``rules`` (:data:`_ASCII` only for an ASCII piece); without
    ``specials``, by the prefix, suffix, infix and URL rules alone (spaCy's ``_tokenize_affixes(s, False)``)."""
    special_in = _special_in if specials else _no_special
    # Shortcuts (the loop below gives the same words): letters only, where no prefix, suffix, infix or URL
    # rule applies, only a special case; letters after "(" or before one of ,;:)!? (no special case ends or
    # starts that way), where that mark alone comes off.
    if s.isalpha():
        return (specials and _special(s)) or (s,)
    if len(s) > 1:
        if s[-1] in _TRAILING and s[:-1].isalpha():
            return _match_specials([*((specials and _special(s[:-1])) or (s[:-1],)), s[-1]], specials)
        if s[0] == "(" and s[1:].isalpha():
            return _match_specials(["(", *((specials and _special(s[1:])) or (s[1:],))], specials)
    prefixes: list[str] = []
    suffixes: list[str] = []
    # The rest is s[a:b]: bounds, not slices, so that stripping n edges one by one costs O(n), not O(n^2).
    # (The prefix alternatives have no lookbehind, so a match from a with endpos b is the slice's.)
    a, b = 0, len(s)
    while a < b:
        if special_in(s, a, b):  # a URL is matched only once the edges are off
            break
        last = b - a
        m = rules.prefix.match(s, a, b)
        pre = m.end() - a if m else 0
        if pre and a + pre < b and special_in(s, a + pre, b):
            prefixes.append(s[a : a + pre])
            a += pre
            break
        suf = _suffix_len(s, a + pre, b, rules.suffix) if a + pre < b else 0
        if suf and b - suf > a and special_in(s, a, b - suf):
            suffixes.append(s[b - suf : b])
            b -= suf
            break
        if pre and suf and pre + suf <= b - a:
            prefixes.append(s[a : a + pre])
            suffixes.append(s[b - suf : b])
            a, b = a + pre, b - suf
        elif pre:
            prefixes.append(s[a : a + pre])
            a += pre
        elif suf:
            suffixes.append(s[b - suf : b])
            b -= suf
        if b - a == last or special_in(s, a, b):
            break
    s = s[a:b]
    middle: list[str] = []
    if s:
        sp = _special(s) if specials else None
        if sp:
            middle = list(sp)
        elif rules.url.fullmatch(s):
            middle = [s]
        else:
            middle = _infix_split(s, rules.infix)
    return _match_specials(prefixes + middle + suffixes[::-1], specials)


def _no_special(t: str, a: int, b: int) -> None:
    return None


def special_strings() -> set[str]:
    """Every string :func:`_special` may answer: the kept-whole and split-whole sets and the contractions (negation
    bases with ``n't``/``nt``, pronouns with their clitics, each with ``'``, ``’`` or no apostrophe) in lower,
    upper and title case (of which ``_special`` answers lower and title case)."""
    folded = {b + neg for b in _NEG_BASES for neg in ("n't", "n’t", "nt")}
    folded |= {h + apo + t for h, ts in _PRONOUN_CLITICS.items() for t in ts for apo in ("'", "’", "")}
    return {*_WHOLE, *_SPLIT_WHOLE} | {f for w in folded for f in (w, w.upper(), w[0].upper() + w[1:])}


@lru_cache(maxsize=1)
def special_patterns() -> dict[tuple[str, ...], tuple[str, ...]]:
    """spaCy's second pass over special cases: a special case that a prefix, infix or suffix rule matches
    (``):``, ``e.g.``, ``:')``) is found again among a piece's words as the words its affix rules alone give it
    (``)`` ``:``), and those words become the special case's. The words of each such case -> its words."""
    out = {}
    for s in sorted(special_strings()):
        sp = _special(s)
        rules = _ASCII if s.isascii() else _UNICODE
        if sp and (rules.prefix.match(s) or rules.infix.search(s) or rules.suffix.search(s)):
            out[_split(s, rules, specials=False)] = sp
    return out


def _match_specials(tokens: list[str], specials: bool = True) -> tuple[str, ...]:
    """``tokens`` with every run that spells a special case as its affix rules split it (:func:`special_patterns`)
    replaced by the special case's words, as spaCy's matcher picks them: the longest runs first, then the
    leftmost; a run is taken unless its first or last word is in a run looked at before (taken or not)."""
    if not specials or len(tokens) < 2:
        return tuple(tokens)
    patterns = special_patterns()
    longest = _LONGEST_PATTERN
    n = len(tokens)
    runs = [
        (i, i + k) for i in range(n) for k in range(1, min(longest, n - i) + 1) if tuple(tokens[i : i + k]) in patterns
    ]
    if not runs:
        return tuple(tokens)
    runs.sort(key=lambda r: (r[0] - r[1], r[0]))
    seen: set[int] = set()
    taken: dict[int, int] = {}
    for a, b in runs:
        if a not in seen and b - 1 not in seen:
            taken[a] = b
        seen.update(range(a, b))
    out: list[str] = []
    i = 0
    while i < n:
        if i in taken:
            out.extend(patterns[tuple(tokens[i : taken[i]])])
            i = taken[i]
        else:
            out.append(tokens[i])
            i += 1
    return tuple(out)


_LONGEST_PATTERN = max(map(len, special_patterns()))


# What the compiled splitter decides for a piece past ASCII (compat_split._wide_tokens), stated here beside the
# rules it rests on. Characters that some prefix, suffix, infix or URL rule reads; a letter or mark outside them
# (a "core" character) triggers no rule, and lower-cases past ASCII where the piece's special cases cannot hold it.
_RULE_CHARS = frozenset(_PUNCT + _QUOTES + _SC + _SO + "".join(_HYPHENS) + "§%=+²°.,:;…$/<>*^'\"@|\\")
_MARK_CATEGORIES = frozenset(("Mn", "Mc", "Me", "Cf"))
# Edge marks (one character, taken off either edge by the prefix and suffix rules) that also sit inside a word
# without effect: not an infix (",", ":", "<", ">", "…"), not the start of "'s" or "’s", not in a special case past
# ASCII.
_NOT_INNER = frozenset(",:<>…'’._") | {c for w in (*_WHOLE, *_SPLIT_WHOLE) if not w.isascii() for c in w}
_SPACY_LOWER, _SPACY_UPPER = re.compile(f"[{_LOWER}]"), re.compile(f"[{_UPPER}]")


def is_core(ch: str) -> bool:
    return (ch.isalpha() or unicodedata.category(ch) in _MARK_CATEGORIES) and ch not in _RULE_CHARS


def is_edge(ch: str) -> bool:
    return ch in _PUNCT or ch in _QUOTES


def is_inner(ch: str) -> bool:
    return is_edge(ch) and ch not in _NOT_INNER


def is_spacy_lower(ch: str) -> bool:
    return _SPACY_LOWER.fullmatch(ch) is not None


def is_spacy_upper(ch: str) -> bool:
    return _SPACY_UPPER.fullmatch(ch) is not None


def wide_piece_tokens(s: str) -> tuple[str, ...] | None:
    """The words of ``s`` where its shape decides them, else None: an optional edge mark, a middle, and an optional
    edge mark or period, where the middle starts and ends with a core character, holds only core characters and
    inner marks, and one of them lower-cases past ASCII. Each edge mark is one word (the prefix and suffix rules
    take it off; no special case is one), the middle one word (no rule reads it and no special case is it); a
    period comes off a middle of two or more characters after a lower-case letter or two upper-case ones (the
    period's suffix rules), else stays in it. ``_split`` gives the same words (tests/preprocess/test_compat_split.py)."""
    a, b = 0, len(s)
    if b - a >= 2 and is_edge(s[a]):
        a += 1
    close = b - a >= 2 and (is_edge(s[b - 1]) or s[b - 1] == ".")
    if close:
        b -= 1
    mid = s[a:b]
    if not (mid and is_core(mid[0]) and is_core(mid[-1])):
        return None
    if not all(is_core(c) or is_inner(c) for c in mid) or mid.lower().isascii():
        return None
    if close and s[b] == ".":
        if len(mid) < 2:
            return None
        if not (is_spacy_lower(mid[-1]) or (is_spacy_upper(mid[-1]) and is_spacy_upper(mid[-2]))):
            b += 1  # the period stays in the word
    return tuple(w for w in (s[:a], s[a:b], s[b:]) if w)


# The shape rests on these: no special case past ASCII is such a piece (nor so its middle, alone or with one
# edge), and no run of its words is one that spaCy's second pass merges (a lone edge mark or period; a run with
# the middle is itself such a piece, split the same way).
assert not any(wide_piece_tokens(w) for w in (*_WHOLE, *_SPLIT_WHOLE) if not w.isascii())
assert not any(
    (len(key) == 1 and (is_edge(key[0]) or key[0] == ".")) or wide_piece_tokens("".join(key)) == key
    for key in special_patterns()
)


def words(text: str) -> list[str]:
    """datatrove's English words of ``text`` (spaCy's tokens, whitespace ones left out)."""
    out: list[str] = []
    for piece in text.split():
        out.extend(_piece_tokens(piece))
    return out


def _is_punct(token: str) -> bool:
    return all(unicodedata.category(c).startswith("P") for c in token)


def count_sentences(text: str) -> int:
    """Sentences of ``text`` as spaCy's sentencizer cuts them (at least 1 for a text with a token)."""
    n, seen_terminal = 0, False
    for token in words(text):
        if n == 0:
            n = 1
        is_term = token in SENTENCE_TERMINALS
        if seen_terminal and not is_term and not _is_punct(token):
            n += 1
            seen_terminal = False
        elif is_term:
            seen_terminal = True
    return max(n, 1)
