"""The mix stage on a real local lake: proportions reached in documents and tokens, up-sampling as whole
epochs plus a hashed fraction, the same selection from the same seed whatever the shard layout, every row
accounted for, reruns skipping done shards, several input manifests, attrs keys, clear errors, validate's
mixture check, and the CLI."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import xxhash
from tokenizer_files import train_bpe

from airflow_curation.cli import main as curation
from airflow_curation.core import storage
from airflow_curation.core.layout import Lake
from airflow_curation.core.lease import Lease
from airflow_curation.core.manifest import Manifest
from airflow_curation.stages import STAGES
from airflow_curation.stages.base import StageRunner
from airflow_curation.stages.ingest.stage import IngestStage
from airflow_curation.stages.mix.stage import MixStage
from airflow_curation.stages.mix.targets import MixError
from airflow_curation.stages.preprocess.stage import PreprocessStage
from airflow_curation.stages.tokenize.stage import TokenizeStage
from airflow_curation.stages.validate import ValidateStage
from airflow_curation.stages.validate.checks import ValidationFailed

TARGET = "airflow_curation.stages.mix.stage:MixStage"
SOURCES = {"web": 600, "code": 200, "books": 100}
WORDS = "alpha beta gamma delta river stone cloud paper light garden number table window market".split()


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    # The entry point (pyproject.toml) is live once the checkout is installed again; until then, here and
    # in the job processes.
    monkeypatch.setitem(STAGES, "mix", TARGET)
    monkeypatch.setenv("CURATION_STAGES", f"mix={TARGET}")


def write_sources(root: Path, sources: dict[str, int] = SOURCES, seed: int = 1) -> Path:
    """``raw/<source>/part<k>.jsonl``: documents of 20-300 words (books longest), two files per source."""
    rnd = random.Random(seed)
    raw = root / "raw"
    for source, n in sources.items():
        (raw / source).mkdir(parents=True)
        top = 300 if source == "books" else 120
        docs = [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(20, top))) + f" {source} {i}" for i in range(n)]
        for k in range(2):
            part = docs[k::2]
            (raw / source / f"part{k}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in part))
    return raw


def ingest(root: Path, raw: Path, dataset: str = "web", **config) -> tuple[Lake, str]:
    lake = Lake(str(root / "lake"), dataset)
    stage = IngestStage(lake, {"inputs": [str(raw)], "input_root": str(raw), **config}, "r1")
    StageRunner(stage).run()
    return lake, stage.manifest_uri


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> tuple[Lake, str]:
    root = tmp_path_factory.mktemp("mix")
    # one shard per input file, 6 shards
    return ingest(root, write_sources(root), unit_bytes=1)


def run_mix(lake: Lake, upstream: str, run_id: str = "m1", **config) -> Manifest:
    return StageRunner(MixStage(lake, {"input_manifest": upstream, **config}, run_id)).run()


def selection(manifest: Manifest) -> dict[str, int]:
    """id -> epochs of every selected row."""
    out = {}
    for s in manifest.shards:
        t = pq.read_table(s.attrs["mix"], columns=["id", "mix_epochs"]).to_pylist()
        out.update({r["id"]: r["mix_epochs"] for r in t if r["mix_epochs"]})
    return out


def test_documents_downsampled_to_target_and_every_row_accounted(lake):
    lk, upstream = lake
    targets = {"web": 0.5, "code": 0.3, "books": 0.2}
    m = run_mix(lk, upstream, targets=targets)
    assert m.status == "complete"
    mix = m.config["mixture"]
    by = mix["by_key"]
    # the scarcest key relative to its target (books: 100 for 0.2) is taken whole, the others cut to match
    assert by["books"]["selected_rows"] == 100 and by["books"]["whole_epochs"] == 1
    assert by["web"]["available_rows"] == 600 and by["code"]["available_rows"] == 200
    for key, p in targets.items():
        assert abs(by[key]["achieved"] - p) <= mix["tolerance"], (key, by[key])
        assert by[key]["selected_copies"] == by[key]["selected_rows"]  # no key repeated
    acc = m.accounting
    assert acc["read"] == 900 == acc["kept"] + acc["dropped"]["downsampled"]
    assert acc["kept"] == mix["selected_rows"] == len(selection(m))
    # the additive output: one row per shard row, the shards themselves untouched
    for s in m.shards:
        t = pq.read_table(s.attrs["mix"])
        assert t.num_rows == s.rows and set(t.column_names) >= {"id", "mix_key", "mix_epochs", "keep", "drop_reason"}
    assert Path(mix["uri"]).exists() and json.loads(Path(mix["uri"]).read_text())["by_key"] == by


def test_tokens_upsampled_as_whole_epochs_plus_hashed_fraction(lake):
    lk, upstream = lake
    avail = run_mix(
        lk, upstream, "probe", targets={"web": 0.4, "code": 0.4, "books": 0.2}, unit="tokens", chars_per_token=4.0
    ).config["mixture"]["by_key"]
    total = 2 * sum(v["available"] for v in avail.values())  # twice the tokens there are: every key repeats
    m = run_mix(
        lk,
        upstream,
        "up",
        targets={"web": 0.4, "code": 0.4, "books": 0.2},
        unit="tokens",
        chars_per_token=4.0,
        total=total,
    )
    mix = m.config["mixture"]
    by = mix["by_key"]
    assert abs(mix["selected"] - total) / total < 0.01
    for key, p in {"web": 0.4, "code": 0.4, "books": 0.2}.items():
        assert abs(by[key]["achieved"] - p) <= mix["tolerance"]
        assert by[key]["epochs"] > 1 and by[key]["whole_epochs"] == int(by[key]["epochs"])
        # every row of the key gets its whole epochs, some one more: copies beyond rows are the repeats
        assert by[key]["selected_rows"] == by[key]["available_rows"]
    code = by["code"]
    assert code["epochs"] > 2  # code is scarce in tokens for 0.4: repeated most
    plans = mix["plans"]
    for s in m.shards:
        t = pq.read_table(s.attrs["mix"]).to_pylist()
        for r in t:
            w = by[r["mix_key"]]["whole_epochs"]
            assert r["mix_epochs"] in (w, w + 1) and r["mix_tokens"] > 0
            # the documented choice, recomputed with the xxhash package: one more epoch below the threshold
            below = xxhash.xxh64_intdigest(f"{mix['seed']}:{r['id']}".encode()) >> 48 < plans[r["mix_key"]]["threshold"]
            assert r["mix_epochs"] == w + below, r
    assert m.accounting["read"] == m.accounting["kept"] == 900


def test_same_seed_same_selection_whatever_the_shard_layout(lake, tmp_path):
    lk, upstream = lake
    targets = "web=0.6,code=0.25,books=0.15"
    a = selection(run_mix(lk, upstream, "a", targets=targets, seed=7))
    # the same input ingested again into one shard per source folder... and into one shard in all
    root = tmp_path / "other"
    raw = write_sources(root)
    other, other_upstream = ingest(root, raw)
    assert len(Manifest.read(other_upstream).shards) != len(Manifest.read(upstream).shards)
    b = selection(run_mix(other, other_upstream, "b", targets=targets, seed=7, workers=2))
    assert a == b and len(a) > 0
    c = selection(run_mix(lk, upstream, "c", targets=targets, seed=8))
    assert c != a and len(c) == pytest.approx(len(a), abs=3)


def test_rerun_skips_done_units(lake):
    lk, upstream = lake
    first = run_mix(lk, upstream, "r1", targets="web=0.5,code=0.5")
    again = run_mix(lk, upstream, "r2", targets="web=0.5,code=0.5")
    assert {u.status for u in first.units} == {"done"}
    assert {u.status for u in again.units} == {"skipped"}
    assert (
        selection(first) == selection(again) and again.config["mixture"]["by_key"] == first.config["mixture"]["by_key"]
    )
    # books untargeted: dropped with its reason, counted
    assert again.accounting["dropped"]["untargeted"] == 100
    # the tally of each unit is kept: another split of the same keys reads it instead of the shards
    tallies = {p: p.stat().st_mtime_ns for p in Path(lk.base).glob("mix/_tally/*/*.npz")}
    assert len(tallies) >= 6
    other = run_mix(lk, upstream, "r3", targets="web=0.7,code=0.3")
    assert {u.status for u in other.units} == {"done"} and other.config["mixture"]["by_key"]["web"]["target"] == 0.7
    assert {p: p.stat().st_mtime_ns for p in tallies} == tallies


def test_several_input_manifests_keyed_by_input(tmp_path):
    raws = {}
    for name, sources in {"web": {"web": 300}, "code": {"code": 100}}.items():
        raws[name] = write_sources(tmp_path / name, sources)
    web, web_uri = ingest(tmp_path / "web", raws["web"], "web", unit_bytes=1)
    _, code_uri = ingest(tmp_path / "code", raws["code"], "code", unit_bytes=1)
    m = run_mix(web, web_uri, targets="web=0.5,code=0.5", key="input", manifests=[code_uri])
    mix = m.config["mixture"]
    assert [i["label"] for i in mix["inputs"]] == ["web", "code"]
    assert [i["rows"] for i in mix["inputs"]] == [300, 100] and m.accounting["read"] == 400
    assert mix["by_key"]["code"]["selected_rows"] == 100 and mix["by_key"]["web"]["selected_rows"] == 100
    assert mix["inputs"][1]["by_key"]["code"]["selected_rows"] == 100
    assert any(s.shard_id.startswith("in1-") for s in m.shards)


def test_several_inputs_as_array_tasks_select_what_one_run_selects(tmp_path):
    sources = {"web": {"web": 300}, "code": {"code": 100}, "books": {"books": 60}}
    uris = {
        name: ingest(tmp_path / name, write_sources(tmp_path / name, s), name, unit_bytes=1)
        for name, s in sources.items()
    }
    lk, first = uris["web"]
    extra = {
        "targets": "web=0.5,code=0.3,books=0.2",
        "key": "input",
        "seed": 4,
        "manifests": [uris["code"][1], uris["books"][1]],
    }
    config = {"input_manifest": first, **extra}
    whole = selection(run_mix(lk, first, "one", **extra))
    # 6 shards in 4 groups: blocks that span two inputs; the plan file comes from the first task
    for i in (2, 0, 3, 1):
        part = StageRunner(MixStage(lk, config, "arr")).run(shard_group=(i, 4))
        assert {u.status for u in part.units} == {"skipped"}  # the one run did them: same plans, same units
    ids = [u.unit_id for i in range(4) for u in StageRunner(MixStage(lk, config, "arr2")).run(shard_group=(i, 4)).units]
    assert ids == [u.unit_id for u in Manifest.read(lk.manifest_uri("one", "mix")).units]
    grouped = StageRunner(MixStage(lk, config, "arr2")).run(collect=True)
    assert grouped.status == "complete" and selection(grouped) == whole and len(whole) > 0


def test_key_from_an_attrs_column_in_buckets(lake):
    lk, upstream = lake
    pre = StageRunner(
        PreprocessStage(lk, {"input_manifest": upstream, "preset": "structure", "mapper": "local"}, "p")
    ).run()
    m = run_mix(
        lk,
        lk.manifest_uri("p", "preprocess"),
        "bins",
        key="preprocess.n_words",
        key_bins=[60, 120],
        targets="<60=0.3,60-120=0.4,>=120=0.3",  # bucket names hold "=" and "<"
    )
    by = m.config["mixture"]["by_key"]
    assert set(by) == {"<60", "60-120", ">=120"}
    assert sum(v["available_rows"] for v in by.values()) == pre.accounting["kept"]  # only what preprocess kept
    for key, v in by.items():
        assert abs(v["achieved"] - v["target"]) <= 0.01


@pytest.mark.parametrize(
    "config, message",
    [
        ({"targets": "web=0.5,code=0.4"}, "sum to 0.9"),
        ({"targets": "web=0.5,news=0.5"}, "targets ['news'] have no rows"),
        ({"targets": "web=1", "key": "lang"}, "key 'lang' is neither a column"),
        ({"targets": "web=1", "unit": "tokens"}, "needs token_column"),
        ({"targets": "web=1", "token_column": "n_tok", "unit": "tokens"}, "token_column 'n_tok' is neither"),
        ({"targets": "web=0.5,code=0.5", "total": 10_000, "max_epochs": 3}, "more than max_epochs=3"),
    ],
)
def test_clear_errors(lake, config, message):
    lk, upstream = lake
    with pytest.raises((ValueError, MixError), match=message.replace("[", r"\[").replace("]", r"\]")):
        run_mix(lk, upstream, "bad", **config)


def test_validate_checks_the_mixture_against_its_targets(lake):
    lk, upstream = lake
    run_mix(lk, upstream, "v", targets="web=0.5,code=0.3,books=0.2", unit="tokens", chars_per_token=4.0)
    uri = lk.manifest_uri("v", "mix")
    ok = StageRunner(ValidateStage(lk, {"input_manifest": uri}, "v")).run()
    report = json.loads(Path(ok.config["report_json"]).read_text())
    mixture = [c for c in report["checks"] if c["type"] == "mixture"]
    assert len(mixture) == 1 and mixture[0]["status"] == "pass"
    # the report and the dataset card carry the mixture
    assert set(report["mixture"]["by_key"]) == {"web", "code", "books"} and report["mixture"]["unit"] == "tokens"
    assert "<h2>Mixture</h2>" in Path(ok.config["report_html"]).read_text()
    assert "### Mixture" in (Path(ok.config["report_json"]).parent / "README.md").read_text()
    # a tolerance the mixture misses (token counts do not split exactly): the check fails and gates the run
    strict = [{"type": "mixture", "tolerance": 1e-9}]
    with pytest.raises(ValidationFailed, match="mixture"):
        StageRunner(ValidateStage(lk, {"input_manifest": uri, "checks": strict}, "v2")).run()


def test_cli(lake, capsys):
    lk, upstream = lake
    rc = curation(
        [
            "mix",
            "--lake",
            lk.root,
            "--dataset",
            lk.dataset,
            "--input-manifest",
            upstream,
            "--targets",
            "web=0.7,code=0.3",
            "--seed",
            "3",
            "--run-id",
            "cli",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert '"mixture"' in out and '"web"' in out
    m = Manifest.read(lk.manifest_uri("cli", "mix"))
    assert m.status == "complete" and m.config["mixture"]["seed"] == 3


def test_tokenize_packs_each_selected_row_its_epochs_times(lake, tmp_path):
    lk, upstream = lake
    m = run_mix(lk, upstream, "tok", targets="web=0.5,books=0.5", total=500)  # books: 100 rows for 250
    by = m.config["mixture"]["by_key"]
    assert by["books"]["whole_epochs"] == 2 and by["books"]["selected_copies"] == 250
    texts = [" ".join(WORDS)] * 5 + [f"{w} {i}" for i, w in enumerate(WORDS * 20)]
    tokenizer = train_bpe(str(tmp_path / "tokenizer.json"), texts, vocab_size=300)
    config = {"input_manifest": lk.manifest_uri("tok", "mix"), "tokenizer": tokenizer, "seq_len": 64}
    tok = StageRunner(TokenizeStage(lk, config, "tok")).run()
    assert tok.accounting["kept"] == m.accounting["kept"] == 500 - 250 + 100
    starts: Counter[str] = Counter()
    for s in tok.shards:
        for r in pq.read_table(s.files["packed"]["uri"], columns=["doc_ids", "doc_offsets"]).to_pylist():
            starts.update(d for d, off in zip(r["doc_ids"], r["doc_offsets"]) if off == 0)
    assert starts == Counter(selection(m))  # every selected row packed exactly its epochs times
    assert tok.config["tokens"]["repeats"] == sum(selection(m).values()) - tok.accounting["kept"] == 150


def test_array_groups_and_collect_select_what_one_run_selects(lake, tmp_path):
    lk, upstream = lake
    targets = "web=0.4,code=0.4,books=0.2"
    whole = selection(run_mix(lk, upstream, "whole", targets=targets, seed=11))
    # the same input in a fresh lake (no checkpoints to reuse), run as 3 array tasks and a collect step
    raw = write_sources(tmp_path)
    other, other_upstream = ingest(tmp_path, raw, unit_bytes=1)
    config = {"input_manifest": other_upstream, "targets": targets, "seed": 11}
    for i in range(3):
        part = StageRunner(MixStage(other, config, "grouped")).run(shard_group=(i, 3))
        assert {u.status for u in part.units} == {"done"} and len(part.units) == 2
    grouped = StageRunner(MixStage(other, config, "grouped")).run(collect=True)
    assert grouped.status == "complete" and selection(grouped) == whole


def test_array_tasks_read_no_tally_once_the_plan_exists(tmp_path, monkeypatch):
    raw = write_sources(tmp_path)
    lk, upstream = ingest(tmp_path, raw, unit_bytes=1)  # 6 shards
    config = {"input_manifest": upstream, "targets": "web=0.5,code=0.3,books=0.2", "seed": 3}
    one, one_upstream = ingest(tmp_path / "one", write_sources(tmp_path / "one"), unit_bytes=1)
    whole = selection(run_mix(one, one_upstream, "whole", **{**config, "input_manifest": one_upstream}))
    read, counted = [], []  # tally files read, units tallied from their shards
    real_read, real_tally = storage.read_bytes, MixStage.unit_tally

    def reading(url: str) -> bytes:
        if "/_tally/" in url:
            read.append(url)
        return real_read(url)

    def tallying(self, unit):
        counted.append(unit.unit_id)
        return real_tally(self, unit)

    monkeypatch.setattr(storage, "read_bytes", reading)
    monkeypatch.setattr(MixStage, "unit_tally", tallying)
    # the first task to plan (group 1 here) tallies its own block beside the others (another task holds the
    # plan lease here), then, holding it, sums the whole input's tallies once (its own read from their files,
    # the rest counted) and leaves the plan file; it counted all 6 itself before, the other tasks waiting
    holder = Lease(lk.path("_locks", "mix.plan.lease"), "the test", 0).acquire()
    out: list = []
    task = threading.Thread(target=lambda: out.append(StageRunner(MixStage(lk, config, "arr")).run(shard_group=(1, 3))))
    task.start()
    deadline = time.monotonic() + 300
    while len(counted) < 2 and task.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # nothing more is counted while the lease is held
    assert sorted(counted) == sorted(s.shard_id for s in Manifest.read(upstream).shards[2:4]) and not read
    holder.release()
    task.join()
    first = out[0]
    assert len(counted) == 6 and len(read) == 2 and len(first.units) == 2
    assert len(list(Path(lk.base).glob("mix/*/plans/*.json"))) == 1
    # every other task, group 0 (which plans every unit) included, and the collect step read that file only
    for group in ((0, 3), (2, 3)):
        read.clear(), counted.clear()
        part = StageRunner(MixStage(lk, config, "arr")).run(shard_group=group)
        assert not read and not counted and {u.status for u in part.units} == {"done"} and len(part.units) == 2
    grouped = StageRunner(MixStage(lk, config, "arr")).run(collect=True)
    assert not read and not counted and grouped.status == "complete"
    assert selection(grouped) == whole and len(whole) > 0
    # a rerun of a task skips its done units, still without a tally
    again = StageRunner(MixStage(lk, config, "arr2")).run(shard_group=(2, 3))
    assert not read and not counted and {u.status for u in again.units} == {"skipped"}


def test_tokens_from_the_tokenize_attrs(lake, tmp_path):
    lk, upstream = lake
    tokenizer = train_bpe(str(tmp_path / "tokenizer.json"), [" ".join(WORDS)] * 5, vocab_size=200)
    config = {"input_manifest": upstream, "tokenizer": tokenizer, "seq_len": 64}
    StageRunner(TokenizeStage(lk, config, "pre")).run()
    m = run_mix(lk, lk.manifest_uri("pre", "tokenize"), "bytok", targets="web=0.5,code=0.5", unit="tokens",
                token_column="tokenize.token_count")  # fmt: skip
    by = m.config["mixture"]["by_key"]
    tokens = sum(
        sum(pq.read_table(sh.attrs["tokenize"], columns=["token_count"]).column(0).fill_null(0).to_pylist())
        for sh in Manifest.read(lk.manifest_uri("pre", "tokenize")).shards
    )
    assert by["web"]["available"] + by["code"]["available"] + by["books"]["available"] == tokens > 0
    assert abs(by["web"]["achieved"] - 0.5) <= 0.01 and by["code"]["whole_epochs"] == 1
