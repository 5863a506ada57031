"""A user's own Parquet files (plain-file mode, ``inputs`` + ``output_dir``) read as a lake's shards are: every
stage that takes them checks the rows ingest would have checked (valid UTF-8, an id on every row) and says
which row broke, once, without retrying; text in any Arrow string layout (a pandas categorical, a view) is read
as plain text, with the results of a plain string column."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizer_files import EOS, stdlib_prose, train_bpe

from airflow_curation.core.layout import Lake
from airflow_curation.stages import stage_class
from airflow_curation.stages.base import StageFailed, StageRunner

# One stage per way a stage reads a user's file: through write_attrs (preprocess, pii), the dedup signatures'
# own unit, tokenize's packing loop.
STAGES = ["preprocess", "pii", "dedup", "tokenize"]
TEXTS = stdlib_prose(12)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> str:
    return train_bpe(str(tmp_path_factory.mktemp("tok") / "tokenizer.json"), TEXTS, vocab_size=400)


def _config(name: str, tokenizer: str) -> dict:
    return {"tokenizer": tokenizer, "eos_token": EOS, "seq_len": 64} if name == "tokenize" else {}


def _run(tmp: Path, name: str, files: list[str], tokenizer: str, tag: str):
    out = tmp / f"out-{name}-{tag}"
    config = {"inputs": files, "output_dir": str(out), "batch_rows": 5, **_config(name, tokenizer)}
    return StageRunner(stage_class(name)(Lake(str(tmp / f"lake-{tag}"), "ds"), config, "r1")).run(), out


def _write(path: Path, ids: pa.Array | list, text: pa.Array) -> str:
    pq.write_table(pa.table({"id": ids, "text": text}), str(path))
    return str(path)


def _raw_strings(values: list[bytes]) -> pa.Array:
    """Strings over raw bytes: Parquet readers hand such a column over without checking its UTF-8."""
    raw = pa.array(values, pa.binary())
    return pa.Array.from_buffers(pa.string(), len(raw), raw.buffers(), raw.null_count)


@pytest.mark.parametrize("name", STAGES)
def test_invalid_utf8_and_missing_ids_fail_the_file_naming_the_row(name, tokenizer, tmp_path):
    values = [t.encode() for t in TEXTS]
    values[7] = values[7][:20] + b"\xff\xfe" + values[7][20:]  # in the second batch of 5 rows
    bad = _write(tmp_path / "bad.parquet", [f"d{i}" for i in range(len(values))], _raw_strings(values))
    with pytest.raises(StageFailed, match=r"bad.parquet: row 7 has invalid UTF-8 in 'text' \(row 7: byte 20"):
        _run(tmp_path, name, [bad], tokenizer, "utf8")
    # tried once (a second attempt cannot mend the file), and the unit's failure record says why
    failures = [json.loads(f.read_text()) for f in tmp_path.rglob("*.failed.json")]
    assert [(f["attempt"], f["error"].split(":")[0]) for f in failures] == [(1, "BadRows")]
    assert not (tmp_path / f"out-{name}-utf8" / "bad.parquet").exists()

    ids = [f"d{i}" for i in range(len(TEXTS))]
    ids[3] = None
    no_id = _write(tmp_path / "noid.parquet", ids, pa.array(TEXTS))
    with pytest.raises(StageFailed, match=r"noid.parquet: row 3 has no id"):
        _run(tmp_path, name, [no_id], tokenizer, "noid")


@pytest.mark.parametrize("name", STAGES)
def test_an_id_repeated_in_or_across_files_fails_the_run_naming_both_rows(name, tokenizer, tmp_path):
    """A user's ids were not checked: a file with a repeated id got two result rows of that id (preprocess
    and dedup kept both), which no join on the id tells apart. The run now fails after its units, naming the
    repeat and the row it repeats; the results stay, and files with unique ids pass."""
    a = _write(tmp_path / "a.parquet", [f"d{i}" for i in range(6)], pa.array(TEXTS[:6]))
    b = _write(tmp_path / "b.parquet", ["e0", "e1", "d4", "e3", "e1", "e5"], pa.array(TEXTS[6:]))
    with pytest.raises(
        StageFailed,
        match=rf"{name}: 2 rows of the input files repeat .* first: .*b.parquet row 2 has id 'd4', as .*a.parquet row 4",
    ):
        _run(tmp_path, name, [a, b], tokenizer, "dup")
    assert (tmp_path / f"out-{name}-dup" / "b.parquet").exists()  # the results are kept
    m, _ = _run(tmp_path, name, [a], tokenizer, "unique")
    assert m.status == "complete"


@pytest.mark.parametrize("name", STAGES)
def test_text_in_any_string_layout_gives_the_plain_columns_results(name, tokenizer, tmp_path):
    ids = [f"d{i}" for i in range(len(TEXTS) * 2)]
    texts = TEXTS + TEXTS[:6] + ["Ω ünïcödé 文字 " * 20] * 6  # repeats, for a dictionary and for dedup
    layouts = {
        "plain": pa.array(texts),
        "categorical": pa.array(texts).dictionary_encode(),
        "view": pa.array(texts, pa.string_view()),
        "large": pa.array(texts, pa.large_string()),
    }
    results = {}
    for layout, text in layouts.items():
        (tmp_path / layout).mkdir()
        f = _write(tmp_path / layout / "docs.parquet", ids, text)
        manifest, out = _run(tmp_path, name, [f], tokenizer, layout)
        assert manifest.status == "complete"
        results[layout] = pq.read_table(str(out / "docs.parquet"))
        if name == "tokenize":
            results[layout] = (results[layout], pq.read_table(str(out / "packed" / "docs.parquet")))
    for layout in ("categorical", "view", "large"):
        assert results[layout] == results["plain"], layout


class _Counted:
    """A file object that counts the bytes read through it."""

    def __init__(self, f, tally: list[int]) -> None:
        self._f, self._tally = f, tally

    def read(self, *args):
        data = self._f.read(*args)
        self._tally[0] += len(data)
        return data

    def readinto(self, buf):
        n = self._f.readinto(buf)
        self._tally[0] += n or 0
        return n

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()

    def __getattr__(self, name):
        return getattr(self._f, name)


def test_user_files_are_known_by_their_stamp_not_read_whole_to_plan(tmp_path, monkeypatch):
    """A run on plain files planned by hashing every file whole, in the planner, on every run: on an object
    store the whole input downloaded before any unit began, and again by each rerun that found every unit
    done. Now a file is known by its size and storage stamp (one stat); a rerun reads footers only, and a
    file written again (same bytes, new stamp) is redone."""
    import numpy as np

    from airflow_curation.core import storage

    rng = np.random.default_rng(0)
    files = []
    for k in range(3):  # ~1.5 MB each of text that compresses little
        texts = [" ".join(rng.choice(TEXTS[0].split(), 4000)) for _ in range(150)]
        files.append(_write(tmp_path / f"in{k}.parquet", [f"f{k}-{i}" for i in range(150)], pa.array(texts)))
    total = sum(Path(f).stat().st_size for f in files)
    first, _ = _run(tmp_path, "pii", files, "", "stamp")
    assert {u.status for u in first.units} == {"done"}

    read = [0]
    real_open = storage.open_read
    monkeypatch.setattr(storage, "open_read", lambda url, mode="rb": _Counted(real_open(url, mode), read))
    again, _ = _run(tmp_path, "pii", files, "", "stamp")
    assert {u.status for u in again.units} == {"skipped"}
    assert read[0] < total / 10, (read[0], total)  # footers (pyarrow reads a file's last 64 KiB), not files

    Path(files[1]).write_bytes(Path(files[1]).read_bytes())  # written again: a new stamp
    fetched = []
    real_fetch = storage.fetch
    monkeypatch.setattr(storage, "fetch", lambda url: fetched.append(url) or real_fetch(url))
    redo, _ = _run(tmp_path, "pii", files, "", "stamp")
    assert [u.status for u in redo.units] == ["skipped", "done", "skipped"]
    # the unit streamed it (a user's file may be of any size), it did not hold it whole as a lake's shard
    assert files[1] not in fetched


def test_a_user_file_written_again_after_planning_fails_its_unit(tmp_path):
    from airflow_curation.core.fingerprint import file_identity
    from airflow_curation.core.integrity import IntegrityError, read_verified, verify_file

    f = _write(tmp_path / "a.parquet", ["a"], pa.array(["text"]))
    size, identity = file_identity(f)
    assert identity.startswith("stamp:") and size == Path(f).stat().st_size
    assert read_verified(f, identity, "input").to_pybytes() == Path(f).read_bytes()
    _write(tmp_path / "a.parquet", ["b"], pa.array(["other"]))
    for check in (read_verified, verify_file):
        with pytest.raises(IntegrityError, match="written again after this run planned it"):
            check(f, identity, "input")


@pytest.mark.parametrize("name", STAGES)
def test_an_output_folder_that_holds_the_input_is_refused_before_a_byte_is_written(
    name, tokenizer, tmp_path, monkeypatch
):
    """``curation pii a.parquet --output .`` wrote the attrs over ``a.parquet``: the user's text was gone."""
    f = _write(tmp_path / "a.parquet", ["a", "b"], pa.array(TEXTS[:2]))
    before = Path(f).read_bytes()
    monkeypatch.chdir(tmp_path)
    lake = Lake(str(tmp_path / "lake"), "ds")
    for inputs, output in (([f], str(tmp_path)), ([f], str(tmp_path / "x" / "..")), (["a.parquet"], ".")):
        with pytest.raises(ValueError, match="would be written over it"):
            stage_class(name)(lake, {"inputs": inputs, "output_dir": output, **_config(name, tokenizer)}, "r1")
    if name == "tokenize":  # its packed sequences go to <output>/packed/<file>
        (tmp_path / "out" / "packed").mkdir(parents=True)
        inner = _write(tmp_path / "out" / "packed" / "a.parquet", ["a"], pa.array(TEXTS[:1]))
        config = {"inputs": [inner], "output_dir": str(tmp_path / "out"), **_config(name, tokenizer)}
        with pytest.raises(ValueError, match="would be written over it"):
            stage_class(name)(lake, config, "r1")
    assert Path(f).read_bytes() == before
    # another folder is fine
    manifest, out = _run(tmp_path, name, [f], tokenizer, "elsewhere")
    assert manifest.status == "complete" and (out / "a.parquet").exists() and Path(f).read_bytes() == before


