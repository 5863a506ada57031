"""Export throughput: tokens per second per core of the export stage (scatter + gather, Megatron format).

Packed shards of random token ids (vocabulary 50,000: uint16 on disk) in tokenize's layout and a tokenize
manifest naming them; then the whole export stage, one worker, in-process, several alternated runs
(each in a fresh output folder: its own seed, so no checkpoint is reused). CPU time of the process
(user + sys) over the run; the figure is tokens / CPU s.

    python benchmarks/bench_export.py [--shards 16 --sequences 1000 --seq-len 2048 --repeats 3]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from airflow_curation.core import storage  # noqa: E402
from airflow_curation.core.fingerprint import checksum_url  # noqa: E402
from airflow_curation.core.layout import Lake  # noqa: E402
from airflow_curation.core.manifest import Manifest, UnitEntry  # noqa: E402
from airflow_curation.stages.base import StageRunner  # noqa: E402
from airflow_curation.stages.export.stage import ExportStage  # noqa: E402
from airflow_curation.stages.tokenize.packing import Packer  # noqa: E402

VOCAB = 50_000


def make_input(base: str, shards: int, sequences: int, seq_len: int) -> tuple[Lake, str, int]:
    lake = Lake(os.path.join(base, "lake"), "bench")
    uri, tokens = write_input(lake, shards, sequences, seq_len)
    return lake, uri, tokens


def write_input(lake: Lake, shards: int, sequences: int, seq_len: int) -> tuple[str, int]:
    """Packed shards of random ids (uint16 on disk) and a tokenize manifest naming them, in ``lake`` (any
    storage); returns the manifest's URI and the tokens."""
    rng = np.random.default_rng(0)
    units, recs, total = [], {}, 0
    for s in range(shards):
        packer = Packer(seq_len, 0)
        n = sequences * seq_len
        lengths = rng.integers(50, 3000, size=n // 50)
        lengths = lengths[np.cumsum(lengths) <= n]
        lengths[-1] += n - int(lengths.sum())
        packer.add([f"d{s}-{i}" for i in range(len(lengths))], rng.integers(1, VOCAB, size=n, dtype=np.int32), lengths)
        sink = io.BytesIO()
        pq.write_table(next(iter(packer.flush())), sink, compression="zstd", row_group_size=1024)
        uri = lake.path("packed", f"s{s:04d}.parquet")
        storage.write_bytes(uri, sink.getvalue())
        units.append(UnitEntry(unit_id=f"s{s:04d}", inputs=[], input_checksum="-", status="done"))
        recs[f"s{s:04d}"] = {"sequences": packer.sequences, "packed_uri": uri, "packed_checksum": checksum_url(uri)}
        total += packer.sequences
    m = Manifest(dataset="bench", stage="tokenize", run_id="in", fingerprint="-", lake=lake.to_dict(), units=units)
    m.status = "complete"
    m.config = {"tokens": {"sequences": total, "seq_len": seq_len, "shards": recs}}
    return m.write(lake.manifest_uri("in", "tokenize")), total * seq_len


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--sequences", type=int, default=1000)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--file-size", default="16MiB")
    ap.add_argument("--out", default="benchmarks/results/export.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as base:
        lake, uri, tokens = make_input(base, args.shards, args.sequences, args.seq_len)
        runs = []
        for r in range(args.repeats):
            c0, w0 = cpu(), time.perf_counter()
            m = StageRunner(
                ExportStage(
                    lake,
                    {"input_manifest": uri, "seed": r, "file_size": args.file_size, "vocab_size": VOCAB},
                    f"run{r}",
                )
            ).run()
            c, w = cpu() - c0, time.perf_counter() - w0
            runs.append({"cpu_s": round(c, 3), "wall_s": round(w, 3), "tokens_per_cpu_s": round(tokens / c)})
            print(json.dumps(runs[-1]), m.config["export"]["buckets"], "buckets", flush=True)
    rates = [x["tokens_per_cpu_s"] for x in runs]
    out = {
        "command": "python " + " ".join(sys.argv),
        "shards": args.shards,
        "sequences": args.shards * args.sequences,
        "seq_len": args.seq_len,
        "tokens": tokens,
        "format": "megatron",
        "dtype": "uint16",
        "file_size": args.file_size,
        "runs": runs,
        "median_tokens_per_cpu_s": statistics.median(rates),
        "spread": [min(rates), max(rates)],
        "load": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "cores": os.cpu_count(),
    }
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({k: out[k] for k in ("median_tokens_per_cpu_s", "spread", "load")}))


if __name__ == "__main__":
    main()
