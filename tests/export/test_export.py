"""The export stage (issue 24, item 3): a seeded global shuffle of tokenize's packed sequences, written as a
Megatron-LM indexed dataset, MosaicML streaming (MDS) shards and Parquet; each format read back by the
real reader (megatron-core's ``IndexedDataset``, mosaicml-streaming's ``StreamingDataset`` in a venv of its
own), tokens identical to the packed Parquet's, in the documented order."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_curation.core.layout import Lake
from airflow_curation.core.lsh import mix64
from airflow_curation.core.manifest import Manifest
from airflow_curation.stages.base import StageFailed, StageRunner
from airflow_curation.stages.export.stage import ExportStage

REPO = Path(__file__).resolve().parents[2]


def _export(packed, run_id: str, **config) -> Manifest:
    config = {"input_manifest": packed["manifest"], **config}
    return StageRunner(ExportStage(packed["lake"], config, run_id)).run()


def _sequences(packed) -> dict[tuple[int, int], np.ndarray]:
    """(shard index in manifest order, row) -> the real tokens of that packed sequence."""
    m = packed["tokenize"]
    out = {}
    for s, shard in enumerate(m.shards):
        t = pq.read_table(shard.files["packed"]["uri"])
        ids = t.column("input_ids").to_pylist()
        for r, (row, n) in enumerate(zip(ids, t.column("n_tokens").to_pylist())):
            out[(s, r)] = np.array(row[:n], np.int64)
    return out


def _documented_order(keys, seed: int, buckets: int) -> list[list[tuple[int, int]]]:
    """docs/export.md: h = mix64(n ^ mix64(seed)), n = shard << 32 | row; bucket h % K, sorted by h."""
    salt = int(mix64(np.array([seed], np.uint64))[0])
    out = [[] for _ in range(buckets)]
    for s, r in sorted(keys, key=lambda k: int(mix64(np.array([(k[0] << 32 | k[1]) ^ salt], np.uint64))[0])):
        h = int(mix64(np.array([(s << 32 | r) ^ salt], np.uint64))[0])
        out[h % buckets].append((s, r))
    return out


def _megatron(prefixes: list[str]) -> list[np.ndarray]:
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    seqs = []
    for prefix in prefixes:
        ds = IndexedDataset(prefix, mmap=True)
        seqs.extend(np.asarray(ds[i], np.int64) for i in range(len(ds)))
    return seqs


def _files_digest(folder: str) -> dict[str, str]:
    root = Path(folder)
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "spill" not in p.parts and p.name != "_SUCCESS.json"  # it names the run
    }


def test_megatron_files_read_by_megatron_core_in_the_documented_order(packed):
    m = _export(packed, "meg", file_size=4096, seed=7)
    e = m.config["export"]
    assert m.status == "complete" and e["buckets"] > 3 and e["dtype"] == "uint16"
    seqs = _sequences(packed)
    got = _megatron(e["megatron_prefixes"])
    order = _documented_order(seqs, 7, e["buckets"])
    want = [seqs[k] for bucket in order for k in bucket]
    assert len(got) == len(want) == len(seqs) == packed["tokenize"].config["tokens"]["sequences"]
    assert all(np.array_equal(a, b) for a, b in zip(got, want))
    # a multiset check that does not lean on the order rule: every sequence once
    assert sorted(map(bytes, (g.astype(np.int32) for g in got))) == sorted(
        map(bytes, (s.astype(np.int32) for s in seqs.values()))
    )


def _streaming(folder: str) -> list[np.ndarray]:
    """The MDS folder as mosaicml-streaming's StreamingDataset reads it (in its own venv)."""
    venv = REPO / ".venv-streaming"
    if not (venv / ".stamp-v2").exists():
        subprocess.run(["bash", str(REPO / "scripts" / "setup_oracles.sh")], check=True)
    proc = subprocess.run(
        [str(venv / "bin" / "python"), str(Path(__file__).with_name("mds_reader.py")), folder],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [np.array(x, np.int64) for x in json.loads(proc.stdout)]


def test_all_three_formats_hold_the_same_sequences_in_the_same_order(packed):
    # a small MDS size limit: a bucket spans several MDS shards, cut where MDSWriter cuts them
    m = _export(packed, "all", file_size=8192, seed=3, formats="mds,parquet,megatron", mds_size_limit=3000)
    e = m.config["export"]
    assert e["formats"] == ["megatron", "mds", "parquet"]
    meg = _megatron(e["megatron_prefixes"])
    mds = _streaming(str(Path(e["mds_index"]).parent))
    index = json.loads(Path(e["mds_index"]).read_text())
    assert len(index["shards"]) > e["buckets"]  # some buckets were cut into several shards
    parquet = [
        np.array(ids[:n], np.int64)
        for f in e["parquet"]
        for ids, n in zip(
            pq.read_table(f).column("input_ids").to_pylist(), pq.read_table(f).column("n_tokens").to_pylist()
        )
    ]
    seqs = _sequences(packed)
    want = [seqs[k] for bucket in _documented_order(seqs, 3, e["buckets"]) for k in bucket]
    for got in (meg, mds, parquet):
        assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))
    # the Parquet keeps tokenize's layout: the document boundaries travel with each sequence
    t = pq.read_table(e["parquet"][0])
    assert t.schema.equals(pq.read_schema(packed["tokenize"].shards[0].files["packed"]["uri"]))


