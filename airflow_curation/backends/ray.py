"""Ray backend: the job runs on an existing Ray cluster, submitted through the Ray Job Submission API.

The job is the same command as everywhere (``python -m airflow_curation.jobs run SPEC --result R``); its
driver runs on the cluster's head and joins the cluster, so an enrich job's engine actors are scheduled
on the cluster's GPUs. The spec and the result live in the lake's ``_jobs/`` folder (the cluster must
reach the lake anyway). A handle is the submission id plus the dashboard address, so a restarted worker
or the triggerer reconnects with nothing else.

Secrets: a job's ``runtime_env`` (entrypoint, ``env_vars``) is shown to anyone who reaches the
dashboard or the job API, and Ray has no secret store to refer to instead. So no credential
(:mod:`airflow_curation.core.credentials` says which variables are) is ever sent: the cluster reads
the lake with credentials of its own (in its nodes' environment, as the chart's RayCluster and the
docker-compose Ray head have them). The lake's storage options (``CURATION_STORAGE_OPTIONS_*``), which
the Airflow layer adds to ``env`` of every job, are left out with a warning; any other credential in
``env`` or ``runtime_env`` (``AWS_SECRET_ACCESS_KEY``, ``HF_TOKEN``, a URI with a password) is refused
when the backend is built, since the job would run without what its configuration asked for.
"""

from __future__ import annotations

import logging
import shlex
import time
import uuid
from collections.abc import Sequence
from typing import Any

from airflow_curation.backends.base import Backend, JobHandle, JobState, JobStatus, slice_log, status_from_result
from airflow_curation.core import credentials, storage
from airflow_curation.core.storage_map import SOURCE_ENV
from airflow_curation.jobs import groups as grp
from airflow_curation.jobs.spec import JobSpec

log = logging.getLogger(__name__)

_STATES = {
    "PENDING": JobState.PENDING,
    "RUNNING": JobState.RUNNING,
    "SUCCEEDED": JobState.SUCCEEDED,
    "FAILED": JobState.FAILED,
    "STOPPED": JobState.CANCELLED,
}


def _storage_options(name: str) -> bool:
    return name.upper().startswith(credentials.STORAGE_OPTIONS_PREFIX)


