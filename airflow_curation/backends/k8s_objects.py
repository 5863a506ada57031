"""Pure builders of the Kubernetes objects that run a job spec: no client, no I/O, plain dicts.

Each function returns one manifest that the tests validate against the real schemas (core kinds with
``kubernetes-validate``, the KubeRay and dask-kubernetes CRDs' ``openAPIV3Schema``). The job spec
travels in a ConfigMap mounted at :data:`SPEC_DIR`; the lake's credentials, and every other credential
(:mod:`airflow_curation.core.credentials`), come from a Secret through ``envFrom``, never from the spec
or these objects.

Launch kinds (``LAUNCH_KINDS``): ``indexed`` (an Indexed Job of groups plus a collect Job that waits
for their results), ``job`` (one pod), ``dask`` (a ``DaskJob``), ``ray`` (a ``RayJob``).
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_curation.core import credentials
from airflow_curation.jobs import groups as grp

SPEC_DIR = "/etc/curation"
SPEC_PATH = f"{SPEC_DIR}/spec.json"
LAUNCH_KINDS = ("indexed", "job", "dask", "ray")
INDEX = "$(JOB_COMPLETION_INDEX)"  # Kubernetes expands it from the variable the Job controller sets
# Labels every object carries, so that RBAC-scoped listing and clean-up can find them.
LABEL_MANAGED = "app.kubernetes.io/managed-by"
LABEL_JOB = "curation.airflow.apache.org/job"
LABEL_STAGE = "curation.airflow.apache.org/stage"
LABEL_ROLE = "curation.airflow.apache.org/role"
ANNOTATION_SPEC_HASH = "curation.airflow.apache.org/spec-sha256"
MANAGER = "airflow-curation"

RAY_GROUP, RAY_VERSION, RAY_PLURAL = "ray.io", "v1", "rayjobs"
DASK_GROUP, DASK_VERSION, DASK_PLURAL = "kubernetes.dask.org", "v1", "daskjobs"
CRDS = {"RayJob": (RAY_GROUP, RAY_VERSION, RAY_PLURAL), "DaskJob": (DASK_GROUP, DASK_VERSION, DASK_PLURAL)}

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass
class PodSettings:
    """Everything about where and how pods run; all of it comes from configuration.

    :param image: container image with airflow-curation and the stage's engine installed.
    :param service_account: the pods' service account (the chart creates ``airflow-curation-job``).
    :param storage_secret: Secret whose keys become environment variables of every pod (e.g.
        ``AWS_ACCESS_KEY_ID``, ``CURATION_STORAGE_OPTIONS_S3``); empty for a lake that needs none.
    :param env: extra plain (non-secret) environment variables, literal in the pod spec; credentials
        (storage options, ``AWS_SECRET_ACCESS_KEY``, ``*_TOKEN``...: :mod:`airflow_curation.core.credentials`)
        are refused here (the Kubernetes backend moves them into the job's Secret before it builds these).
    :param requests: / :param limits: CPU and memory of a worker pod (quantity strings).
    :param gpu_resource: / :param gpus: extended resource and count requested by GPU (Ray) workers.
    :param node_selector: / :param tolerations: / :param gpu_node_selector: / :param gpu_tolerations:
        placement; the GPU ones apply to GPU workers on top of the general ones.
    :param run_as_user: non-root uid (and gid) the containers run as.
    """

    image: str = "airflow-curation:0.1.0"
    image_pull_policy: str = "IfNotPresent"
    image_pull_secrets: list[str] = field(default_factory=list)
    service_account: str = "airflow-curation-job"
    storage_secret: str = ""
    extra_secrets: list[str] = field(default_factory=list)  # more Secrets read through envFrom
    env: dict[str, str] = field(default_factory=dict)
    requests: dict[str, str] = field(default_factory=lambda: {"cpu": "1", "memory": "4Gi"})
    limits: dict[str, str] = field(default_factory=lambda: {"cpu": "2", "memory": "8Gi"})
    gpu_resource: str = "nvidia.com/gpu"
    gpus: int = 1
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    gpu_node_selector: dict[str, str] = field(default_factory=dict)
    gpu_tolerations: list[dict[str, Any]] = field(default_factory=list)
    run_as_user: int = 1000
    priority_class: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.run_as_user == 0:
            raise ValueError("run_as_user must not be 0: curation pods run as non-root")
        for what, res in (("requests", self.requests), ("limits", self.limits)):
            for k, v in res.items():
                if not isinstance(v, str):
                    raise ValueError(f"{what}[{k!r}] must be a quantity string such as '2' or '4Gi', got {v!r}")
        if self.gpus < 0:
            raise ValueError("gpus must be >= 0")
        # pod.env values are literal in every pod spec (readable by anyone who may read Jobs): credentials
        # belong in a Secret.
        literal = sorted(k for k, v in self.env.items() if credentials.is_secret(k, v))
        if literal:
            raise ValueError(
                f"pod.env {literal}: credentials (storage options are secrets too) would be written into "
                "the pod spec; put them in the Secret named by pod.storage_secret, or pass them as the "
                "backend's env (a per-job Secret; the Kubernetes backend moves pod.env credentials there)"
            )

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "PodSettings":
        d = dict(d or {})
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown pod settings {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}")
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def spec_sha256(spec_json: str) -> str:
    return hashlib.sha256(spec_json.encode()).hexdigest()


def object_name(stage: str, spec_json: str, attempt: int = 0) -> str:
    """A deterministic DNS-1123 name for a job spec: the same spec always maps to the same name, so a
    submit that is retried after a lost response finds its job (409) instead of starting a second one.
    ``attempt`` gives a fresh name when an earlier job of the same spec failed."""
    stem = re.sub(r"[^a-z0-9-]", "-", stage.lower()).strip("-")[:20] or "stage"
    name = f"cur-{stem}-{spec_sha256(spec_json)[:10]}"
    if attempt:
        name += f"-r{attempt}"
    # 52 leaves room for the suffixes that controllers add to pod and service names.
    assert len(name) <= 52 and _DNS_LABEL.match(name), name
    return name


def _labels(name: str, stage: str, role: str, settings: PodSettings) -> dict[str, str]:
    return {
        **settings.labels,
        LABEL_MANAGED: MANAGER,
        LABEL_JOB: name,
        LABEL_STAGE: _label_value(stage),
        LABEL_ROLE: role,
    }


def _label_value(value: str) -> str:
    value = re.sub(r"[^A-Za-z0-9_.-]", "-", value)[:63].strip("-_.")
    return value or "x"


def _meta(
    name: str, namespace: str, stage: str, role: str, settings: PodSettings, spec_hash: str | None = None, base=None
) -> dict[str, Any]:
    """An object's metadata; ``base``: the run's name that labels it, when the object is one of its attempts."""
    annotations = dict(settings.annotations)
    if spec_hash:
        annotations[ANNOTATION_SPEC_HASH] = spec_hash
    labels = _labels(base or name, stage, role, settings)
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return meta


def _container(
    name: str,
    settings: PodSettings,
    command: list[str] | None,
    *,
    gpus: int = 0,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    ports: list[dict[str, Any]] | None = None,
    extra_env: dict[str, str] | None = None,
) -> dict:
    requests = dict(requests if requests is not None else settings.requests)
    limits = dict(limits if limits is not None else settings.limits)
    if gpus:
        # Extended resources must be equal in requests and limits.
        requests[settings.gpu_resource] = str(gpus)
        limits[settings.gpu_resource] = str(gpus)
    env = {"HOME": "/tmp", "PYTHONUNBUFFERED": "1", **settings.env, **(extra_env or {})}
    c: dict[str, Any] = {
        "name": name,
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "env": [{"name": k, "value": str(v)} for k, v in sorted(env.items())],
        "resources": {"requests": requests, "limits": limits},
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": settings.run_as_user,
            "runAsGroup": settings.run_as_user,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "spec", "mountPath": SPEC_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    if command is not None:
        c["command"] = command
    secrets = [settings.storage_secret] if settings.storage_secret else []
    secrets += [s for s in settings.extra_secrets if s not in secrets]
    if secrets:
        c["envFrom"] = [{"secretRef": {"name": s}} for s in secrets]
    if ports:
        c["ports"] = ports
    return c


def _ports(*ports: tuple[str, int]) -> list[dict[str, Any]]:
    return [{"name": name, "containerPort": port, "protocol": "TCP"} for name, port in ports]


def _pod_spec(
    name: str, settings: PodSettings, containers: list[dict], *, restart_policy: str | None, gpu: bool = False
) -> dict[str, Any]:
    node_selector = {**settings.node_selector, **(settings.gpu_node_selector if gpu else {})}
    tolerations = list(settings.tolerations) + (list(settings.gpu_tolerations) if gpu else [])
    spec: dict[str, Any] = {
        "serviceAccountName": settings.service_account,
        "automountServiceAccountToken": False,  # stage code never talks to the Kubernetes API
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": settings.run_as_user,
            "runAsGroup": settings.run_as_user,
            "fsGroup": settings.run_as_user,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": containers,
        "volumes": [{"name": "spec", "configMap": {"name": f"{name}-spec"}}, {"name": "tmp", "emptyDir": {}}],
    }
    optional = {
        "restartPolicy": restart_policy,
        "nodeSelector": node_selector,
        "tolerations": tolerations,
        "imagePullSecrets": [{"name": s} for s in settings.image_pull_secrets],
        "priorityClassName": settings.priority_class,
    }
    spec.update((k, v) for k, v in optional.items() if v)
    return spec


def spec_config_map(name: str, namespace: str, stage: str, spec_json: str, settings: PodSettings) -> dict:
    """The ConfigMap that carries the job spec (no secrets in it: the spec holds none)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(f"{name}-spec", namespace, stage, "spec", settings, spec_sha256(spec_json)),
        "data": {"spec.json": spec_json},
    }