def test_same_seed_same_bytes_other_seed_other_order(packed):
    a = _export(packed, "det-a", file_size=4096, seed=11, formats="megatron,mds")
    b = _export(packed, "det-b", file_size=4096, seed=11, formats="megatron,mds", workers=2)
    c = _export(packed, "det-c", file_size=4096, seed=12, formats="megatron,mds")
    da, db, dc = (_files_digest(m.config["export"]["output_dir"]) for m in (a, b, c))
    # same settings, same folder (the fingerprint): b reuses a's checkpoints (a fresh lake: the next test)
    assert a.config["export"]["output_dir"] == b.config["export"]["output_dir"]
    assert da == db and da != dc
    ga = _megatron(a.config["export"]["megatron_prefixes"])
    gc = _megatron(c.config["export"]["megatron_prefixes"])
    assert [x.tolist() for x in ga] != [x.tolist() for x in gc]
    assert sorted(x.tolist() for x in ga) == sorted(x.tolist() for x in gc)


def test_a_fresh_lake_gives_the_same_bytes(packed, tmp_path):
    """Determinism without checkpoints: another lake, the same packed shards, the same files byte for byte."""
    import shutil

    a = _export(packed, "fresh-a", file_size=4096, seed=5, formats="megatron,mds,parquet")
    copy = tmp_path / "copy"
    shutil.copytree(packed["lake"].root, copy)
    lake = Lake(str(copy), "d")
    shutil.rmtree(lake.path("export"))
    for d in Path(lake.path("_checkpoints")).glob("export*"):
        shutil.rmtree(d)
    uri = lake.manifest_uri("r", "tokenize")
    config = {"input_manifest": uri, "file_size": 4096, "seed": 5, "formats": "megatron,mds,parquet", "workers": 2}
    b = StageRunner(ExportStage(lake, config, "fresh-b")).run()  # and two worker processes
    assert _files_digest(a.config["export"]["output_dir"]) == _files_digest(b.config["export"]["output_dir"])


