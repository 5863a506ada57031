"""``python -m airflow_curation.jobs``: the whole protocol between a backend and the stage code.

* ``run SPEC [--group I/N] [--result R]``: run a stage (or only units ``I::N`` of its plan: one task of
  a Slurm array or pod of a Kubernetes Indexed Job) and write a :class:`JobResult`.
* ``collect SPEC [--result R] [--wait-groups N --group-results DIR] [--attempt N --attempts M [--newest U]]``:
  the step after every group: run no unit, gather the checkpoints into the manifest, count units without one as
  failed, apply the failure budget and the stage's ``finalize``. With ``--wait-groups`` it first waits until
  every group has written its result (a collect pod created together with its sweep). Attempt N < M
  that failed with units lost marks the manifest's relaunch pending (``core/manifest.py``); ``--newest``: the
  run's ``current.json``, whose later attempt counts (a collect pod that waited through a relaunch).
* ``reopen SPEC``: before a relaunch, mark the manifest planned again and clear the failure markers
  of its unfinished units.

Exit codes: 0 done, 1 stage failed, 2 bad spec or arguments.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import traceback

from airflow_curation.core import redact, storage
from airflow_curation.jobs import progress
from airflow_curation.jobs.result import EXIT_BAD_SPEC, EXIT_OK, EXIT_STAGE_FAILED, JobResult
from airflow_curation.jobs.run import LakeFiles
from airflow_curation.jobs.spec import JobSpec

log = logging.getLogger("airflow_curation.jobs")


def run_spec(
    spec: JobSpec, shard_group: tuple[int, int] | None = None, collect: bool = False, relaunchable: bool = False
) -> dict:
    """Run one job spec in this process and return its result summary (raises on failure).

    :param shard_group: ``(i, n)``: run only group ``i`` of ``n`` of the units (one array task).
    :param collect: run no unit; gather the groups' checkpoints into the manifest.
    :param relaunchable: (collect) the run's follower may relaunch this attempt: a failed manifest with
        units lost (no checkpoint, no failure of their own) says a relaunch is pending.
    """
    from airflow_curation.stages import stage_class
    from airflow_curation.stages.base import StageRunner

    stage = stage_class(spec.stage)(spec.lake_obj, spec.config, spec.run_id)
    manifest = StageRunner(stage).run(shard_group=shard_group, collect=collect, relaunchable=relaunchable)
    result = {
        **manifest.summary(stage.manifest_uri),
        "accounting": manifest.accounting,
        "fingerprint": manifest.fingerprint,
    }
    if shard_group is not None:
        result["group"] = f"{shard_group[0]}/{shard_group[1]}"
    return result


def group_result_uri(folder: str, index: int) -> str:
    """Where group ``index`` of a sweep writes its result, so that a waiting collect step can see it."""
    return storage.join(folder, f"group-{index}.json")


def _group(value: str) -> tuple[int, int]:
    try:
        index, count = (int(x) for x in value.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected I/N (e.g. 3/16), got {value!r}") from None
    if not 0 <= index < count:
        raise argparse.ArgumentTypeError(f"group {value!r}: need 0 <= I < N")
    return index, count


def _pick(value: str) -> list[int]:
    try:
        return [int(x) for x in value.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated group indices, got {value!r}") from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m airflow_curation.jobs")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a stage, or one group of its units, from a job spec")
    collect = sub.add_parser("collect", help="after every group: write the manifest, apply the budget")
    reopen = sub.add_parser("reopen", help="before a relaunch: mark the run planned again")
    for sp in (run, collect, reopen):
        sp.add_argument("spec", help="path or URL of the job spec JSON")
    for sp in (run, collect):
        sp.add_argument("--result", help="write the JobResult JSON here ({group}: the group's index)")
        sp.add_argument(
            "--scheduler-address",
            metavar="ADDRESS",
            help="run on this Dask cluster (e.g. the one a Slurm allocation started)",
        )
    run.add_argument(
        "--group",
        "--shard-group",
        dest="group",
        type=_group,
        metavar="I/N",
        help="run only units I::N of the plan (one task of an array or an Indexed Job)",
    )
    run.add_argument(
        "--pick", type=_pick, metavar="G0,G1,...", help="I indexes this list of groups (a relaunch of only some groups)"
    )
    collect.add_argument("--wait-groups", type=int, metavar="N", help="first wait for N group results")
    collect.add_argument("--group-results", metavar="DIR", help="where the groups write group-<i>.json")
    collect.add_argument("--timeout", type=float, default=7 * 86400.0, help="longest wait for the groups (s)")
    collect.add_argument("--poll", type=float, default=10.0)
    collect.add_argument("--attempt", type=int, metavar="N", help="this attempt of the run (1 for the first)")
    collect.add_argument(
        "--attempts",
        type=int,
        metavar="M",
        help="attempts the follower may make: before the last, a failure that lost units says a relaunch is pending",
    )
    collect.add_argument(
        "--newest",
        metavar="URI",
        help="the run's newest-attempt record (current.json): a later attempt there than --attempt counts",
    )
    return p


def _wait_for_groups(folder: str, groups: int, timeout: float, poll: float) -> None:
    # No API access needed: each group writes its result when it ends. A group whose pods were all
    # killed writes none; a relaunch of that group (decided by the operator) does, else the timeout ends
    # the wait and its units count as failed.
    deadline = time.monotonic() + timeout
    reported = None
    while True:
        missing = [i for i in range(groups) if not storage.exists(group_result_uri(folder, i))]
        if not missing:
            log.info("all %d groups reported", groups)
            return
        if time.monotonic() >= deadline:
            log.warning(
                "gave up waiting for groups %s after %.0fs; their unfinished units count as failed", missing, timeout
            )
            return
        if missing != reported:
            log.info("waiting for groups %s of %d", missing, groups)
            reported = missing
        time.sleep(poll)


def _attempt(attempt: int | None, newest_uri: str | None) -> int | None:
    """The attempt a collect gathers: its own, or a later one of the run's record. A Kubernetes collect pod,
    created with attempt *n*, waits through the relaunches of its groups and then collects the newest."""
    if attempt is None or not newest_uri:
        return attempt
    newest = LakeFiles().read_json(newest_uri) or {}
    return max(attempt, int(newest.get("attempt") or 1))


def _kernels_compiled() -> int:
    """The numba kernels this task compiled, logged with what to do where every task compiles them again
    (a node whose CPU the image's kernel cache lacks: ``core.jit.compile_notice``). Read only where a stage
    of this process imported the kernels' numba (``core.jit``): a stage without kernels never imports it."""
    jit = sys.modules.get("airflow_curation.core.jit")
    try:
        return jit.log_compiles(log) if jit is not None else 0
    except Exception as e:  # noqa: BLE001  (a report never costs the task its result)
        log.warning("could not read the kernels' cache statistics: %s", e)
        return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    started = time.time()
    kind = "collect" if args.command == "collect" else ("group" if getattr(args, "group", None) else "run")
    result_uri = getattr(args, "result", None)
    group = args.group if args.command == "run" else None
    if group is not None and args.pick:
        if group[0] >= len(args.pick) or not all(0 <= g < group[1] for g in args.pick):
            print(f"error: --group {group[0]}/{group[1]} does not index --pick {args.pick}", file=sys.stderr)
            return EXIT_BAD_SPEC
        group = (args.pick[group[0]], group[1])
    label = f"{group[0]}/{group[1]}" if group else None
    if result_uri and group:  # a pattern shared by every group of a sweep
        result_uri = result_uri.replace("{group}", str(group[0]))
    try:
        spec = JobSpec.read(args.spec)
        if getattr(args, "scheduler_address", None):
            spec.config = {**spec.config, "scheduler_address": args.scheduler_address}
    except Exception as e:  # noqa: BLE001
        print(f"error: cannot read job spec {args.spec}: {e}", file=sys.stderr)
        JobResult(kind, "failed", EXIT_BAD_SPEC, error=f"bad spec: {e}", group=label).write(result_uri)
        return EXIT_BAD_SPEC
    if args.command == "reopen":
        reopened = progress.reopen(spec.manifest_uri)
        print(json.dumps({"manifest_uri": spec.manifest_uri, "reopened": reopened}, sort_keys=True))
        return EXIT_OK
    if args.command == "collect" and args.wait_groups:
        if not args.group_results:
            print("error: --wait-groups needs --group-results", file=sys.stderr)
            return EXIT_BAD_SPEC
        _wait_for_groups(args.group_results, args.wait_groups, args.timeout, args.poll)
    try:
        attempt = _attempt(getattr(args, "attempt", None), getattr(args, "newest", None))
        most = getattr(args, "attempts", None)
        relaunchable = attempt is not None and most is not None and attempt < most
        summary = run_spec(spec, shard_group=group, collect=args.command == "collect", relaunchable=relaunchable)
    except Exception as e:  # noqa: BLE001
        # The job log and the result file are read by others: secrets masked, bounded.
        print(redact.scrub(traceback.format_exc(), limit=redact.TRACEBACK_LIMIT), file=sys.stderr)
        JobResult(
            kind,
            "failed",
            EXIT_STAGE_FAILED,
            group=label,
            manifest_uri=spec.manifest_uri,
            error=redact.scrub(f"{type(e).__name__}: {e}", limit=redact.TRACEBACK_LIMIT),
            seconds=time.time() - started,
            kernels_compiled=_kernels_compiled(),
        ).write(result_uri)
        return EXIT_STAGE_FAILED
    summary.pop("group", None)
    result = JobResult(
        kind,
        "succeeded",
        EXIT_OK,
        group=label,
        seconds=time.time() - started,
        kernels_compiled=_kernels_compiled(),
        **{k: v for k, v in summary.items() if k in JobResult.__dataclass_fields__},
    )
    result.write(result_uri)
    print(json.dumps(result.to_dict(), sort_keys=True))
    return EXIT_OK
