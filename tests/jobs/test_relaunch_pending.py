"""A streaming reader and a relaunch of its upstream (issue 25).

The upstream (a real attrs stage) runs as an array of two groups: group 0 finishes, group 1 is lost (its task
cancelled: no checkpoint, no failure marker), and the collect step of an attempt that the follower may still
relaunch marks the manifest ``failed`` with a relaunch pending. A downstream stage streaming on it:

* goes on while the relaunch is pending: it processes group 0's shard, then, once the run is reopened
  (``jobs reopen``, what the follower's relaunch does) and group 1 and the collect have run again, the rest;
  its output is that of the same stages run without the loss;
* fails, naming the upstream and its failed units, once the follower decides not to relaunch
  (:meth:`Follower.conclude` on a failure it will not relaunch), or when no relaunch is pending (the last
  attempt), or when the pending relaunch never comes within ``upstream_wait_s``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stages.text_length import TextLengthStage

from airflow_curation.backends.local import LocalBackend
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest, ManifestHead, ShardEntry
from airflow_curation.core.shards import write_parquet
from airflow_curation.jobs import progress
from airflow_curation.jobs.follow import Follower
from airflow_curation.jobs.run import RunRecord
from airflow_curation.jobs.status import JobState, JobStatus
from airflow_curation.stages.base import StageRunner

RUN = "r"
HANG_GUARD_S = 300.0  # only against a hang: every wait below ends on an event


class Downstream(TextLengthStage):
    """A second attrs stage on the first one's shards (its own name, checkpoints and attrs)."""

    name = "text_length_b"


def _lake(root: Path) -> tuple[Lake, str]:
    """Two source shards in a complete manifest: the upstream stage's two units."""
    lake = Lake(str(root), "d")
    entries = []
    for k in range(2):
        texts = [f"shard {k} document {i} " + "word " * (i % 5) for i in range(9)]
        t = pa.table({"id": [f"s{k}-{i}" for i in range(9)], "text": texts})
        sid = f"part-{k:05d}"
        n, ck = write_parquet(lake.shard_uri(sid), t)
        entries.append(ShardEntry(shard_id=sid, uri=lake.shard_uri(sid), rows=9, bytes=n, checksum=ck))
    uri = lake.manifest_uri(RUN, "ingest")
    Manifest(
        dataset="d", stage="ingest", run_id=RUN, fingerprint="f", lake=lake.to_dict(), shards=entries, status="complete"
    ).write(uri)
    return lake, uri


def _upstream(lake: Lake, source: str) -> TextLengthStage:
    return TextLengthStage(lake, {"input_manifest": source, "min_chars": 20}, RUN)


def _downstream(lake: Lake, upstream_uri: str, wait_s: float = HANG_GUARD_S) -> Downstream:
    return Downstream(lake, {"input_manifest": upstream_uri, "stream_poll_s": 0.05, "upstream_wait_s": wait_s}, RUN)


def _lost_group_1(lake: Lake, source: str, relaunchable: bool) -> str:
    """The upstream's attempt 1: group 0 done, group 1's task gone, then the collect step."""
    StageRunner(_upstream(lake, source)).run(shard_group=(0, 2))
    with pytest.raises(Exception, match="1 of 2 units failed"):
        StageRunner(_upstream(lake, source)).run(collect=True, relaunchable=relaunchable)
    return _upstream(lake, source).manifest_uri


class _Reader(threading.Thread):
    """The downstream stage's run, in a thread (the DAG runs it beside the upstream's follower)."""

    def __init__(self, stage: Downstream) -> None:
        super().__init__(daemon=True)
        self.stage, self.manifest, self.error = stage, None, None

    def run(self) -> None:
        try:
            self.manifest = StageRunner(self.stage).run()
        except Exception as e:  # noqa: BLE001 - the test reads it
            self.error = e


def _streamed_first_shard(reader: _Reader) -> None:
    """Wait until the reader has checkpointed the upstream's group-0 shard (it went on past the failure)."""
    deadline = time.monotonic() + HANG_GUARD_S
    while reader.stage.checkpoints.scan()[0] != {"part-00000"}:
        assert reader.is_alive(), f"the reader gave up on the upstream: {reader.error}"
        assert time.monotonic() < deadline, "hang guard"
        time.sleep(0.05)


def _attrs(manifest: Manifest) -> dict[str, pa.Table]:
    return {s.shard_id: pq.read_table(s.attrs["text_length_b"]) for s in manifest.shards}