def _killed_export(lake: Lake, config: dict, run_id: str, fault: str) -> None:
    """An export run in a child process, SIGKILLed (as a lost node) at the fault point ``fault``."""
    code = (
        "from airflow_curation.core.layout import Lake; from airflow_curation.stages.base import StageRunner;"
        "from airflow_curation.stages.export.stage import ExportStage;"
        f"StageRunner(ExportStage(Lake({lake.root!r}, {lake.dataset!r}), {config!r}, {run_id!r})).run()"
    )
    env = {**os.environ, "CURATION_FAULT": fault, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == -9, proc.stderr[-2000:]


def test_killed_after_two_scatter_units_resumes_without_redoing_them(packed, tmp_path):
    lake = packed["lake"]
    config = {"input_manifest": packed["manifest"], "file_size": 4096, "seed": 99}
    _killed_export(lake, config, "kill", "export_scatter.after_commit@2")
    m = StageRunner(ExportStage(lake, config, "kill")).run()
    scatter = Manifest.read(lake.manifest_uri("kill", "export_scatter"))
    statuses = [u.status for u in scatter.units]
    assert statuses.count("skipped") == 2 and statuses.count("done") == len(statuses) - 2
    clean = _export(packed, "clean", file_size=4096, seed=99, formats="megatron,mds")
    seqs = _megatron(m.config["export"]["megatron_prefixes"])
    assert [x.tolist() for x in seqs] == [x.tolist() for x in _megatron(clean.config["export"]["megatron_prefixes"])]


def test_an_empty_packed_shard_is_exported_with_nothing_lost(packed, tmp_path):
    """A packed shard without a sequence (a shard whose rows were all dropped) between two others."""
    from airflow_curation.core.fingerprint import checksum_url
    from airflow_curation.core.manifest import UnitEntry
    from airflow_curation.stages.tokenize.packing import packed_schema

    lake = packed["lake"]
    m = Manifest.read(packed["manifest"])
    empty = str(tmp_path / "empty.parquet")
    pq.write_table(packed_schema(m.config["tokens"]["seq_len"]).empty_table(), empty)
    m.units.insert(1, UnitEntry(unit_id="empty", inputs=[], input_checksum="-", status="done", rows=0))
    packed_file = {"uri": empty, "checksum": checksum_url(empty), "bytes": Path(empty).stat().st_size}
    m.shards.insert(1, replace(m.shards[0], shard_id="empty", rows=0, files={"packed": packed_file}))
    m.run_id = "with-empty"
    uri = m.write(lake.manifest_uri("with-empty", "tokenize"))
    out = StageRunner(ExportStage(lake, {"input_manifest": uri, "file_size": 4096, "seed": 7}, "empty")).run()
    scatter = Manifest.read(lake.manifest_uri("empty", "export_scatter"))
    assert [u.unit_id for u in scatter.units][1] == "empty" and all(u.status != "failed" for u in scatter.units)
    total = m.config["tokens"]["sequences"]
    assert out.accounting["kept"] == out.config["export"]["sequences"] == total
    assert len(_megatron(out.config["export"]["megatron_prefixes"])) == total


def test_a_token_outside_the_vocabulary_fails_with_the_file_named(packed):
    with pytest.raises(Exception, match="outside the vocabulary of 100"):
        _export(packed, "vocab", vocab_size=100, max_attempts=1)


def test_the_cli_reads_the_newest_tokenize_manifest_and_prints_what_it_wrote(packed, capsys):
    from airflow_curation.cli import main as curation

    lake = packed["lake"]
    args = ["export", "--lake", lake.root, "--dataset", "d", "--run-id", "cli", "--formats", "megatron,parquet"]
    code = curation([*args, "--seed", "4", "--file-size", "8KiB"])
    assert code == 0, capsys.readouterr().err
    summary = json.loads(capsys.readouterr().out)
    e = summary["export"]
    assert e["formats"] == ["megatron", "parquet"] and e["seed"] == 4 and e["dtype"] == "uint16"
    assert e["sequences"] == packed["tokenize"].config["tokens"]["sequences"]
    assert curation([*args, "--formats", "megatron,tfrecord"]) == 1
    assert "formats must be some of" in capsys.readouterr().err


def test_plain_files_tokenized_then_exported_with_relative_folders_trace_from_anywhere(
    packed, tmp_path, monkeypatch, capsys
):
    """``curation tokenize a.parquet --output out`` then ``curation export --lake out --dataset _curation
    --output-dir ex``, both typed in one folder with relative paths: the export's manifest kept ``ex`` as it
    was typed, so ``curation trace`` from another folder (or a trainer reading the manifest's prefixes) found
    no file ("order file ... is missing"). Folders given on the command line are kept absolute."""
    from tokenizer_files import stdlib_prose

    from airflow_curation.cli import main as curation

    work = tmp_path / "work"
    work.mkdir()
    texts = stdlib_prose(40)
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(len(texts))], "text": texts}), work / "a.parquet")
    monkeypatch.chdir(work)
    tok = packed["tokenizer"]
    assert curation(["tokenize", "a.parquet", "--output", "out", "--tokenizer", tok, "--seq-len", "32"]) == 0
    capsys.readouterr()
    assert curation(["export", "--lake", "out", "--dataset", "_curation", "--output-dir", "ex"]) == 0
    e = json.loads(capsys.readouterr().out)["export"]
    assert e["output_dir"] == str(work / "ex") and Path(e["output_dir"], "_SUCCESS.json").exists()
    monkeypatch.chdir(tmp_path)  # another folder
    assert curation(["trace", "--lake", str(work / "out"), "--dataset", "_curation", "--sequence", "3"]) == 0, (
        capsys.readouterr().err
    )
    traced = json.loads(capsys.readouterr().out)
    assert traced["documents"] and traced["documents"][0]["file"].endswith("a.parquet")


