"""Kubernetes backend: a job spec becomes an Indexed Job (groups + a collect Job), a plain Job, a
``DaskJob`` (dask-kubernetes operator) or a ``RayJob`` (KubeRay), built by :mod:`k8s_objects`.

The lake must be object storage that the pods reach (credentials from a Secret, never the spec); the
job's result JSON is written into the lake, where :meth:`status` reads it. :meth:`status` only reads;
the collect Job is created at launch. The API client is given (built by
:mod:`airflow_curation.hooks.factory` from the cncf-kubernetes provider's ``KubernetesHook``, with the
provider's retry of 429/5xx and dropped connections); the backend never builds one. Names are
deterministic per spec and attempt, so a launch retried after a lost answer gets 409 AlreadyExists and
reconnects instead of starting a second job.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from typing import Any

from airflow_curation.backends import k8s_objects as objs
from airflow_curation.backends.base import (
    CANCELLED,
    Backend,
    JobHandle,
    JobState,
    JobStatus,
    beside_result,
    slice_log,
    status_from_result,
)
from airflow_curation.core import credentials, storage
from airflow_curation.jobs import attempts, group_result_uri
from airflow_curation.jobs import groups as grp
from airflow_curation.jobs.run import RunRecord
from airflow_curation.jobs.spec import JobSpec

log = logging.getLogger(__name__)

LOG_CONTAINERS = ("stage", "job", "ray-job-submitter")
MAX_REVISIONS = 20
# Job failures that running the groups again cannot cure: a bad spec, the deadline.
FATAL_REASONS = {"PodFailurePolicy", "DeadlineExceeded"}


class KubernetesBackend(Backend):
    """:param namespace: where the jobs run.
    :param pod: pod settings (:class:`k8s_objects.PodSettings` as a dict): image, service account,
        storage secret, requests/limits, GPUs, node selectors, tolerations...
    :param launch_kinds: stage name -> ``indexed`` | ``job`` | ``dask`` | ``ray`` (deployment
        configuration, e.g. the helm chart's ``jobs.launchKinds``); ``default_launch_kind`` for others.
    :param shard_groups: pods of an Indexed Job; 0 sizes it from the input manifest's head: one pod per
        shard, at most ``max_shard_groups``, and at least ``min_group_bytes`` of shards a pod (small shards go
        several to a pod: a pod's fixed cost is 0.8-2 CPU-s; 0: no floor). :param parallelism: pods of a sweep
        running at once.
    :param dask_workers: / :param ray_workers: cluster sizes; ``ray_gpus_per_worker`` overrides ``pod.gpus``.
    :param result_root: where job results go; default the lake's ``_jobs`` folder.
    :param api_client: the ``kubernetes.client.ApiClient`` every call goes through, retries included
        (required: :func:`airflow_curation.hooks.factory.backend_for` builds it from a ``kubernetes``
        connection or the client options, and supplies it again wherever the backend is rebuilt); not
        part of :meth:`options`.
    :param propagation_policy: how ``cancel`` deletes: ``Background`` (default) or ``Foreground``.
    :param validate: check every object against its schema before creating it.
    :param collect_wait_seconds: longest wait of a sweep's collect pod for the groups' results
        (default: ``active_deadline_seconds``, else 7 days).
    :param max_resubmits: relaunches of groups whose pods were all killed (see :func:`airflow_curation.jobs.attempts.settle`).
    :param env: the job's environment, secrets included (the lake's storage options): a per-job Secret
        read through ``envFrom``, never the pod spec. Credentials in ``pod.env`` (see
        :mod:`airflow_curation.core.credentials`) join it there (over ``env``'s value of the same name, as
        a literal ``pod.env`` used to win), so no pod spec holds one.
    """

    name = "kubernetes"
    _unshared_options = ("api_client",)  # a trigger's factory builds its own client

    def __init__(
        self,
        namespace: str = "default",
        pod: dict[str, Any] | None = None,
        launch_kinds: dict[str, str] | None = None,
        default_launch_kind: str = "indexed",
        shard_groups: int = 0,
        max_shard_groups: int = 64,
        min_group_bytes: int = grp.MIN_GROUP_BYTES,
        parallelism: int = 4,
        dask_workers: int = 2,
        ray_workers: int = 1,
        ray_gpus_per_worker: int | None = None,
        ray_version: str = "2.60.0",
        result_root: str | None = None,
        propagation_policy: str = "Background",
        ttl_seconds: int = 86400,
        active_deadline_seconds: int | None = None,
        backoff_limit: int = 2,
        validate: bool = True,
        env: dict[str, str] | None = None,
        collect_wait_seconds: float | None = None,
        max_resubmits: int = 0,
        api_client: Any = None,
    ) -> None:
        if api_client is None:
            raise TypeError(
                "KubernetesBackend needs an api_client: build the backend with "
                "airflow_curation.hooks.factory.backend_for (a kubernetes_conn_id, in_cluster, config_file/context "
                "or host), which makes the client with the cncf-kubernetes provider's hook and retry"
            )
        self.namespace = namespace
        pod = dict(pod or {})
        pod["env"], pod_secrets = credentials.split(pod.get("env") or {})
        if pod_secrets:
            log.info("pod.env %s: credentials, read from the job's Secret", ", ".join(sorted(pod_secrets)))
        self.pod = objs.PodSettings.from_dict(pod)
        self.launch_kinds = dict(launch_kinds or {})
        for stage, kind in {**self.launch_kinds, "*": default_launch_kind}.items():
            if kind not in objs.LAUNCH_KINDS:
                raise ValueError(f"launch kind {kind!r} for {stage} unknown; known: {objs.LAUNCH_KINDS}")
        if propagation_policy not in ("Background", "Foreground"):
            raise ValueError("propagation_policy must be Background or Foreground")
        self.default_launch_kind = default_launch_kind
        self.shard_groups, self.max_shard_groups, self.parallelism = shard_groups, max_shard_groups, parallelism
        self.min_group_bytes = min_group_bytes
        self.dask_workers, self.ray_workers, self.ray_gpus_per_worker = dask_workers, ray_workers, ray_gpus_per_worker
        self.ray_version = ray_version
        self.result_root = result_root
        self.propagation_policy = propagation_policy
        self.ttl_seconds, self.active_deadline_seconds = ttl_seconds, active_deadline_seconds
        self.backoff_limit = backoff_limit
        self.validate = validate
        self.env = {**(env or {}), **pod_secrets}
        credentials.warn_unmaskable(self.env, "kubernetes env")
        # How long a sweep's collect pod waits for the groups' results before collecting what there is.
        self.collect_wait_seconds = collect_wait_seconds or active_deadline_seconds or 7 * 86400
        self.max_resubmits = int(max_resubmits)
        self.api_client = api_client

    @property
    def core(self):
        from kubernetes import client

        return client.CoreV1Api(self.api_client)

    # -- objects ------------------------------------------------------------------------------
    def launch_kind_for(self, stage: str) -> str:
        return self.launch_kinds.get(stage, self.default_launch_kind)

    def _result_dir(self, spec: JobSpec, name: str) -> str:
        root = self.result_root or spec.lake_obj.jobs_dir(spec.run_id, spec.stage)
        return storage.join(root, name)

    def _groups_for(self, spec: JobSpec) -> int:
        if self.shard_groups:
            return self.shard_groups
        sized = grp.groups_for_input(self.max_shard_groups, spec.config.get("input_manifest"), self.min_group_bytes)
        return sized or max(1, min(self.parallelism, self.max_shard_groups))

    def build(self, spec: JobSpec, revision: int = 0) -> tuple[JobHandle, list[dict[str, Any]]]:
        """The handle and the objects (spec ConfigMap first) that :meth:`launch` would create."""
        kind = self.launch_kind_for(spec.stage)
        groups = self._groups_for(spec) if kind == "indexed" else 1
        # A unit for each completion index where the input allows (as the Slurm backend does for its array
        # tasks): a small ingest input is else one unit, and every other pod of the Indexed Job idles.
        spec = grp.with_min_units(spec, groups)
        spec_json = spec.to_json()
        name = objs.object_name(spec.stage, spec_json, revision)
        result_dir = self._result_dir(spec, name)
        result_uri = storage.join(result_dir, "result.json")
        ns, stage = self.namespace, spec.stage
        handle: JobHandle = {
            "backend": self.name,
            "job_id": name,
            "name": name,
            "namespace": ns,
            "launch_kind": kind,
            "revision": revision,
            "attempt": 1,
            "main": name,
            "result": result_uri,
            "result_dir": result_dir,
            "manifest_uri": spec.manifest_uri,
        }
        env_secret = None
        if self.env:
            env_secret = objs.storage_secret(f"{name}-env", ns, self.env, {objs.LABEL_JOB: name})
            handle["env_secret"] = env_secret["metadata"]["name"]
        cm = objs.spec_config_map(name, ns, stage, spec_json, self._pod_for(handle))
        extras = []
        if kind == "indexed":
            handle["groups"] = groups
            handle["collect"] = f"{name}-collect"
            extras.append(self._collect_job(handle, spec))
        main = self._main(handle, spec)
        handle["kind"] = main["kind"]
        return handle, [cm, *([env_secret] if env_secret else []), main, *extras]

    def _pod_for(self, handle: JobHandle) -> objs.PodSettings:
        if not handle.get("env_secret"):
            return self.pod
        return dataclasses.replace(self.pod, extra_secrets=[*self.pod.extra_secrets, handle["env_secret"]])

    def _main(self, handle: JobHandle, spec: JobSpec, pick: list[int] | None = None) -> dict[str, Any]:
        """The object that runs an attempt, ``handle["main"]``, labelled as the run and reading its spec
        ConfigMap: the Indexed Job of groups (``pick``: a relaunch of some), the Job, DaskJob or RayJob."""
        kind = handle["launch_kind"]
        args = (handle["main"], handle["namespace"], spec.stage, spec.to_json(), self._pod_for(handle))
        run = {"base_name": handle["name"]}
        deadline, ttl = self.active_deadline_seconds, self.ttl_seconds
        if kind == "indexed":
            return objs.sweep_job(
                *args,
                groups=handle["groups"],
                parallelism=self.parallelism,
                pick=pick,
                result_dir=handle["result_dir"],
                backoff_limit=self.backoff_limit,
                ttl_seconds=ttl,
                active_deadline=deadline,
                **run,
            )
        if kind == "job":
            return objs.stage_job(
                *args, result_uri=handle["result"], backoff_limit=self.backoff_limit, ttl_seconds=ttl, **run
            )
        if kind == "dask":
            return objs.dask_job(*args, workers=self.dask_workers, result_uri=handle["result"], **run)
        gpus, version = self.ray_gpus_per_worker, self.ray_version
        return objs.ray_job(
            *args,
            workers=self.ray_workers,
            result_uri=handle["result"],
            gpus_per_worker=gpus,
            ray_version=version,
            active_deadline=deadline,
            ttl_seconds=ttl,
            **run,
        )

    def _collect_job(self, handle: JobHandle, spec: JobSpec) -> dict[str, Any]:
        # Not owned by the group Job: the group Job's TTL must not take the waiting collect with it. It carries
        # the attempt that created it and the follower's budget: a collect before the last attempt that lost
        # units (a killed pod) says in the failed manifest that a relaunch is pending, so a stage streaming
        # from this run waits for the reopen instead of giving up.
        return objs.stage_job(
            handle["collect"],
            handle["namespace"],
            spec.stage,
            spec.to_json(),
            self._pod_for(handle),
            result_uri=handle["result"],
            backoff_limit=self.backoff_limit,
            ttl_seconds=self.ttl_seconds,
            base_name=handle["name"],
            collect=(handle["result_dir"], handle["groups"], self.collect_wait_seconds),
            attempts=(int(handle.get("attempt", 1)), self.max_resubmits + 1),
            # It may wait through relaunches of its groups (_relaunch keeps a waiting collect): the newest counts.
            newest=RunRecord.from_dict(handle).current_uri,
        )

    def spec_of(self, handle: JobHandle) -> JobSpec:
        cm = self._api("read", "ConfigMap", handle["namespace"], f"{handle['name']}-spec")
        return JobSpec.from_dict(json.loads(cm["data"]["spec.json"]))

    def _api(self, verb: str, kind: str, namespace: str, *args: Any, **kwargs: Any) -> Any:
        """``verb`` (create, read, patch, delete) on an object of ``kind``, as a plain dict; ``args``: the
        body (create) or the name and then the body."""
        from kubernetes import client

        if kind in objs.CRDS:
            group, version, plural = objs.CRDS[kind]
            method = f"{'get' if verb == 'read' else verb}_namespaced_custom_object"
            fn = getattr(client.CustomObjectsApi(self.api_client), method)
            return fn(group, version, namespace, plural, *args, **kwargs)
        api = (client.BatchV1Api if kind == "Job" else client.CoreV1Api)(self.api_client)
        noun = {"Job": "job", "ConfigMap": "config_map", "Secret": "secret"}[kind]
        fn = getattr(api, f"{verb}_namespaced_{noun}" + ("_status" if (verb, kind) == ("read", "Job") else ""))
        args = (namespace, *args) if verb == "create" else (args[0], namespace, *args[1:])
        return self.api_client.sanitize_for_serialization(fn(*args, **kwargs))

    def _create(self, obj: dict[str, Any], reconnect: bool = False) -> dict[str, Any] | None:
        """Create ``obj``; with ``reconnect``, one that exists already (409: same name, same spec) is fine."""
        from kubernetes.client.exceptions import ApiException

        try:
            return self._api("create", obj["kind"], obj["metadata"]["namespace"], obj)
        except ApiException as e:
            if e.status != 409 or not reconnect:
                raise
        return None

    def _get(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        """The object as a dict, or None when it does not exist."""
        from kubernetes.client.exceptions import ApiException

        try:
            return self._api("read", kind, namespace, name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def _delete(self, kind: str, name: str, namespace: str) -> None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        try:
            self._api(
                "delete", kind, namespace, name, body=client.V1DeleteOptions(propagation_policy=self.propagation_policy)
            )
        except ApiException as e:
            if e.status != 404:
                raise

    # -- Backend ------------------------------------------------------------------------------
    def launch(
        self, spec: JobSpec, groups: Sequence[int] | None = None, *, previous: JobHandle | None = None
    ) -> JobHandle:
        if previous is not None:
            return self._relaunch(spec, previous, groups)
        for revision in range(MAX_REVISIONS):
            handle, objects = self.build(spec, revision)
            self._validate(*objects)
            parts = [o for o in objects if o["kind"] in ("ConfigMap", "Secret")]
            main, *extras = objects[len(parts) :]
            for obj in parts:  # 409: same name, same spec (the name is its hash): an earlier submit got this far
                self._create(obj, reconnect=True)
            kind, name, ns = main["kind"], handle["name"], handle["namespace"]
            if self._get(kind, name, ns) is None:
                self._clear_results(handle)  # left by a deleted job of the same name: not this one's
            created = self._create(main, reconnect=True) or self._get(kind, name, ns)  # 409: reconnect to it
            if created is None:
                raise RuntimeError(f"{kind} {ns}/{name} was deleted while it was launched; launch again")
            state = self._object_state(created)[0]
            if state in (JobState.FAILED, JobState.CANCELLED) or created["metadata"].get("deletionTimestamp"):
                log.info(
                    "%s %s exists and has ended (%s); launching revision %d", kind, name, state.value, revision + 1
                )
                continue
            self._own_parts(handle, created, parts)
            for obj in extras:  # the sweep's collect job: it starts waiting for the groups' results
                self._create(obj, reconnect=True)
            log.info("launched %s %s/%s (%s)", kind, ns, name, handle["launch_kind"])
            return handle
        raise RuntimeError(f"{MAX_REVISIONS} earlier jobs of this spec failed; delete them or change the spec")

    def _relaunch(self, spec: JobSpec, previous: JobHandle, groups: Sequence[int] | None) -> JobHandle:
        """Attempt n+1: a new object of the run's launch kind (an ``indexed`` run: a group Job of only
        ``groups``) under the same spec ConfigMap and env Secret. Its name is deterministic, so two
        followers relaunching at once create one."""
        handle = {**previous, "attempt": int(previous.get("attempt", 1)) + 1}
        handle["main"] = f"{handle['name']}-a{handle['attempt']}"
        pick = None
        if handle["launch_kind"] == "indexed":
            pick = sorted(groups) if groups is not None else list(range(handle["groups"]))
            collect = self._get("Job", handle["collect"], handle["namespace"])
            if collect is None or self._object_state(collect)[0].finished:
                # The collect step has given up or ended: a fresh one waits for the relaunched groups.
                self._clear_results(handle, fresh=False)
                handle["collect"] = f"{handle['name']}-collect-a{handle['attempt']}"
                self._validate(waiting := self._collect_job(handle, spec))
                self._create(waiting, reconnect=True)
        else:
            self._clear_results(handle, fresh=False)
        if pick != []:
            self._validate(main := self._main(handle, spec, pick))
            self._create(main, reconnect=True)
        log.info("relaunched %s as attempt %d (%s)", handle["name"], handle["attempt"], handle["main"])
        return handle

    def _validate(self, *objects: dict[str, Any]) -> None:
        """Check the objects against their schemas (``validate``) before any of them is created."""
        if self.validate:
            from airflow_curation.backends.schemas import validate_object

            for obj in objects:
                validate_object(obj)

    def _clear_results(self, handle: JobHandle, fresh: bool = True) -> None:
        """Remove the run's result (and cancel marker); a fresh launch also its groups' results and the
        relaunch bookkeeping (newest attempt, attempt locks) that a deleted run of the same name left."""
        uris = [handle["result"], beside_result(handle, CANCELLED)]
        if fresh:
            uris += [group_result_uri(handle["result_dir"], i) for i in range(handle.get("groups", 0))]
            uris += attempts.bookkeeping(handle, self.max_resubmits + 1)
        for uri in uris:
            try:
                storage.remove(uri)
            except Exception as e:  # noqa: BLE001 - best effort; a stale file only makes a collect start early
                log.warning("cannot remove stale %s: %s", uri, e)

    def _own_parts(self, handle: JobHandle, owner: dict[str, Any], parts: list[dict[str, Any]]) -> None:
        # Deleting the job (cancel, or its TTL) then garbage-collects its ConfigMap and Secret too.
        if not owner.get("metadata", {}).get("uid"):
            return
        patch = {"metadata": {"ownerReferences": [objs.owner_reference(owner)]}}
        for obj in parts:
            self._api("patch", obj["kind"], handle["namespace"], obj["metadata"]["name"], patch)

    def status(self, handle: JobHandle) -> JobStatus:
        """One or two GETs (plus a result read once finished), nothing written: cheap to poll from a trigger."""
        main_name = handle.get("main", handle["name"])
        obj = self._get(handle["kind"], main_name, handle["namespace"])
        collect = self._get("Job", handle["collect"], handle["namespace"]) if handle.get("collect") else None
        if obj is None and collect is None:
            return self._gone(handle)
        for o in (obj, collect):
            if o is not None and o["metadata"].get("deletionTimestamp"):
                return JobStatus(JobState.CANCELLED, f"{o['kind']} {o['metadata']['name']} is being deleted")
        state, message = self._object_state(obj) if obj is not None else (JobState.SUCCEEDED, f"{main_name} gone")
        if handle.get("collect"):
            groups_message = f"groups: {message}"
            if state == JobState.FAILED and _fatal(obj):
                # A bad spec or the deadline: running the groups again cannot help.
                return JobStatus(JobState.FAILED, groups_message)
            if state == JobState.FAILED:
                silent = [
                    i for i in range(handle["groups"]) if not storage.exists(group_result_uri(handle["result_dir"], i))
                ]
                if silent:  # every pod of these groups was killed: the collect step waits for them
                    return JobStatus(
                        JobState.FAILED,
                        f"{groups_message}; groups {silent} ended without a result (pods killed?)",
                        retryable=True,
                    )
            if collect is None:
                return self._gone(handle)
            cstate, cmessage = self._object_state(collect)
            if cstate == JobState.PENDING and state == JobState.RUNNING:
                cstate = JobState.RUNNING  # the groups run while the collect pod waits to be scheduled
            state, message = cstate, f"{groups_message}; collect: {cmessage}"
        if state == JobState.SUCCEEDED:
            return self._from_result(handle, message)
        if state == JobState.FAILED:
            if (result := self._result(handle)) is not None:
                return JobStatus(JobState.FAILED, f"{message}: {result.error}", result.to_dict())
            # A Job, DaskJob or RayJob whose pods died without a word (OOM, lost node) may well succeed again.
            return JobStatus(JobState.FAILED, message, retryable=handle["launch_kind"] != "indexed" and not _fatal(obj))
        return JobStatus(state, message)

    def release(self, handle: JobHandle) -> None:
        """No relaunch follows: a collect pod still waiting for groups that will not come goes now."""
        if handle.get("collect"):
            collect = self._get("Job", handle["collect"], handle["namespace"])
            if collect is not None and not self._object_state(collect)[0].finished:
                self._delete("Job", handle["collect"], handle["namespace"])

    def _gone(self, handle: JobHandle) -> JobStatus:
        # The object is gone: TTL after finishing, a cancel, or someone deleted it.
        if (st := status_from_result(self._result(handle))) is not None:
            return st
        if self._was_cancelled(handle):
            return JobStatus(JobState.CANCELLED, "cancelled")
        return JobStatus(
            JobState.FAILED,
            f"{handle['kind']} {handle['namespace']}/{handle['name']} not found and no result was written (deleted?)",
        )

    def _from_result(self, handle: JobHandle, message: str) -> JobStatus:
        return status_from_result(self._result(handle), message) or JobStatus(
            JobState.FAILED,
            f"{message}; but the job wrote no result at {handle['result']} (is the lake shared object storage?)",
        )

    @staticmethod
    def _object_state(obj: dict[str, Any]) -> tuple[JobState, str]:
        kind = obj.get("kind")
        status = obj.get("status") or {}
        name = obj.get("metadata", {}).get("name", "?")
        if kind == "Job":
            return _job_state(obj)
        if kind == "RayJob":
            deploy = status.get("jobDeploymentStatus") or ""
            job = status.get("jobStatus") or ""
            msg = f"RayJob {name}: deployment {deploy or 'new'}, job {job or '-'}"
            if status.get("message"):
                msg += f": {status['message']}"
            if job == "STOPPED":
                return JobState.CANCELLED, msg
            if deploy in ("Failed", "ValidationFailed"):
                return JobState.FAILED, msg
            if deploy == "Complete":  # STOPPED is cancelled (above), SUCCEEDED succeeded, the rest failed
                return (JobState.SUCCEEDED if job == "SUCCEEDED" else JobState.FAILED), msg
            if deploy in ("Running", "Retrying") and job in ("RUNNING", "SUCCEEDED", "FAILED"):
                return JobState.RUNNING, msg
            if deploy in ("", "New", "Initializing", "Waiting", "Suspended", "Suspending", "Running", "Retrying"):
                return JobState.PENDING, msg
            return JobState.UNKNOWN, msg
        if kind == "DaskJob":
            job = status.get("jobStatus") or ""
            msg = f"DaskJob {name}: {job or 'new'}"
            return {
                "": JobState.PENDING,
                "JobCreated": JobState.PENDING,
                "ClusterCreated": JobState.PENDING,
                "Running": JobState.RUNNING,
                "Successful": JobState.SUCCEEDED,
                "Failed": JobState.FAILED,
            }.get(job, JobState.UNKNOWN), msg
        return JobState.UNKNOWN, f"unknown kind {kind}"

    def cancel(self, handle: JobHandle) -> None:
        """Delete the job's objects (idempotent); the spec ConfigMap goes with them."""
        self._mark_cancelled(handle)
        ns = handle["namespace"]
        if handle.get("collect"):
            self._delete("Job", handle["collect"], ns)
        for name in dict.fromkeys([handle.get("main", handle["name"]), handle["name"]]):
            self._delete(handle["kind"], name, ns)
        self._delete("ConfigMap", f"{handle['name']}-spec", ns)
        if handle.get("env_secret"):
            self._delete("Secret", handle["env_secret"], ns)

    def logs(self, handle: JobHandle, offset: int = 0) -> tuple[str, int]:
        """The stage containers' logs of every pod of the job, oldest pod first, from byte ``offset``.
        The API has no byte offsets, so each call reads the logs whole and slices them."""
        from kubernetes.client.exceptions import ApiException

        pods = self.core.list_namespaced_pod(handle["namespace"], label_selector=f"{objs.LABEL_JOB}={handle['name']}")
        items = sorted(pods.items, key=lambda p: (p.metadata.creation_timestamp or 0, p.metadata.name))
        parts = []
        for p in items:
            for c in p.spec.containers:
                if c.name not in LOG_CONTAINERS:
                    continue
                try:
                    # Raw bytes: client versions differ in how they decode a text/plain answer.
                    resp = self.core.read_namespaced_pod_log(
                        p.metadata.name, handle["namespace"], container=c.name, _preload_content=False
                    )
                    text = resp.data.decode("utf-8", "replace")
                except ApiException as e:
                    if e.status in (400, 404):  # not started yet, or gone
                        continue
                    raise
                end = "\n" if text and not text.endswith("\n") else ""
                parts.append(f"==> pod {p.metadata.name} ({c.name}) <==\n{text}{end}")
        return slice_log("".join(parts).encode(), offset)


