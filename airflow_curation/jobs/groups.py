"""One shape for a stage spread over groups, whatever runs them (Slurm array tasks, Kubernetes Indexed
Job pods): the ``python -m airflow_curation.jobs`` arguments of a whole run, of one group, and of the
collect step after the groups. An argument is a literal, or a tuple of literals and the launcher's own
placeholders (the array or completion index, the attempt), which each launcher renders its way."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from airflow_curation.core.manifest import ManifestHead
from airflow_curation.jobs.spec import JobSpec

log = logging.getLogger(__name__)

Arg = str | tuple[Any, ...]
GROUP = "{group}"  # in a group's --result: the CLI puts the group's index there


def group_count(requested: int, cap: int | None = None) -> int:
    """Groups a launch spreads over: ``requested``, at most ``cap`` (e.g. Slurm's MaxArraySize)."""
    return max(1, min(requested, cap) if cap else requested)


# A group (one task process) reads at least this many bytes of shards where the run has them: a task costs
# 0.8-2 CPU-s before its first unit (interpreter, imports, plan), and 64 MiB of zstd Parquet (~210 MB of text,
# ~2.5 CPU-s of preprocess) is more than that; the same floor as ingest's units (stages/ingest/sizing.py).
MIN_GROUP_BYTES = 64 * 1024 * 1024


def sized_groups(cap: int, shards: int, total_bytes: int, min_bytes: int = MIN_GROUP_BYTES) -> int:
    """Groups for a run over ``shards`` upstream shards holding ``total_bytes``: at most ``cap`` and one per
    shard, and few enough that each group reads ``min_bytes`` or more (0: no floor), so small shards go
    several to a task (each still its own unit: checkpointed and retried alone)."""
    groups = min(cap, shards) if shards else cap
    if min_bytes > 0:
        groups = min(groups, total_bytes // min_bytes)
    return max(1, groups)


def groups_for_input(cap: int, input_manifest: str | None, min_bytes: int = MIN_GROUP_BYTES) -> int | None:
    """:func:`sized_groups` of the run's input manifest (its head: counts and bytes, no shard list), what
    every launcher of an array sizes it by (the Kubernetes sweep's default, the Slurm array's ``shard_groups``
    as a cap); None without an input manifest, or when its head cannot be read (the job reads it itself)."""
    if not input_manifest:
        return None
    try:
        head = ManifestHead.read(input_manifest)
    except Exception as e:  # noqa: BLE001 - sizing is a hint; the job reads the manifest and says what is wrong
        log.warning("cannot size the groups from %s (%s)", input_manifest, e)
        return None
    if not head.shard_count:
        return None
    return sized_groups(cap, head.shard_count, head.bytes, min_bytes)


def with_min_units(spec: JobSpec, groups: int) -> JobSpec:
    """The spec a launch over ``groups`` groups runs: ``min_units`` raised to ``groups``, so that a stage that
    sizes its own units (ingest) splits even a small input into one unit per group where it has the files
    for it, and no array task or indexed pod is left without work. One group: the spec as it is."""
    if groups <= 1:
        return spec
    floor = max(groups, int(spec.config.get("min_units") or 1))
    return dataclasses.replace(spec, config={**spec.config, "min_units": floor})


def run_args(spec: str, result: Arg) -> list[Arg]:
    """The whole stage in one process (one group: plan, units, manifest, budget, finalize)."""
    return ["run", spec, "--result", result]


def group_args(spec: str, result: Arg, index: Any, groups: int, pick: Sequence[int] | None = None) -> list[Arg]:
    """Group ``index`` of ``groups`` (a block of units: ``core.manifest.group_range``). ``result`` should
    contain :data:`GROUP`.
    With ``pick``, ``index`` counts through those groups only (a relaunch of some groups)."""
    args = ["run", spec, "--result", result, "--group", (index, f"/{groups}")]
    if pick is not None:
        args += ["--pick", ",".join(str(int(g)) for g in pick)]
    return args


def collect_args(
    spec: str,
    result: Arg,
    wait: tuple[str, int, float] | None = None,
    attempts: tuple[Arg, int] | None = None,
    newest: str | None = None,
) -> list[Arg]:
    """The step after every group; ``wait=(folder, groups, timeout_s)``: first wait for the groups'
    results (a collect started together with its groups, not after them). ``attempts=(this attempt, attempts
    the follower may make)``: a failure before the last that lost units says a relaunch is pending.
    ``newest``: the run's newest-attempt record (``current.json``), for a collect that may outlive its attempt
    (a Kubernetes collect pod waits through relaunches of its groups): a newer attempt there counts."""
    args = ["collect", spec, "--result", result]
    if attempts is not None:
        attempt, most = attempts
        args += ["--attempt", attempt, "--attempts", str(int(most))]
        if newest:
            args += ["--newest", newest]
    if wait is not None:
        folder, groups, timeout = wait
        args += ["--wait-groups", str(int(groups)), "--group-results", folder, "--timeout", str(int(timeout))]
    return args


def command(args: Sequence[Arg], python: str = "python") -> list[str]:
    """argv of the one command every launcher runs, ``PYTHON -m airflow_curation.jobs ARGS`` (literal
    arguments only; a launcher with placeholders renders them its own way)."""
    return [python, "-m", "airflow_curation.jobs", *render(args, {})]


def render(args: Sequence[Arg], placeholders: dict[Any, str]) -> list[str]:
    """Arguments as plain strings, each placeholder replaced by its text."""
    return [
        "".join(placeholders.get(p, p) if not isinstance(p, str) else p for p in (a if isinstance(a, tuple) else (a,)))
        for a in args
    ]
