"""``curation <stage> --backend NAME [--backend-options ...]``: submit the stage to a backend without Airflow.

The same backend classes the operators use (local, slurm, kubernetes, ray), built by the same factory
(:func:`airflow_curation.hooks.factory.backend_for`: a login node or a cluster from its connection); the
job gets the storage options of this process's environment through its own (a ``0600`` file on Slurm, a
Secret on Kubernetes; see core/credentials.py), never in its spec. The command follows the job until it
ends (its log streamed to stderr), relaunches it where the backend allows, and cancels it on Ctrl-C/SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import Any

from airflow_curation.backends import Backend, JobState
from airflow_curation.core import storage_map
from airflow_curation.jobs.follow import Follower
from airflow_curation.jobs.spec import JobSpec

BACKENDS = ("local", "slurm", "kubernetes", "ray")


def add_backend_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        help="submit the stage as a job to this backend and follow it (default: run it in this process)",
    )
    p.add_argument(
        "--backend-options",
        type=backend_options,
        default={},
        metavar="JSON|K=V,...",
        help='the backend\'s options: JSON (\'{"shard_groups": 4, "partition": "debug"}\') or key=value pairs '
        "(shard_groups=4,partition=debug; values read as JSON where they parse)",
    )


def backend_options(text: str) -> dict[str, Any]:
    """``--backend-options``: a JSON object, or ``k=v`` pairs separated by commas (each value JSON if it
    parses, else a string)."""
    text = text.strip()
    if not text:
        return {}
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"not a JSON object: {e}") from None
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError("must be a JSON object")
        return value
    out: dict[str, Any] = {}
    for pair in text.split(","):
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(f"expected key=value, got {pair!r}")
        try:
            out[key.strip()] = json.loads(raw)
        except ValueError:
            out[key.strip()] = raw
    return out


def build_backend(name: str, options: dict[str, Any]) -> Backend:
    """Backend ``name`` built by the factory, as the operators build it (clients and transports come from
    connections or client options there: ``slurm_conn_id``, ``kubernetes_conn_id``, ``in_cluster``...);
    the job's environment gets this process's storage options. Airflow is imported only where a
    connection or client is asked for."""
    # The Airflow layer's module, the one exception to the layers (pyproject.toml's import contracts):
    # its top level imports no Airflow, so local, Slurm-here and Ray submissions run without Airflow.
    from airflow_curation.hooks.factory import backend_for

    smap = storage_map.current()
    # Ray: a runtime_env is readable by the dashboard's users (core/credentials.py).
    return backend_for(name, options, storage=smap if name != "ray" else None)


def submit_and_follow(spec: JobSpec, name: str, options: dict[str, Any], poll_s: float = 2.0) -> dict[str, Any]:
    """Submit ``spec`` to backend ``name`` and follow it to its end: the job's result summary (raises on
    failure with the backend's message)."""
    backend = build_backend(name, options)
    follower = Follower(backend, backend.submit(spec))
    print(f"submitted {spec.stage} job {follower.record.job_id} to {name} ({follower.record.where})", file=sys.stderr)

    def stop(signum, _frame):
        print(f"signal {signum}: cancelling job {follower.record.job_id}", file=sys.stderr)
        follower.cancel()
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        while True:
            look = follower.look()
            if look.text:
                sys.stderr.write(look.text)
            if look.relaunched:
                print(f"relaunched as attempt {look.record.attempt}: {look.status.message}", file=sys.stderr)
                continue
            if look.ended:
                status = look.status
                if status.state != JobState.SUCCEEDED:
                    raise RuntimeError(f"{spec.stage} job {look.record.job_id} {status.state.value}: {status.message}")
                return {**(status.result or {}), "job_id": look.record.job_id, "backend": name}
            time.sleep(poll_s)
    except KeyboardInterrupt:
        print(f"interrupted: cancelling job {follower.record.job_id}", file=sys.stderr)
        follower.cancel()
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
