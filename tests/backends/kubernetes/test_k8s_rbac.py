"""The chart's Role allows every API call the backend really makes (recorded by the loopback API
server over a full submit / poll / collect / logs / cancel flow of every engine), and no more
verbs on kinds it never touches."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import helm_python
import yaml

from airflow_curation.backends.k8s_objects import LABEL_JOB
from airflow_curation.core import storage

CHART = Path(__file__).resolve().parents[3] / "helm" / "airflow-curation"
VERBS = {"POST": "create", "PATCH": "patch", "DELETE": "delete", "PUT": "update"}


def _permission(method: str, path: str) -> tuple[str, str, str]:
    url = urlparse(path)
    m = re.match(
        r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)/namespaces/[^/]+/(?P<res>[^/]+)"
        r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$",
        url.path,
    )
    assert m, path
    resource = m["res"] + (f"/{m['sub']}" if m["sub"] else "")
    if method == "GET":
        verb = (
            "get"
            if m["name"]
            else ("watch" if parse_qs(url.query).get("watch", [""])[0].lower() in ("true", "1") else "list")
        )
    else:
        verb = VERBS[method]
    return m["group"] or "", resource, verb


def _allowed(role: dict, group: str, resource: str, verb: str) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in role["rules"])


def test_role_covers_every_call_of_every_engine(fake_k8s, make_backend, make_spec):
    backend = make_backend(
        launch_kinds={"preprocess": "indexed", "ingest": "job"}, env={"CURATION_STORAGE_OPTIONS_S3": "{}"}
    )
    for stage, plural, done in [
        ("preprocess", "jobs", {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}),
        ("ingest", "jobs", {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}),
        ("dedup", "daskjobs", {"jobStatus": "Successful"}),
        ("enrich", "rayjobs", {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}),
    ]:
        handle = backend.submit(make_spec(stage))
        backend.submit(make_spec(stage))  # 409 path: get of the existing object
        fake_k8s.add_pod(f"{handle['name']}-pod", {LABEL_JOB: handle["name"]}, {"stage": "log\n"})
        backend.logs(handle)
        fake_k8s.set_status(plural, handle["name"], done)
        backend.status(handle)
        if handle["launch_kind"] == "indexed":
            fake_k8s.set_status("jobs", handle["collect"], done)
        storage.write_json(
            handle["result"], {"result_version": 1, "kind": "run", "status": "succeeded", "returncode": 0}
        )
        backend.status(handle)
        backend.cancel(handle)

    with helm_python.Chart.load(str(CHART)) as chart:
        out = chart.render({}, name="cur", namespace="airflow")
    role = next(
        d
        for path, t in out.items()
        if path.endswith(".yaml")
        for d in yaml.safe_load_all(t)
        if d and d.get("kind") == "Role"
    )
    used = {_permission(m, p) for m, p, _ in fake_k8s.requests}
    assert {
        ("batch", "jobs", "create"),
        ("ray.io", "rayjobs", "create"),
        ("kubernetes.dask.org", "daskjobs", "create"),
        ("", "pods/log", "get"),
        ("", "secrets", "create"),
    } <= used
    missing = sorted(p for p in used if not _allowed(role, *p))
    assert not missing, f"the chart's Role lacks {missing}"
    # Least privilege: secrets are never listed or watched (names are known), pods never changed.
    assert not _allowed(role, "", "secrets", "list") and not _allowed(role, "", "pods", "delete")
