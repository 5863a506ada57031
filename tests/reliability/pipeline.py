"""A small real pipeline for the fault-injection tests, and what "the same curated output" means.

Every stage runs the way a backend runs it: ``python -m airflow_curation.jobs run SPEC.json`` in a
subprocess, so that ``CURATION_FAULT`` can SIGKILL it. The lake always lives at the same path
(``root``): a scenario restores a saved copy of the lake into that path (manifests store URIs relative to
the lake root, so a copy elsewhere would do too; the same path keeps job logs and reports comparable).

**Curated output** is defined by content, not by files: for a stage's final manifest, every row of
every shard it lists (``id``, ``text``, ``source``, ``meta``) together with every attrs column of every
stage that manifest lists for that shard, keyed by ``id``. Shard and attrs file names, checkpoint
records, timings and hosts legitimately differ between runs and are not part of it. Floats are
compared exactly (``repr`` round-trips), so "identical" means byte-identical values.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from airflow_curation.core import storage
from airflow_curation.core.accounting import RowAccounting
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest
from airflow_curation.jobs.spec import JobSpec

STAGES = ("ingest", "preprocess", "dedup", "enrich", "validate")
# Training data out: the curated rows mixed, tokenized and exported (tests/reliability/test_kill_resume_out.py).
OUT_STAGES = ("ingest", "preprocess", "mix", "tokenize", "export")
# The filters between (tests/reliability/test_kill_resume_mid.py).
MID_STAGES = ("ingest", "preprocess", "boilerplate", "dedup", "quality", "decontaminate", "pii")
RUN_ID = "run1"
DATASET = "web"
# Report fields that differ between two runs of the same data (time, paths of this run's files).
VOLATILE_REPORT_KEYS = ("created_at", "seconds", "stages", "timeline")  # timings, not output
TEMP_GLOB = "**/.*.tmp-*"


@dataclass(frozen=True)
class Pipeline:
    """:param root: the lake root (always this path). :param corpus: the raw input folder.
    :param model: the enrich model folder. :param work: specs and job logs (outside the lake).
    :param stages: the chain, each stage reading the manifest of the one before.
    :param tokenizer: the tokenizer file (tokenize). :param quality_model: the quality model folder.
    :param eval_set: the evaluation set file (decontaminate).
    """

    root: Path
    corpus: Path
    model: str
    work: Path
    stages: tuple[str, ...] = STAGES
    tokenizer: str = ""
    quality_model: str = ""
    eval_set: str = ""

    @property
    def lake(self) -> Lake:
        return Lake(str(self.root), DATASET)

    def manifest_uri(self, stage: str) -> str:
        return self.lake.manifest_uri(RUN_ID, stage)

    def config(self, stage: str) -> dict[str, Any]:
        # Small units, shards and row groups so that every fault point is hit more than once.
        upstream = self.stages[self.stages.index(stage) - 1] if stage != "ingest" else None
        common = {"input_manifest": self.manifest_uri(upstream)} if upstream else {}
        return {
            "ingest": {
                "inputs": [str(self.corpus)],
                "unit_bytes": 100_000,
                "target_shard_bytes": 40_000,
                "row_group_rows": 16,
            },
            "preprocess": {**common, "mapper": "local", "batch_rows": 32},
            "dedup": {**common, "mapper": "local", "partitions": 2},
            # transformers in the job process: the cheapest real model run; parts of 10 rows so that
            # a shard is killed between two within-shard checkpoints.
            "enrich": {
                **common,
                "task": "score",
                "model": self.model,
                "model_runtime": "transformers",
                "mapper": "local",
                "checkpoint_rows": 10,
                "batch_size": 8,
                "max_input_tokens": 64,
            },
            # One DuckDB thread: the least CPU on a shared machine (the means no longer depend on the threads: fsum).
            "validate": {**common, "query_engine": "duckdb", "threads": 1, "max_duplicate_rate": 1.0},
            # Three keys (mean line length bins), up-sampled past what is kept: epochs > 1 reach tokenize.
            "mix": {
                **common,
                "workers": 1,
                "key": "preprocess.mean_line_len",
                "key_bins": [30, 60],
                "targets": {"<30": 0.2, "30-60": 0.5, ">=60": 0.3},
                "total": 400,
                "seed": 3,
            },
            "tokenize": {**common, "workers": 1, "tokenizer": self.tokenizer, "seq_len": 64},
            # Lines held by 3 documents are boilerplate: the sample corpus's licence headers and shared lines.
            "boilerplate": {**common, "min_documents": 3, "batch_rows": 32},
            "quality": {**common, "model": self.quality_model, "batch_rows": 32},
            "decontaminate": {**common, "eval_sets": {"held": self.eval_set}, "ngram": 8},
            "pii": {**common, "batch_rows": 32},
            # Small files and a small memory budget: ~35 buckets in ~6 gather units, several MDS shards a bucket;
            # the spill files merged by chunk of buckets first (too few for the middle pass to pay on its own).
            "export": {
                **common,
                "workers": 1,
                "spill_merge": "on",
                "formats": ["megatron", "mds", "parquet"],
                "file_size": 32768,
                "memory_budget": 800_000,
                "mds_size_limit": 8192,
                "seed": 11,
            },
        }[stage]

    def run(self, stage: str, fault: str | None = None, tag: str = "") -> subprocess.CompletedProcess:
        """Run one stage as a job; ``fault`` sets ``CURATION_FAULT``. Output goes to a log in ``work``."""
        self.work.mkdir(parents=True, exist_ok=True)
        spec = JobSpec(stage=stage, lake=self.lake.to_dict(), run_id=RUN_ID, config=self.config(stage))
        spec_path = self.work / f"{stage}.spec.json"
        spec_path.write_text(spec.to_json())
        env = {k: v for k, v in os.environ.items() if k != "CURATION_FAULT"}
        # One compute thread per job: less CPU on a shared 2-core machine, and the same arithmetic every run.
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
        if fault:
            env["CURATION_FAULT"] = fault
        log = self.work / f"{stage}{tag}.log"
        with open(log, "wb") as out:
            proc = subprocess.run(
                [sys.executable, "-m", "airflow_curation.jobs", "run", str(spec_path)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                timeout=600,
            )
        proc.log = log  # type: ignore[attr-defined]
        return proc

    def output_view(self) -> dict[str, str]:
        """What the chain produced: the curated rows of its last stage that lists shards (``curated_view``)
        and, where it exports, every exported file's bytes (``exported_files``)."""
        rows_stage = self.stages[-1] if self.stages[-1] != "export" else self.stages[-2]
        view = curated_view(self.manifest_uri(rows_stage))
        if "export" in self.stages:
            view.update(exported_files(self.manifest_uri("export")))
        return view

    def restore(self, saved: Path | None) -> None:
        """Make the lake what ``saved`` holds (nothing when None)."""
        shutil.rmtree(self.root, ignore_errors=True)
        if saved is not None:
            shutil.copytree(saved, self.root, symlinks=True)

    def save(self, to: Path) -> Path:
        shutil.rmtree(to, ignore_errors=True)
        shutil.copytree(self.root, to, symlinks=True)
        return to


