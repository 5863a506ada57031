"""A task reads only its slice (issue 20): an attrs stage's group plan opens no upstream attrs footer (which
attrs hold ``keep``, ``is_duplicate`` and ``clean_text`` is in the shard entries, as each writer recorded it),
and an export task finds its block's packed files in the tokenize manifest's shard pages, not in its head."""

from __future__ import annotations

import json
from dataclasses import asdict

import pyarrow.parquet as pq
import pytest
from opened_files import record_opens
from tokenizer_files import stdlib_prose, train_bpe

from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest, ManifestHead, group_range
from airflow_curation.stages import stage_class
from airflow_curation.stages.attrs import clear_caches
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.export.stage import ExportStage
from airflow_curation.stages.export.trace import trace
from airflow_curation.stages.tokenize import packing
from airflow_curation.stages.tokenize.stage import TokenizeStage

GROUPS = 3


def _run(lake: Lake, name: str, config: dict, run_id: str = "pipe") -> Manifest:
    return StageRunner(stage_class(name)(lake, config, run_id)).run()


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """ingest -> preprocess (line cleaning: a clean_text column) -> dedup -> tokenize, several shards."""
    base = tmp_path_factory.mktemp("slice")
    prose = stdlib_prose(120)
    docs = [t for t in prose if len(t.split()) >= 40][:60]
    docs += docs[:5] + ["short", ""]
    src = base / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    lake = Lake(str(base / "lake"), "pipe")
    _run(lake, "ingest", {"inputs": [str(src)], "target_shard_bytes": 8192, "row_group_rows": 16})
    pre = {"input_manifest": lake.manifest_uri("pipe", "ingest"), "mapper": "local", "line_rules": "c4"}
    _run(lake, "preprocess", pre)
    _run(lake, "dedup", {"input_manifest": lake.manifest_uri("pipe", "preprocess"), "mapper": "local"})
    tokenizer = train_bpe(str(base / "tokenizer.json"), prose)
    config = {"input_manifest": lake.manifest_uri("pipe", "dedup"), "tokenizer": tokenizer, "seq_len": 64}
    tok = _run(lake, "tokenize", config)
    assert len(tok.shards) >= 2 * GROUPS
    assert "clean_text" in tok.shards[0].attrs_columns["preprocess"]  # the cleaned text is read downstream
    return {"lake": lake, "config": config, "tokenize": tok}


def _units(stage: TokenizeStage, index: int, count: int) -> list[tuple]:
    clear_caches()
    return [(u.unit_id, u.inputs, u.input_checksum) for u in stage.plan_group(index, count)]


def test_a_group_plan_opens_no_footer_and_plans_what_the_whole_plan_does(chain, monkeypatch):
    lake, config, tok = chain["lake"], chain["config"], chain["tokenize"]
    whole = [(u.unit_id, u.inputs, u.input_checksum) for u in tok.units]
    # every unit reads the keep/is_duplicate attrs and the cleaned text: the footers a plan used to open
    assert all(len(inputs) == 3 for _, inputs, _ in whole)
    opened = record_opens(monkeypatch)
    stage = TokenizeStage(lake, {**config, "upstream_wait_s": 0}, "again")
    got = [u for i in range(GROUPS) for u in _units(stage, i, GROUPS)]
    assert got == whole
    assert not [f for f in opened if "/attrs/" in f or f.startswith("footer:")], opened


def test_the_recorded_columns_are_those_of_the_files(chain):
    """Every attrs stage of the chain (preprocess, dedup, tokenize) recorded its file's columns as written."""
    for s in chain["tokenize"].shards:
        assert set(s.attrs_columns) == set(s.attrs) == {"preprocess", "dedup", "tokenize"}
        for key, columns in s.attrs_columns.items():
            assert columns == pq.read_schema(s.attrs[key]).names, (s.shard_id, key)


def test_an_old_manifest_without_recorded_columns_is_planned_from_the_footers(chain, monkeypatch):
    """A lake written before the columns were recorded: the same units, its footers read as then."""
    lake, config, tok = chain["lake"], chain["config"], chain["tokenize"]
    dedup = Manifest.read(lake.manifest_uri("pipe", "dedup"))
    for s in dedup.shards:
        s.attrs_columns = {}
    dedup.run_id = "old"
    uri = dedup.write(lake.manifest_uri("old", "dedup"))
    assert all("attrs_columns" not in s for s in ManifestHead.read(uri).shard_dicts())
    opened = record_opens(monkeypatch)
    stage = TokenizeStage(lake, {**config, "input_manifest": uri, "upstream_wait_s": 0}, "old")
    block = group_range(len(dedup.shards), 1, GROUPS)
    got = _units(stage, 1, GROUPS)
    assert got == [(u.unit_id, u.inputs, u.input_checksum) for u in tok.units[block.start : block.stop]]
    assert len([f for f in opened if "/attrs/" in f]) >= len(block)  # the footers, as before


