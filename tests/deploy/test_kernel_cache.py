"""Compiled kernels as deployments get them: ``curation warm`` compiles every cached numba kernel of the
stages into numba's cache, a second process loads them all, and a prebuilt cache seeded into an empty
``NUMBA_CACHE_DIR`` (what the image does for a pod whose root filesystem is read-only) leaves the real
stages nothing to compile: no file is added to the cache by ingest, preprocess (default and compat presets,
on the Dask mapper), dedup, boilerplate or decontaminate on the demo's corpus."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from process_helpers import sample_corpus

from airflow_curation.core.jit import KERNEL_MODULES, SEED_ENV, seed_cache
from airflow_curation.jobs.result import JobResult
from airflow_curation.jobs.spec import JobSpec

REPO = Path(__file__).resolve().parents[2]
CURATION = str(Path(sys.executable).parent / "curation")


def _env(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_") and k != SEED_ENV}
    return {**env, "NUMBA_CACHE_DIR": str(cache), **extra}


def _curation(*args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([CURATION, *args], env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
    if check:
        assert proc.returncode == 0, f"curation {' '.join(args)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()
    }


@pytest.fixture(scope="module")
def warmed(tmp_path_factory) -> tuple[Path, dict, int]:
    """A cold cache warmed once, with --check (which fails: every kernel had to be compiled)."""
    cache = tmp_path_factory.mktemp("kernels") / "cache"
    proc = _curation("warm", "--check", "--json", env=_env(cache), check=False)
    assert "kernels were not in the cache" in proc.stderr
    return cache, json.loads(proc.stdout), proc.returncode


def test_kernel_modules_name_every_module_with_cached_kernels():
    core = REPO / "airflow_curation" / "core"
    with_cache = {p.stem for p in core.glob("*.py") if re.search(r"jit\([^)]*cache=True", p.read_text())}
    assert with_cache == set(KERNEL_MODULES)


def test_a_cold_warm_compiles_every_cached_kernel_and_saves_it(warmed):
    cache, report, rc = warmed
    assert rc == 1, "--check must fail when kernels had to be compiled"
    # every cached kernel was reached by the warm's stages (a kernel it missed would compile in a task)
    missed = [name for name, k in report["by_kernel"].items() if not k["compiled"]]
    assert missed == [] and report["compiled"] == report["kernels"] >= 40
    assert (
        report["not_saved"] == []
        and report["cache_paths"]
        and all(p.startswith(str(cache)) for p in report["cache_paths"])
    )
    assert any(f.endswith(".nbi") for f in _files(cache))


def test_a_second_process_loads_every_kernel_it_needs(warmed):
    cache, _, _ = warmed
    proc = _curation("warm", "--check", "--json", env=_env(cache))
    report = json.loads(proc.stdout)
    assert report["compiled"] == 0 and report["loaded"] > 0


def test_seed_copies_what_the_target_lacks_and_keeps_what_it_has(tmp_path):
    seed, target = tmp_path / "seed", tmp_path / "target"
    (seed / "core_x").mkdir(parents=True)
    (seed / "core_x" / "a.nbi").write_bytes(b"seed-a")
    (seed / "core_x" / "b.nbc").write_bytes(b"seed-b")
    (target / "core_x").mkdir(parents=True)
    (target / "core_x" / "a.nbi").write_bytes(b"own-a")  # compiled here already: not replaced
    assert seed_cache(str(seed), str(target)) == 1
    assert (target / "core_x" / "a.nbi").read_bytes() == b"own-a"
    assert (target / "core_x" / "b.nbc").read_bytes() == b"seed-b"
    assert not list(target.rglob("*.tmp"))
    assert seed_cache(str(seed), str(target)) == 0
    assert seed_cache(str(seed), str(seed)) == 0 and seed_cache(None, str(target)) == 0


def test_stages_on_a_seeded_empty_cache_compile_nothing(warmed, tmp_path):
    seed, _, _ = warmed
    before = _files(seed)
    target = tmp_path / "pod-cache"  # a pod's empty /tmp
    env = _env(target, **{SEED_ENV: str(seed)})
    corpus = sample_corpus(tmp_path / "corpus", 16)
    lake = ["--lake", str(tmp_path / "lake"), "--dataset", "demo"]
    _curation("ingest", str(corpus / "data"), *lake, "--run-id", "a", env=env)
    _curation("preprocess", *lake, "--run-id", "a", env=env)  # the default preset, on the Dask mapper
    _curation("dedup", *lake, "--run-id", "a", env=env)
    _curation("boilerplate", *lake, "--run-id", "a", "--min-documents", "2", env=env)
    evals = tmp_path / "eval.jsonl"
    evals.write_text(json.dumps({"text": (REPO / "README.md").read_text()[:4000]}) + "\n")
    _curation("decontaminate", *lake, "--run-id", "a", "--eval-sets", f"readme={evals}", env=env)
    # the compat presets, in this process, with numba saying what it loads and saves
    compat = _curation(
        "preprocess",
        *lake,
        "--run-id",
        "b",
        "--input-manifest",
        str(tmp_path / "lake" / "demo" / "_manifests" / "a" / "ingest.json"),
        "--preset",
        "gopher_compat,c4_compat,fineweb_compat",
        "--mapper",
        "local",
        env={**env, "NUMBA_DEBUG_CACHE": "1"},
    )
    assert f"data loaded from '{target}" in compat.stdout
    assert "data saved" not in compat.stdout
    assert "numba kernels" not in compat.stderr  # no compile notice (core.jit.compile_notice)
    assert _files(target).keys() == before.keys(), "a stage compiled a kernel the warm did not"
    assert _files(seed) == before, "the prebuilt cache is read, never written"


def test_a_task_on_a_cpu_the_cache_lacks_says_so_and_counts_what_it_compiled(warmed, tmp_path):
    """A job task on a node of another CPU model than the image's (NUMBA_CPU_NAME stands in for the node)
    compiles the kernels its stage runs: its log says which cache lacks what and what to do, its job result
    counts them. On the CPU the cache was warmed for: neither."""
    seed, _, _ = warmed
    corpus = sample_corpus(tmp_path / "corpus", 16)
    lake = {"root": str(tmp_path / "lake"), "dataset": "demo", "snapshot": None}
    _curation(
        "ingest",
        str(corpus / "data"),
        "--lake",
        lake["root"],
        "--dataset",
        "demo",
        "--run-id",
        "a",
        env=_env(tmp_path / "c0"),
    )
    ingest = Path(lake["root"], "demo", "_manifests", "a", "ingest.json")

    def task(name: str, **env: str) -> tuple[JobResult, str]:
        spec = JobSpec("boilerplate", lake, name, {"input_manifest": str(ingest), "min_documents": 2})
        (tmp_path / f"{name}.json").write_text(spec.to_json())
        result = tmp_path / f"{name}-result.json"
        cmd = [
            sys.executable,
            "-m",
            "airflow_curation.jobs",
            "run",
            str(tmp_path / f"{name}.json"),
            "--result",
            str(result),
        ]
        pod = _env(tmp_path / f"pod-{name}", **{SEED_ENV: str(seed)}, **env)  # an empty /tmp, the image's seed
        proc = subprocess.run(cmd, env=pod, capture_output=True, text=True, timeout=600, cwd=REPO)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return JobResult.from_dict(json.loads(result.read_text())), proc.stderr

    other, log = task("other-cpu", NUMBA_CPU_NAME="generic", NUMBA_CPU_FEATURES="")
    assert other.kernels_compiled > 0
    notice = [line for line in log.splitlines() if "numba kernels" in line]
    assert len(notice) == 1 and "WARNING" in notice[0], log[-3000:]
    assert f"compiled {other.kernels_compiled} numba kernels" in notice[0]
    assert f"${SEED_ENV}={seed} lacks for this CPU (generic)" in notice[0] and "curation warm" in notice[0]
    same, log = task("same-cpu")
    assert same.kernels_compiled == 0 and "numba kernels" not in log


def _dockerfile_instructions() -> list[str]:
    text = (REPO / "docker" / "Dockerfile").read_text().replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_image_warms_the_cache_its_read_only_pods_seed_from():
    from airflow_curation.backends import k8s_objects as o

    lines = _dockerfile_instructions()
    warm = next(line for line in lines if line.startswith("RUN") and "curation warm" in line)
    install = next(i for i, line in enumerate(lines) if line.startswith("RUN") and "pip install" in line)
    assert lines.index(warm) > install and "curation warm --check" in warm
    built = set(re.findall(r"NUMBA_CACHE_DIR=(\S+) curation warm", warm))
    assert len(built) == 1
    env = dict(re.findall(r"(\w+)=(\S+)", " ".join(line[4:] for line in lines if line.startswith("ENV"))))
    assert env[SEED_ENV] == built.pop()
    # where the pods read it from: a writable volume of every job pod, whose root filesystem is read-only
    container = o.stage_job("cur-x", "ns", "x", "{}", o.PodSettings(), result_uri="r")["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    writable = [m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")]
    assert any(env["NUMBA_CACHE_DIR"].startswith(path.rstrip("/") + "/") for path in writable)