def test_a_reader_waits_out_a_pending_relaunch_and_ends_as_without_the_loss(tmp_path):
    lake, source = _lake(tmp_path / "lake")
    upstream_uri = _lost_group_1(lake, source, relaunchable=True)
    head = ManifestHead.read(upstream_uri)
    assert head.status == "failed" and head.relaunch_pending and head.relaunch["lost_units"] == 1

    reader = _Reader(_downstream(lake, upstream_uri))
    reader.start()
    _streamed_first_shard(reader)
    # The follower's relaunch: reopen, then the lost group and the collect again (attempt 2, the last).
    assert set(progress.reopen(upstream_uri)) == {"part-00001"}
    StageRunner(_upstream(lake, source)).run(shard_group=(1, 2))
    StageRunner(_upstream(lake, source)).run(collect=True)
    reader.join(HANG_GUARD_S)
    assert not reader.is_alive() and reader.error is None, reader.error
    assert ManifestHead.read(upstream_uri).relaunch is None  # reopened: no longer says anything of a relaunch

    # The same two stages without the loss.
    ref_lake, ref_source = _lake(tmp_path / "reference")
    StageRunner(_upstream(ref_lake, ref_source)).run()
    reference = StageRunner(_downstream(ref_lake, _upstream(ref_lake, ref_source).manifest_uri)).run()
    got = reader.manifest
    assert got.status == reference.status == "complete"
    assert got.accounting == reference.accounting and got.rows == reference.rows == 18
    got_attrs, want_attrs = _attrs(got), _attrs(reference)
    assert list(got_attrs) == list(want_attrs) == ["part-00000", "part-00001"]
    assert all(got_attrs[s].equals(want_attrs[s]) for s in want_attrs)
    assert {u.unit_id: u.status for u in got.units}["part-00000"] == "skipped"  # done while it waited


def test_a_reader_fails_naming_the_upstream_once_the_follower_declines_the_relaunch(tmp_path):
    lake, source = _lake(tmp_path / "lake")
    upstream_uri = _lost_group_1(lake, source, relaunchable=True)
    reader = _Reader(_downstream(lake, upstream_uri))
    reader.start()
    _streamed_first_shard(reader)
    # A follower that will not relaunch (not a retryable failure): its look ends the pending relaunch.
    record = RunRecord("local", "4242", manifest_uri=upstream_uri)
    oom = JobStatus(JobState.FAILED, "group 1/2 ran out of memory", retryable=False)
    assert not Follower(LocalBackend(), record, relaunch=False).conclude(oom).relaunch_due
    reader.join(HANG_GUARD_S)
    assert not reader.is_alive()
    text = str(reader.error)
    assert f"upstream manifest {upstream_uri} is not complete" in text, text
    assert "the text_length run failed, 1 of 2 units failed: part-00001" in text, text
    assert "not relaunched (group 1/2 ran out of memory)" in text, text
    assert not ManifestHead.read(upstream_uri).relaunch_pending


def test_a_failed_upstream_without_a_relaunch_left_fails_the_reader_at_once(tmp_path):
    lake, source = _lake(tmp_path / "lake")
    upstream_uri = _lost_group_1(lake, source, relaunchable=False)  # the last attempt: nothing pending
    assert not ManifestHead.read(upstream_uri).relaunch_pending
    stage = _downstream(lake, upstream_uri)
    with pytest.raises(ValueError) as e:
        StageRunner(stage).run()
    text = str(e.value)
    assert "1 of 2 units failed: part-00001" in text and "a finished upstream is not waited for" in text, text
    assert stage.checkpoints.scan()[0] == set()  # it streamed nothing from a run that is over


def test_a_pending_relaunch_that_never_comes_ends_the_wait_after_upstream_wait_s(tmp_path):
    lake, source = _lake(tmp_path / "lake")
    upstream_uri = _lost_group_1(lake, source, relaunchable=True)
    with pytest.raises(ValueError) as e:
        StageRunner(_downstream(lake, upstream_uri, wait_s=0.5)).run()
    text = str(e.value)
    assert "1 of 2 units failed: part-00001" in text, text
    assert "its relaunch was still pending after upstream_wait_s=0.5: no follower reopened it" in text, text


def test_group_0_of_an_array_streams_its_own_block_only(tmp_path):
    """Group 0 plans every unit (it writes the run's planned manifest) but streams, like any other task, only
    the upstream units of its own block: it once streamed all of them, so it processed group 1's shards too
    (the same units twice, racing group 1's task for their outputs)."""
    lake, source = _lake(tmp_path / "lake")
    for group in (0, 1):  # the upstream's tasks are done; its collect has not run: still planned
        StageRunner(_upstream(lake, source)).run(shard_group=(group, 2))
    upstream_uri = _upstream(lake, source).manifest_uri
    assert ManifestHead.read(upstream_uri).status == "planned"
    assert progress.checkpointed(upstream_uri) == (2, 2)

    group_0 = _downstream(lake, upstream_uri)
    reader = threading.Thread(target=lambda: StageRunner(group_0).run(shard_group=(0, 2)), daemon=True)
    reader.start()
    deadline = time.monotonic() + HANG_GUARD_S
    while not group_0.checkpoints.scan()[0]:  # its first streaming pass saw both upstream shards checkpointed
        assert reader.is_alive() and time.monotonic() < deadline
        time.sleep(0.05)
    StageRunner(_upstream(lake, source)).run(collect=True)  # the upstream completes
    reader.join(HANG_GUARD_S)
    assert not reader.is_alive()
    assert group_0.checkpoints.scan()[0] == {"part-00000"}  # group 1's shard is group 1's to do

    ran = StageRunner(_downstream(lake, upstream_uri)).run(shard_group=(1, 2))
    assert {u.unit_id: u.status for u in ran.units} == {"part-00001": "done"}  # by its own task, once
    manifest = StageRunner(_downstream(lake, upstream_uri)).run(collect=True)
    assert manifest.status == "complete" and manifest.rows == 18
