"""A stand-in for the Airflow worker process that runs one stage operator, for test_worker_killed.

``python airflow_worker.py STATE LAKE INPUTS WORK_DIR PYTHON RESULT`` runs an ``IngestOperator``'s ``execute()``
the way the task runner does (a context with a task state store), polling the job in this process
(``deferrable=False``: the worker holds the task while the job runs, the case a worker crash hits).
The task state store is kept in the file STATE: Airflow keeps it in its database, which survives a
worker; a file survives this process's SIGKILL the same way. On success the XCom summary goes to RESULT.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

SNAPSHOT = "2026-11-30"


class FileTaskStateStore:
    """The task state store's ``get``/``set``/``delete`` over a JSON file, replaced atomically."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def _load(self) -> dict[str, Any]:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def get(self, key: str, default: Any = None) -> Any:
        return self._load().get(key, default)

    def set(self, key: str, value: Any, *, retention=None) -> None:
        data = {**self._load(), key: value}
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.path)

    def delete(self, key: str) -> None:
        data = self._load()
        data.pop(key, None)
        self.path.write_text(json.dumps(data))


def main(argv: list[str]) -> int:
    from curation_airflow_helpers import task_context

    from airflow_curation.operators.ingest import IngestOperator

    state, lake, inputs, work_dir, python, result = argv

    def event(what: str) -> None:
        with open(f"{state}.events", "a") as f:
            f.write(f"{os.getpid()} {what}\n")

    class ObservedIngestOperator(IngestOperator):
        """Records ``<worker pid> <event>`` lines in STATE.events: ``status:<state>`` when it asks for a
        stored job's status (a retry), ``polling`` once it follows a job; so the test knows where a
        worker is without timing it."""

        def get_job_status(self, external_id, context):
            status = super().get_job_status(external_id, context)
            event(f"status:{status}")
            return status

        def poll_until_complete(self, external_id, context):
            event("polling")
            return super().poll_until_complete(external_id, context)

    op = ObservedIngestOperator(
        task_id="ingest",
        inputs=inputs,
        lake=lake,
        dataset="web",
        snapshot=SNAPSHOT,
        backend_options={"work_dir": work_dir, "python": python},
        deferrable=False,
        poll_interval=0.05,
        config={"target_shard_bytes": 4096, "row_group_rows": 16},
    )
    summary = op.execute(task_context(FileTaskStateStore(state)))
    Path(result).write_text(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
