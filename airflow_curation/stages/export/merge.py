"""Export's optional middle pass: the spill files merged by chunk of buckets, so the gather reads few files.

Without it every gather unit reads its range of every spill file: units x shards ranged reads, and both
grow with the corpus (the units from the memory budget), so the reads grow with its square (~0.7 G reads
of ~43 KB at the 50 TB plan). With it, the buckets are cut into chunks (``k`` consecutive gather units each)
and the spill files into groups (``g`` consecutive shards, as many as a merge unit's memory holds of one
chunk); a merge unit reads one chunk of its group's files (one ranged read each) and writes them as one
file (:func:`~airflow_curation.core.lsh.merge_partitions`); a gather unit then reads its range of its
chunk's merged files, one a group. Reads: ``chunks x shards + units x groups``, which
:func:`~airflow_curation.core.merge_plan.merge_plan` minimises: at the plan, ~2 x units x sqrt(shards / 2)
(4.4 M reads of ~13.6 MB instead of 0.7 G of ~43 KB). That is the optimum of two passes at a fixed memory (docs/export.md: it still grows as the corpus^1.5).

The merged files are an intermediate: the written bytes do not depend on them (each bucket is sorted by
its order hash in the gather), so turning the pass on or off never changes an export.
"""

from __future__ import annotations

from bisect import bisect_right
from functools import cached_property
from typing import Any

from airflow_curation.core import storage
from airflow_curation.core.accounting import RowAccounting
from airflow_curation.core.fingerprint import checksum_url
from airflow_curation.core.lsh import UnreadableSpill, merge_partitions
from airflow_curation.core.manifest import ManifestHead, UnitEntry
from airflow_curation.stages.barrier import lost_step_files
from airflow_curation.stages.base import Stage, UnitResult, file_record
from airflow_curation.stages.export import marks
from airflow_curation.stages.settings import Setting
from airflow_curation.stages.tokenize.packing import packed_files


class ExportMergeStage(Stage):
    """The middle pass as a stage of its own (each merged file checkpointed; a rerun merges only what is
    missing). Built and run by :class:`~airflow_curation.stages.export.stage.ExportStage`.

    A unit is (chunk, group): buckets ``chunks[c]`` of the spill files of the packed shards at positions
    ``groups[j]`` of the tokenize manifest, read from its pages of those positions only."""

    name = "export_merge"
    version = "1"
    SETTINGS = Stage.SETTINGS.extend(
        Setting("run_key", str, "", "the scatter's run key (ExportStage._run_key)", cli=False),
        Setting("scatter_fingerprint", str, "", "where the spill files are", cli=False),
        Setting("chunks", list, [], "bucket ranges [lo, hi) of the chunks", cli=False),
        Setting("groups", list, [], "shard position ranges [a, b) of the groups", cli=False),
        Setting("tokenize_manifest", str, None, "names the packed shards (their spill files)", runtime=True, cli=False),
    )

    def merged_uri(self, chunk: int, group: int) -> str:
        return self.lake.path("export", self.fingerprint, "merge", f"c{chunk:05d}-g{group:05d}.arrow")

    def merged_uris(self, bucket: int) -> list[str]:
        """The merged files of the chunk that holds ``bucket``, one a group of shards: what a gather unit of
        that chunk reads."""
        c = bisect_right([lo for lo, _ in self.config["chunks"]], bucket) - 1
        return [self.merged_uri(c, j) for j in range(len(self.config["groups"]))]

    def spill_uri(self, shard_id: str) -> str:
        return self.lake.path("export", self.config["scatter_fingerprint"], "spill", f"{shard_id}.arrow")

    def plan(self) -> list[UnitEntry]:
        key = self.config["run_key"]
        return [
            UnitEntry(unit_id=f"c{c:05d}-g{j:05d}", inputs=[], input_checksum=f"{key}:{lo}-{hi}:{a}-{b}")
            for c, (lo, hi) in enumerate(self.config["chunks"])
            for j, (a, b) in enumerate(self.config["groups"])
        ]

    @cached_property
    def tokenize_head(self) -> ManifestHead:
        """The tokenize manifest's head (a unit reads the pages of its group's positions only)."""
        return ManifestHead.read(self.config["tokenize_manifest"])

    def process_unit(self, unit: UnitEntry) -> UnitResult:
        c, j = (int(x[1:]) for x in unit.unit_id.split("-"))
        lo, hi = self.config["chunks"][c]
        a, b = self.config["groups"][j]
        spills = [self.spill_uri(sid) for sid, _ in packed_files(self.tokenize_head, range(a, b))]
        out = self.merged_uri(c, j)
        try:
            rows = merge_partitions(spills, lo, hi, out)
        except (FileNotFoundError, UnreadableSpill) as e:
            mark = marks.scatter_mark(self.lake, self.config["scatter_fingerprint"], self.config["run_key"])
            raise lost_step_files(e, spills, mark, "export", "scatter") or e from e
        nbytes, _ = storage.stat(out)
        acc = RowAccounting()
        acc.keep(rows)
        return UnitResult(
            outputs=[], accounting=acc, extra={"sequences": rows}, files=[file_record(out, nbytes, checksum_url(out))]
        )


def merge_config(
    run_key: str,
    scatter_fingerprint: str,
    buckets: list[tuple[int, int]],
    units_per_chunk: int,
    shards: int,
    group: int,
) -> dict[str, Any]:
    """The merge stage's config for gather units of bucket ranges ``buckets`` and ``shards`` spill files."""
    ranges = list(buckets)
    chunks = [
        [ranges[i][0], ranges[min(i + units_per_chunk, len(ranges)) - 1][1]]
        for i in range(0, len(ranges), units_per_chunk)
    ]
    groups = [[a, min(a + group, shards)] for a in range(0, shards, group)]
    return {"run_key": run_key, "scatter_fingerprint": scatter_fingerprint, "chunks": chunks, "groups": groups}
