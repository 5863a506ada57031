"""The base stage operator: build a job spec, submit it through a backend, follow it durably.

Durability comes from Airflow 3.3's :class:`~airflow.sdk.ResumableJobMixin`: the job handle is written
to the task state store right after submission, so a retry after a worker crash reconnects to the
running job (or takes the result of a finished one) instead of submitting a second job. How the
operator then waits is its own choice, made in :meth:`poll_until_complete`: deferred to a
:class:`StageJobTrigger` (default), polling in the worker, or not at all (``wait=False``: a
:class:`~airflow_curation.sensors.shard_checkpoint.ShardCheckpointSensor` gates downstream instead).
"""

from __future__ import annotations

import inspect
import json
import socket
import time
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, ResumableJobMixin
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from airflow_curation.backends import Backend, JobState, JobStatus
from airflow_curation.core import storage
from airflow_curation.core.layout import Lake, curation_run_id, sanitize_run_id
from airflow_curation.hooks.factory import CurationSettings, backend_for, curation_settings, handle_options
from airflow_curation.jobs.follow import Follower, Look
from airflow_curation.jobs.run import RunRecord
from airflow_curation.jobs.spec import JobSpec
from airflow_curation.links.curation import CurationJobLogLink, CurationManifestLink
from airflow_curation.operators.lineage import StageLineageMixin
from airflow_curation.triggers.stage_job import StageJobTrigger

SUMMARY_KEYS = ("manifest_uri", "shards", "rows", "bytes")


def _json_safe(value: Any) -> Any:
    """``value`` as plain JSON (params may hold dates or other objects): what a manifest can store."""
    return json.loads(json.dumps(value, default=str))


def run_context(
    context: Any, settings: CurationSettings, conn_id: str | None, lake: Lake, backend: str | None
) -> dict[str, Any]:
    """What one run was launched with, as its report shows it: the DAG run, its effective params, the conf
    keys Airflow did not apply (their value differs from the param's), the connection's non-secret values
    and the rendered lake. Storage options and backend option values stay out (they may hold secrets)."""
    get = context.get if hasattr(context, "get") else (lambda _k, _d=None: _d)
    dag_run = get("dag_run")
    params = dict(get("params") or {})
    conf = dict(getattr(dag_run, "conf", None) or {})
    not_applied = {k: {"conf": v, "used": params[k]} for k, v in conf.items() if k in params and params[k] != v}
    logical = get("logical_date")
    return _json_safe(
        {
            "dag_id": getattr(dag_run, "dag_id", None),
            "airflow_run_id": get("run_id"),
            "run_type": str(getattr(dag_run, "run_type", "") or "") or None,
            "logical_date": logical.isoformat() if hasattr(logical, "isoformat") else logical,
            "params": params,
            "conf_not_applied": not_applied,
            "connection": {
                "conn_id": conn_id,
                "lake": settings.lake,
                "backend": settings.backend,
                "backend_options": sorted(settings.backend_options),
            },
            "lake": lake.to_dict(),
            "backend": backend or settings.backend or "local",
        }
    )


# Backend options and handle keys that say where a job runs, in the order a person would name them.
WHERE_KEYS = (
    "cluster",
    "ssh_host",
    "host",
    "address",
    "namespace",
    "partition",
    "slurm_conn_id",
    "kubernetes_conn_id",
    "ssh_conn_id",
)


def launched_line(stage: str, record: RunRecord, options: dict[str, Any]) -> str:
    """The launch task's sentence: which job, where it runs (backend and host or cluster), where to follow it,
    and the manifest it will write.

    :param options: the backend's options as the task resolved them (connection ids, hosts; no secrets).
    """
    found = {
        **{k: v for k, v in options.items() if k in WHERE_KEYS},
        **{k: v for k, v in record.extra.items() if k in WHERE_KEYS},
    }
    where = ", ".join(f"{k.replace('_', ' ')} {found[k]}" for k in WHERE_KEYS if found.get(k))
    if record.backend == "local" and not where:
        where = f"host {socket.gethostname()}"
    link = record.url or record.log or record.extra.get("job_dir")
    return (
        f"Launched the {stage} job {record.job_id} on the {record.backend} backend ({where or 'its default'}); "
        f"follow it at {link or 'the gate task (no log location)'}; it writes {record.manifest_uri}."
    )


def summary_of(result: dict[str, Any] | None) -> dict[str, Any]:
    """Only the pointer and the counts go to XCom, whatever else the job reported."""
    result = result or {}
    return {k: result.get(k) for k in SUMMARY_KEYS}


