"""The export stage: tokenize's packed sequences, globally shuffled, written in the trainers' formats.

Two phases, each resumable (see :mod:`.phases` for the order rule and docs/export.md):

1. scatter, per packed shard (parallel, checkpointed as the ``export_scatter`` sub-stage): the shard's
   sequences spilled to ``export/<fingerprint>/spill/<shard>.arrow``, one batch per bucket;
2. gather, per contiguous range of buckets (the stage's own checkpointed units): one ranged read of every
   spill file, then per bucket the seeded order and one file per format: ``megatron/<bucket>.bin/.idx``,
   ``mds/shard.<bucket>.<k>.mds`` (``mds/index.json`` after the last unit), ``parquet/<bucket>.parquet``,
   and ``order/<bucket>.parquet`` (the source shard and row of every written sequence).

The bucket count comes from bytes (``file_size``), never from the shard count. The books are kept in
sequences: every sequence of the tokenize manifest is written exactly once (checked in :meth:`collect`).
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from functools import cached_property
from typing import Any

from airflow_curation.core import storage
from airflow_curation.core.accounting import RowAccounting
from airflow_curation.core.faults import fault_point
from airflow_curation.core.fingerprint import checksum_url
from airflow_curation.core.integrity import verify_file
from airflow_curation.core.lsh import partition_ranges
from airflow_curation.core.manifest import Manifest, ManifestError, UnitEntry
from airflow_curation.stages.base import Stage, StageFailed, StageRunner, UnitResult, file_record
from airflow_curation.stages.export import formats, phases
from airflow_curation.stages.settings import Setting, size

log = logging.getLogger(__name__)

FORMATS = ("megatron", "mds", "parquet")


class ExportScatterStage(Stage):
    """Phase 1 as a stage of its own, so that each packed shard's spill file is checkpointed and a rerun
    scatters only the shards not done yet. Built and run by :class:`ExportStage`."""

    name = "export_scatter"
    version = "1"
    SETTINGS = Stage.SETTINGS.extend(
        Setting("seed", int, 0, "shuffle seed", cli=False),
        Setting("buckets", int, 1, "buckets (output files per format)", cli=False),
        Setting("dtype", str, "uint16", "token dtype", cli=False),
        Setting("vocab_size", int, None, "ids must be below it", cli=False),
        Setting("boundaries", bool, False, "spill the document boundaries too (the parquet format)", cli=False),
        Setting("shards", list, [], "the packed shards to scatter (ExportStage's plan)", runtime=True, cli=False),
    )

    def spill_uri(self, shard_id: str) -> str:
        return self.lake.path("export", self.fingerprint, "spill", f"{shard_id}.arrow")

    def plan(self) -> list[UnitEntry]:
        return [
            UnitEntry(unit_id=s["shard_id"], inputs=[s["uri"]], input_checksum=f"{s['checksum']}@{s['index']}")
            for s in self.config["shards"]
        ]

    def process_unit(self, unit: UnitEntry) -> UnitResult:
        s = next(s for s in self.config["shards"] if s["shard_id"] == unit.unit_id)
        verify_file(s["uri"], s["checksum"], f"packed shard {unit.unit_id}")
        uri = self.spill_uri(unit.unit_id)
        c = self.config
        stats = phases.scatter_shard(
            s["uri"], s["index"], c["seed"], c["buckets"], c["dtype"], c["vocab_size"], c["boundaries"], uri
        )
        nbytes, _ = storage.stat(uri)
        acc = RowAccounting()
        acc.keep(stats["sequences"])
        return UnitResult(outputs=[], accounting=acc, extra=stats, files=[file_record(uri, nbytes, checksum_url(uri))])


class ExportStage(Stage):
    """Globally shuffle tokenize's packed sequences (seeded, deterministic) and write them as a Megatron-LM
    indexed dataset, MosaicML streaming (MDS) shards and/or Parquet. See docs/export.md."""

    name = "export"
    version = "1"
    INPUTS = "manifest"
    UPSTREAM = ("tokenize",)
    OPTIONAL_WITHOUT = "formats"
    SETTINGS = Stage.SETTINGS.extend(
        Setting("formats", list, ["megatron"], "any of megatron, mds, parquet (comma-separated)"),
        Setting("seed", int, 0, "shuffle seed: the same seed and input give the same bytes"),
        Setting(
            "file_size",
            size,
            1 << 30,
            "target tokens bytes per output file, e.g. 1GiB: sets the bucket count (files per format)",
        ),
        Setting("vocab_size", int, None, "vocabulary size (default: the tokenizer file the tokenize run names)"),
        Setting("mds_size_limit", size, formats.MDS_SIZE_LIMIT, "MDS shard size limit (MDSWriter's size_limit)"),
        Setting(
            "memory_budget",
            size,
            8 << 30,
            "memory of one gather unit (a range of buckets read at once); with workers, sets the units",
            runtime=True,
        ),
        Setting(
            "tokenize_manifest",
            str,
            None,
            "set by the stage from input_manifest: the tokenize manifest it reads",
            runtime=True,
            cli=False,
        ),
        Setting(
            "upstream_wait_s",
            float,
            600,
            "seconds to wait for a planned tokenize manifest to complete (its gate opens on its checkpoints, "
            "its job writes the final manifest just after)",
            runtime=True,
        ),
        Setting(
            "output_dir", str, None, "write the formats here (default: export/<fingerprint>/ in the lake)", runtime=True
        ),
    )

    def __init__(self, lake, config, run_id) -> None:
        super().__init__(lake, config, run_id)
        unknown = sorted(set(self.config["formats"]) - set(FORMATS))
        if unknown or not self.config["formats"]:
            raise ValueError(f"export: formats must be some of {list(FORMATS)}, not {self.config['formats']!r}")
        self.config["formats"] = [f for f in FORMATS if f in self.config["formats"]]  # one spelling, one fingerprint
        # The manifest names its input tokenize_manifest, not input_manifest: export's books are in sequences,
        # not rows, so the row chain between stages (the runner's, the gates', validate's) does not apply to
        # it; collect checks that every sequence is written once instead.
        if self.config.get("input_manifest"):
            self.config["tokenize_manifest"] = self.config.pop("input_manifest")

    # -- inputs --------------------------------------------------------------------------------------
    @cached_property
    def tokenize_manifest(self) -> Manifest:
        uri = self.config.get("tokenize_manifest")
        if not uri:
            raise ValueError("export needs input_manifest, a tokenize manifest")
        deadline = time.monotonic() + float(self.config["upstream_wait_s"] or 0)
        while (m := Manifest.read(uri)).status == "planned" and time.monotonic() < deadline:
            time.sleep(1.0)
        if m.status != "complete" or "tokens" not in m.config:
            raise ManifestError(f"export: {uri} is not a complete tokenize manifest (status {m.status_text})")
        return m

    @cached_property
    def vocab_size(self) -> int:
        if self.config["vocab_size"]:
            return int(self.config["vocab_size"])
        from airflow_curation.stages.tokenize.stage import load_tokenizer

        tokenizer = self.tokenize_manifest.config.get("tokenizer")
        if not tokenizer:
            raise ValueError("export: the tokenize manifest names no tokenizer file; give vocab_size (--vocab-size)")
        try:
            return int(load_tokenizer(tokenizer).get_vocab_size(with_added_tokens=True))
        except ValueError as e:
            raise ValueError(f"export: {e}; give vocab_size (--vocab-size)") from None

    def out_dir(self) -> str:
        return self.config.get("output_dir") or self.lake.path("export", self.fingerprint)

    def work_dirs(self) -> list[str]:
        return [self.lake.base, *([self.config["output_dir"]] if self.config.get("output_dir") else [])]

    # -- phase 1 while planning phase 2 --------------------------------------------------------------
    def plan(self) -> list[UnitEntry]:
        tokens = self.tokenize_manifest.config["tokens"]
        by_shard = tokens["shards"]
        shards = []
        for index, unit in enumerate(self.tokenize_manifest.units):
            rec = by_shard.get(unit.unit_id)
            if rec is None:
                raise ManifestError(f"export: shard {unit.unit_id} has no packed file in the tokenize manifest")
            shards.append(
                {"shard_id": unit.unit_id, "uri": rec["packed_uri"], "checksum": rec["packed_checksum"], "index": index}
            )
        self._sequences = int(tokens["sequences"])
        seq_len = int(tokens["seq_len"])
        dtype = formats.token_dtype(self.vocab_size)
        total = self._sequences * seq_len * dtype.itemsize
        buckets = max(1, math.ceil(total / int(self.config["file_size"])))
        scatter = ExportScatterStage(
            self.lake,
            {
                "seed": self.config["seed"],
                "buckets": buckets,
                "dtype": dtype.name,
                "vocab_size": self.vocab_size,
                "boundaries": "parquet" in self.config["formats"],
                "shards": shards,
                "workers": self.config["workers"],
                "max_attempts": self.config["max_attempts"],
            },
            self.run_id,
        )
        StageRunner(scatter, self.default_mapper()).run()
        fault_point("export.after_scatter")
        # A unit holds its range of every spill file, the sorted copy, the cut-off padding and the bytes it
        # writes: about four times its buckets' tokens.
        memory_units = math.ceil(4 * total / int(self.config["memory_budget"]))
        ranges = partition_ranges(buckets, max(memory_units, int(self.config["workers"] or 1)))
        self._gather = {
            "spill_uris": [scatter.spill_uri(s["shard_id"]) for s in shards],
            "seq_len": seq_len,
            "dtype": dtype.name,
            "buckets": buckets,
        }
        run_key = hashlib.sha256(
            "|".join([scatter.fingerprint, *(s["checksum"] for s in shards)]).encode()
        ).hexdigest()[:16]
        log.info(
            "export: %d sequences, %d buckets (%s tokens) in %d units",
            self._sequences,
            buckets,
            dtype.name,
            len(ranges),
        )
        return [
            UnitEntry(unit_id=f"buckets-{lo:05d}-{hi:05d}", inputs=[], input_checksum=f"{run_key}:{lo}-{hi}")
            for lo, hi in ranges
        ]

    def process_unit(self, unit: UnitEntry) -> UnitResult:
        lo, hi = (int(x) for x in unit.unit_id.removeprefix("buckets-").split("-"))
        g = self._gather
        result = phases.gather_buckets(
            lo,
            hi,
            g["spill_uris"],
            int(self.config["seed"]),
            g["seq_len"],
            g["dtype"],
            self.config["formats"],
            self.out_dir(),
            int(self.config["mds_size_limit"]),
        )
        acc = RowAccounting()
        acc.keep(sum(b["sequences"] for b in result["buckets"]))
        return UnitResult(outputs=[], accounting=acc, extra={"buckets": result["buckets"]}, files=result["files"])

    # -- after all units -----------------------------------------------------------------------------
    def collect(self, manifest: Manifest) -> None:
        """Every sequence written once (the books), MDS's ``index.json``, and the summary in the manifest
        (``config["export"]``)."""
        buckets: list[dict[str, Any]] = []
        for unit in manifest.units:
            rec = self.checkpoints.load(unit.unit_id)
            if rec is None or rec.fingerprint != manifest.fingerprint:
                raise StageFailed(f"export: unit {unit.unit_id} has no checkpoint")
            buckets.extend(rec.extra["buckets"])
        buckets.sort(key=lambda b: b["bucket"])
        written = sum(b["sequences"] for b in buckets)
        if written != self._sequences:
            raise StageFailed(f"export: wrote {written} sequences, the tokenize manifest has {self._sequences}")
        out = self.out_dir()
        summary: dict[str, Any] = {
            "sequences": written,
            "tokens": sum(b["tokens"] for b in buckets),
            "buckets": len(buckets),
            "dtype": self._gather["dtype"],
            "seq_len": self._gather["seq_len"],
            "seed": int(self.config["seed"]),
            "formats": self.config["formats"],
            "output_dir": out,
            "bucket_sequences": [b["sequences"] for b in buckets],  # where each bucket starts: curation trace
        }
        stems = [phases.bucket_stem(b["bucket"]) for b in buckets]
        if "megatron" in self.config["formats"]:
            summary["megatron_prefixes"] = [storage.join(out, "megatron", s) for s in stems]
        if "mds" in self.config["formats"]:
            index = formats.mds_index([info for b in buckets for info in b["mds"]])
            summary["mds_index"] = storage.join(out, "mds", "index.json")
            storage.write_bytes(summary["mds_index"], index)
        if "parquet" in self.config["formats"]:
            summary["parquet"] = [storage.join(out, "parquet", s + ".parquet") for s in stems]
        manifest.config = {**manifest.config, "export": summary}