def test_array_tasks_scatter_their_own_block_and_write_the_same_bytes(packed, tmp_path, monkeypatch):
    """A task of an array scatters the shards of its block only (read from their pages); the first task to
    find the scatter unfinished finishes it under the lease, the others find it done; the files are those of
    a one-process run, byte for byte."""
    import shutil
    import threading
    import time

    from airflow_curation.core.lease import Lease
    from airflow_curation.core.manifest import group_range

    fmts = "megatron,mds,parquet"
    whole = _export(packed, "arr-whole", file_size=4096, seed=21, formats=fmts)
    copy = tmp_path / "copy"
    shutil.copytree(packed["lake"].root, copy)
    lake = Lake(str(copy), "d")
    shutil.rmtree(lake.path("export"))
    for d in Path(lake.path("_checkpoints")).glob("export*"):
        shutil.rmtree(d)
    config = {"input_manifest": lake.manifest_uri("r", "tokenize"), "file_size": 4096, "seed": 21, "formats": fmts}
    n = len(packed["tokenize"].units)
    assert n >= 3
    read: list[range | None] = []  # the positions of the tokenize shards each plan scattered (None: all)
    real = ExportStage._shards
    monkeypatch.setattr(
        ExportStage, "_shards", lambda self, positions: (read.append(positions), real(self, positions))[1]
    )
    spills = lambda: sorted(p.stem for p in Path(lake.path("export")).glob("*/spill/*.arrow"))  # noqa: E731
    # another holder of the scatter lease: task 1 scatters its block, then waits for it
    holder = Lease(lake.path("_locks", "export.scatter.lease"), "the test", 0).acquire()
    out: list = []
    task = threading.Thread(
        target=lambda: out.append(StageRunner(ExportStage(lake, config, "arr")).run(shard_group=(1, 3)))
    )
    task.start()
    block = group_range(n, 1, 3)
    mine = sorted(u.unit_id for u in packed["tokenize"].units[block.start : block.stop])
    deadline = time.monotonic() + 300
    while spills() != mine and task.is_alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert spills() == mine and read == [block]  # its own block, nothing else, while the lease is held
    holder.release()
    task.join()
    assert read == [block, None] and out  # then, holding the lease, what was still missing (all: None)
    for i in (0, 2):
        StageRunner(ExportStage(lake, config, "arr")).run(shard_group=(i, 3))
    assert read == [block, None]  # the scatter was done: no other task read a shard of it
    grouped = StageRunner(ExportStage(lake, config, "arr")).run(collect=True)
    assert grouped.status == "complete"
    assert _files_digest(grouped.config["export"]["output_dir"]) == _files_digest(whole.config["export"]["output_dir"])