def test_plain_inputs_are_files_folders_or_globs_as_ingests_are(tmp_path):
    """A folder or a glob was taken as a file name (`IsADirectoryError`, `invalid input file name 'in*'`): on an
    object store no shell expands a glob. They list as ingest's inputs do, and a run's own output folder inside
    an input folder is not read back as input."""
    from airflow_curation.stages.plain_files import input_files as plain_input_files

    (tmp_path / "data" / "sub").mkdir(parents=True)
    for rel in ("data/b.parquet", "data/a.parquet", "data/sub/c.parquet", "data/.hidden.parquet"):
        _write(tmp_path / rel, [rel], pa.array([TEXTS[0]]))
    (tmp_path / "data" / "notes.txt").write_text("not parquet")
    data = str(tmp_path / "data")
    want = [f"{data}/a.parquet", f"{data}/b.parquet", f"{data}/sub/c.parquet"]
    assert list(plain_input_files([data])) == want
    assert list(plain_input_files([f"{data}/*.parquet", f"{data}/a.parquet"])) == want[:2]  # each file once
    with pytest.raises(FileNotFoundError, match="no Parquet files under"):
        plain_input_files([f"{data}/zz*.parquet"])

    manifest, out = _run(tmp_path, "pii", [data], "", "folder")  # output folder beside: tmp_path/out-pii-folder
    assert sorted(s.shard_id for s in manifest.shards) == ["a", "b", "c"]
    inside = str(tmp_path / "data" / "out")  # results inside the input folder: not inputs on the rerun
    config = {"inputs": [data], "output_dir": inside}
    for status in ("done", "skipped"):
        m = StageRunner(stage_class("pii")(Lake(str(tmp_path / "lake-in"), "ds"), config, "r1")).run()
        assert {u.status for u in m.units} == {status} and len(m.shards) == 3


