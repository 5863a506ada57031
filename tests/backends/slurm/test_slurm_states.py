"""Slurm state words and command output -> our job states (every state the backend must handle)."""

from __future__ import annotations

import pytest

from airflow_curation.backends.base import JobState
from airflow_curation.backends.slurm import (
    FAILURE_NOTES,
    compress,
    failure_word,
    map_state,
    parse_sacct,
    parse_scontrol_jobs,
    summarize,
)

# A line as `scontrol show job -o` prints it (Slurm 22.05), with the state substituted.
LINE = (
    "JobId={id} {array}JobName=curation-dedup UserId=root(0) GroupId=root(0) MCS_label=N/A "
    "Priority=4294901759 Nice=0 Account=(null) QOS=(null) JobState={state} Reason={reason} "
    "Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode={exit} RunTime=00:00:01 "
    "TimeLimit=UNLIMITED Command=/lake/_jobs/r/dedup/x/job-1.sh WorkDir=/lake StdOut=/lake/job.log Power="
)


@pytest.mark.parametrize(
    "state,expected",
    [
        ("PENDING", JobState.PENDING),
        ("CONFIGURING", JobState.PENDING),
        ("REQUEUED", JobState.PENDING),
        ("SUSPENDED", JobState.PENDING),
        ("RUNNING", JobState.RUNNING),
        ("COMPLETING", JobState.RUNNING),
        ("COMPLETED", JobState.SUCCEEDED),
        ("CANCELLED", JobState.CANCELLED),
        ("CANCELLED by 0", JobState.CANCELLED),
        ("FAILED", JobState.FAILED),
        ("TIMEOUT", JobState.FAILED),
        ("OUT_OF_MEMORY", JobState.FAILED),
        ("NODE_FAIL", JobState.FAILED),
        ("PREEMPTED", JobState.FAILED),
        ("BOOT_FAIL", JobState.FAILED),
        ("DEADLINE", JobState.FAILED),
        ("SOMETHING_NEW", JobState.UNKNOWN),
        ("", JobState.UNKNOWN),
    ],
)
def test_map_state(state, expected):
    assert map_state(state) == expected


@pytest.mark.parametrize(
    "state,reason,exit_code,expected,note",
    [
        ("COMPLETED", "None", "0:0", JobState.SUCCEEDED, "completed"),
        ("FAILED", "NonZeroExitCode", "1:0", JobState.FAILED, "exited non-zero"),
        ("TIMEOUT", "TimeLimit", "0:15", JobState.FAILED, "time limit"),
        ("OUT_OF_MEMORY", "OutOfMemory", "0:125", JobState.FAILED, "memory"),
        ("NODE_FAIL", "NodeDown", "0:0", JobState.FAILED, "node failed"),
        ("PREEMPTED", "None", "0:15", JobState.FAILED, "preempted"),
        ("CANCELLED", "None", "0:15", JobState.CANCELLED, ""),
    ],
)
def test_parse_scontrol_and_summarize(state, reason, exit_code, expected, note):
    records = parse_scontrol_jobs(LINE.format(id=41, array="", state=state, reason=reason, exit=exit_code))
    assert len(records) == 1 and records[0].job_id == "41" and records[0].state == state
    got, message = summarize(records)
    assert got == expected and note in message
    if expected == JobState.FAILED:
        assert "41" in message


def test_array_tasks_mixed_states():
    text = "\n".join(
        [
            LINE.format(id=10, array="ArrayJobId=10 ArrayTaskId=3 ", state="RUNNING", reason="None", exit="0:0"),
            LINE.format(
                id=12, array="ArrayJobId=10 ArrayTaskId=1 ", state="OUT_OF_MEMORY", reason="OutOfMemory", exit="0:125"
            ),
            LINE.format(id=11, array="ArrayJobId=10 ArrayTaskId=0 ", state="COMPLETED", reason="None", exit="0:0"),
        ]
    )
    records = parse_scontrol_jobs(text)
    assert [(r.job_id, r.array_task_id) for r in records] == [("10", "3"), ("12", "1"), ("11", "0")]
    state, message = summarize(records)
    assert state == JobState.RUNNING and "1 failed so far" in message
    state, message = summarize(records[1:])
    assert state == JobState.FAILED and "OUT_OF_MEMORY" in message and "12[1]" in message
    assert failure_word(records) == "OUT_OF_MEMORY"


def test_pending_array_is_one_record():
    records = parse_scontrol_jobs(
        LINE.format(id=7, array="ArrayJobId=7 ArrayTaskId=0-9%2 ", state="PENDING", reason="Priority", exit="0:0")
    )
    assert summarize(records)[0] == JobState.PENDING


def test_parse_sacct_when_accounting_exists():
    text = "55_0|COMPLETED|0:0|None\n55_1|NODE_FAIL|0:0|None\n56|CANCELLED by 0|0:0|Dependency\n"
    records = parse_sacct(text)
    assert [(r.job_id, r.array_task_id, r.mapped) for r in records] == [
        ("55", "0", JobState.SUCCEEDED),
        ("55", "1", JobState.FAILED),
        ("56", None, JobState.CANCELLED),
    ]
    assert failure_word(records) == "NODE_FAIL"
    assert summarize(records)[0] == JobState.FAILED


def test_every_failure_state_has_a_note():
    for word in ("FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED"):
        assert word in FAILURE_NOTES


def test_compress_array_indices():
    assert compress([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert compress([3]) == "3"
    assert compress([]) == ""
