"""Typed stage settings (one declaration per setting), renamed keys, the stage registry, stable fingerprints."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from airflow_curation.core.layout import Lake
from airflow_curation.stages import ENTRY_POINT_GROUP, stage_class, stage_names
from airflow_curation.stages.base import Stage
from airflow_curation.stages.settings import Setting, Settings, auto_or_bool, size

REPO = Path(__file__).resolve().parents[2]
LAKE = Lake("/tmp/settings-test-lake", "ds")


@pytest.mark.parametrize(
    "kind, given, expected",
    [
        (bool, "true", True),
        (bool, " False ", False),
        (bool, "1", True),
        (bool, 0, False),
        (bool, True, True),
        (int, "4", 4),
        (int, 4.0, 4),
        (int, 7, 7),
        (float, "0.7", 0.7),
        (float, 1, 1.0),
        (str, "x", "x"),
        (str, Path("/m"), "/m"),
        (list, "a.jsonl, b.jsonl", ["a.jsonl", "b.jsonl"]),
        (list, '[{"name": "r"}]', [{"name": "r"}]),
        (list, ("a",), ["a"]),
        (dict, '{"a": 1}', {"a": 1}),
        (dict, {"a": 1}, {"a": 1}),
        (size, "512MiB", 512 << 20),
        (size, "1000000", 1000000),
        (size, 64, 64),
        (auto_or_bool, "auto", "auto"),
        (auto_or_bool, "true", True),
    ],
)
def test_coercion(kind, given, expected):
    assert Setting("x", kind).coerce(given, "here") == expected
    assert Setting("x", kind).coerce(None, "here") is None  # None: "not set", for the stage to read


@pytest.mark.parametrize(
    "kind, given, message",
    [
        (bool, "maybe", "expected a boolean"),
        (int, "4.5", "expected an integer"),
        (int, True, "expected an integer"),
        (float, "fast", "expected a number"),
        (dict, "[1]", "expected a mapping"),
        (dict, "{", "not JSON"),
        (size, "lots", "not a size"),
        (str, 3, "expected a string"),
    ],
)
def test_coercion_errors_name_the_setting(kind, given, message):
    with pytest.raises(ValueError, match=f"here: setting 'x': {message}"):
        Setting("x", kind).coerce(given, "here")


def test_schema_refuses_unknown_and_renamed_keys_and_drops_rendered_nothing():
    s = Settings(
        Setting("mapper", str, "local", choices=("local", "dask")), Setting("n", int, 1), renamed={"engine": "mapper"}
    )
    assert s.defaults == {"mapper": "local", "n": 1}
    with pytest.raises(ValueError, match="st: setting 'engine' was renamed to 'mapper'"):
        s.coerce({"engine": "dask"}, "st")
    with pytest.raises(ValueError, match=r"st: unknown settings \['m'\]"):
        s.coerce({"m": 1}, "st")
    with pytest.raises(ValueError, match="st: mapper must be one of local, dask, not 'ray'"):
        s.coerce({"mapper": "ray"}, "st")
    assert s.coerce({"mapper": "", "n": "None"}, "st", drop_empty=True) == {}
    assert s.coerce({"mapper": "dask", "n": "3"}, "st", drop_empty=True) == {"mapper": "dask", "n": 3}
    assert s.replace("n", default=5).defaults["n"] == 5 and s.extend(Setting("n", int, 9)).defaults["n"] == 9


@pytest.mark.parametrize(
    "stage, old, new, extra",
    [
        ("preprocess", "engine", "mapper", {"input_manifest": "/m"}),
        ("dedup", "engine", "mapper", {"input_manifest": "/m"}),
        ("enrich", "engine", "model_runtime", {"input_manifest": "/m", "task": "embed", "model": "/x"}),
        ("enrich", "executor", "mapper", {"input_manifest": "/m", "task": "embed", "model": "/x"}),
        ("enrich", "engine_kwargs", "model_runtime_kwargs", {"input_manifest": "/m", "task": "embed", "model": "/x"}),
        ("validate", "engine", "query_engine", {"input_manifest": "/m"}),
    ],
)
def test_old_setting_names_are_refused_with_the_new_one(stage, old, new, extra):
    with pytest.raises(ValueError, match=f"{stage}: setting '{old}' was renamed to '{new}'"):
        stage_class(stage)(LAKE, {**extra, old: "local"}, "r1")


@pytest.mark.parametrize(
    "stage, setting, extra",
    [
        ("ingest", "row_group_rows", {"inputs": ["/x"]}),  # 0: one row group per row
        ("ingest", "target_shard_bytes", {"inputs": ["/x"]}),
        ("preprocess", "batch_rows", {"input_manifest": "/m"}),
        ("preprocess", "max_attempts", {"input_manifest": "/m"}),  # 0: no unit ever tried
        ("dedup", "memory_budget", {"input_manifest": "/m"}),
        ("export", "file_size", {"input_manifest": "/m"}),  # 0: ZeroDivisionError while planning
        ("export", "mds_size_limit", {"input_manifest": "/m"}),
        ("enrich", "checkpoint_rows", {"input_manifest": "/m", "task": "embed", "model": "/x"}),
    ],
)
def test_a_count_or_size_of_zero_is_refused_naming_the_setting(stage, setting, extra):
    """Found by running them: ``--row-group-rows 0`` wrote a row group per row, ``--file-size 0`` failed the
    export with ``ZeroDivisionError``; a count or size below 1 is refused when the config is read."""
    for bad in (0, -3):
        with pytest.raises(ValueError, match=f"{stage}: {setting} must be at least 1, not {bad}"):
            stage_class(stage)(LAKE, {**extra, setting: bad}, "r1")
    stage_class(stage)(LAKE, {**extra, setting: 1}, "r1")


@pytest.mark.parametrize(
    "stage, setting, extra",
    [
        ("preprocess", "max_failed_fraction", {"input_manifest": "/m"}),
        ("validate", "max_duplicate_rate", {"input_manifest": "/m"}),
        ("validate", "min_kept_fraction", {"input_manifest": "/m"}),
        ("mix", "tolerance", {"input_manifest": "/m", "targets": {"a": 1.0}}),
    ],
)
def test_a_fraction_outside_0_to_1_is_refused(stage, setting, extra):
    """``--max-failed-fraction -1`` failed a run with no failed unit (`0 of 1 units failed, budget allows -1`),
    and 3 let every unit fail."""
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match=f"{stage}: {setting} must be between 0 and 1, not {bad}"):
            stage_class(stage)(LAKE, {**extra, setting: bad}, "r1")
    stage_class(stage)(LAKE, {**extra, setting: 1}, "r1")


@pytest.mark.parametrize(
    "stage, setting, bad, bound, extra",
    [
        ("preprocess", "workers", -2, "at least 0", {"input_manifest": "/m"}),  # ran in-process, said nothing
        ("pii", "lease_wait_s", -1, "at least 0", {"input_manifest": "/m"}),
        ("pii", "stream_poll_s", -1, "at least 0", {"input_manifest": "/m"}),  # time.sleep(-1) mid-stream
        ("pii", "upstream_wait_s", -5, "at least 0", {"input_manifest": "/m"}),
        ("dedup", "partitions", -1, "at least 0", {"input_manifest": "/m"}),
        ("dedup", "num_perm", 0, "at least 1", {"input_manifest": "/m"}),
        ("dedup", "threshold", 1.5, "between 0 and 1", {"input_manifest": "/m"}),
        ("validate", "part_rows", -5, "at least 0", {"input_manifest": "/m"}),
        ("enrich", "top_p", 1.5, "between 0 and 1", {"input_manifest": "/m", "task": "embed", "model": "/x"}),
        ("mix", "total", 0, "at least 1", {"input_manifest": "/m", "targets": {"a": 1.0}}),
    ],
)
def test_a_number_no_run_can_use_is_refused(stage, setting, bad, bound, extra):
    """Negative waits, workers and partitions, a threshold or probability past 1: accepted without a word, and
    then ignored, or failed deep in a run. Refused when the config is read, where the run is launched too."""
    from airflow_curation.operators.base import CurationStageOperator

    with pytest.raises(ValueError, match=f"{stage}: {setting} must be {bound}, not {bad}"):
        stage_class(stage)(LAKE, {**extra, setting: bad}, "r1")
    op = CurationStageOperator(task_id="t", stage=stage, dataset="ds", lake="/l", config={setting: str(bad)})
    with pytest.raises(ValueError, match=f"{setting} must be {bound}"):
        op.build_config({})


def test_stage_defaults_and_runtime_keys_come_from_the_settings():
    cls = stage_class("dedup")
    assert cls.DEFAULTS["threshold"] == 0.8 and cls.DEFAULTS["mapper"] == "local"
    assert {"mapper", "memory_budget", "workers", "input_manifest", "output_dir"} <= cls.RUNTIME_KEYS
    assert "threshold" not in cls.RUNTIME_KEYS
    a = cls(LAKE, {"input_manifest": "/m"}, "r1")
    b = cls(LAKE, {"input_manifest": "/m", "mapper": "dask", "workers": "8", "memory_budget": "2GiB"}, "r1")
    assert a.fingerprint == b.fingerprint and b.config["memory_budget"] == 2 << 30 and b.config["workers"] == 8
    assert cls(LAKE, {"input_manifest": "/m", "threshold": "0.7"}, "r1").fingerprint != a.fingerprint


def test_fingerprints_did_not_change_with_the_settings_schema():
    """Checkpoints of earlier runs stay valid: the same settings give the same fingerprints as before (unless a
    stage's output changed: then its version and the pinned value change together)."""
    from airflow_curation.stages.dedup.stage import DedupSignaturesStage

    cases = {
        "ingest": ({"inputs": ["/x"]}, "5c78db5a3afe1618"),
        # new on purpose: version 4, compat presets read the text their reference reads (3: structure rules)
        "preprocess": ({"input_manifest": "/m.json"}, "c05b9d25a15309a7"),
        "dedup": ({"input_manifest": "/m.json"}, "20c04ef953e4bce0"),
    }
    for name, (config, fp) in cases.items():
        assert stage_class(name)(LAKE, config, "r").fingerprint == fp, name
    pre = {
        "input_manifest": "/m.json",
        "preset": "gopher,c4",
        "code": True,
        "rules": [{"name": "r", "signal": "n_words", "min": 3}],
    }
    assert (
        stage_class("preprocess")(LAKE, pre, "r").fingerprint == "849633f3d5d6ea12"
    )  # version 4 (compat presets' texts)
    dedup = {"input_manifest": "/m.json", "threshold": 0.7, "num_perm": 64, "verify": True, "only_kept": False}
    assert stage_class("dedup")(LAKE, dedup, "r").fingerprint == "dc33d8f594660a1c"
    # version 2 (spill files named .arrow): a lake signed before re-signs once
    assert DedupSignaturesStage(LAKE, {"params": {"a": 1}, "shards": []}, "r").fingerprint == "15a7c009b53c37cc"


def test_stages_declared_the_older_way_still_work():
    class Legacy(Stage):
        name = "legacy"
        DEFAULTS = {"units": 4, "sleep_s": 0.0, "workers": 3}
        RUNTIME_KEYS = Stage.RUNTIME_KEYS | {"sleep_s"}

    s = Legacy(LAKE, {"units": 5}, "r1")
    assert s.config["units"] == 5 and s.config["sleep_s"] == 0.0 and s.config["workers"] == 3
    assert "sleep_s" in Legacy.RUNTIME_KEYS and "units" not in Legacy.RUNTIME_KEYS
    assert Legacy(LAKE, {"units": 5, "sleep_s": 9}, "r1").fingerprint == s.fingerprint
    with pytest.raises(ValueError, match="unknown settings"):
        Legacy(LAKE, {"unit": 5}, "r1")


def test_the_installed_entry_points_are_pyprojects_and_the_one_registry():
    from importlib.metadata import entry_points

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"][ENTRY_POINT_GROUP]
    installed = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    assert installed == declared  # else: `pip install -e .` again
    assert set(declared) <= set(stage_names())  # (tests may register more in this process)
    for name in declared:
        assert stage_class(name).name == name


def test_operator_refuses_renamed_arguments():
    from airflow_curation.operators.enrich import EnrichOperator
    from airflow_curation.operators.preprocess import PreprocessOperator

    with pytest.raises(TypeError, match="argument 'engine' was renamed to 'mapper'"):
        PreprocessOperator(task_id="p", dataset="ds", lake="/l", input_manifest="/m", engine="local")
    with pytest.raises(TypeError, match="'engine_executor' was renamed to 'mapper'"):
        EnrichOperator(
            task_id="e", dataset="ds", lake="/l", input_manifest="/m", task="embed", model="/x", engine_executor="local"
        )
    op = PreprocessOperator(task_id="p2", dataset="ds", lake="/l", input_manifest="/m", config={"engine": "dask"})
    with pytest.raises(ValueError, match="setting 'engine' was renamed to 'mapper'"):
        op.build_config({})


def test_cli_flags_come_from_the_settings_and_old_flags_still_parse():
    from airflow_curation.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(
        [
            "dedup",
            "--lake",
            "/l",
            "--dataset",
            "d",
            "--no-near",
            "--all-rows",
            "--memory-budget",
            "512MiB",
            "--engine",
            "dask",
        ]
    )
    assert (args.near, args.only_kept, args.memory_budget, args.mapper) == (False, False, 512 << 20, "dask")
    assert not hasattr(args, "threshold")  # not given: the stage's default applies
    args = parser.parse_args(
        ["validate", "--lake", "/l", "--dataset", "d", "--warn-only", "--checks", "c.yaml", "--query-engine", "daft"]
    )
    assert (args.fail_on_error, args.checks_file, args.query_engine) == (False, "c.yaml", "daft")
    args = parser.parse_args(
        [
            "enrich",
            "f.parquet",
            "--output",
            "o",
            "--task",
            "embed",
            "--model",
            "/m",
            "--labels",
            "a,b",
            "--model-runtime-kwargs",
            '{"x": 1}',
        ]
    )
    assert args.labels == ["a", "b"] and args.model_runtime_kwargs == {"x": 1}
    with pytest.raises(SystemExit):
        parser.parse_args(["dedup", "--lake", "/l", "--dataset", "d", "--mapper", "ray"])


@pytest.mark.parametrize(
    "stage, config, refused",
    [
        ("preprocess", {"rules": [{"name": "r", "signal": "num_words", "min": 3}]}, "did you mean 'n_words'"),
        ("preprocess", {"preset": "no_such_preset"}, "no_such_preset"),
        ("quality", {"model": "/m", "rules": [{"name": "r", "signal": "n_words", "min": 3}]}, "read other columns"),
        ("dedup", {"exact": False, "near": False}, "nothing to do"),
        ("dedup", {"bands": 4}, "give both bands and rows"),
        ("mix", {"targets": {}}, "no targets given"),
        ("mix", {"targets": {"a": 1.0}, "unit": "tokens"}, "needs token_column"),
        ("export", {"formats": ["megatron", "jsonl"]}, "formats must be some of"),
        ("decontaminate", {}, "no eval_sets given"),
        (
            "enrich",
            {"task": "embed", "model": "/x", "tensor_parallel_size": 2, "model_runtime": "transformers"},
            "vllm",
        ),
        ("enrich", {"task": "generate", "model": "/x", "prompt_template": "Rewrite:"}, "must contain"),
        ("enrich", {"task": "embed", "model": "/x", "name": "a/b"}, "invalid enrich name"),
        ("enrich", {"task": "embed"}, "no model given"),
        ("validate", {"checks": [{"type": "no_such_check"}]}, "unknown type 'no_such_check'"),
        ("validate", {"checks": "- type: sql\n  query: COPY t TO '/tmp/x'"}, "query refused"),
    ],
)
def test_the_submitting_task_refuses_what_the_settings_alone_make_impossible(stage, config, refused):
    """Checked where the run is launched, before any job (a Slurm array's every task failed on each of these,
    after the queue), with the message the job gives."""
    from airflow_curation.operators.base import CurationStageOperator

    op = CurationStageOperator(task_id="t", stage=stage, dataset="ds", lake="/l", config=config)
    with pytest.raises(ValueError, match=rf"t \({stage}\): .*{re.escape(refused)}"):
        op.build_config({})


def test_the_submitting_task_reads_no_file_the_settings_name():
    """Files, models and block lists may be where only the job runs (a cluster's paths): the submitting task
    leaves them to the job, which checks them before any work."""
    from airflow_curation.operators.base import CurationStageOperator

    gone = "/nonexistent-on-this-host"
    for stage, config in [
        ("preprocess", {"url_blocklist": gone, "url_categories": ["adult"]}),
        ("tokenize", {"tokenizer": f"{gone}/tokenizer.json"}),
        ("quality", {"model": gone}),
        ("decontaminate", {"eval_sets": {"mmlu": [f"{gone}/test.jsonl"]}}),
        ("validate", {"checks": f"{gone}/checks.yaml", "checks_file": f"{gone}/more.yaml"}),
        ("enrich", {"task": "embed", "model": gone}),
    ]:
        op = CurationStageOperator(task_id="t", stage=stage, dataset="ds", lake="/l", config=config)
        assert op.build_config({}) == config


def test_a_flags_help_says_its_bounds(capsys):
    from airflow_curation.cli import main

    with pytest.raises(SystemExit):
        main(["dedup", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Jaccard similarity at which two documents are near duplicates (between 0 and 1) (default: 0.8)" in text
    assert "MinHash permutations (at least 1) (default: 128)" in text