def _condition(obj: dict[str, Any], ctype: str, reason: set[str] | None = None) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype and c.get("status") == "True" and (reason is None or c.get("reason") in reason):
            return c
    return None


def _fatal(obj: dict[str, Any]) -> bool:
    """A failure that running the job again cannot cure: a bad spec, the deadline."""
    ray_invalid = (obj.get("status") or {}).get("jobDeploymentStatus") == "ValidationFailed"
    return ray_invalid or _condition(obj, "Failed", reason=FATAL_REASONS) is not None


def _job_state(obj: dict[str, Any]) -> tuple[JobState, str]:
    status = obj.get("status") or {}
    name = obj["metadata"]["name"]
    counts = (
        f"active {status.get('active', 0)}, succeeded {status.get('succeeded', 0)}, failed {status.get('failed', 0)}"
    )
    if status.get("failedIndexes"):
        counts += f", failed indexes {status['failedIndexes']}"
    for ctype, state in (("Complete", JobState.SUCCEEDED), ("Failed", JobState.FAILED)):
        c = _condition(obj, ctype)
        if c:
            return (
                state,
                f"Job {name} {ctype.lower()}: {c.get('reason', '')} {c.get('message', '')}".strip() + f" ({counts})",
            )
    if _condition(obj, "Suspended"):
        return JobState.PENDING, f"Job {name} suspended ({counts})"
    if status.get("ready") or (status.get("active") and status.get("ready") is None):
        return JobState.RUNNING, f"Job {name} running ({counts})"
    return JobState.PENDING, f"Job {name} pending ({counts})"
