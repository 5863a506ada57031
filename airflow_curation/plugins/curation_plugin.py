"""The ``curation`` UI plugin: a run's curation report on the run's page, and the stage tasks' links.

A FastAPI app mounted at ``/curation`` in the api-server serves the report that the validate task
wrote beside the run's manifests (its location comes from the task's ``curation_report`` XCom), and
an external view adds a "Curation report" tab to every DAG run page. No React, no CDN: the report is
one self-contained HTML page. It also serves what the stage tasks' extra links point to (a stage
run's manifest, a job's log: lake files the browser cannot open itself); which file is served comes
only from the task's own ``curation_links`` XCom, never from the request. Requests are authorised
like the REST API (bearer token or the UI's session cookie) against read access to the DAG's runs
(the job log: to its task logs).
"""

from __future__ import annotations

import html
import logging
from typing import Any
from urllib.parse import quote

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import requires_access_dag
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse

from airflow_curation.core import storage
from airflow_curation.links.curation import LINK_TARGETS_KEY

log = logging.getLogger(__name__)

REPORT_XCOM_KEY = "curation_report"  # pushed by ValidateOperator
URL_PREFIX = "/curation"

app = FastAPI(title="Curation reports", description="Curation reports of airflow-curation runs")
_can_read_run = Depends(requires_access_dag("GET", DagAccessEntity.RUN))
_can_read_logs = Depends(requires_access_dag("GET", DagAccessEntity.TASK_LOGS))
#: The most of a job log the plugin returns: its end (a log can be large; the task log has all of it).
MAX_LOG_BYTES = 2 << 20


def _reports(dag_id: str | None = None, run_id: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
    """``curation_report`` XComs, newest first, with the task that pushed them."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = select(XComModel).where(XComModel.key == REPORT_XCOM_KEY)
    if dag_id is not None:
        query = query.where(XComModel.dag_id == dag_id)
    if run_id is not None:
        query = query.where(XComModel.run_id == run_id)
    query = query.order_by(XComModel.timestamp.desc()).limit(limit)
    out = []
    with create_session() as session:
        for row in session.scalars(query):
            value = XComModel.deserialize_value(row)
            if isinstance(value, dict) and value.get("html"):
                out.append({**value, "dag_id": row.dag_id, "run_id": row.run_id, "task_id": row.task_id})
    return out


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title>"
        "<style>body{font:14px sans-serif;margin:24px}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}</body></html>",
        status_code=status,
    )


@app.get("/report/{dag_id}/{run_id}", response_class=HTMLResponse, dependencies=[_can_read_run])
def report_html(dag_id: str, run_id: str, task_id: str | None = None) -> HTMLResponse:
    found = [r for r in _reports(dag_id, run_id) if task_id is None or r["task_id"] == task_id]
    if not found:
        return _page(
            "No curation report yet",
            f"<p>Run <code>{html.escape(run_id)}</code> of <code>{html.escape(dag_id)}</code> has no "
            "curation report: its validate task has not run yet (or the DAG has none).</p>",
            404,
        )
    report = found[0]
    try:
        page = storage.read_bytes(report["html"]).decode()
    except FileNotFoundError:
        raise HTTPException(404, f"the report file {report['html']} is gone from the lake") from None
    # In the run's "Curation report" tab the page is an iframe: offer it whole, in a tab of its own.
    self_url = quote(run_id, safe="") + (f"?task_id={quote(task_id, safe='')}" if task_id else "")
    opener = (
        f'<p style="float:right;margin:0"><a href="./{html.escape(self_url)}" target="_blank" rel="noopener" '
        'id="open-new-tab">Open in a new tab &#8599;</a></p>'
    )
    return HTMLResponse(page.replace("<body>", "<body>" + opener, 1))


@app.get("/report/{dag_id}/{run_id}/json", dependencies=[_can_read_run])
def report_json(dag_id: str, run_id: str) -> JSONResponse:
    found = _reports(dag_id, run_id)
    if not found:
        raise HTTPException(404, f"no curation report for {dag_id} / {run_id}")
    return JSONResponse(storage.read_json(found[0]["json"]))


def _link_target(dag_id: str, run_id: str, task_id: str, map_index: int, target: str) -> str:
    """The URI a task recorded for one of its links (``curation_links`` XCom), or 404."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.scalars(
            select(XComModel).where(
                XComModel.key == LINK_TARGETS_KEY,
                XComModel.dag_id == dag_id,
                XComModel.run_id == run_id,
                XComModel.task_id == task_id,
                XComModel.map_index == map_index,
            )
        ).first()
        value = XComModel.deserialize_value(row) if row is not None else None
    uri = value.get(target) if isinstance(value, dict) else None
    if not uri:
        raise HTTPException(404, f"task {task_id} of run {run_id} has no {target.replace('_', ' ')} (yet)")
    return uri


@app.get("/manifest/{dag_id}/{run_id}/{task_id}", dependencies=[_can_read_run])
def manifest(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> JSONResponse:
    """The stage run's manifest that the task recorded, as JSON."""
    uri = _link_target(dag_id, run_id, task_id, map_index, "manifest")
    try:
        return JSONResponse(storage.read_json(uri))
    except FileNotFoundError:
        raise HTTPException(404, f"the manifest {uri} is not written yet (or is gone)") from None


@app.get("/joblog/{dag_id}/{run_id}/{task_id}", response_class=PlainTextResponse, dependencies=[_can_read_logs])
def job_log(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> PlainTextResponse:
    """The backend job's log that the task recorded (its last ``MAX_LOG_BYTES``), as text."""
    uri = _link_target(dag_id, run_id, task_id, map_index, "job_log")
    try:
        fs, path = storage.filesystem(uri)
        size = fs.size(path)
        with fs.open(path, "rb") as f:
            if size > MAX_LOG_BYTES:
                f.seek(size - MAX_LOG_BYTES)
            data = f.read()
    except FileNotFoundError:
        raise HTTPException(404, f"the job log {uri} is gone") from None
    head = f"[last {MAX_LOG_BYTES} bytes of {size}]\n" if size > MAX_LOG_BYTES else ""
    return PlainTextResponse(head + data.decode(errors="replace"))


@app.get("/", response_class=HTMLResponse, dependencies=[_can_read_run])
def index(dag_id: str | None = None) -> HTMLResponse:
    rows = "".join(
        f"<tr><td>{html.escape(r['dag_id'])}</td><td><a href='report/{quote(r['dag_id'], safe='')}/"
        f"{quote(r['run_id'], safe='')}'>{html.escape(r['run_id'])}</a></td><td>{html.escape(str(r.get('snapshot')))}"
        f"</td><td>{html.escape(str(r.get('status')))}</td></tr>"
        for r in _reports(dag_id)
    )
    return _page(
        "Curation reports",
        f"<table border=1 cellpadding=4><tr><th>DAG</th><th>run</th><th>snapshot</th><th>checks</th></tr>{rows}</table>"
        if rows
        else "<p>No reports yet.</p>",
    )


class CurationPlugin(AirflowPlugin):
    name = "curation"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "Curation reports"}]
    external_views = [
        {
            "name": "Curation report",
            "href": "curation/report/{DAG_ID}/{RUN_ID}",
            "destination": "dag_run",
            "url_route": "curation-report",
        },
        {
            "name": "Curation reports",
            "href": "curation/",
            "destination": "nav",
            "category": "browse",
            "url_route": "curation-reports",
        },
    ]
