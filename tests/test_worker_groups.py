"""The pytest-xdist work units (tests/worker_units.py): every test module that starts the session's Slurm
cluster runs on the Slurm group's worker (two workers running ``slurm_up.sh`` at once would race to start
one cluster), and each shared session's modules form one unit."""

from __future__ import annotations

from pathlib import Path

from worker_units import SHARED_SESSION_GROUPS, xdist_group

TESTS = Path(__file__).resolve().parent


def _starts_slurm(path: Path) -> bool:
    text = path.read_text().replace('" / "', "/")
    return "slurm_cluster" in text or "backends/slurm/conftest.py" in text


def test_every_module_that_starts_the_slurm_cluster_is_in_the_slurm_group():
    users = [p for p in TESTS.rglob("test_*.py") if p.name != Path(__file__).name and _starts_slurm(p)]
    assert len(users) > 5  # the Slurm backend's tests and the contract's Slurm case
    assert {xdist_group(f"tests/{p.relative_to(TESTS)}::test_x") for p in users} == {"slurm"}


def test_shared_sessions_are_one_unit_and_other_modules_their_own():
    assert xdist_group("tests/enrich/test_ray.py::test_a") == xdist_group("tests/enrich/test_vllm.py::test_b[x]")
    assert xdist_group("tests/backends/test_contract.py::test_backend_contract[slurm-logs]") == "slurm"
    assert (
        xdist_group("tests/backends/kubernetes/test_k8s_hook.py::test_a")
        == "tests/backends/kubernetes/test_k8s_hook.py"
    )
    # an absolute node id (pytest run from elsewhere) maps the same way
    assert xdist_group("/repo/tests/journey/test_journey.py::test_a") == "journey"
    assert set(SHARED_SESSION_GROUPS.values()) >= {"slurm", "enrich", "journey"}