def log_tail(proc: subprocess.CompletedProcess, lines: int = 30) -> str:
    text = Path(proc.log).read_text(errors="replace").splitlines()  # type: ignore[attr-defined]
    return "\n".join(text[-lines:])


# -- what is compared ----------------------------------------------------------------------------


def curated_view(manifest_uri: str) -> dict[str, str]:
    """id -> the row's canonical JSON: shard columns plus ``{stage: {column: value}}`` of its attrs."""
    manifest = Manifest.read(manifest_uri)
    rows: dict[str, str] = {}
    for shard in manifest.shards:
        table = _table(shard.uri)
        ids = table.column("id")
        attrs = {}
        for stage, uri in sorted(shard.attrs.items()):
            a = _table(uri)
            assert a.column("id").equals(ids), f"{uri}: not the rows of {shard.uri} in its order"
            attrs[stage] = a.drop_columns(["id"]).to_pylist()
        for i, row in enumerate(table.to_pylist()):
            row["attrs"] = {stage: values[i] for stage, values in attrs.items()}
            assert row["id"] not in rows, f"id {row['id']} appears twice"
            rows[row["id"]] = json.dumps(row, sort_keys=True, default=repr)
    return rows


def exported_files(manifest_uri: str) -> dict[str, str]:
    """``export:<file>`` -> the SHA-256 of every file in the export's output folder (each format's files, the
    order files, MDS's index and ``_SUCCESS.json``): what a trainer reads, byte for byte."""
    out = Path(Manifest.read(manifest_uri).config["export"]["output_dir"])
    return {
        f"export:{p.relative_to(out)}": hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.rglob("*"))
        if p.is_file()
    }


