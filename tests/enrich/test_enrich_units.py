"""The enrich stage's model-free parts: output parsing, within-shard parts, settings validation."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_curation.stages.enrich.parts import PartStore
from airflow_curation.stages.enrich.stage import EnrichStage
from airflow_curation.stages.enrich.tasks import parse_pair
from airflow_curation.stages.text import ShardText


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "empty_output"),
        ("   \n", "empty_output"),
        ("no braces here", "no_json"),
        ('{"instruction": "x", ', "invalid_json"),
        ('{"instruction": "Do it"}', "missing_response"),
        ('{"instruction": "  ", "response": "r"}', "empty_instruction"),
        ('{"instruction": 3, "response": "r"}', "empty_instruction"),
    ],
)
def test_parse_pair_rejects_with_reason(text, reason):
    pair, error = parse_pair(text)
    assert pair is None and error == reason


def test_parse_pair_takes_first_object_after_chatter():
    pair, error = parse_pair('Sure! {"instruction": " Sum 2 and 2 ", "response": "4"} trailing {"x": 1}')
    assert error is None
    assert pair == {"instruction": "Sum 2 and 2", "response": "4"}


def _part(ids):
    return pa.table({"id": ids})


def test_parts_resume_keeps_only_contiguous_run(tmp_path):
    store = PartStore(str(tmp_path / "p"))
    store.write(0, 3, _part(["a", "b", "c"]))
    store.write(3, 5, _part(["d", "e"]))
    store.write(7, 9, _part(["h", "i"]))  # a gap: not a continuation of [0, 5)
    (tmp_path / "p" / ".0000000005-0000000007.parquet.tmp-abc").write_bytes(b"torn")
    assert store.resume(10) == 5
    assert sorted(os.listdir(tmp_path / "p")) == ["0000000000-0000000003.parquet", "0000000003-0000000005.parquet"]
    assert store.read_all().column("id").to_pylist() == ["a", "b", "c", "d", "e"]
    store.clear()
    assert not (tmp_path / "p").exists()


def test_parts_beyond_shard_end_are_dropped(tmp_path):
    store = PartStore(str(tmp_path / "p"))
    store.write(0, 4, _part(["a", "b", "c", "d"]))
    assert store.resume(3) == 0  # the shard shrank: the part cannot be trusted


def test_part_row_count_is_checked(tmp_path):
    with pytest.raises(ValueError, match="has 1 rows"):
        PartStore(str(tmp_path / "p")).write(0, 2, _part(["a"]))


@pytest.mark.parametrize(
    "config, message",
    [
        ({"task": "summarise", "model": "/m", "input_manifest": "x"}, "task must be one of"),
        ({"task": "embed", "input_manifest": "x"}, "no model"),
        ({"task": "embed", "model": "/m"}, "either input_manifest"),
        ({"task": "embed", "model": "/m", "inputs": ["a.parquet"]}, "need output_dir"),
        ({"task": "embed", "model": "/m", "input_manifest": "x", "batch_size": 0}, "batch_size must be at least 1"),
        ({"task": "generate", "model": "/m", "input_manifest": "x", "prompt_template": "no slot"}, "must contain"),
        ({"task": "embed", "model": "/m", "input_manifest": "x", "mapper": "dask"}, "mapper must be"),
        ({"task": "embed", "model": "/m", "input_manifest": "x", "name": "a/b"}, "invalid enrich name"),
        ({"task": "embed", "model": "/m", "input_manifest": "x", "beam_width": 4}, "unknown settings"),
    ],
)
def test_bad_settings_fail_before_any_work(tmp_path, config, message):
    from airflow_curation.core.layout import Lake

    with pytest.raises(ValueError, match=message):
        EnrichStage(Lake(str(tmp_path), "ds"), config, "r1")


def test_runtime_settings_do_not_change_the_fingerprint(tmp_path):
    from airflow_curation.core.layout import Lake

    lake = Lake(str(tmp_path), "ds")
    base = {"task": "embed", "model": "/m", "input_manifest": "x"}
    a = EnrichStage(lake, base, "r1").fingerprint
    b = EnrichStage(
        lake, {**base, "batch_size": 7, "replicas": 3, "mapper": "local", "checkpoint_rows": 10}, "r1"
    ).fingerprint
    c = EnrichStage(lake, {**base, "max_input_tokens": 64}, "r1").fingerprint
    assert a == b != c


def test_enrich_operator_config_and_skip_without_model():
    from airflow.sdk.exceptions import AirflowSkipException

    from airflow_curation.operators.enrich import EnrichOperator, RayDashboardLink

    op = EnrichOperator(
        task_id="enrich",
        dataset="ds",
        lake="/lake",
        input_manifest="/lake/ds/m.json",
        task="score",
        model="/models/q",
        model_runtime="transformers",
        mapper="local",
        replicas=2,
        max_failed_fraction="0.1",
        config={"max_input_tokens": 128},
    )
    assert op.build_config({}) == {
        "max_input_tokens": 128,
        "input_manifest": "/lake/ds/m.json",
        "task": "score",
        "model": "/models/q",
        "model_runtime": "transformers",
        "mapper": "local",
        "replicas": 2,
        "max_failed_fraction": 0.1,
    }
    assert any(isinstance(link, RayDashboardLink) for link in op.operator_extra_links)
    skipping = EnrichOperator(
        task_id="e2", dataset="ds", lake="/lake", input_manifest="m", task="embed", model="  ", optional=True
    )
    with pytest.raises(AirflowSkipException, match="enrich skipped: no model configured"):
        skipping.execute({})


class _CountedText(ShardText):
    """The real reader of a Parquet file, counting the batches it has handed over."""

    pulled = 0

    def batches(self, columns, batch_rows=None):
        for b in super().batches(columns, batch_rows):
            self.pulled += 1
            yield b


@pytest.mark.parametrize("covered,step", [(0, 4), (6, 4), (5, 3), (0, 100)])
def test_chunks_read_the_text_a_chunk_at_a_time(tmp_path, covered, step):
    """A unit's texts are streamed, never held whole (a user's file has no size bound; a lake shard's texts took ~2x
    their size as Python strings): the first chunk comes after the first batches only, and the chunks are the
    rows from the resumed position, in order, skipping the rows upstream dropped and the empty ones."""
    f = str(tmp_path / "u.parquet")
    texts = [f"text {i}" if i % 5 else "  " for i in range(23)]
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(23)], "text": texts}), f, row_group_size=2)
    reasons = [("not_kept" if i % 7 == 3 else None) for i in range(23)]
    text = _CountedText(f, user_file=True)
    chunks = EnrichStage._chunks(text, reasons, covered, step)
    first = next(chunks)
    needed = -(-(covered + step) // step)  # batches of `step` rows up to the first chunk's end
    assert text.pulled <= needed + 1, (text.pulled, needed)
    got = [first, *chunks]
    assert [(c.start, c.end) for c in got] == [(a, min(a + step, 23)) for a in range(covered, 23, step)]
    want = [i for i in range(covered, 23) if i % 7 != 3 and i % 5]
    assert [p for c in got for p in c.positions] == want
    assert [t for c in got for t in c.texts] == [texts[i] for i in want]
    empty = [i for i in range(covered, 23) if i % 5 == 0 and i % 7 != 3]
    assert [reasons[i] for i in empty] == ["empty"] * len(empty)
    assert text.pulled == -(-23 // step)  # and the whole file once