@pytest.mark.parametrize("spill_merge", ["auto", "on"])
def test_every_task_of_an_array_gathers_some_buckets(packed, tmp_path, spill_merge):
    """An array of three tasks on an export whose memory budget needs one gather unit: the backend's spec
    (``with_min_units``) asks for a unit per task, and each task gathers its own buckets (all gathered by one
    task before, the others idle); the files are those of a one-process run. With the middle pass, each task
    merges its share of the chunks, the first to find the merge unfinished the rest, and the others find it
    marked done."""
    import shutil

    from airflow_curation.jobs.groups import with_min_units
    from airflow_curation.jobs.spec import JobSpec

    whole = _export(packed, "slots-whole", file_size=4096, seed=8)
    copy = tmp_path / "copy"
    shutil.copytree(packed["lake"].root, copy)
    lake = Lake(str(copy), "d")
    config = {"input_manifest": lake.manifest_uri("r", "tokenize"), "file_size": 4096, "seed": 8}
    config["spill_merge"] = spill_merge
    spec = with_min_units(JobSpec("export", lake.to_dict(), "slots", config), 3)
    done = [
        [
            u
            for u in StageRunner(ExportStage(lake, dict(spec.config), "slots")).run(shard_group=(i, 3)).units
            if u.status == "done"
        ]
        for i in range(3)
    ]
    assert all(done), [len(d) for d in done]  # every task gathered some buckets
    collected = StageRunner(ExportStage(lake, dict(spec.config), "slots")).run(collect=True)
    assert collected.status == "complete" and len(collected.units) == 3
    merged = sorted(Path(lake.path("export")).glob("*/merge/*.arrow"))
    # 3 x 14 reads are too few to merge for; merged, one chunk of the 3 units, one group of the 14 shards
    assert len(merged) == (1 if spill_merge == "on" else 0)
    assert _files_digest(collected.config["export"]["output_dir"]) == _files_digest(
        whole.config["export"]["output_dir"]
    )


def test_an_output_folder_holds_one_export_and_another_folder_gets_its_own_files(packed, tmp_path):
    """``--output-dir ex`` twice, the second with a larger file_size (fewer buckets) and fewer formats: the first
    one's other buckets stayed beside the second's, and a trainer reading ex/megatron took sequences twice.
    Then the same export into another folder was 'done' (its units' checkpoints matched) and wrote nothing there.
    Now a folder holds the last export alone, and each folder gets its own files."""
    out = tmp_path / "ex"
    first = _export(packed, "into-1", file_size=2048, seed=2, formats="megatron,mds,parquet", output_dir=str(out))
    second = _export(packed, "into-2", file_size=1 << 20, seed=2, formats="megatron", output_dir=str(out))
    assert first.config["export"]["buckets"] > second.config["export"]["buckets"] == 1
    e = second.config["export"]
    on_disk = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert on_disk == ["_SUCCESS.json", "megatron/00000.bin", "megatron/00000.idx", "order/00000.parquet"], on_disk
    seqs = _sequences(packed)
    want = [seqs[k] for bucket in _documented_order(seqs, 2, 1) for k in bucket]
    got = _megatron(sorted(str(p.with_suffix("")) for p in (out / "megatron").glob("*.bin")))  # what a glob finds
    assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))

    other = tmp_path / "other"
    third = _export(packed, "into-3", file_size=1 << 20, seed=2, formats="megatron", output_dir=str(other))
    assert third.config["export"]["output_dir"] == str(other)
    assert _files_digest(str(other)) == _files_digest(str(out)) and _files_digest(str(other))
    assert e["megatron_prefixes"] == [str(out / "megatron" / "00000")]


def test_a_folder_marks_a_whole_export_and_unmarks_it_while_another_is_written(packed, tmp_path):
    """A trainer reads a folder only once it says it holds a whole export: ``_SUCCESS.json`` (its files listed),
    written last; a later export into the folder removes it before its first file, so a killed one leaves
    the folder unmarked, not marked with a mix of two exports' files."""
    out = tmp_path / "ex"
    _export(packed, "mark-a", file_size=2048, seed=6, formats="megatron,mds", output_dir=str(out))
    marker = json.loads((out / "_SUCCESS.json").read_text())
    on_disk = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.name != "_SUCCESS.json")
    assert marker["files"] == on_disk and marker["manifest"].endswith("mark-a/export.json"), marker
    config = {"input_manifest": packed["manifest"], "file_size": 1 << 20, "seed": 7, "output_dir": str(out)}
    _killed_export(packed["lake"], config, "mark-b", "export.before_commit")  # after its bucket, before its record
    assert not (out / "_SUCCESS.json").exists() and (out / "megatron" / "00000.bin").exists()
    m = StageRunner(ExportStage(packed["lake"], config, "mark-b")).run()
    marker = json.loads((out / "_SUCCESS.json").read_text())
    on_disk = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.name != "_SUCCESS.json")
    assert marker["files"] == on_disk == ["megatron/00000.bin", "megatron/00000.idx", "order/00000.parquet"]
    assert marker["sequences"] == m.config["export"]["sequences"]


