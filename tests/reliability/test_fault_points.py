"""The fault-point mechanism itself: which hit kills, and that nothing happens when it is unset."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from airflow_curation.core import faults

# Hits "a" three times, printing before each; the process dies at the hit CURATION_FAULT names.
PROGRAM = """
from airflow_curation.core.faults import fault_point
for i in range(1, 4):
    print(i, flush=True)
    fault_point("other")
    fault_point("a")
print("end", flush=True)
"""


def _run(fault: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != faults.ENV}
    if fault is not None:
        env[faults.ENV] = fault
    return subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize(
    "fault, returncode, printed",
    [
        (None, 0, "1 2 3 end"),
        ("", 0, "1 2 3 end"),
        ("b", 0, "1 2 3 end"),
        ("a", -signal.SIGKILL, "1"),
        ("a@2", -signal.SIGKILL, "1 2"),
        ("a@3", -signal.SIGKILL, "1 2 3"),
        ("a@4", 0, "1 2 3 end"),
    ],
)
def test_the_named_hit_kills_the_process(fault, returncode, printed):
    proc = _run(fault)
    assert (proc.returncode, proc.stdout.split()) == (returncode, printed.split()), proc.stderr


@pytest.mark.parametrize("value", ["a@0", "a@x", "a@", "@2"])
def test_a_malformed_setting_is_refused(value):
    with pytest.raises(ValueError, match="CURATION_FAULT"):
        faults.parse(value)
    assert _run(value).returncode == 1  # refused at import: the job fails, it does not run unfaulted