def _table(uri: str):
    """A Parquet file of any storage (a local path, or an object store through the options in effect)."""
    with storage.open_read(uri) as f:
        return pq.read_table(f)


def view_differences(got: dict[str, str], want: dict[str, str], limit: int = 5) -> list[str]:
    """Readable differences (missing, extra, changed ids), at most ``limit`` of each."""
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    changed = sorted(k for k in set(got) & set(want) if got[k] != want[k])
    out = [f"missing {len(missing)} ids, e.g. {missing[:limit]}"] if missing else []
    out += [f"{len(extra)} ids not in the reference, e.g. {extra[:limit]}"] if extra else []
    out += [f"id {k}:\n  got  {got[k][:400]}\n  want {want[k][:400]}" for k in changed[:limit]]
    return out


def accountings(lake: Lake) -> dict[str, dict]:
    """Each stage manifest's accounting in this run's folder (the dedup sub-stage's included)."""
    folder = Path(lake.manifest_uri(RUN_ID, "x")).parent
    out = {}
    for path in sorted(folder.glob("*.json")):
        if path.name.startswith("report"):
            continue
        m = Manifest.read(str(path))
        out[m.stage] = {"status": m.status, **m.accounting}
    return out


def accounting_problems(books: dict[str, dict]) -> list[str]:
    """Each stage's books close, and every stage after ingest read exactly the rows ingest kept."""
    problems = []
    for stage, acc in books.items():
        if not RowAccounting.from_dict(acc).closes:
            problems.append(f"{stage}: {acc} does not close")
    ingested = books.get("ingest", {}).get("kept")
    for stage in sorted({*STAGES[1:], *OUT_STAGES[1:], *MID_STAGES[1:]} - {"export"}):  # export: sequences
        if stage in books and books[stage]["read"] != ingested:
            problems.append(f"{stage} read {books[stage]['read']} rows, ingest kept {ingested}")
    return problems


def report(lake: Lake) -> dict[str, Any]:
    """The validate report without what legitimately differs between runs ({} where the chain has none)."""
    path = Path(lake.manifest_uri(RUN_ID, "report"))
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {k: v for k, v in data.items() if k not in VOLATILE_REPORT_KEYS}


def stale_temps(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.glob(TEMP_GLOB))


def checkpoint_records(lake: Lake) -> dict[tuple[str, str], dict]:
    """(stage, unit id) -> committed checkpoint record, every stage and fingerprint."""
    out = {}
    for path in Path(lake.path("_checkpoints")).glob("*/*/*.json"):
        if path.name.endswith(".failed.json") or path.name.startswith("."):
            continue
        out[(path.parts[-3], path.stem)] = json.loads(path.read_text())
    return out


# A manifest's pages are named by the generation that wrote them (a time and a random tag): the kind of list is
# what two runs can share, not the name.
_PAGES_GENERATION = re.compile(r"\.index/\d+-[0-9a-f]+\.(units|shards)\.pages$")


def lake_files(root: Path) -> list[str]:
    """Every file of the lake but temporaries (those are checked on their own); a manifest's pages files by
    their kind, not their generation."""
    temps = set(stale_temps(root))
    rels = (str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    return sorted({_PAGES_GENERATION.sub(r".index/<generation>.\1.pages", rel) for rel in rels if rel not in temps})


def unit_statuses(lake: Lake, stage: str) -> dict[str, str]:
    return {u.unit_id: u.status for u in Manifest.read(lake.manifest_uri(RUN_ID, stage)).units}
