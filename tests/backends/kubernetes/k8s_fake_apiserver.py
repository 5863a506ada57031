"""A small Kubernetes API server on 127.0.0.1 for tests of the real ``kubernetes`` client.

It keeps objects in memory with resourceVersions, answers create/get/list/patch/delete for core,
batch and custom resources, streams watches (ending them at ``timeoutSeconds`` as the real server
does, and answering 410 Gone for a resourceVersion older than the last compaction), serves pod
logs, validates every created object against the real schemas (422 when invalid), and injects
faults (an HTTP status for the next N matching requests, optionally after performing them, which is
how a response lost after a successful create looks to the client).

Tests play the controllers: they set an object's ``status`` and add pods with logs.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from airflow_curation.backends.schemas import ManifestInvalid, validate_object

_CORE = re.compile(
    r"^/api/(?P<version>v1)/namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+)"
    r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>status|log))?$"
)
_GROUP = re.compile(
    r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+)"
    r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>status))?$"
)
KINDS = {
    "configmaps": "ConfigMap",
    "pods": "Pod",
    "secrets": "Secret",
    "jobs": "Job",
    "rayjobs": "RayJob",
    "daskjobs": "DaskJob",
}


@dataclass
class Fault:
    method: str
    path: str  # regex searched in the path
    status: int
    count: int = 1
    after: bool = False  # perform the request, then answer the error (a lost response)


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status_body(code: int, reason: str, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge_patch(out.get(k), v)
    return out


class FakeKubernetes:
    """The state and the HTTP server. Use as a context manager; ``url`` is the API server address."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str, str], dict] = {}  # (group/version, plural, ns, name)
        self.events: list[tuple[int, str, tuple, dict]] = []
        self.logs: dict[tuple[str, str, str], str] = {}  # (ns, pod, container) -> text
        self.requests: list[tuple[str, str, dict]] = []
        self.deletes: list[tuple[str, str, str | None]] = []  # (plural, name, propagationPolicy)
        self.faults: list[Fault] = []
        self.rv = 100
        self.compacted_rv = 0
        self.cond = threading.Condition()
        self.server: ThreadingHTTPServer | None = None

    # -- lifecycle --------------------------------------------------------------------------------
    def __enter__(self) -> "FakeKubernetes":
        fake = self

        class Handler(_Handler):
            state = fake

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        with self.cond:
            self.cond.notify_all()
        if self.server:
            self.server.shutdown()
            self.server.server_close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    # -- state used by tests (the "controllers") ------------------------------------------------
    def _bump(self, etype: str, key: tuple, obj: dict) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, etype, key, copy.deepcopy(obj)))
        self.cond.notify_all()

    def get(self, plural: str, name: str, ns: str = "default") -> dict | None:
        with self.cond:
            for (gv, p, n, nm), obj in self.objects.items():
                if p == plural and n == ns and nm == name:
                    return copy.deepcopy(obj)
        return None

    def names(self, plural: str, ns: str = "default") -> list[str]:
        with self.cond:
            return sorted(nm for (gv, p, n, nm) in self.objects if p == plural and n == ns)

    def set_status(self, plural: str, name: str, status: dict, ns: str = "default") -> None:
        with self.cond:
            key = next(k for k in self.objects if k[1] == plural and k[2] == ns and k[3] == name)
            obj = self.objects[key]
            obj["status"] = status
            self._bump("MODIFIED", key, obj)

    def add_pod(self, name: str, labels: dict, containers: dict[str, str], ns: str = "default") -> None:
        """A pod with the given labels whose containers have logged the given text."""
        with self.cond:
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "labels": labels,
                    "uid": str(uuid.uuid4()),
                    "creationTimestamp": _now(),
                },
                "spec": {"containers": [{"name": c, "image": "x"} for c in containers]},
                "status": {"phase": "Running"},
            }
            key = ("v1", "pods", ns, name)
            self.objects[key] = pod
            self._bump("ADDED", key, pod)
            for c, text in containers.items():
                self.logs[(ns, name, c)] = text

    def compact(self) -> None:
        """Forget history: watches from an older resourceVersion now get 410 Gone."""
        with self.cond:
            self.compacted_rv = self.rv
            self.events.clear()

    def fault(self, method: str, path: str, status: int, count: int = 1, after: bool = False) -> None:
        with self.cond:
            self.faults.append(Fault(method, path, status, count, after))

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self.cond:
            for f in self.faults:
                if f.count > 0 and f.method == method and re.search(f.path, path):
                    f.count -= 1
                    return f
        return None


def _selects(obj: dict, label_selector: str | None, field_selector: str | None) -> bool:
    labels = obj["metadata"].get("labels") or {}
    for term in filter(None, (label_selector or "").split(",")):
        k, _, v = term.partition("=")
        if labels.get(k) != v.lstrip("="):
            return False
    for term in filter(None, (field_selector or "").split(",")):
        k, _, v = term.partition("=")
        if k == "metadata.name" and obj["metadata"]["name"] != v:
            return False
    return True