def test_an_output_folder_is_one_stages_and_a_users_files_in_it_are_not_written_over(tokenizer, tmp_path):
    """``curation preprocess a.parquet --output out`` then ``curation pii a.parquet --output out``: PII's results
    were written over preprocess's (both name theirs ``a.parquet``), without a word; a folder that held a user's
    own ``a.parquet`` lost it the same way. The second stage is refused, naming the first (or the file), before
    anything is written; the same stage again is a rerun."""
    f = _write(tmp_path / "a.parquet", ["a", "b"], pa.array(TEXTS[:2]))
    lake = Lake(str(tmp_path / "lake"), "ds")
    out = tmp_path / "out"

    def run(name: str, output: Path = out):
        config = {"inputs": [f], "output_dir": str(output), **_config(name, tokenizer)}
        return StageRunner(stage_class(name)(lake, config, "r1")).run()

    assert run("preprocess").status == "complete"
    written = (out / "a.parquet").read_bytes()
    for other in ("pii", "dedup", "tokenize"):
        with pytest.raises(ValueError, match=f"{other}: {out} holds the results of preprocess"):
            run(other)
    assert (out / "a.parquet").read_bytes() == written
    assert run("preprocess").status == "complete"  # a rerun of the folder's own stage

    mine = tmp_path / "mine"
    mine.mkdir()
    own = _write(mine / "a.parquet", ["x"], pa.array(["a user's file"]))
    kept = Path(own).read_bytes()
    with pytest.raises(ValueError, match=f"{own} exists and no curation run wrote it"):
        run("pii", mine)
    assert Path(own).read_bytes() == kept
    # `--output results.parquet`, an existing file: a folder is needed (it failed with NotADirectoryError)
    with pytest.raises(ValueError, match=f"pii: the output {own} is a file; the results go in a folder"):
        run("pii", Path(own))
    assert Path(own).read_bytes() == kept