def test_an_output_folder_it_cannot_write_fails_before_the_scatter(packed, tmp_path):
    """A bucket that does not exist (or a folder not writable) failed the gather units only after the scatter,
    a pass over every packed shard; it now fails first, naming the folder."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    out = blocker / "ex"
    with pytest.raises(OSError, match=f"export: cannot write to the output folder {out}"):
        _export(packed, "unwritable", file_size=2048, seed=8, formats="megatron", output_dir=str(out))
    assert not Path(packed["lake"].manifest_uri("unwritable", "export_scatter")).exists()


def test_the_middle_pass_reads_chunks_times_shards_plus_units_times_groups_and_writes_the_same_bytes(
    packed, tmp_path, monkeypatch
):
    """``spill_merge``: the spill files merged by chunk of buckets (docs/export.md) before the gather. The
    written files are those of an export without it, byte for byte; the spill reads fall from units x shards
    to chunks x shards + units x groups, one merged file a (chunk, group)."""
    from airflow_curation.core import lsh
    from airflow_curation.stages.export.merge import ExportMergeStage

    reads: list[str] = []
    real = lsh._read_range
    monkeypatch.setattr(lsh, "_read_range", lambda uri, *a: (reads.append(uri), real(uri, *a))[1])
    fmts = ["megatron", "mds", "parquet"]
    # 100 kB for ~0.5 MB of tokens: 20 gather units; merged in 5 chunks of 4 units x 2 groups of 7 shards
    config = {"file_size": 2048, "seed": 5, "formats": fmts, "memory_budget": 100_000}
    outs = {}
    for mode in ("off", "on"):
        reads.clear()
        m = _export(packed, f"merge-{mode}", spill_merge=mode, output_dir=str(tmp_path / mode), **config)
        units, shards = len(m.units), len(packed["tokenize"].units)
        outs[mode] = (m, list(reads))
    m_off, reads_off = outs["off"]
    m_on, reads_on = outs["on"]
    assert len(m_off.units) == len(m_on.units) == units == 20
    assert len(reads_off) == units * shards and not any("/merge/" in r for r in reads_off)
    merge = Manifest.read(packed["lake"].manifest_uri("merge-on", "export_merge"))
    stage = ExportMergeStage(packed["lake"], merge.config, "merge-on")
    chunks, groups = len(stage.config["chunks"]), len(stage.config["groups"])
    assert chunks > 1 and 1 < groups < shards  # both ways cut
    assert len(merge.units) == chunks * groups and all(u.status == "done" for u in merge.units)
    assert len(reads_on) == chunks * shards + units * groups < units * shards
    assert sum("/merge/" in r for r in reads_on) == units * groups
    assert merge.accounting["kept"] == m_on.config["export"]["sequences"]  # every sequence in a merged file
    assert _files_digest(str(tmp_path / "on")) == _files_digest(str(tmp_path / "off"))


@pytest.mark.parametrize("spill_merge, lost", [("off", ["spill"]), ("on", ["merge"]), ("on", ["merge", "spill"])])
def test_a_file_of_a_phase_marked_done_deleted_fails_the_gather_named_and_the_rerun_redoes_it_only(
    packed, tmp_path, spill_merge, lost
):
    """A spill (or merged) file removed after its phase was marked done, then an export that reads it (here
    into another folder): the gather failed with a bare FileNotFoundError on every rerun, since the mark
    kept the phase from running. Now the run fails with the file named and the mark removed, and the next
    run redoes that file only and writes what a clean export writes. A merged file and a spill file it is
    made of: the gather names the first, the merge unit that redoes it the second, then the run completes."""
    lake = packed["lake"]
    config = {"file_size": 2048, "seed": 3, "formats": ["megatron"], "memory_budget": 100_000}
    config["spill_merge"] = spill_merge
    _export(packed, "lost-0", output_dir=str(tmp_path / "a"), **config)
    subs = {"spill": "export_scatter", "merge": "export_merge"}
    gone = []
    for phase in lost:  # the lake is shared with other tests: this run's folders only
        fp = Manifest.read(lake.manifest_uri("lost-0", subs[phase])).fingerprint
        gone.append(sorted(Path(lake.path("export", fp, phase)).glob("*.arrow"))[0])
        gone[-1].unlink()
    for k, path in enumerate(gone, 1):
        with pytest.raises(StageFailed, match=f"the (scatter|middle pass)'s file {path} is missing.*export again"):
            _export(packed, f"lost-{k}", output_dir=str(tmp_path / "b"), **config)
    m = _export(packed, "lost-end", output_dir=str(tmp_path / "b"), **config)
    assert m.status == "complete" and all(p.exists() for p in gone)
    for phase in lost:
        redone = Manifest.read(lake.manifest_uri("lost-end", subs[phase]))
        assert [u.status for u in redone.units].count("done") == 1  # the lost file only
    assert _files_digest(str(tmp_path / "b")) == _files_digest(str(tmp_path / "a"))


@pytest.mark.parametrize("spill_merge, phase, seed", [("off", "spill", 11), ("on", "merge", 12), ("on", "spill", 13)])
def test_a_file_of_a_phase_marked_done_corrupted_fails_named_and_the_rerun_redoes_it_only(
    packed, tmp_path, spill_merge, phase, seed
):
    """A spill (or merged) file overwritten after its phase was marked done (its size kept, its footer
    zeroed): the read failed naming the file, but the mark kept the phase from redoing it, so every rerun
    failed the same way. Now the mark is removed with the error, and the next run redoes that file only (its
    checkpoint no longer matches: the changed file is re-hashed) and writes what a clean export writes."""
    lake = packed["lake"]
    # a seed of its own: the lake is shared, and another test's scatter would be this one's (no manifest here)
    config = {"file_size": 2048, "seed": seed, "formats": ["megatron"], "memory_budget": 100_000}
    config["spill_merge"] = spill_merge
    _export(packed, "bad-0", output_dir=str(tmp_path / "a"), **config)
    subs = {"spill": "export_scatter", "merge": "export_merge"}
    fp = Manifest.read(lake.manifest_uri("bad-0", subs[phase])).fingerprint
    bad = sorted(Path(lake.path("export", fp, phase)).glob("*.arrow"))[0]
    data = bytearray(bad.read_bytes())
    data[-64:-6] = bytes(58)  # the IPC footer (its schema and batch offsets), before the trailing magic
    bad.write_bytes(bytes(data))
    if phase == "spill" and spill_merge == "on":  # the merged files were made: the merge unit reads spills
        shutil.rmtree(lake.path("export", Manifest.read(lake.manifest_uri("bad-0", "export_merge")).fingerprint))
    with pytest.raises(StageFailed, match=f"the (scatter|middle pass)'s file {bad} is unreadable.*export again"):
        _export(packed, "bad-1", output_dir=str(tmp_path / "b"), **config)
    m = _export(packed, "bad-end", output_dir=str(tmp_path / "b"), **config)
    assert m.status == "complete"
    redone = Manifest.read(lake.manifest_uri("bad-end", subs[phase]))
    assert [u.status for u in redone.units].count("done") == 1  # the corrupted file only
    assert _files_digest(str(tmp_path / "b")) == _files_digest(str(tmp_path / "a"))


def test_the_middle_pass_sizes_its_groups_by_the_largest_packed_shard(packed, tmp_path):
    """Groups of spill files were sized by the mean packed shard, so a group holding large ones (a source
    whose rows were all kept, beside shards mostly dropped) held more than the memory budget in one merge
    unit. Tokenize records its largest packed shard, and every merge unit's range is now within
    ``memory_budget / MERGE_EXPANSION``: measured here on the spill files themselves, with shards of 1x and
    11x the documents."""
    from tokenizer_files import stdlib_prose

    from airflow_curation.core.lsh import read_partition_pieces
    from airflow_curation.core.merge_plan import MERGE_EXPANSION
    from airflow_curation.stages.export.merge import ExportMergeStage
    from airflow_curation.stages.tokenize.stage import TokenizeStage

    texts = stdlib_prose(150)  # 157 documents of the standard library's docstrings
    files, at = [], 0
    for k, n in enumerate([5] * 8 + [55, 55]):  # two large shards, side by side: one group
        files.append(str(tmp_path / f"f{k:02d}.parquet"))
        pq.write_table(pa.table({"id": [f"d{i}" for i in range(at, at + n)], "text": texts[at : at + n]}), files[-1])
        at += n
    lake = Lake(str(tmp_path / "tok"), "_curation")
    config = {"inputs": files, "output_dir": str(tmp_path / "tok"), "tokenizer": packed["tokenizer"], "seq_len": 64}
    tok = StageRunner(TokenizeStage(lake, config, "t")).run()
    tokens = tok.config["tokens"]
    assert tokens["largest_shard_sequences"] > 3 * tokens["sequences"] / len(files)
    budget = 60_000
    config = {"input_manifest": lake.manifest_uri("t", "tokenize"), "spill_merge": "on", "memory_budget": budget}
    StageRunner(ExportStage(lake, {**config, "file_size": 1024, "output_dir": str(tmp_path / "ex")}, "e")).run()
    merge = Manifest.read(lake.manifest_uri("e", "export_merge"))
    stage = ExportMergeStage(lake, merge.config, "e")
    seq_bytes = 64 * 2  # uint16 tokens
    held = []
    for c, (lo, hi) in enumerate(stage.config["chunks"]):
        for a, b in stage.config["groups"]:
            spills = [stage.spill_uri(Path(f).stem) for f in files[a:b]]
            rows = sum(len(p) for _, pieces in read_partition_pieces(spills, lo, hi, ["n_tokens"]) for p in pieces)
            held.append(rows * seq_bytes)
    assert len(stage.config["groups"]) > 1 and max(held) > 0
    assert max(held) * MERGE_EXPANSION <= budget, (max(held), stage.config["groups"])


def test_the_middle_pass_runs_where_it_at_least_halves_the_reads_and_fits_the_budget():
    """``merge_plan`` at the 50 TB plan (docs/scale.md: 50,000 packed shards, ~30 TB of uint16 tokens, the
    default 8 GiB budget: ~14,000 gather units) and at a small export, where it declines."""
    import math

    from airflow_curation.core.merge_plan import MERGE_EXPANSION, merge_plan

    units, shards, total, budget = 14_000, 50_000, 30 * 10**12, 8 << 30
    k, g = merge_plan(units, shards, total, budget)
    chunks, groups = math.ceil(units / k), math.ceil(shards / g)
    reads = chunks * shards + units * groups
    assert reads * 100 < units * shards  # 0.7 G reads of ~43 KB before
    assert MERGE_EXPANSION * g * total * k / units / shards <= budget  # a merge unit within the budget
    assert total / (units * groups) > 4 << 20 and total * k / units / shards > 4 << 20  # reads of MBs
    assert merge_plan(1, shards, total, budget) is None  # one gather unit: one read a spill file already
    assert merge_plan(20, 14, 10**6, 200_000) is None  # a small export: 280 reads in all
    assert merge_plan(100, 500, 10**13, budget) is None  # reads of 200 MB: their fixed cost is nothing
    assert merge_plan(100, 500, 10**11, budget) is not None  # reads of 2 MB
    assert merge_plan(20, 14, 10**6, 200_000, force=True) is not None
    # groups sized by the largest spill file: 4x the mean makes groups about 4x smaller
    k4, g4 = merge_plan(units, shards, total, budget, largest=4 * total // shards)
    assert MERGE_EXPANSION * g4 * 4 * total * k4 / units / shards <= budget and g4 < g
    # forced where nothing fits the budget: the smallest chunks and groups, not the fewest reads
    assert merge_plan(20, 14, 10**6, 1_000, force=True) == (1, 2)
