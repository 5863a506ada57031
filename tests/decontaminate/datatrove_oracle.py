"""datatrove's n-gram decontamination on given data, run in the oracle venv (datatrove 0.10.1 + spaCy).

    python datatrove_oracle.py INPUT.json  ->  JSON on stdout

INPUT: {"n": 13, "eval": {benchmark: [text, ...]}, "docs": [text, ...], "index_dir": folder, "repeat": 1}.
The index is built by datatrove's own ``NGramsDecontIndexer.compute_hashes`` on each evaluation text (as the
label, no query) and saved as its ``run`` saves it (``<task>.index.hashes``); its ``run`` itself only reads
lighteval tasks (and imports lighteval), so it is not called. The documents go through
``NGramsDecontFilter.filter`` unchanged. Output: the flagged documents (index, task, n-gram) and the seconds
(wall and CPU) of the index and of each of ``repeat`` filter passes over all documents (a fresh filter each time, index load included).
"""

from __future__ import annotations

import json
import os
import sys
import time
from types import SimpleNamespace

import numpy as np
from datatrove.data import Document
from datatrove.pipeline.decont.n_grams import NGramsDecontConfig, NGramsDecontFilter, NGramsDecontIndexer
from datatrove.utils.hashing import create_hash_func
from datatrove.utils.word_tokenizers import load_word_tokenizer


def main() -> None:
    spec = json.load(open(sys.argv[1]))
    config = NGramsDecontConfig(n_grams=int(spec["n"]))
    folder = spec["index_dir"]
    os.makedirs(folder, exist_ok=True)
    indexer = SimpleNamespace(
        tokenizer=load_word_tokenizer("en"), config=config, hash_func=create_hash_func(config.hash_config)
    )
    started, cpu = time.perf_counter(), time.process_time()
    for task, texts in spec["eval"].items():
        hashes: set[int] = set()
        for text in texts:
            hashes.update(NGramsDecontIndexer.compute_hashes(indexer, text))
        np.array(sorted(hashes), dtype=config.hash_config.np_descr).tofile(os.path.join(folder, f"{task}.index.hashes"))
    index_seconds, index_cpu = time.perf_counter() - started, time.process_time() - cpu
    flagged, seconds, cpus = [], [], []
    for _ in range(int(spec.get("repeat", 1))):
        filt = NGramsDecontFilter(folder, config=config)
        started, cpu = time.perf_counter(), time.process_time()
        flagged = []
        for i, text in enumerate(spec["docs"]):
            doc = Document(text=text, id=str(i))
            if filt.filter(doc) is not True:
                flagged.append(
                    {"i": i, "task": doc.metadata["contaminated_task"], "ngram": doc.metadata["contaminated_ngram"]}
                )
        seconds.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu)
    out = {"flagged": flagged, "index_seconds": index_seconds, "index_cpu": index_cpu}
    json.dump({**out, "filter_seconds": seconds, "filter_cpu": cpus}, sys.stdout)


if __name__ == "__main__":
    main()