def storage_secret(name: str, namespace: str, env: dict[str, str], labels: dict[str, str] | None = None) -> dict:
    """A Secret of environment variables (the lake's credentials), read by pods through ``envFrom``."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": name, "namespace": namespace, "labels": {LABEL_MANAGED: MANAGER, **(labels or {})}},
        "stringData": {k: str(v) for k, v in env.items()},
    }


def _job(
    name: str,
    namespace: str,
    stage: str,
    role: str,
    settings: PodSettings,
    command: list[str],
    *,
    spec_hash: str,
    completions: int = 1,
    parallelism: int = 1,
    indexed: bool = False,
    backoff_limit: int = 2,
    ttl_seconds: int = 86400,
    active_deadline: int | None = None,
    base_name: str | None = None,
) -> dict:
    base = base_name or name  # the job's group name: labels and the spec ConfigMap
    pod_labels = _labels(base, stage, role, settings)
    pod = _pod_spec(base, settings, [_container("stage", settings, command)], restart_policy="Never")
    spec: dict[str, Any] = {
        "completions": completions,
        "parallelism": parallelism,
        "ttlSecondsAfterFinished": ttl_seconds,
        "template": {"metadata": {"labels": pod_labels}, "spec": pod},
        # Exit 2 is a bad job spec: retrying cannot help. A pod evicted or preempted (DisruptionTarget)
        # is not the stage's fault and does not count against the retries; its units are checkpointed
        # or redone by the next pod.
        "podFailurePolicy": {
            "rules": [
                {"action": "FailJob", "onExitCodes": {"containerName": "stage", "operator": "In", "values": [2]}},
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            ]
        },
    }
    if indexed:
        spec["completionMode"] = "Indexed"
        spec["backoffLimitPerIndex"] = backoff_limit
        # Exit 1 means the stage ran and its units failed after their in-process retries (its result
        # says so): give up on that index rather than rerun the whole group; the collect step counts them.
        spec["podFailurePolicy"]["rules"].insert(
            1, {"action": "FailIndex", "onExitCodes": {"containerName": "stage", "operator": "In", "values": [1]}}
        )
    else:
        spec["backoffLimit"] = backoff_limit
    if active_deadline:
        spec["activeDeadlineSeconds"] = active_deadline
    meta = _meta(name, namespace, stage, role, settings, spec_hash, base)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def sweep_job(
    name: str,
    namespace: str,
    stage: str,
    spec_json: str,
    settings: PodSettings,
    *,
    groups: int,
    parallelism: int,
    result_dir: str,
    pick: list[int] | None = None,
    backoff_limit: int = 2,
    ttl_seconds: int = 86400,
    active_deadline: int | None = None,
    base_name: str | None = None,
) -> dict:
    """Indexed Job: pod *i* runs group *i* of ``groups`` (or group ``pick[i]``: a relaunch of some
    groups) and writes ``<result_dir>/group-<g>.json``, which the collect Job waits for."""
    completions = len(pick) if pick is not None else groups
    if completions < 1 or parallelism < 1:
        raise ValueError("groups and parallelism must be >= 1")
    result = f"{result_dir.rstrip('/')}/group-{grp.GROUP}.json"
    command = grp.command(grp.group_args(SPEC_PATH, result, INDEX, groups, pick))
    return _job(
        name,
        namespace,
        stage,
        "group",
        settings,
        command,
        spec_hash=spec_sha256(spec_json),
        completions=completions,
        parallelism=min(parallelism, completions),
        indexed=True,
        backoff_limit=backoff_limit,
        ttl_seconds=ttl_seconds,
        active_deadline=active_deadline,
        base_name=base_name,
    )


def stage_job(
    name: str,
    namespace: str,
    stage: str,
    spec_json: str,
    settings: PodSettings,
    *,
    result_uri: str,
    backoff_limit: int = 1,
    ttl_seconds: int = 86400,
    base_name: str | None = None,
    collect: tuple[str, int, float] | None = None,
    attempts: tuple[int, int] | None = None,
    newest: str | None = None,
) -> dict:
    """One pod. Alone (``launch_kind`` ``job``) it runs the whole stage; with ``collect=(result_dir,
    groups, timeout_s)`` it is the collect step of a sweep: it waits for every group's result, then
    writes the manifest, applies the failure budget and runs ``finalize``.

    :param attempts: (collect) ``(this attempt, attempts the follower may make)``: a collect before the last
        attempt that lost units writes a failed manifest saying a relaunch is pending (``jobs collect --attempt``).
    :param newest: (collect) the run's ``current.json``: the collect pod waits through relaunches of its
        groups, and then collects the newest attempt, not its own.
    """
    if collect is None:
        role, command = "job", grp.command(grp.run_args(SPEC_PATH, result_uri))
    else:
        budget = (str(attempts[0]), attempts[1]) if attempts is not None else None
        args = grp.collect_args(SPEC_PATH, result_uri, wait=collect, attempts=budget, newest=newest)
        role, command = "collect", grp.command(args)
    return _job(
        name,
        namespace,
        stage,
        role,
        settings,
        command,
        spec_hash=spec_sha256(spec_json),
        backoff_limit=backoff_limit,
        ttl_seconds=ttl_seconds,
        base_name=base_name,
    )


def dask_job(
    name: str,
    namespace: str,
    stage: str,
    spec_json: str,
    settings: PodSettings,
    *,
    workers: int,
    result_uri: str,
    threads_per_worker: int = 1,
    base_name: str | None = None,
) -> dict:
    """A ``DaskJob``: the operator starts a scheduler and ``workers`` workers, then the runner pod,
    into which it injects ``DASK_SCHEDULER_ADDRESS``; the cluster goes when the runner ends.
    ``base_name``: the run's name (labels, spec ConfigMap) when this is a later attempt of it."""
    if workers < 1:
        raise ValueError("workers must be >= 1")
    base = base_name or name
    labels = _labels(base, stage, "dask", settings)
    mem = settings.limits.get("memory", "")
    scheduler_ports = (("tcp-comm", 8786), ("http-dashboard", 8787))
    worker_cmd = [
        "dask",
        "worker",
        "--name",
        "$(DASK_WORKER_NAME)",
        "--dashboard",
        "--dashboard-address",
        "8788",
        "--nthreads",
        str(threads_per_worker),
    ]
    if mem:
        worker_cmd += ["--memory-limit", _dask_memory(mem)]
    worker = _container("worker", settings, worker_cmd, ports=_ports(("http-dashboard", 8788)))
    scheduler = _container(
        "scheduler",
        settings,
        ["dask", "scheduler"],
        requests={"cpu": "500m", "memory": "1Gi"},
        limits={"cpu": "1", "memory": "2Gi"},
        ports=_ports(*scheduler_ports),
    )
    scheduler["readinessProbe"] = {
        "httpGet": {"port": "http-dashboard", "path": "/health"},
        "initialDelaySeconds": 5,
        "periodSeconds": 10,
    }
    runner = _container("job", settings, grp.command(grp.run_args(SPEC_PATH, result_uri)))
    return {
        "apiVersion": f"{DASK_GROUP}/{DASK_VERSION}",
        "kind": "DaskJob",
        "metadata": _meta(name, namespace, stage, "dask", settings, spec_sha256(spec_json), base),
        "spec": {
            "job": {
                "metadata": {"labels": labels},
                "spec": _pod_spec(base, settings, [runner], restart_policy="Never"),
            },
            "cluster": {
                "spec": {
                    "worker": {
                        "replicas": workers,
                        "metadata": {"labels": labels},
                        "spec": _pod_spec(base, settings, [worker], restart_policy=None),
                    },
                    "scheduler": {
                        "metadata": {"labels": labels},
                        "spec": _pod_spec(base, settings, [scheduler], restart_policy=None),
                        "service": {
                            "type": "ClusterIP",
                            "selector": {"dask.org/cluster-name": name, "dask.org/component": "scheduler"},
                            "ports": [
                                {"name": n, "protocol": "TCP", "port": p, "targetPort": n} for n, p in scheduler_ports
                            ],
                        },
                    },
                }
            },
        },
    }