def test_the_tokenize_head_lists_no_packed_file_and_an_export_task_reads_its_block_only(chain, monkeypatch):
    lake, tok = chain["lake"], chain["tokenize"]
    head = ManifestHead.read(lake.manifest_uri("pipe", "tokenize"))
    assert "shards" not in head.config["tokens"]
    assert all(s.files["packed"]["uri"].endswith(f"{s.shard_id}.parquet") for s in tok.shards)
    opened = record_opens(monkeypatch)
    stage = ExportStage(lake, {"input_manifest": head.uri, "file_size": 1 << 40}, "exp")
    stage.tokenize_head  # noqa: B018 - the head is read once, as a task does
    block = group_range(head.shard_count, 1, GROUPS)
    shards = stage._shards(block)
    assert [s["shard_id"] for s in shards] == [s.shard_id for s in tok.shards[block.start : block.stop]]
    assert [s["index"] for s in shards] == list(block)
    assert not [f for f in opened if "/packed/" in f]


def _old_tokenize(lake: Lake) -> str:
    """The chain's tokenize manifest as one from before: its head lists every packed file, the entries none."""
    old = Manifest.read(lake.manifest_uri("pipe", "tokenize"))
    old.config["tokens"]["shards"] = {
        s.shard_id: {"packed_uri": s.files["packed"]["uri"], "packed_checksum": s.files["packed"]["checksum"]}
        for s in old.shards
    }
    for s in old.shards:
        s.files = {}
    old.run_id = "oldtok"
    uri = old.write(lake.manifest_uri("oldtok", "tokenize"))
    assert all("files" not in s for s in ManifestHead.read(uri).shard_dicts())
    return uri


def test_one_reader_finds_the_packed_files_of_both_layouts(chain):
    """packing.packed_files, what export's plan and trace both read: the same files at the same positions from
    the shard entries (the new layout) and from the head of a manifest from before."""
    lake, tok = chain["lake"], chain["tokenize"]
    new, old = ManifestHead.read(lake.manifest_uri("pipe", "tokenize")), ManifestHead.read(_old_tokenize(lake))
    assert packing.packed_in_head(new) is None and len(packing.packed_in_head(old)) == len(tok.shards)
    whole = [(s.shard_id, s.files["packed"]["uri"], s.files["packed"]["checksum"]) for s in tok.shards]
    for positions in (None, range(1, 3), range(len(tok.shards) - 1, len(tok.shards))):
        block = whole[positions.start : positions.stop] if positions is not None else whole
        for head in (new, old):
            got = [(sid, rec["uri"], rec["checksum"]) for sid, rec in packing.packed_files(head, positions)]
            assert got == block, (head.uri, positions)


def test_export_of_an_old_tokenize_manifest_writes_the_same_bytes_and_traces_the_same(chain, monkeypatch):
    """A tokenize manifest from before (its head lists every packed file, the entries none): exported as the
    new one is, byte for byte, and its sequences traced to the same documents, from manifest heads and the
    pages of the traced shard (no whole manifest read)."""
    lake, tok = chain["lake"], chain["tokenize"]
    old_uri = _old_tokenize(lake)
    outs, exports = {}, {}
    for name, uri in (("new", lake.manifest_uri("pipe", "tokenize")), ("old", old_uri)):
        config = {"input_manifest": uri, "file_size": 4096, "seed": 5, "output_dir": str(lake.root) + f"/out-{name}"}
        e = StageRunner(ExportStage(lake, config, f"exp-{name}")).run().config["export"]
        outs[name] = [open(p + ".bin", "rb").read() for p in e["megatron_prefixes"]]
        exports[name] = lake.manifest_uri(f"exp-{name}", "export")
    assert outs["new"] == outs["old"] and sum(len(b) for b in outs["new"]) > 0
    assert asdict(tok.shards[0])["files"]  # the new manifest's entries name their packed file

    def whole(cls, uri):
        raise AssertionError(f"trace read the whole manifest {uri}")

    monkeypatch.setattr(Manifest, "read", classmethod(whole))
    sequences = int(ManifestHead.read(exports["new"]).config["export"]["sequences"])
    for k in (0, sequences // 2, sequences - 1):
        new, old = trace(exports["new"], k).as_dict(), trace(exports["old"], k).as_dict()
        assert new == old and new["documents"], k
        assert new["packed_shard"] in {s.shard_id for s in tok.shards}