class CurationStageOperator(StageLineageMixin, ResumableJobMixin, BaseOperator):
    """Run one curation stage as a backend job.

    A subclass is small: its ``stage``, its arguments that are stage settings (``settings_params``, also in
    ``template_fields``) and anything Airflow-specific. The stage's settings check and type the config
    (:meth:`build_config`), so a setting is declared once, in the stage.

    :param stage: the stage name (subclasses set it).
    :param lake: root URL of the lake (a folder or ``s3://...``); default the connection's.
    :param dataset: dataset name inside the lake.
    :param snapshot: snapshot partition (``"{{ ds }}"`` gives one partition per logical date).
    :param config: the stage's settings (see the stage's ``SETTINGS``); templated values are coerced.
    :param backend: where the job runs: ``local`` (default), ``slurm``, ``kubernetes``...
    :param backend_options: the backend's constructor options, merged over the connection's (a dict, or
        its JSON text from a template); ``{"slurm_conn_id": ...}`` or
        ``{"kubernetes_conn_id": ...}`` take them (and the client) from an Airflow connection of that
        type, resolved wherever the job is submitted or followed (:mod:`airflow_curation.hooks.factory`).
    :param curation_conn_id: optional ``curation`` connection with lake, backend and storage options.
    :param run_id: names the manifest; default the snapshot and how the run started
        (:func:`~airflow_curation.core.layout.curation_run_id`: ``2026-11-30__scheduled``).
    :param wait: ``True``: finish when the job finishes and return ``{manifest_uri, shards, rows,
        bytes}``; ``False``: return ``{manifest_uri, job}`` once the job is launched.
    :param deferrable: wait in the triggerer instead of holding a worker slot (default).
    :param durable: keep the job handle in the task state store so a retry reconnects.
    :param poll_interval: seconds between status polls.
    :param lease_wait_s: how long the job waits for another run of this stage on the same snapshot to
        finish before it refuses (one run per stage and snapshot holds the lake's lease).
    :param optional: skip the task (not fail) when the stage has nothing to do here: the setting its stage
        declares as ``OPTIONAL_WITHOUT`` (a model, a tokenizer, evaluation sets) renders empty, or its
        ``input_manifest`` does (no upstream stage ran). A pipeline sets it for its optional stages.
    """

    stage: str = ""
    # Arguments of the subclass that are stage settings: rendered "nothing" ("", "None") leaves the stage's
    # default; any other value is checked and typed by the stage's settings. Derived from the subclass's
    # keyword-only ``__init__`` arguments (all but this base's and ``airflow_params``), and templated.
    settings_params: tuple[str, ...] = ()
    # Arguments of the subclass that are not stage settings (a link URL, a skip switch): templated unless
    # they are ``bool``.
    airflow_params: tuple[str, ...] = ()
    # Arguments renamed with the stage settings (old -> new): refused with the new name.
    renamed_params: dict[str, str] = {}
    # The per-operator skip switches of earlier versions, all one declared thing now (``optional``).
    SKIP_SWITCHES = {
        "skip_without_model": "optional",
        "skip_without_tokenizer": "optional",
        "skip_without_eval_sets": "optional",
        "skip_without_input": "optional",
    }
    external_id_key = "curation_job"
    template_fields: Sequence[str] = ("lake", "dataset", "snapshot", "config", "backend", "backend_options", "run_id")
    template_fields_renderers = {"config": "json", "backend_options": "json"}
    operator_extra_links = (CurationManifestLink(), CurationJobLogLink())
    ui_color = "#e8f4e8"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A setting is declared once in the operator: as a typed, documented keyword of its ``__init__``.
        super().__init_subclass__(**kwargs)
        if "__init__" not in cls.__dict__:
            return
        own = [
            p
            for p in inspect.signature(cls.__init__).parameters.values()
            if p.kind is p.KEYWORD_ONLY and p.name not in _BASE_PARAMS
        ]
        if "settings_params" not in cls.__dict__:
            cls.settings_params = tuple(p.name for p in own if p.name not in cls.airflow_params)
        if "template_fields" not in cls.__dict__:
            templated = [p.name for p in own if p.annotation not in (bool, "bool")]
            cls.template_fields = tuple(dict.fromkeys((*cls.template_fields, *templated)))

    def __init__(
        self,
        *,
        dataset: str,
        lake: str | None = None,
        snapshot: str | None = None,
        config: dict[str, Any] | None = None,
        stage: str | None = None,
        backend: str | None = None,
        backend_options: dict[str, Any] | str | None = None,
        curation_conn_id: str | None = None,
        run_id: str | None = None,
        wait: bool = True,
        deferrable: bool = True,
        durable: bool = True,
        poll_interval: float = 5.0,
        lease_wait_s: float = 6 * 3600.0,
        optional: bool = False,
        **kwargs: Any,
    ) -> None:
        renames = {**self.SKIP_SWITCHES, **self.renamed_params}
        renamed = sorted(set(kwargs) & set(renames))
        if renamed:
            raise TypeError(
                f"{type(self).__name__}: " + "; ".join(f"argument {k!r} was renamed to {renames[k]!r}" for k in renamed)
            )
        # Each key of the returned dict is also its own XCom, so that ``op.output["manifest_uri"]`` works.
        kwargs.setdefault("multiple_outputs", True)
        super().__init__(durable=durable, **kwargs)
        if stage:
            self.stage = stage
        if not self.stage:
            raise ValueError(f"{type(self).__name__}: no stage given")
        self.lake = lake
        self.dataset = dataset
        self.snapshot = snapshot
        self.config = dict(config or {})
        self.backend = backend
        # A dict, or JSON text (a templated value: the DAG's per-stage options rendered with ``tojson``).
        self.backend_options = backend_options if isinstance(backend_options, str) else dict(backend_options or {})
        self.curation_conn_id = curation_conn_id
        self.run_id = run_id
        self.wait = wait
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.lease_wait_s = lease_wait_s
        self.optional = optional
        self._handle: dict[str, Any] | None = None
        self._follower: Follower | None = None
        self._backend: Backend | None = None
        self._backend_options: dict[str, Any] = {}
        self._curation: CurationSettings | None = None

    # -- what a subclass may change ----------------------------------------------------------------
    def skip_reason(self) -> str | None:
        """Why this ``optional`` task has nothing to do (after templating), or None: the stage's declared
        ``OPTIONAL_WITHOUT`` setting is empty (as an argument, or in ``config``), or no upstream ran."""
        if not self.optional:
            return None
        from airflow_curation.stages import stage_class

        setting = stage_class(self.stage).OPTIONAL_WITHOUT
        if setting and _unset(getattr(self, setting, None)) and _unset(self.config.get(setting)):
            return f"{self.stage} skipped: no {setting} configured"
        if "input_manifest" in self.settings_params and _unset(getattr(self, "input_manifest", None)):
            return f"{self.stage} skipped: no upstream stage ran (no input manifest)"
        return None

    def build_config(self, context: Any) -> dict[str, Any]:
        """The stage's settings for this run (after templating): ``config``, then the ``settings_params``,
        checked and typed by the stage's settings (a templated ``"0.7"`` becomes ``0.7``, once, here), so an
        unknown or renamed setting, or one the stage's :meth:`~airflow_curation.stages.base.Stage.check_config`
        refuses, fails the task before any job is submitted."""
        if "input_manifest" in self.settings_params and not getattr(self, "input_manifest", None):
            raise ValueError(f"{self.task_id}: no input_manifest given")
        from airflow_curation.stages import stage_class

        stage = stage_class(self.stage)
        settings = stage.SETTINGS
        where = f"{self.task_id} ({self.stage})"
        config = settings.coerce(self.config, where, drop_empty=True)
        config.update(settings.coerce({k: getattr(self, k) for k in self.settings_params}, where, drop_empty=True))
        try:
            stage.check_config({**settings.defaults, **config})  # the settings alone; files are the job's to check
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        return config

    # -- building the job ----------------------------------------------------------------------------
    def _settings(self) -> CurationSettings:
        if self._curation is None:
            self._curation = curation_settings(self.curation_conn_id)  # a missing connection: empty settings
        return self._curation

    def build_spec(self, context: Any) -> JobSpec:
        settings = self._settings()
        root = self.lake or settings.lake
        if not root:
            raise AirflowFailException(
                f"{self.task_id}: no lake given (the task's `lake`, or the lake of the "
                f"connection {self.curation_conn_id!r})"
            )
        lake = Lake(root=str(root), dataset=self.dataset, snapshot=self.snapshot or None)
        # The snapshot leads the run id a user sees, not the trigger time; a retry or clear keeps it.
        run_id = sanitize_run_id(self.run_id) if self.run_id else self._curation_run_id(context, lake.snapshot)
        config = self.build_config(context)
        # Another run of this stage on this snapshot (a manual run beside the scheduled one): wait for it.
        config.setdefault("lease_wait_s", self.lease_wait_s)
        # What the run was launched with, recorded in its manifest and report (never part of a fingerprint).
        config["run_context"] = run_context(context, settings, self.curation_conn_id, lake, self.backend)
        return JobSpec(stage=self.stage, lake=lake.to_dict(), run_id=run_id, config=config)

    @staticmethod
    def _curation_run_id(context: Any, snapshot: str | None) -> str:
        get = context.get if hasattr(context, "get") else (lambda _k, _d=None: _d)
        run_type = getattr(get("dag_run"), "run_type", None)
        return curation_run_id(context["run_id"], snapshot, run_type=run_type, logical_date=get("logical_date"))

    def _task_backend_options(self) -> dict[str, Any]:
        """This task's backend options (rendered JSON text allowed; empty text: none)."""
        raw = self.backend_options
        if isinstance(raw, str):
            raw = json.loads(raw) if raw.strip() not in ("", "None", "null") else {}
        if not isinstance(raw, dict):
            raise AirflowFailException(f"{self.task_id}: backend_options must be an object, not {raw!r}")
        return raw

    def get_backend(self, spec: JobSpec | None = None) -> Backend:
        if self._backend is not None:
            return self._backend
        settings = self._settings()
        name = self.backend or settings.backend or "local"
        options = {**settings.backend_options, **self._task_backend_options()}
        if name == "local" and "work_dir" not in options and spec is not None and storage.is_local(spec.lake["root"]):
            # Job folders (spec, log, result) next to the data they produced, under the lake's _jobs/.
            options["work_dir"] = spec.lake_obj.jobs_dir(spec.run_id, spec.stage)
        self._backend = backend_for(name, options, storage=settings.storage)
        self._backend_options = options
        self.backend = name
        return self._backend

    # -- ResumableJobMixin ---------------------------------------------------------------------------
    def execute(self, context: Any) -> dict[str, Any]:
        reason = self.skip_reason()
        if reason:
            raise AirflowSkipException(reason)
        self._context = context
        # This task reads storage too (inputs, input manifests, results): with the connection's options,
        # in effect for this task only.
        with storage.using(self._settings().storage):
            return self.execute_resumable(context)

    def submit_job(self, context: Any) -> dict[str, Any]:
        spec = self.build_spec(context)
        backend = self.get_backend(spec)
        launched = RunRecord.from_dict(backend.submit(spec))
        # What reconnecting needs besides the backend's handle: which backend, with which options and
        # connection ids (resolved again where the job is followed). The job's environment may hold
        # storage secrets: it is not needed to poll, log or cancel.
        record = launched.with_holder(
            backend=backend.name,
            backend_options=handle_options(backend, self._backend_options),
            curation_conn_id=self.curation_conn_id,
            lake_root=spec.lake["root"],
            manifest_uri=launched.manifest_uri or spec.manifest_uri,
            submitted_at=time.time(),
        )
        self.log.info("%s", launched_line(self.stage, record, self._backend_options))
        self._log_effective(spec)
        return self._remember(record.to_dict(), context)

    def _log_effective(self, spec: JobSpec) -> None:
        """The values this run really uses: the stage's settings after templating, the run's params, and
        any ``conf`` value Airflow did not apply (a backfill or re-run without "override parameters")."""
        rc = spec.config.get("run_context") or {}
        settings = {k: v for k, v in spec.config.items() if k != "run_context"}
        self.log.info("Effective %s settings: %s", self.stage, json.dumps(settings, sort_keys=True, default=str))
        self.log.info("Run params: %s", json.dumps(rc.get("params", {}), sort_keys=True, default=str))
        if rc.get("conf_not_applied"):
            self.log.warning(
                "Run conf values NOT applied (the run's params differ; tick 'override parameters' to apply): %s",
                json.dumps(rc["conf_not_applied"], sort_keys=True, default=str),
            )

    def _remember(
        self, handle: dict[str, Any], context: Any, log_offset: int = 0, newest: bool = True
    ) -> dict[str, Any]:
        """Follow ``handle``'s newest attempt (a checkpoint gate may have relaunched the job) and return it.
        :param newest: False: ``handle``'s own attempt (a trigger's event: its status is that attempt's)."""
        if self._backend is None:
            # A retry reconnecting: the connections are resolved again here.
            self._backend = backend_for(handle["backend"], handle.get("backend_options", {}))
        # The operator that waits for its job decides its relaunches; one that only launches leaves them
        # to its full checkpoint gate.
        self._follower = Follower(self._backend, handle, log_offset=log_offset, relaunch=self.wait)
        if newest:
            self._follower.refresh()
        return self._record_now(context)

    def _record_now(self, context: Any) -> dict[str, Any]:
        self._handle = handle = self._follower.handle
        CurationManifestLink.persist(context, handle.get("manifest_uri"))
        # A backend may give a web URL for its job (a dashboard); else the log file.
        CurationJobLogLink.persist(context, handle.get("url") or handle.get("log"))
        return handle

    def get_job_status(self, external_id: dict[str, Any], context: Any) -> str:
        self._remember(external_id, context)
        status = self._follower.status()
        self.log.info("Job %s is %s %s", self._follower.record.job_id, status.state.value, status.message)
        return status.state.value

    def is_job_active(self, status: str) -> bool:
        # "unknown" counts as active: submitting a second job is worse than waiting on one we lost sight of.
        return status in (JobState.PENDING.value, JobState.RUNNING.value, JobState.UNKNOWN.value)

    def is_job_succeeded(self, status: str) -> bool:
        return status == JobState.SUCCEEDED.value

    def poll_until_complete(self, external_id: dict[str, Any], context: Any) -> Any:
        external_id = self._remember(external_id, context)
        if not self.wait:
            return self.get_job_result(external_id, context)
        if self.deferrable:
            self._defer(external_id)
        while True:
            look = self._follower.look()
            for line in look.text.splitlines():
                self.log.info("[job %s] %s", look.record.job_id, line)
            if look.relaunched:
                self._relaunched(look, context)
            elif look.ended:
                return self._finish(
                    look.status.state.value, look.status.message, look.status.result, look.record.to_dict()
                )
            time.sleep(self.poll_interval)

    def _defer(self, handle: dict[str, Any], log_offset: int = 0) -> None:
        self.defer(
            trigger=StageJobTrigger(
                backend=handle["backend"],
                backend_options=handle.get("backend_options", {}),
                handle=handle,
                poll_interval=self.poll_interval,
                log_offset=log_offset,
                curation_conn_id=handle.get("curation_conn_id"),
            ),
            method_name="execute_complete",
        )

    def _relaunched(self, look: Look, context: Any) -> None:
        """The follower relaunched the job: the new attempt goes to the task state store (a retry
        reconnects to it) and the log says what failed, and the relaunch."""
        self.log.warning("Job %s: %s", look.record.job_id, look.status.message)
        store = context.get("task_state_store") if hasattr(context, "get") else None
        if store is not None and self.durable:
            store.set(self.external_id_key, look.record.to_dict())
        self._record_now(context)

    def get_job_result(self, external_id: dict[str, Any], context: Any) -> dict[str, Any]:
        external_id = self._handle or external_id  # the latest attempt, when this task relaunched the job
        if not self.wait:
            return {"manifest_uri": external_id["manifest_uri"], "job": external_id}
        status = self._follower.status()
        return self._finish(status.state.value, status.message, status.result, self._follower.handle)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        """Resumed from the trigger: the job has ended; relaunch it (and defer again) or finish."""
        with storage.using(self._settings().storage):
            return self._complete(context, event)

    def _complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        self._remember(event["handle"], context, log_offset=int(event.get("log_offset") or 0), newest=False)
        status = JobStatus(
            JobState(event["status"]),
            event.get("message", ""),
            event.get("result"),
            retryable=bool(event.get("retryable")),
        )
        look = self._follower.conclude(status)
        if look.relaunched:
            self._relaunched(look, context)
            self._defer(look.record.to_dict(), log_offset=self._follower.log_offset)
        return self._finish(status.state.value, status.message, status.result, look.record.to_dict())

    def _finish(
        self, state: str, message: str, result: dict[str, Any] | None, handle: dict[str, Any]
    ) -> dict[str, Any]:
        if state != JobState.SUCCEEDED.value:
            tail = ""
            try:
                text, _ = self._backend.logs(handle, 0)
                tail = "\n".join(text.splitlines()[-20:])
            except Exception:  # noqa: BLE001 - the log is a courtesy; the state is what matters
                pass
            raise AirflowException(f"{self.stage} job {handle.get('job_id')} {state}: {message}\n{tail}".rstrip())
        summary = summary_of(result)
        self.log.info("%s done: %s", self.stage, summary)
        return summary

    def on_kill(self) -> None:
        if self._follower is not None:
            self.log.info("Cancelling %s job %s", self.stage, self._follower.record.job_id)
            self._follower.cancel()


def _unset(value: Any) -> bool:
    """A rendered value that means "nothing": empty, blank, ``None``, an empty list or object."""
    if isinstance(value, str):
        return value.strip() in ("", "None", "null", "[]", "{}")
    return not value


# The base's own arguments: never stage settings of a subclass (ingest repeats ``dataset``, ``lake``...).
_BASE_PARAMS = frozenset(inspect.signature(CurationStageOperator.__init__).parameters)
