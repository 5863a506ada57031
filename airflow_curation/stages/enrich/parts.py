"""Checkpoints inside a shard: the results of every ``checkpoint_rows`` rows go to a part file.

``<dir>/<start>-<end>.parquet`` holds rows ``[start, end)`` of the shard, written atomically. A job killed
mid-shard resumes after the longest run of contiguous parts from row 0, so checkpointed rows are never
recomputed and never duplicated; anything else in the folder (a torn temporary file, a part that does
not continue the run) is removed. The folder is named by the config fingerprint and the input
checksum, so parts of another config or another version of the shard are never reused.
"""

from __future__ import annotations

import logging
import re

import pyarrow as pa

from airflow_curation.core import storage
from airflow_curation.core.shards import write_parquet

log = logging.getLogger(__name__)

_PART = re.compile(r"^(\d{10})-(\d{10})\.parquet$")


class PartStore:
    """:param directory: folder URL of one shard's parts."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def _uri(self, start: int, end: int) -> str:
        return storage.join(self.directory, f"{start:010d}-{end:010d}.parquet")

    def _listing(self) -> list[tuple[int, int, str]]:
        found = []
        for url in storage.listdir(self.directory):
            m = _PART.match(url.rsplit("/", 1)[-1])
            if m:
                found.append((int(m.group(1)), int(m.group(2)), url))
            else:
                storage.remove(url)  # temporary file of a write that was killed
        return sorted(found)

    def resume(self, n_rows: int) -> int:
        """Rows ``[0, covered)`` already done; removes every part that does not extend that run."""
        covered = 0
        for start, end, url in self._listing():
            if start == covered and covered < end <= n_rows:
                covered = end
            else:
                log.info("removing part %s: does not continue rows [0, %d)", url, covered)
                storage.remove(url)
        return covered

    def write(self, start: int, end: int, table: pa.Table) -> str:
        if table.num_rows != end - start:
            raise ValueError(f"part [{start}, {end}) has {table.num_rows} rows")
        uri = self._uri(start, end)
        write_parquet(uri, table, row_group_rows=max(1, table.num_rows))
        return uri

    def read_all(self) -> pa.Table | None:
        tables = []
        for _, _, url in self._listing():
            tables.append(storage.read_parquet(url))
        if not tables:
            return None
        return pa.concat_tables(tables, promote_options="permissive")

    def clear(self) -> None:
        for url in storage.listdir(self.directory):
            storage.remove(url)
        if storage.is_local(self.directory):
            fs, path = storage.filesystem(self.directory)
            try:
                fs.rmdir(path)
            except OSError:
                pass
