"""The gather pod of an Indexed sweep: wait until every shard group has reported, then run the spec.

``python -m airflow_curation.backends.k8s_gather SPEC --result R --wait-dir DIR --groups N``

It is created with the sweep, so the stage finishes in the cluster whether or not anyone polls it
(a DAG that launches with ``wait=False`` and gates on checkpoints still gets its final manifest). It
needs no Kubernetes API access: each sweep pod writes ``DIR/sweep-<i>.json`` when it exits (the jobs
entrypoint's ``--result``); a group whose pods were all killed writes none, so the backend writes it
for them once the sweep Job has failed, and ``--timeout`` bounds the wait in any case. Then the
whole spec runs: every unit the sweep checkpointed is skipped, the rest is redone here, the manifest
is written and the failure budget applied.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from airflow_curation.core import storage

log = logging.getLogger("airflow_curation.k8s_gather")


def sweep_result_uri(result_dir: str, index: int) -> str:
    return storage.join(result_dir, f"sweep-{index}.json")


def missing_groups(result_dir: str, groups: int) -> list[int]:
    return [i for i in range(groups) if not storage.exists(sweep_result_uri(result_dir, i))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_curation.backends.k8s_gather")
    parser.add_argument("spec")
    parser.add_argument("--result", required=True)
    parser.add_argument("--wait-dir", required=True, help="where the sweep pods write sweep-<i>.json")
    parser.add_argument("--groups", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=7 * 86400.0, help="longest wait for the sweep (s)")
    parser.add_argument("--poll", type=float, default=10.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    deadline = time.monotonic() + args.timeout
    reported = None
    while True:
        missing = missing_groups(args.wait_dir, args.groups)
        if not missing:
            log.info("all %d shard groups reported; running the spec whole", args.groups)
            break
        if time.monotonic() >= deadline:
            log.warning("gave up waiting for shard groups %s after %.0fs; their units are redone here",
                        missing, args.timeout)
            break
        if missing != reported:
            log.info("waiting for shard groups %s of %d", missing, args.groups)
            reported = missing
        time.sleep(args.poll)

    from airflow_curation.jobs import main as jobs_main

    return jobs_main(["run", args.spec, "--result", args.result])


if __name__ == "__main__":
    sys.exit(main())
