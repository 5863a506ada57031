"""Session fixtures for dedup tests: the handbook near-duplicate corpus and its ground truth, built once."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from .corpus import exact_jaccard_matrix, near_duplicate_corpus


@pytest.fixture(scope="session")
def nd_corpus() -> tuple[list[str], list[str], np.ndarray]:
    """``(ids, texts, exact Jaccard matrix)`` of the handbook corpus with mutated copies."""
    docs = near_duplicate_corpus()
    ids = [i for i, _ in docs]
    texts = [t for _, t in docs]
    return ids, texts, exact_jaccard_matrix(texts)


@pytest.fixture(scope="session")
def nd_files(nd_corpus, tmp_path_factory) -> list[str]:
    """The corpus as three Parquet files (small row groups), rows interleaved across files."""
    ids, texts, _ = nd_corpus
    d = tmp_path_factory.mktemp("nd_files")
    files = []
    for k in range(3):
        f = str(d / f"part-{k}.parquet")
        pq.write_table(pa.table({"id": ids[k::3], "text": texts[k::3]}), f, row_group_size=40)
        files.append(f)
    return files
