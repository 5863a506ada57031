"""The names of the datatrove-definition signals (:mod:`airflow_curation.core.compat`), without its import.

:mod:`~airflow_curation.core.compat` builds its word-splitting rules at import (Unicode symbol classes
scanned over every code point: ~0.4 CPU s); a preprocess process whose rules read no ``dt_*`` signal needs
only these names, so it does not pay for that.
"""

from __future__ import annotations

TOP_NGRAMS = (2, 3, 4)
DUP_NGRAMS = (5, 6, 7, 8, 9, 10)

GOPHER_QUALITY_SIGNALS = (
    "dt_n_words",
    "dt_mean_word_len",
    "dt_hash_word_ratio",
    "dt_ellipsis_word_ratio",
    "dt_bullet_line_frac",
    "dt_ellipsis_line_frac",
    "dt_alpha_word_frac",
    "dt_n_stop_words",
)
GOPHER_REPETITION_SIGNALS = (
    "dt_dup_para_frac",
    "dt_dup_para_char_frac",
    "dt_dup_line_frac",
    "dt_dup_line_char_frac",
    *(f"dt_top_{n}gram_char_frac" for n in TOP_NGRAMS),
    *(f"dt_dup_{n}gram_char_frac" for n in DUP_NGRAMS),
)
C4_SIGNALS = ("dt_c4_lorem_ipsum", "dt_c4_curly_bracket", "dt_c4_n_sentences")
# C4QualityFilter(filter_no_terminal_punct=False), as FineWeb's recipe runs it: a line without terminal
# punctuation stays (its sentences count, a "{" in it drops the page)
C4_FINEWEB_SIGNALS = ("dt_c4fw_lorem_ipsum", "dt_c4fw_curly_bracket", "dt_c4fw_n_sentences")
FINEWEB_SIGNALS = ("dt_line_punct_frac", "dt_short_line_frac", "dt_char_dup_frac", "dt_newline_word_ratio")
COMPAT_SIGNALS = GOPHER_QUALITY_SIGNALS + GOPHER_REPETITION_SIGNALS + C4_SIGNALS + C4_FINEWEB_SIGNALS + FINEWEB_SIGNALS
