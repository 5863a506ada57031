"""Extra links: the stage run's manifest and job log, and the run's curation report.

The Airflow 3.3 UI shows only same-origin or http(s) links, so a lake file (``/data/lake/...`` or
``s3://...``) is never linked directly: the ``curation`` UI plugin serves it, and the link points there.

How a link gets to the UI: when a task ends, Airflow's task runner calls :meth:`get_link` on the
operator that ran and stores the result under ``_link_<ClassName>``; the UI reads that. So
:meth:`get_link` reads nothing (no XCom look-up, hence no "XCom not found" error for a link that has
nothing behind it): it returns the plugin's URL when the operator recorded a target during this
attempt (:meth:`persist`), else ``""``, which the UI does not show. What the plugin serves is found
through the ``curation_links`` XCom, pushed by :meth:`persist` only when there is something to link.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

PLUGIN_PREFIX = "/curation"
#: XCom key of ``{target: uri}``: what the plugin may serve for a task instance.
LINK_TARGETS_KEY = "curation_links"
_ATTR = "_curation_link_targets"


def api_base_url() -> str:
    """The api-server's ``[api] base_url`` without a trailing slash ("" when unset: a relative link)."""
    try:
        from airflow.configuration import conf

        return (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    except Exception:  # noqa: BLE001 - a relative link still works from the UI
        return ""


def _ti_path(ti_key: Any) -> str:
    path = "/".join(quote(str(p), safe="") for p in (ti_key.dag_id, ti_key.run_id, ti_key.task_id))
    map_index = getattr(ti_key, "map_index", -1)
    return path + (f"?map_index={map_index}" if map_index is not None and map_index >= 0 else "")


def link_targets(operator: Any) -> dict[str, str]:
    """What the operator recorded for its links during this attempt."""
    return dict(getattr(operator, "__dict__", {}).get(_ATTR) or {})


class CurationPluginLink(BaseOperatorLink):
    """A link to something the ``curation`` plugin serves for one task instance.

    :cvar target: the key under which :meth:`persist` records the thing to serve.
    :cvar route: the plugin's route (``<route>/<dag_id>/<run_id>/<task_id>``).
    """

    name = "link"
    target = ""
    route = ""

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        uri = link_targets(operator).get(self.target)
        if not uri:
            return ""
        return self.url(ti_key, uri)

    def url(self, ti_key: Any, uri: str) -> str:
        """The URL for ``ti_key``, given the recorded ``uri``."""
        return f"{api_base_url()}{PLUGIN_PREFIX}/{self.route}/{_ti_path(ti_key)}"

    @classmethod
    def persist(cls, context: Any, uri: str | None) -> None:
        """Record ``uri`` as this link's target (on the operator, and for the plugin in XCom).

        :param context: the task's context.
        :param uri: what to serve (a lake file) or link (an http URL); nothing is recorded when empty.
        """
        task = context.get("task") if hasattr(context, "get") else None
        ti = context.get("ti") if hasattr(context, "get") else None
        if not uri or task is None:
            return
        targets = task.__dict__.setdefault(_ATTR, {})
        if targets.get(cls.target) == uri:
            return
        targets[cls.target] = uri
        if ti is not None:
            ti.xcom_push(key=LINK_TARGETS_KEY, value=dict(targets))


class CurationManifestLink(CurationPluginLink):
    """The manifest of the stage run (what XCom points to), served by the plugin as JSON."""

    name = "Curation manifest"
    target = "manifest"
    route = "manifest"


class CurationJobLogLink(CurationPluginLink):
    """The backend job's log, served by the plugin; a backend's own web page (a dashboard) is linked as is."""

    name = "Curation job log"
    target = "job_log"
    route = "joblog"

    def url(self, ti_key: Any, uri: str) -> str:
        if uri.startswith(("http://", "https://")):
            return uri
        return super().url(ti_key, uri)


class CurationReportLink(CurationPluginLink):
    """The run's curation report: the "Curation report" tab of the run's page in the Airflow UI."""

    name = "Curation report"
    target = "report"

    def url(self, ti_key: Any, uri: str) -> str:
        dag_id, run_id = quote(ti_key.dag_id, safe=""), quote(ti_key.run_id, safe="")
        return f"{api_base_url()}/dags/{dag_id}/runs/{run_id}/plugin/curation-report"
