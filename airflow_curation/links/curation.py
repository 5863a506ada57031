"""Extra links: the stage run's manifest and the backend job's log.

The URL is computed when the task runs (it depends on the lake, the run id and the job) and pushed to
XCom under ``_link_<ClassName>``, which is where the UI reads it from.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperatorLink
from airflow.sdk.bases.xcom import BaseXCom


def _as_url(uri: str) -> str:
    return uri if "://" in uri else f"file://{uri}"


class _PushedLink(BaseOperatorLink):
    name = "link"

    def get_link(self, operator, *, ti_key) -> str:
        return BaseXCom.get_value(key=self.xcom_key, ti_key=ti_key) or ""

    @classmethod
    def persist(cls, context: Any, uri: str | None) -> None:
        ti = context.get("ti") if hasattr(context, "get") else None
        if uri and ti is not None:
            ti.xcom_push(key=f"_link_{cls.__name__}", value=_as_url(uri))


class CurationManifestLink(_PushedLink):
    """The manifest of the stage run (what XCom points to)."""

    name = "Curation manifest"


class CurationJobLogLink(_PushedLink):
    """The backend job's log (a file for the local backend; a backend may push its own URL)."""

    name = "Curation job log"
