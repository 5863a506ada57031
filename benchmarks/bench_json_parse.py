"""JSON parsers side by side on bench_ingest.py's JSONL: the choice behind ingest's fast parse path.

    .venv/bin/python benchmarks/bench_json_parse.py [--mb 32] [--rounds 5] [--no-results]

The first ``--mb`` MB of benchmarks/bench_ingest.py's first file (generated once), held in memory as
lines. Each parser parses every line the way ingest's reader would, in one process, rounds alternated
(every parser once per round); CPU seconds (``time.process_time``) per parser, median and spread. A
parser that is not installed is skipped (orjson is not an Airflow 3.3 dependency: install it beside the
venv, e.g. ``pip install --target DIR orjson`` and ``PYTHONPATH=DIR``, to include it).

* ``json (str)``: ``json.loads(line.decode("utf-8"))``, the standard library (ingest's path before);
* ``msgspec``: ``msgspec.json.Decoder().decode(line)`` on the bytes (UTF-8 checked by the decoder);
* ``orjson``: ``orjson.loads(line)``;
* ``pyarrow.json``: ``pyarrow.json.read_json`` over the whole block, one thread, then ``to_pylist()``
  (records as dicts, what the reader hands on); a block parser cannot quarantine one line, and it infers
  one schema for all lines, so it is listed for speed only.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_ingest import generate  # noqa: E402
from results import RESULTS, replace_block  # noqa: E402


def parsers() -> dict:
    out = {"json (str)": lambda lines: [json.loads(line.decode("utf-8")) for line in lines]}
    try:
        import msgspec

        dec = msgspec.json.Decoder()
        out["msgspec"] = lambda lines: [dec.decode(line) for line in lines]
    except ImportError:
        pass
    try:
        import orjson

        out["orjson"] = lambda lines: [orjson.loads(line) for line in lines]
    except ImportError:
        pass
    import pyarrow.json as pj

    def block(lines):
        opts = pj.ReadOptions(use_threads=False, block_size=16 << 20)
        return pj.read_json(io.BytesIO(b"".join(lines)), read_options=opts).to_pylist()

    out["pyarrow.json (block)"] = block
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workdir", default=str(HERE / "data" / "ingest"))
    ap.add_argument("--no-results", action="store_true")
    args = ap.parse_args(argv)
    [source] = generate(Path(args.workdir) / "input", 1)
    lines, size = [], 0
    with open(source, "rb") as f:
        for line in f:
            if size + len(line) > args.mb * 1e6:
                break
            lines.append(line)
            size += len(line)
    fns = parsers()
    reference = fns["json (str)"](lines)
    for name, fn in fns.items():  # every parser gives the same records on this data
        if fn(lines) != reference:
            raise SystemExit(f"{name} disagrees with json on the records")
    cpu: dict[str, list[float]] = {n: [] for n in fns}
    for _ in range(args.rounds):
        for name, fn in fns.items():
            t = time.process_time()
            fn(lines)
            cpu[name].append(time.process_time() - t)
    base = statistics.median(cpu["json (str)"])
    rows = []
    print(f"{len(lines)} lines, {size / 1e6:.1f} MB; CPU s median (min-max) of {args.rounds} alternated rounds")
    for name, xs in cpu.items():
        med = statistics.median(xs)
        row = {
            "parser": name,
            "cpu_median": med,
            "cpu_min": min(xs),
            "cpu_max": max(xs),
            "mb_per_cpu_s": size / 1e6 / med,
        }
        row["speedup_vs_json"] = base / med
        rows.append(row)
        print(
            f"{name:<22} {med:6.3f} ({min(xs):.3f}-{max(xs):.3f})  {row['mb_per_cpu_s']:7.1f} MB/CPU-s  {row['speedup_vs_json']:.2f}x"
        )
    if args.no_results:
        return 0
    load = os.getloadavg()[0]
    out = HERE / "results" / "json_parse.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "args": vars(args),
                "lines": len(lines),
                "mb": size / 1e6,
                "load_1min_end": load,
                "rows": rows,
                "runs": cpu,
            },
            indent=1,
        )
        + "\n"
    )
    table = "\n".join(
        f"| {r['parser']} | {r['cpu_median']:.3f} ({r['cpu_min']:.3f}-{r['cpu_max']:.3f}) | {r['mb_per_cpu_s']:.0f} | {r['speedup_vs_json']:.2f}x |"
        for r in rows
    )
    replace_block(
        RESULTS,
        "bench_json_parse",
        f"""## Ingest: JSON parsers side by side (`benchmarks/bench_json_parse.py`)

Command: `PYTHONPATH=<dir with orjson> .venv/bin/python benchmarks/bench_json_parse.py --mb {args.mb:g} --rounds {args.rounds}`
(run {time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, load average {load:.1f} on 2 shared cores; JSON: `benchmarks/results/json_parse.json`).
{len(lines)} lines ({size / 1e6:.1f} MB) of bench_ingest's JSONL, parsed line by line as ingest's reader does (pyarrow:
the whole block, then `to_pylist()`); every parser's records checked equal to json's first. CPU s: median (min-max)
of {args.rounds} alternated rounds in one process.

| parser | CPU s | MB per CPU-s | vs json |
| --- | --- | --- | --- |
{table}
""",
        after="bench_ingest_sizing",
    )
    print("wrote benchmarks/RESULTS.md and", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
