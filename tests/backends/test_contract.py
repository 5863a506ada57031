"""Every backend passes the same contract (tests/backends/contract.py): launch, a read-only status
(polled two hundred times, nothing on disk, in the API server's store or in Slurm changes), an idempotent
cancel, logs by byte offsets with non-ASCII text, the result after success, the message after a failure; and
under the jobs layer's follower: the log streamed once, a relaunch that is one attempt every holder follows."""

from __future__ import annotations

import pytest
from contract import CHECKS, HARNESSES, REPO, load_module

_slurm = load_module("curation_slurm_conftest_for_contract", REPO / "tests" / "backends" / "slurm" / "conftest.py")
slurm_cluster = _slurm.slurm_cluster  # the one-node Slurm of tests/backends/slurm, started on demand


@pytest.fixture(params=["local", pytest.param("slurm", marks=pytest.mark.slurm), "kubernetes", "ray"])
def harness(request, tmp_path):
    if request.param == "slurm":
        request.getfixturevalue("slurm_cluster")
    extra = {"max_resubmits": 1, "resubmit_on": ["FAILED"]} if request.param == "slurm" else {}
    h = HARNESSES[request.param](tmp_path)
    if extra:  # a failure Slurm calls retryable: the case where polling used to resubmit
        h.backend = h.make(**extra)
    yield h
    h.close()


@pytest.mark.parametrize("check", list(CHECKS))
def test_backend_contract(harness, check):
    CHECKS[check](harness)