@pytest.mark.parametrize("name", STAGES)
def test_a_run_into_another_output_folder_writes_its_own_results(name, tokenizer, tmp_path):
    """One lake, the same settings, two output folders: the second run found the first's checkpoints matching
    (the folder is no setting of the result), called every unit done and left its folder empty."""
    f = _write(tmp_path / "a.parquet", ["a", "b", "c"], pa.array(TEXTS[:3]))
    lake = Lake(str(tmp_path / "lake"), "ds")
    results = []
    for folder in ("one", "two"):
        config = {"inputs": [f], "output_dir": str(tmp_path / folder), **_config(name, tokenizer)}
        manifest = StageRunner(stage_class(name)(lake, config, "r1")).run()
        assert manifest.status == "complete" and [u.status for u in manifest.units] == ["done"], folder
        results.append(pq.read_table(tmp_path / folder / "a.parquet"))
    assert results[0].equals(results[1])


@pytest.mark.parametrize("name", STAGES)
def test_integer_ids_give_string_ids_as_every_stage_writes_them(name, tokenizer, tmp_path):
    """A user's file with integer ids: dedup wrote them as integers where the other stages wrote strings (their
    results did not join), and enrich failed on them (`Expected bytes, got a 'int' object`, after the model
    ran). Every stage now writes them as the strings they read as; an id of another type is refused by name."""
    f = tmp_path / "a.parquet"
    pq.write_table(pa.table({"id": pa.array([7, 8, 9], pa.int64()), "text": TEXTS[:3]}), f)
    manifest, out = _run(tmp_path, name, [str(f)], tokenizer, "int")
    assert manifest.status == "complete"
    got = pq.read_table(out / "a.parquet")
    assert got.schema.field("id").type == pa.string() and got.column("id").to_pylist() == ["7", "8", "9"]
    bad = tmp_path / "b.parquet"
    pq.write_table(pa.table({"id": [0.5, 1.5], "text": TEXTS[:2]}), bad)
    with pytest.raises(ValueError, match="column 'id' must be a string or integer column, found double"):
        _run(tmp_path, name, [str(bad)], tokenizer, "float")


def test_two_stages_started_at_once_into_one_folder_one_is_refused(tokenizer, tmp_path):
    """Both found the folder free (each checks it when it starts); the owner file is created only where none
    is, so the later one to claim it is refused before its first result. Before, it found the file there, took
    it for its own, and wrote its ``a.parquet`` over the other stage's."""
    f = _write(tmp_path / "a.parquet", ["a", "b"], pa.array(TEXTS[:2]))
    lake = Lake(str(tmp_path / "lake"), "ds")
    out = tmp_path / "out"

    def stage(name: str):
        return stage_class(name)(lake, {"inputs": [f], "output_dir": str(out), **_config(name, tokenizer)}, "r1")

    pii = stage("pii")  # started: the folder is free
    assert StageRunner(stage("preprocess")).run().status == "complete"
    written = (out / "a.parquet").read_bytes()
    with pytest.raises(StageFailed, match=f"pii: {out} was claimed by preprocess"):
        StageRunner(pii).run()
    assert (out / "a.parquet").read_bytes() == written
