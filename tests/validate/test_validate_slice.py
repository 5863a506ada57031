"""A task of a validate array reads only its slice (issue 20): group ``i`` of ``n`` (not group 0) plans from its
block of this run's unit pages, the input manifest's head and the layout the whole plan left, then reads the
pages of its parts' shards and those shards' files: no whole manifest, no sibling manifest, no page outside
its block. The merged report is still the single-node one, number for number."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from airflow_curation.core import manifest as manifest_mod
from airflow_curation.core import storage
from airflow_curation.core.layout import Lake
from airflow_curation.core.manifest import Manifest, ManifestHead, group_range
from airflow_curation.jobs import cli
from airflow_curation.stages.validate import ValidateStage, checks
from airflow_curation.stages.validate.query_engines import DuckDBEngine
from airflow_curation.stages.validate.stage import _json_safe
from airflow_curation.stages.validate.view import CuratedView

from .test_validate_split import CURATED_BOUNDS, _lake, _report, _spec

SHARDS = 6  # _lake's, 80 rows each: part_rows 80 makes a part of each shard, two parts a group of three


@pytest.fixture
def one_entry_pages(monkeypatch):
    """Manifests written with one entry a page: a block's pages are told apart from its neighbours'."""
    monkeypatch.setattr(manifest_mod, "PAGE_ENTRIES", 1)


class Reads:
    """What the code reads from now on: pages (by file and page index), whole JSON documents, whole
    manifests, files opened through the lake's storage."""

    def __init__(self, monkeypatch) -> None:
        self.pages: dict[str, set[int]] = {}
        self.json: Counter[str] = Counter()
        self.whole: Counter[str] = Counter()
        self.opened: set[str] = set()
        real_ranges, real_json, real_open = manifest_mod._read_ranges, storage.read_json, storage.open_read
        real_read = Manifest.read.__func__

        def ranges(url, spans, manifest_uri):
            index = ManifestHead.read(manifest_uri).data["index"]
            kind = next(k for k in ("units", "shards") if url.endswith(index[k]["file"]))
            starts = [sum(index[kind]["lengths"][:p]) for p in range(len(index[kind]["lengths"]))]
            key = f"{os.path.basename(manifest_uri)}:{kind}"
            self.pages.setdefault(key, set()).update(starts.index(a) for a, _ in spans)
            return real_ranges(url, spans, manifest_uri)

        def read_json(url, *a, **kw):
            self.json[str(url)] += 1
            return real_json(url, *a, **kw)

        def open_read(url, *a, **kw):
            self.opened.add(str(url))
            return real_open(url, *a, **kw)

        def whole(cls, uri):
            self.whole[os.path.basename(uri)] += 1
            return real_read(cls, uri)

        monkeypatch.setattr(manifest_mod, "_read_ranges", ranges)
        monkeypatch.setattr(storage, "read_json", read_json)
        monkeypatch.setattr(storage, "open_read", open_read)
        monkeypatch.setattr(Manifest, "read", classmethod(whole))


def test_a_part_task_reads_only_its_pages_and_files(tmp_path, monkeypatch, one_entry_pages):
    root = str(tmp_path / "lake")
    uris = _lake(root)
    spec = _spec(tmp_path, root, uris["dedup"], "slice", part_rows=80, max_attempts=1)
    m = Manifest.read(uris["dedup"])
    assert len(m.shards) == SHARDS and ManifestHead.read(uris["dedup"]).data["index"]["page_entries"] == 1
    assert cli.main(["run", spec, "--group", "0/3"]) == 0  # plans every part, writes the run's manifest

    reads = Reads(monkeypatch)
    assert cli.main(["run", spec, "--group", "1/3"]) == 0
    monkeypatch.undo()
    block = group_range(SHARDS, 1, 3)  # a part a shard: its parts' block is its shards' block
    assert reads.whole == {}, reads.whole  # no manifest read whole
    assert reads.pages == {"validate.json:units": set(block), "dedup.json:shards": set(block)}, reads.pages
    manifests = {os.path.basename(u) for u in reads.json if "/_manifests/" in u}
    assert manifests == {"validate.json", "dedup.json"}, reads.json  # heads: its own run's and its input's
    parquet = {f for f in reads.opened if f.endswith(".parquet")}
    mine = {f for i in block for f in [m.shards[i].uri, *m.shards[i].attrs.values()]}
    layout = {m.shards[0].uri} | {
        f for st in m.shards[0].attrs for f in (m.shards[0].attrs[st], m.shards[-1].attrs[st])
    }
    assert parquet & mine and parquet <= mine | layout, sorted(parquet - mine - layout)

    stage = ValidateStage(Lake(root, "demo"), json.load(open(spec))["config"], "slice")
    units = stage.plan()
    assert [stage.checkpoints.load(u.unit_id) is not None for u in units] == [True, True, True, True, False, False]
    assert cli.main(["run", spec, "--group", "2/3"]) == 0 and cli.main(["collect", spec]) == 0
    assert not storage.exists(stage._plan_uri())  # merged: no task plans from it again

    view = CuratedView.from_manifest(m)  # today's single-node path: one engine over the whole view
    engine = DuckDBEngine(view, threads=1, ids_per_pass=150)
    try:
        single = _json_safe(engine.metrics(curated_signals=checks.curated_signal_columns(CURATED_BOUNDS, view)))
    finally:
        engine.close()
    merged = _report(root, "slice")["metrics"]
    assert json.dumps(merged, sort_keys=True) == json.dumps(json.loads(json.dumps(single)), sort_keys=True)


def test_a_part_task_before_group_0_plans_whole(tmp_path, monkeypatch, one_entry_pages):
    """Before group 0 planned (no unit pages, no layout yet) a task plans whole, as before: the same parts."""
    root = str(tmp_path / "lake")
    uris = _lake(root)
    spec = _spec(tmp_path, root, uris["dedup"], "early", part_rows=80, max_attempts=1)
    reads = Reads(monkeypatch)
    assert cli.main(["run", spec, "--group", "1/3"]) == 0
    monkeypatch.undo()
    assert reads.whole["dedup.json"] == 1 and "validate.json:units" not in reads.pages
    stage = ValidateStage(Lake(root, "demo"), json.load(open(spec))["config"], "early")
    done = [stage.checkpoints.load(u.unit_id) is not None for u in stage.plan()]
    assert done == [False, False, True, True, False, False]