class RayJobBackend(Backend):
    """:param address: the cluster's dashboard / job server, e.g. ``http://head:8265`` (where the job's
        dashboard link points; the factory resolves it and its default).
    :param python: interpreter on the cluster that has airflow-curation installed (default ``python``).
    :param env: extra environment variables of the job, sent in its runtime environment (visible in the
        dashboard): not secrets. Storage options (``CURATION_STORAGE_OPTIONS_*``) are left out; any other
        credential is refused (see the module's docstring).
    :param runtime_env: a Ray runtime environment (``pip``, ``working_dir``...), merged with ``env``; the
        same goes for its ``env_vars``.
    :param agent_wait_s: how long to retry a submission that the cluster refuses because its job agent is
        not up yet (a freshly started head).
    :param client: the Job Submission client every call goes through (``submit_job``, ``get_job_info``,
        ``get_job_logs``, ``stop_job``): :func:`airflow_curation.hooks.factory.ray_client` builds it, from a
        ``ray_conn_id`` connection (address, token, headers) or the address.
    """

    name = "ray"
    _unshared_options = ("client",)  # a live client: the triggerer's factory builds its own

    def __init__(
        self,
        address: str | None = None,
        python: str = "python",
        env: dict[str, str] | None = None,
        runtime_env: dict[str, Any] | None = None,
        agent_wait_s: float = 120.0,
        client: Any = None,
    ) -> None:
        if client is None:
            raise ValueError(
                "RayJobBackend needs a client: build the backend with "
                "airflow_curation.hooks.factory.backend_for('ray', options), which makes one"
            )
        self.client = client
        self.address = address or getattr(client, "address", None) or ""
        self.python = python
        self.env = env or {}
        self.runtime_env = runtime_env or {}
        self.agent_wait_s = agent_wait_s
        env_vars = {**self.runtime_env.get("env_vars", {}), **self.env}
        refused = sorted(k for k in credentials.split(env_vars)[1] if not _storage_options(k))
        if refused:
            raise ValueError(
                f"{', '.join(refused)}: credentials cannot be sent to a Ray job (its runtime_env is readable "
                "by anyone who reaches the dashboard or the job API); give the cluster's nodes these "
                "credentials in their own environment (a Secret of the RayCluster, the head's environment)"
            )

    def dashboard_url(self, job_id: str) -> str:
        return f"{self.address.rstrip('/')}/#/jobs/{job_id}"

    def launch(
        self, spec: JobSpec, groups: Sequence[int] | None = None, *, previous: JobHandle | None = None
    ) -> JobHandle:
        """One Ray job runs the whole stage (its engine spreads over the cluster): no groups to pick."""
        job_id = f"curation-{spec.stage}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
        folder = storage.join(spec.lake_obj.jobs_dir(spec.run_id, spec.stage), job_id)
        spec_uri, result_uri = storage.join(folder, "spec.json"), storage.join(folder, "result.json")
        storage.write_bytes(spec_uri, spec.to_json().encode())
        entrypoint = shlex.join(grp.command(grp.run_args(spec_uri, result_uri), self.python))
        runtime_env = self.job_runtime_env()
        client = self.client
        deadline = time.monotonic() + self.agent_wait_s
        while True:
            try:
                client.submit_job(
                    entrypoint=entrypoint,
                    submission_id=job_id,
                    runtime_env=runtime_env,
                    metadata={"stage": spec.stage, "run_id": spec.run_id},
                )
                break
            except RuntimeError as e:
                # A fresh cluster answers before its job agent is up; the same submission id makes the retry
                # safe (a second submit of an accepted id is refused, not duplicated).
                if "No available agent" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(2)
        return {
            "backend": self.name,
            "job_id": job_id,
            "address": self.address,
            "result": result_uri,
            "spec": spec_uri,
            "manifest_uri": spec.manifest_uri,
            "attempt": int((previous or {}).get("attempt", 0)) + 1,
            "dashboard_url": self.dashboard_url(job_id),
            "log": self.dashboard_url(job_id),
        }

    def job_runtime_env(self) -> dict[str, Any]:
        """The runtime environment a job is submitted with: ``runtime_env`` plus ``env``, without the
        storage options (the only credentials the constructor lets through; see the module's docstring)."""
        runtime_env = dict(self.runtime_env)
        env_vars = {**runtime_env.get("env_vars", {}), **self.env}
        withheld = sorted(credentials.split(env_vars)[1])  # the constructor let only storage options through
        if withheld:
            log.warning(
                "not sending %s to Ray (a runtime_env is readable in its dashboard); the cluster "
                "reads the lake with its own credentials",
                ", ".join(withheld),
            )
        # Where the withheld storage options were configured would only mislead the job's errors.
        runtime_env["env_vars"] = {k: v for k, v in env_vars.items() if k not in withheld and k != SOURCE_ENV}
        return runtime_env

    def status(self, handle: JobHandle) -> JobStatus:
        try:
            info = self.client.get_job_info(handle["job_id"])
        except Exception as e:  # noqa: BLE001 - an unreachable cluster is "unknown", not "failed"
            return JobStatus(JobState.UNKNOWN, f"cannot reach Ray at {self.address}: {e}")
        state = _STATES.get(str(getattr(info.status, "value", info.status)), JobState.UNKNOWN)
        message = info.message or ""
        if state.finished and state != JobState.CANCELLED:
            done = status_from_result(self._result(handle), message)
            if done is not None:
                return done
            if state == JobState.SUCCEEDED:
                return JobStatus(
                    JobState.FAILED, f"Ray job {handle['job_id']} ended without a result at {handle['result']}"
                )
        return JobStatus(state, message)

    def spec_of(self, handle: JobHandle) -> JobSpec:
        return JobSpec.read(handle["spec"])

    def cancel(self, handle: JobHandle) -> None:
        try:
            self.client.stop_job(handle["job_id"])
        except Exception:  # noqa: BLE001 - already gone: cancelling is idempotent
            pass

    def logs(self, handle: JobHandle, offset: int = 0) -> tuple[str, int]:
        try:
            text = self.client.get_job_logs(handle["job_id"])
        except Exception:  # noqa: BLE001
            return "", offset
        # Ray returns the log whole, as text: offsets count its UTF-8 bytes, as for every backend.
        return slice_log(text.encode("utf-8", "surrogateescape"), offset)