class _Handler(BaseHTTPRequestHandler):
    state: FakeKubernetes
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # keep test output quiet
        pass

    def _send(self, code: int, body: Any, content_type: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, code: int, reason: str, message: str) -> None:
        self._send(code, _status_body(code, reason, message))

    def _body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"null") if n else None

    def _route(self) -> tuple[dict, dict] | None:
        url = urlparse(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        m = _CORE.match(url.path) or _GROUP.match(url.path)
        if not m:
            return None
        r = m.groupdict()
        r["gv"] = f"{r['group']}/{r['version']}" if r.get("group") else r["version"]
        return r, query

    def _handle(self, method: str) -> None:
        st = self.state
        body = self._body() if method in ("POST", "PATCH", "PUT", "DELETE") else None
        routed = self._route()
        st.requests.append((method, self.path, body))
        if routed is None:
            return self._error(404, "NotFound", f"no route {self.path}")
        r, query = routed
        fault = st._take_fault(method, urlparse(self.path).path)
        if fault and not fault.after:
            return self._error(fault.status, "InjectedFault", f"injected {fault.status}")
        code, answer, ctype = self._dispatch(method, r, query, body)
        if code is None:
            return  # a watch, already streamed
        if fault and fault.after:
            return self._error(fault.status, "InjectedFault", f"injected {fault.status} after {method}")
        self._send(code, answer, ctype)

    def _dispatch(self, method: str, r: dict, query: dict, body: Any) -> tuple[int | None, Any, str]:
        st = self.state
        key = (r["gv"], r["plural"], r["ns"], r["name"])
        json_t = "application/json"
        with st.cond:
            if method == "POST" and not r["name"]:
                if not isinstance(body, dict) or body.get("kind") != KINDS.get(r["plural"]):
                    return 400, _status_body(400, "BadRequest", "kind does not match the resource"), json_t
                try:
                    validate_object(body)
                except ManifestInvalid as e:
                    return 422, _status_body(422, "Invalid", str(e)), json_t
                name = body["metadata"]["name"]
                key = (r["gv"], r["plural"], r["ns"], name)
                if key in st.objects:
                    return 409, _status_body(409, "AlreadyExists", f'{r["plural"]} "{name}" already exists'), json_t
                obj = copy.deepcopy(body)
                obj["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
                st.objects[key] = obj
                st._bump("ADDED", key, obj)
                return 201, obj, json_t
            if method == "GET" and r["name"] and r.get("sub") == "log":
                text = st.logs.get((r["ns"], r["name"], query.get("container", "")))
                if text is None:
                    return 404, _status_body(404, "NotFound", "no such pod/container"), json_t
                return 200, text, "text/plain"
            if method == "GET" and r["name"]:
                obj = st.objects.get(key)
                if obj is None:
                    return 404, _status_body(404, "NotFound", f'{r["plural"]} "{r["name"]}" not found'), json_t
                return 200, obj, json_t
            if method == "GET" and str(query.get("watch", "")).lower() in ("true", "1"):
                pass  # streamed below, outside the lock
            elif method == "GET":
                items = [
                    o
                    for (gv, p, n, _), o in sorted(st.objects.items())
                    if gv == r["gv"]
                    and p == r["plural"]
                    and n == r["ns"]
                    and _selects(o, query.get("labelSelector"), query.get("fieldSelector"))
                ]
                return (
                    200,
                    {
                        "kind": KINDS.get(r["plural"], "") + "List",
                        "apiVersion": r["gv"],
                        "metadata": {"resourceVersion": str(st.rv)},
                        "items": items,
                    },
                    json_t,
                )
            elif method == "PATCH" and r["name"]:
                obj = st.objects.get(key)
                if obj is None:
                    return 404, _status_body(404, "NotFound", f'{r["plural"]} "{r["name"]}" not found'), json_t
                patched = _merge_patch(obj, body)
                st.objects[key] = patched
                st._bump("MODIFIED", key, patched)
                return 200, patched, json_t
            elif method == "DELETE" and r["name"]:
                obj = st.objects.pop(key, None)
                if obj is None:
                    return 404, _status_body(404, "NotFound", f'{r["plural"]} "{r["name"]}" not found'), json_t
                st.deletes.append((r["plural"], r["name"], (body or {}).get("propagationPolicy")))
                st._bump("DELETED", key, obj)
                return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "metadata": {}}, json_t
            else:
                return 405, _status_body(405, "MethodNotAllowed", method), json_t
        self._watch(r, query)
        return None, None, json_t

    def _watch(self, r: dict, query: dict) -> None:
        st = self.state
        timeout = float(query.get("timeoutSeconds") or 30)
        since = int(query.get("resourceVersion") or st.rv)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(obj: dict) -> None:
            data = (json.dumps(obj) + "\n").encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        deadline = time.monotonic() + timeout
        try:
            if since < st.compacted_rv:
                chunk({"type": "ERROR", "object": _status_body(410, "Expired", f"too old resource version: {since}")})
                return
            while True:
                with st.cond:
                    pending = [
                        (rv, t, k, o)
                        for rv, t, k, o in st.events
                        if rv > since and k[0] == r["gv"] and k[1] == r["plural"] and k[2] == r["ns"]
                    ]
                    if not pending:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            return  # the server ends the watch at timeoutSeconds, as Kubernetes does
                        st.cond.wait(min(remaining, 0.5))
                        continue
                for rv, etype, _, obj in pending:
                    since = rv
                    if _selects(obj, query.get("labelSelector"), query.get("fieldSelector")):
                        chunk({"type": etype, "object": obj})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away mid-stream
        finally:
            try:
                # End of the chunked body: the connection stays usable, as with a real API server.
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                self.close_connection = True

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_PUT(self) -> None:
        self._handle("PUT")
