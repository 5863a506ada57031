"""Per-stage metrics through Airflow's ``Stats`` (StatsD or OpenTelemetry, as ``[metrics]`` configures).

Every checkpoint gate reports its stage when it opens or fails (``curation.<stage>.units_done``...);
validate adds the rows each stage kept, dropped and quarantined (see ``ValidateOperator``).
"""

from __future__ import annotations

import logging
import re
from typing import Any

log = logging.getLogger(__name__)
_NAME = re.compile(r"[^A-Za-z0-9_]")


def _stats():
    from airflow.sdk.observability.stats import Stats

    return Stats


def emit_gate_metrics(event: dict[str, Any], tags: dict[str, str] | None = None) -> None:
    """Gauges for one gate's verdict: units done, failed and total; rows, shards and bytes when it opened.

    :param event: the gate's event (``decide``'s verdict): ``stage``, ``done``, ``failed``, ``total``,
        ``status`` and, when done, ``summary``.
    :param tags: more tags (the dataset...).
    """
    stage = _NAME.sub("_", str(event.get("stage") or "stage"))
    tags = {"stage": stage, **(tags or {})}
    try:
        stats = _stats()
        for key in ("done", "failed", "total"):
            if key in event:
                stats.gauge(f"curation.{stage}.units_{key}", int(event[key]), tags=tags)
        summary = event.get("summary") or {}
        for key in ("rows", "shards", "bytes"):
            if summary.get(key) is not None:
                stats.gauge(f"curation.{stage}.gate_{key}", int(summary[key]), tags=tags)
        stats.incr(f"curation.{stage}.gate_{'opened' if event.get('status') == 'done' else 'failed'}", tags=tags)
    except Exception as e:  # noqa: BLE001 - metrics never fail a task
        log.debug("curation metrics not sent: %s", e)
