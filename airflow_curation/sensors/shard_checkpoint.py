"""Gate a downstream task on a stage run's per-shard checkpoints."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_curation.core import storage
from airflow_curation.core.storage_map import StorageMap
from airflow_curation.jobs.follow import Look
from airflow_curation.jobs.gate import CheckpointGate
from airflow_curation.metrics import emit_gate_metrics
from airflow_curation.triggers.job_log import JobLogRelay, unit_line
from airflow_curation.triggers.shard_checkpoint import ShardCheckpointTrigger


class ShardCheckpointSensor(BaseSensorOperator):
    """Wait until every unit of a manifest has a checkpoint record; fail fast when it cannot happen.

    Returns (XCom) ``{manifest_uri, shards, rows, bytes}`` counted from the checkpoint records.

    :param manifest_uri: the stage run's manifest, usually ``launch.output["manifest_uri"]``.
    :param job: optional job handle (``launch.output["job"]``): if the job ends before every unit is
        checkpointed, the sensor fails at once instead of waiting for its timeout; a full gate (``quorum``
        1) relaunches it where its backend calls the failure retryable and attempts remain.
    :param max_failed_fraction: failure budget as a fraction of units; default the manifest's own.
    :param quorum: fraction of units whose checkpoints open the gate (default 1.0: all). With less, the
        summary counts the units done so far, and the next stage must itself wait for the rest.
    :param curation_conn_id: optional ``curation`` connection for storage credentials.
    :param deferrable: wait in the triggerer (default).
    :param poll_interval: seconds between looks (``poke_interval`` when not deferred).
    """

    template_fields: Sequence[str] = ("manifest_uri", "job", "max_failed_fraction", "quorum")
    ui_color = "#f4f0e8"

    def __init__(
        self,
        *,
        manifest_uri: str,
        job: dict[str, Any] | str | None = None,
        max_failed_fraction: float | str | None = None,
        quorum: float | str = 1.0,
        curation_conn_id: str | None = None,
        deferrable: bool = True,
        poll_interval: float = 10.0,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("poke_interval", poll_interval)
        # Each key of the summary is also its own XCom: ``gate.output["manifest_uri"]`` feeds the next stage.
        kwargs.setdefault("multiple_outputs", True)
        super().__init__(**kwargs)
        self.manifest_uri = manifest_uri
        self.job = job
        self.max_failed_fraction = max_failed_fraction
        self.quorum = quorum
        self.curation_conn_id = curation_conn_id
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self._gate: CheckpointGate | None = None
        self._relay: JobLogRelay | None = None
        self._log_offset = 0
        self._storage_map: StorageMap | None = None

    # Rendered values may be JSON text (Jinja) rather than objects (XComArg); accept both.
    def _job(self) -> dict[str, Any] | None:
        if isinstance(self.job, str):
            text = self.job.strip()
            return None if text in ("", "None", "null") else json.loads(text)
        return self.job or None

    def _budget(self) -> float | None:
        if self.max_failed_fraction in (None, ""):
            return None
        budget = float(self.max_failed_fraction)
        if not 0 <= budget <= 1 or math.isnan(budget):
            raise ValueError(f"max_failed_fraction must be within [0, 1], not {budget}")
        return budget

    def _quorum(self) -> float:
        quorum = float(self.quorum)
        if not 0 < quorum <= 1:
            raise ValueError(f"quorum must be within (0, 1], not {quorum}")
        return quorum

    def _storage(self) -> StorageMap:
        """The connection's storage map (resolved as in the trigger), for this task's own looks only."""
        from airflow_curation.hooks.factory import curation_settings

        if self._storage_map is None:
            job = self._job()
            self._storage_map = curation_settings(self.curation_conn_id or (job or {}).get("curation_conn_id")).storage
        return self._storage_map

    def execute(self, context: Any) -> Any:
        with storage.using(self._storage()):
            return self._execute(context)

    def _execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        # One look first: an already finished stage needs no trip to the triggerer.
        verdict = self._look()
        if verdict is not None:
            return self.execute_complete(context, verdict)
        job = self._job()
        self.defer(
            trigger=ShardCheckpointTrigger(
                manifest_uri=self.manifest_uri,
                max_failed_fraction=self._budget(),
                backend=job.get("backend") if job else None,
                backend_options=job.get("backend_options") if job else None,
                job=job,
                not_before=job.get("submitted_at") if job else None,
                curation_conn_id=self.curation_conn_id,
                quorum=self._quorum(),
                poll_interval=self.poll_interval,
                log_offset=self._log_offset,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout)),
        )

    def _look(self) -> dict[str, Any] | None:
        job = self._job()
        if self._gate is None:
            self._gate = CheckpointGate(
                self.manifest_uri,
                self._budget(),
                job.get("submitted_at") if job else None,
                backend=self._job_backend(job) if job else None,
                job=job,
                quorum=self._quorum(),
                relaunch=True,  # in the worker: a full gate relaunches (a quorum gate never does)
                log_offset=self._log_offset,
            )
        look = self._gate.look()
        if look.job is not None:
            # The newest attempt, also when another task (an earlier try of this gate) relaunched the job.
            self.job, self._log_offset = self._gate.follower.handle, self._gate.follower.log_offset
            self._relay_job_log(look.job)
            if look.job.relaunched:
                self.log.warning("Job %s: %s", look.job.record.job_id, look.job.status.message)
        if look.progress is None:
            return None  # relaunched: the next look gates the new attempt
        for unit_id, info in sorted(look.new_units.items()):
            self.log.info("%s", unit_line(look.progress.stage, unit_id, info))
        self.log.info("%s", look.progress.line())
        return look.verdict

    def _relay_job_log(self, job_look: Look) -> None:
        """The job's log since the last look into this task's log (the trigger goes on from there)."""
        if self._relay is None:
            self._relay = JobLogRelay(self.log, str(job_look.record.job_id))
        self._relay.feed(job_look.text)
        if job_look.status.state.finished:
            self._relay.flush()

    @staticmethod
    def _job_backend(job: dict[str, Any]):
        from airflow_curation.hooks.factory import backend_for

        return backend_for(job.get("backend", "local"), job.get("backend_options", {}))

    def poke(self, context: Any) -> bool | PokeReturnValue:
        with storage.using(self._storage()):
            return self._poke(context)

    def _poke(self, context: Any) -> bool | PokeReturnValue:
        verdict = self._look()
        if verdict is None:
            return False
        return PokeReturnValue(is_done=True, xcom_value=self.execute_complete(context, verdict))

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        with storage.using(self._storage()):
            return self._complete(context, event)

    def _complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("status") == "relaunch":
            # The trigger saw a relaunch due: look here, in the worker, where the gate relaunches the job
            # (or follows another follower's relaunch), then gate the new attempt (defers again).
            self.job, self._gate = event["job"], None
            self._log_offset = int(event.get("log_offset") or self._log_offset)  # what the trigger relayed
            return self._execute(context)
        stage = event.get("stage") or _stage_of(self.task_id)
        if "total" in event:  # a verdict of decide(), not a read error
            emit_gate_metrics({**event, "stage": stage})
        if event.get("status") != "done":
            if "total" in event:
                # Over budget, a failed run, or its job ended short: running the gate again cannot change
                # that (rerun the launch task), so no retries.
                raise AirflowFailException(f"{stage} gate: {event.get('reason', event)}")
            raise AirflowException(f"{self.manifest_uri}: {event.get('reason', event)}")
        self.log.info("%s", verdict_line(stage, event))
        return event["summary"]


def _stage_of(task_id: str) -> str:
    """The stage a gate's task id names: ``dedup.checkpoints`` (a stage's TaskGroup), or ``dedup_checkpoints``."""
    group, dot, _ = task_id.rpartition(".")
    return group if dot else task_id.removesuffix("_checkpoints").removesuffix("_first_shards")


def verdict_line(stage: str, event: dict[str, Any]) -> str:
    """The open gate's sentence: how many units are checkpointed, what they hold and where the manifest is."""
    summary = event.get("summary") or {}
    held = f"{summary.get('rows') or 0:,} rows in {summary.get('shards') or 0:,} shards ({_size(summary.get('bytes'))})"
    failed = int(event.get("failed") or 0)
    if event.get("partial"):
        return (
            f"{stage} has {event.get('done', 0)} of {event.get('total', 0)} units checkpointed, enough to start "
            f"the next stage on them: {held} so far; manifest {summary.get('manifest_uri')}."
        )
    total = int(event.get("total") or 0)
    units = (
        f"{total - failed} of {total} units checkpointed, {failed} failed within the failure budget"
        if failed
        else f"all {total} units checkpointed"
    )
    return f"{stage} is done: {units}; {held}; manifest {summary.get('manifest_uri')}."


def _size(nbytes: int | None) -> str:
    n, unit = float(nbytes or 0), "bytes"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if n < 1024:
            break
        n, unit = n / 1024, bigger
    return f"{n:,.0f} bytes" if unit == "bytes" else f"{n:,.1f} {unit}"