def _dask_memory(quantity: str) -> str:
    # Dask reads "8GiB", Kubernetes writes "8Gi".
    return quantity + "B" if re.fullmatch(r"\d+(Ki|Mi|Gi|Ti)", quantity) else quantity


def ray_job(
    name: str,
    namespace: str,
    stage: str,
    spec_json: str,
    settings: PodSettings,
    *,
    workers: int,
    result_uri: str,
    gpus_per_worker: int | None = None,
    ray_version: str = "2.60.0",
    active_deadline: int | None = None,
    ttl_seconds: int = 86400,
    base_name: str | None = None,
) -> dict:
    """A ``RayJob``: KubeRay starts a Ray cluster (head + ``workers`` GPU workers), submits the
    entrypoint, and deletes the cluster when it finishes. The entrypoint runs on the head as the Ray
    driver; Ray Data then schedules the vLLM replicas on the GPU workers. ``base_name`` as for
    :func:`dask_job`."""
    if workers < 1:
        raise ValueError("workers must be >= 1")
    gpus = settings.gpus if gpus_per_worker is None else gpus_per_worker
    base = base_name or name
    labels = _labels(base, stage, "ray", settings)
    head = _container(
        "ray-head",
        settings,
        None,
        requests={"cpu": "1", "memory": "4Gi"},
        limits={"cpu": "2", "memory": "8Gi"},
        ports=_ports(("gcs", 6379), ("dashboard", 8265), ("client", 10001)),
        extra_env={"RAY_USAGE_STATS_ENABLED": "0"},
    )
    worker = _container("ray-worker", settings, None, gpus=gpus, extra_env={"RAY_USAGE_STATS_ENABLED": "0"})
    worker["lifecycle"] = {"preStop": {"exec": {"command": ["ray", "stop"]}}}
    small = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}}
    submitter = _container("ray-job-submitter", settings, None, **small)
    spec: dict[str, Any] = {
        "entrypoint": shlex.join(grp.command(grp.run_args(SPEC_PATH, result_uri))),
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": min(ttl_seconds, 3600),
        "submissionMode": "K8sJobMode",
        "backoffLimit": 0,  # units are retried inside the job and checkpointed; a rerun skips them
        "rayClusterSpec": {
            "rayVersion": ray_version,
            "headGroupSpec": {
                "rayStartParams": {"dashboard-host": "0.0.0.0", "num-cpus": "0"},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": _pod_spec(base, settings, [head], restart_policy=None),
                },
            },
            "workerGroupSpecs": [
                {
                    "groupName": "gpu" if gpus else "cpu",
                    "replicas": workers,
                    "minReplicas": workers,
                    "maxReplicas": workers,
                    "rayStartParams": {},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": _pod_spec(base, settings, [worker], restart_policy=None, gpu=bool(gpus)),
                    },
                }
            ],
        },
        # The submitter pod (K8sJobMode) only runs `ray job submit`; keep it small and non-root too.
        "submitterPodTemplate": {
            "metadata": {"labels": labels},
            "spec": _pod_spec(base, settings, [submitter], restart_policy="Never"),
        },
    }
    if active_deadline:
        spec["activeDeadlineSeconds"] = active_deadline
    return {
        "apiVersion": f"{RAY_GROUP}/{RAY_VERSION}",
        "kind": "RayJob",
        "metadata": _meta(name, namespace, stage, "ray", settings, spec_sha256(spec_json), base),
        "spec": spec,
    }


def owner_reference(obj: dict) -> dict:
    """An ownerReference to ``obj`` (as returned by the API server, with its uid), so that deleting
    the job garbage-collects the spec ConfigMap too."""
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "blockOwnerDeletion": False,
        "controller": False,
    }
