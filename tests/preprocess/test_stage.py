"""The preprocess stage on a real Dask LocalCluster, reruns, the job spec path and the CLI."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_curation.core.filters import DEFAULT_PRESET, apply_rules, resolve_rules
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest, ShardEntry, UnitEntry
from airflow_curation.core.schema import SHARD_SCHEMA
from airflow_curation.core.shards import read_shard, write_parquet
from airflow_curation.core.signals import compute_signals
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.mappers.budget import cpu_count, plan_workers
from airflow_curation.stages.mappers.dask import dask_mapper
from airflow_curation.stages.preprocess.stage import PreprocessStage

from .conftest import REPO


def _make_lake(root, prose, code) -> tuple[Lake, str]:
    """Three small shards of real text and a complete ingest manifest over them."""
    lake = Lake(str(root), "docs")
    docs = [(f"prose/{i}", t, "prose.txt") for i, t in enumerate(prose[:90])]
    docs += [(f"code/{name}", t, name) for name, t in code[:30]]
    docs += [("edge/empty", "", "e.txt"), ("edge/ru", "Привет мир. Это русский текст!", "ru.txt")]
    shards, units = [], []
    for k in range(3):
        part = docs[k::3]
        table = pa.table(
            {
                "id": [d[0] for d in part],
                "text": [d[1] for d in part],
                "source": [d[2] for d in part],
                "meta": [None] * len(part),
            },
            schema=SHARD_SCHEMA,
        )
        sid = f"part-{k:05d}-000"
        uri = lake.shard_uri(sid)
        nbytes, checksum = write_parquet(uri, table, row_group_rows=16)
        shards.append(ShardEntry(shard_id=sid, uri=uri, rows=len(part), bytes=nbytes, checksum=checksum))
        units.append(UnitEntry(unit_id=f"u{k}", inputs=[], input_checksum="x", status="done"))
    m = Manifest(
        dataset="docs",
        stage="ingest",
        run_id="ingest-1",
        fingerprint="f",
        lake=lake.to_dict(),
        units=units,
        shards=shards,
        status="complete",
    )
    uri = lake.manifest_uri("ingest-1", "ingest")
    m.write(uri)
    return lake, uri


@pytest.fixture
def lake(tmp_path, prose, code):
    return _make_lake(tmp_path / "lake", prose, code)


def _expected(shard_uri: str, preset: str) -> pa.Table:
    shard = read_shard(shard_uri)
    return apply_rules(compute_signals(shard.column("text")), resolve_rules(preset))


def test_stage_on_a_dask_local_cluster(lake, warm_signals, caplog):
    lake, ingest_uri = lake
    stage = PreprocessStage(lake, {"input_manifest": ingest_uri, "preset": "gopher", "workers": 2}, "pre-1")
    with caplog.at_level(logging.INFO, "airflow_curation.stages.mappers.dask"):
        manifest = StageRunner(stage).run()
    workers = min(2, cpu_count())  # one worker runs in-process (test below)
    where = "on a LocalCluster of 2 workers" if workers == 2 else "in this process"
    assert f"dask: 3 units {where}" in caplog.text
    assert manifest.status == "complete" and len(manifest.shards) == 3
    acc = manifest.accounting
    assert acc["read"] == 122 == acc["kept"] + sum(acc["dropped"].values())
    assert acc["dropped"]["empty"] == 1 and acc["kept"] > 0
    for entry in manifest.shards:
        attrs = pq.read_table(entry.attrs["preprocess"])
        shard = read_shard(entry.uri, columns=["id"])
        assert attrs.column("id").to_pylist() == shard.column("id").to_pylist()  # same rows, same order
        expected = _expected(entry.uri, "gopher")
        assert attrs.column("keep").equals(expected.column("keep"))
        assert attrs.column("drop_reason").equals(expected.column("drop_reason"))
        assert {"n_words", "dup_5gram_char_frac", "char_token_ratio"} <= set(attrs.column_names)
    records = [stage.checkpoints.load(u.unit_id) for u in manifest.units]
    assert all(r is not None and r.extra["attrs_checksum"] for r in records)


def test_rerun_skips_done_shards_and_a_new_config_recomputes(lake, warm_signals):
    lake, ingest_uri = lake
    cfg = {"input_manifest": ingest_uri, "mapper": "local"}
    first = StageRunner(PreprocessStage(lake, cfg, "pre-1")).run()
    mtimes = {s.shard_id: os.stat(s.attrs["preprocess"]).st_mtime_ns for s in first.shards}
    again = StageRunner(PreprocessStage(lake, cfg, "pre-2")).run()
    assert [u.status for u in again.units] == ["skipped"] * 3
    assert again.accounting == first.accounting
    assert {s.shard_id: os.stat(s.attrs["preprocess"]).st_mtime_ns for s in again.shards} == mtimes
    # one lost checkpoint: only that shard runs again
    stage = PreprocessStage(lake, cfg, "pre-3")
    os.remove(os.path.join(stage.checkpoints.directory, "part-00001-000.json"))
    third = StageRunner(stage).run()
    assert [u.status for u in third.units] == ["skipped", "done", "skipped"]
    # another preset is another fingerprint: everything recomputes, with other decisions
    c4 = StageRunner(PreprocessStage(lake, {**cfg, "preset": "c4"}, "pre-4")).run()
    assert [u.status for u in c4.units] == ["done"] * 3
    assert c4.fingerprint != first.fingerprint and c4.accounting != first.accounting


def test_code_preset_reads_languages_from_source(lake, warm_signals):
    lake, ingest_uri = lake
    m = StageRunner(
        PreprocessStage(lake, {"input_manifest": ingest_uri, "mapper": "local", "preset": "code"}, "pre-code")
    ).run()
    rows = pa.concat_tables([pq.read_table(s.attrs["preprocess"]) for s in m.shards]).to_pylist()
    code_rows = [r for r in rows if r["id"].startswith("code/")]
    prose_rows = [r for r in rows if r["id"].startswith("prose/")]
    assert code_rows and all(r["syntax_ok"] is True for r in code_rows)
    assert all(r["syntax_ok"] is None for r in prose_rows)  # no parser for .txt: null, not a guess
    assert sum(r["keep"] for r in code_rows) > len(code_rows) // 2


def test_bad_configuration_fails_before_any_work(lake):
    lake, ingest_uri = lake
    with pytest.raises(ValueError, match="unknown filter preset"):
        PreprocessStage(lake, {"input_manifest": ingest_uri, "preset": "gopherr"}, "x")
    with pytest.raises(ValueError, match="input_manifest"):
        PreprocessStage(lake, {}, "x")


def test_worker_plan_is_bound_by_memory_and_open_files():
    gib = 1024**3
    by_mem = plan_workers([512 * 1024**2] * 100, 8.0, memory=10 * gib, open_files=65536, cpus=64)
    need = int(512 * 1024**2 * 8.0) + 640 * 1024**2
    assert by_mem.bound_by == "memory" and by_mem.workers == int(10 * gib * 0.8) // need
    assert by_mem.memory_limit >= need
    by_fd = plan_workers([1024] * 100, 8.0, memory=512 * gib, open_files=1024, cpus=64)
    assert by_fd.bound_by == "open_files" and by_fd.workers == (1024 - 256) // 64
    by_cpu = plan_workers([1024] * 100, 8.0, memory=512 * gib, open_files=65536, cpus=3)
    assert (by_cpu.bound_by, by_cpu.workers) == ("cpus", 3)
    assert plan_workers([1024], 8.0, memory=512 * gib, open_files=65536, cpus=8).workers == 1


def _pid_of(x: int) -> tuple[int, int]:
    return os.getpid(), x


def test_a_one_worker_plan_runs_in_this_process_and_a_larger_one_on_a_local_cluster():
    """A cluster of one worker would only add its start-up to every task of an array; two workers are worth it."""
    one = list(dask_mapper(workers=1)(_pid_of, [(1,), (2,), (3,)]))
    assert one == [(os.getpid(), 1), (os.getpid(), 2), (os.getpid(), 3)]  # results in submission order
    single_unit = list(dask_mapper(workers=4)(_pid_of, [(7,)]))
    assert single_unit == [(os.getpid(), 7)]
    if cpu_count() < 2:
        pytest.skip("a LocalCluster of two workers needs two usable cores")
    two = list(dask_mapper(workers=2)(_pid_of, [(k,) for k in range(4)]))
    assert [x for _, x in two] == [0, 1, 2, 3]
    assert os.getpid() not in {pid for pid, _ in two}  # each ran in a worker process of the cluster


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": REPO}
    code = "import sys; from airflow_curation.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=600, cwd=REPO, check=False
    )


def test_cli_on_plain_parquet(tmp_path, prose):
    src = tmp_path / "mine.parquet"
    texts = prose[:20] + ["", "Привет мир. Это русский текст!"]
    pq.write_table(
        pa.table({"id": [f"d{i}" for i in range(len(texts))], "text": texts, "other": list(range(len(texts)))}), src
    )
    out = tmp_path / "out"
    proc = _cli("preprocess", str(src), "--output", str(out), "--preset", "gopher,c4")
    assert proc.returncode == 0, proc.stderr
    result = pq.read_table(out / "mine.parquet")
    assert result.column("id").to_pylist() == [f"d{i}" for i in range(len(texts))]
    assert {"keep", "drop_reason", "n_words", "stop_word_ratio"} <= set(result.column_names)
    assert "text" not in result.column_names and "other" not in result.column_names
    assert result.column("drop_reason").to_pylist()[-2] == "empty"
    expected = apply_rules(compute_signals(texts), resolve_rules("gopher,c4"))
    assert result.column("keep").equals(expected.column("keep"))


def test_cli_rejects_parquet_without_text(tmp_path):
    src = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"id": ["a"], "body": ["x"]}), src)
    proc = _cli("preprocess", str(src), "--output", str(tmp_path / "out"))
    assert proc.returncode == 1 and "missing column 'text'" in proc.stderr
    assert not (tmp_path / "out" / "bad.parquet").exists()


def test_cli_on_a_lake_finds_the_ingest_manifest(lake):
    lake, _ = lake
    proc = _cli(
        "preprocess",
        "--lake",
        lake.root,
        "--dataset",
        lake.dataset,
        "--mapper",
        "local",
        "--run-id",
        "cli-pre",
        "--preset",
        "fineweb",
    )
    assert proc.returncode == 0, proc.stderr
    m = Manifest.read(lake.manifest_uri("cli-pre", "preprocess"))
    assert m.status == "complete" and m.rows == 122
    assert all("preprocess" in s.attrs for s in m.shards)


def test_stage_on_an_existing_dask_cluster(lake, warm_signals):
    from distributed import Client, LocalCluster

    lake, ingest_uri = lake
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        cfg = {"input_manifest": ingest_uri, "preset": "fineweb", "scheduler_address": cluster.scheduler_address}
        manifest = StageRunner(PreprocessStage(lake, cfg, "pre-ext")).run()
        with Client(cluster) as client:
            worker_pids = set(client.run(os.getpid).values())
    assert manifest.status == "complete" and manifest.rows == 122
    pids = {
        stage_rec.pid
        for stage_rec in (PreprocessStage(lake, cfg, "x").checkpoints.load(u.unit_id) for u in manifest.units)
    }
    assert pids == worker_pids  # the units ran in the existing cluster's worker process


def test_memory_expansion_is_measured_from_checkpoints(lake, warm_signals):
    lake, ingest_uri = lake
    cfg = {"input_manifest": ingest_uri, "mapper": "local"}
    stage = PreprocessStage(lake, cfg, "pre-m1")
    assert stage.memory_expansion() == 8.0  # nothing measured yet
    assert PreprocessStage(lake, {**cfg, "memory_expansion": 3}, "x").memory_expansion() == 3.0
    StageRunner(stage).run()
    records = [stage.checkpoints.load(u.unit_id) for u in stage.plan()]
    assert all(r.extra["peak_rss_mib"] > 0 for r in records)
    measured = PreprocessStage(lake, cfg, "pre-m2").memory_expansion()
    # tiny shards under a process of a few hundred MiB: the measured factor is large, and capped
    expected = max((r.extra["peak_rss_mib"] * 1024**2 - 640 * 1024**2) / r.outputs[0]["bytes"] for r in records)
    assert measured == min(64.0, max(1.0, expected))


def test_a_failed_upstream_is_reported_as_failed_not_as_a_long_wait(tmp_path):
    """The message once said "not complete (waited 600 s)" for an upstream that had failed seconds before
    (the setting, not the wait): a finished upstream is not waited for, and the message says what it is."""
    lake = Lake(str(tmp_path / "lake"), "docs")
    m = Manifest(dataset="docs", stage="ingest", run_id="i1", fingerprint="f", lake=lake.to_dict(), status="failed")
    uri = lake.manifest_uri("i1", "ingest")
    m.write(uri)
    stage = PreprocessStage(lake, {"input_manifest": uri, "upstream_wait_s": 600}, "p1")
    with pytest.raises(ValueError) as e:
        stage._wait_for_upstream()
    text = str(e.value)
    assert "is not complete: 'failed'" in text and "a finished upstream is not waited for" in text
    assert "600" not in text


@pytest.mark.parametrize("line_rules, codec", [(None, "LZ4"), ("c4", "ZSTD")])
def test_attrs_codec_is_lz4_unless_they_hold_cleaned_text(tmp_path, prose, line_rules, codec):
    # numbers only: lz4 (cheaper to write and read); the cleaned text's copy: zstd, which compresses text far better
    from airflow_curation.stages.preprocess.stage import Preprocessor

    src, out = str(tmp_path / "in.parquet"), str(tmp_path / "out.parquet")
    texts = prose[:20]
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(len(texts))], "text": texts}), src)
    Preprocessor(line_rules=line_rules).run_file(src, out)
    md = pq.ParquetFile(out).metadata
    assert {md.row_group(0).column(c).compression for c in range(md.num_columns)} == {codec}
    assert ("clean_text" in md.schema.names) == (line_rules is not None)
    if line_rules is None:  # what was written reads back as computed
        want = apply_rules(compute_signals(texts), resolve_rules(DEFAULT_PRESET))
        assert pq.read_table(out).column("keep").equals(want.column("keep"))
