"""The pytest-xdist work units of the suite (``make test`` runs it on workers; tests/conftest.py's scheduler).

Each worker is a pytest session of its own with its own Airflow home. The tests that share one session's
cluster, server or engine run on one worker, so each is started once (the Slurm cluster, which
test_contract.py's Slurm case starts too; the vLLM engine and Ray Data of tests/enrich; the journey's Airflow
stack; the oracle venvs' users; ...); every other module is a work unit of its own, its module fixtures set
up once. Units go out in this order, then in collection order: the longest first, so no worker is left alone
with a long one at the end. (A module of its own: test modules cannot import tests/conftest.py by name,
every folder's conftest is a ``conftest``.)
"""

from __future__ import annotations

SHARED_SESSION_GROUPS = {
    "tests/journey/": "journey",
    "tests/backends/slurm/": "slurm",
    "tests/backends/test_contract.py": "slurm",
    "tests/enrich/": "enrich",
    "tests/preprocess/": "preprocess",
    "tests/s3/": "s3",
    "tests/dedup/": "dedup",
    "tests/export/": "export",
}


def xdist_group(nodeid: str) -> str:
    """The work unit of a test: its shared session's group, else its module."""
    path = "tests/" + nodeid.split("::", 1)[0].split("tests/", 1)[-1]
    for prefix, group in SHARED_SESSION_GROUPS.items():
        if path.startswith(prefix):
            return group
    return path
