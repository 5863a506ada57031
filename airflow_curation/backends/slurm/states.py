"""Slurm's state words and command output -> our job states."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby

from airflow_curation.backends.base import JobState

# Slurm job states (``scontrol``/``sacct`` spelling) -> our states, with a note for the failures.
_PENDING = {
    "PENDING",
    "CONFIGURING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "RESIZING",
    "SUSPENDED",
    "STAGE_OUT",
    "SIGNALING",
    "SPECIAL_EXIT",
}
_RUNNING = {"RUNNING", "COMPLETING", "STOPPED"}
FAILURE_NOTES = {
    "FAILED": "a task exited non-zero",
    "TIMEOUT": "hit its time limit; raise --time (resubmission resumes from the checkpoints)",
    "OUT_OF_MEMORY": "ran out of memory (OOM); raise the backend option mem (sbatch --mem) or use more shard_groups",
    "NODE_FAIL": "its node failed",
    "BOOT_FAIL": "its node failed to boot",
    "PREEMPTED": "was preempted by a higher-priority job",
    "DEADLINE": "missed its deadline",
    "REVOKED": "was revoked (federation)",
}
# Final states after which running the unfinished units again may well succeed (GONE: the job vanished
# without a result; CANCELLED: an array task cancelled while the run was not, by an admin or a
# preemption that cancels: Slurm's requeue semantics, within the follower's max_resubmits).
DEFAULT_RESUBMIT_ON = ("TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "PREEMPTED", "CANCELLED", "GONE")
# What happened to an array task that ended in each state, for the follower's log.
TASK_ENDS = {
    "CANCELLED": "was cancelled",
    "NODE_FAIL": "lost its node",
    "BOOT_FAIL": "lost its node at boot",
    "PREEMPTED": "was preempted",
    "TIMEOUT": "hit its time limit",
    "OUT_OF_MEMORY": "ran out of memory",
    "DEADLINE": "missed its deadline",
    "FAILED": "failed",
}
_STATES = (
    (_PENDING, JobState.PENDING),
    (_RUNNING, JobState.RUNNING),
    ({"COMPLETED"}, JobState.SUCCEEDED),
    ({"CANCELLED"}, JobState.CANCELLED),
    (FAILURE_NOTES, JobState.FAILED),
)
_FIELD = re.compile(r"(?:^|\s)(JobId|ArrayJobId|ArrayTaskId|JobState|Reason|ExitCode)=(\S*)")


def map_state(slurm_state: str) -> JobState:
    """Our state for a Slurm state word (``CANCELLED by 0`` counts as ``CANCELLED``)."""
    word = slurm_state.split()[0].rstrip("+").upper() if slurm_state.strip() else ""
    for words, state in _STATES:
        if word in words:
            return state
    return JobState.UNKNOWN


@dataclass
class SlurmJobRecord:
    """One job (or array task) as ``scontrol`` or ``sacct`` reports it."""

    job_id: str
    state: str
    reason: str = ""
    exit_code: str = ""
    array_task_id: str | None = None

    @property
    def mapped(self) -> JobState:
        return map_state(self.state)


def parse_scontrol_jobs(text: str) -> list[SlurmJobRecord]:
    """Parse ``scontrol show job -o`` output: one job or array task per line."""
    records = []
    for line in text.splitlines():
        fields: dict[str, str] = {}
        for key, value in _FIELD.findall(line):
            fields.setdefault(key, value)  # first occurrence: the job's own field, not a later value
        if "JobId" in fields and "JobState" in fields:
            records.append(
                SlurmJobRecord(
                    fields["JobId"],
                    fields["JobState"],
                    fields.get("Reason", ""),
                    fields.get("ExitCode", ""),
                    fields.get("ArrayTaskId"),
                )
            )
    return records


def parse_sacct(text: str) -> list[SlurmJobRecord]:
    """Parse ``sacct -n -P -X -o JobID,State,ExitCode,Reason`` output (``1234_5`` is an array task)."""
    records = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 3 or not parts[0]:
            continue
        job_id, _, task = parts[0].partition("_")
        records.append(SlurmJobRecord(job_id, parts[1], parts[3] if len(parts) > 3 else "", parts[2], task or None))
    return records


def summarize(records: Sequence[SlurmJobRecord]) -> tuple[JobState, str]:
    """One state for a job and its array tasks: failures first, then running, pending, success."""
    if not records:
        return JobState.UNKNOWN, "no record"
    states = [r.mapped for r in records]
    bad = [r for r in records if r.mapped in (JobState.FAILED, JobState.CANCELLED)]
    if any(s in (JobState.RUNNING, JobState.PENDING, JobState.UNKNOWN) for s in states):
        running = sum(s == JobState.RUNNING for s in states)
        state = JobState.RUNNING if running else JobState.PENDING
        if any(s == JobState.UNKNOWN for s in states):
            state = JobState.RUNNING if running else JobState.UNKNOWN
        return state, f"{running} running, {sum(s == JobState.PENDING for s in states)} pending" + (
            f", {len(bad)} failed so far" if bad else ""
        )
    if bad:
        words = sorted({r.state.split()[0] for r in bad})
        cancelled_only = all(r.mapped == JobState.CANCELLED for r in bad)
        notes = "; ".join(f"{w}: {FAILURE_NOTES.get(w, w.lower())}" for w in words)
        who = ", ".join(_label(r) for r in bad[:10])
        return (JobState.CANCELLED if cancelled_only else JobState.FAILED), f"{notes} ({who})"
    return JobState.SUCCEEDED, "completed"


def _label(r: SlurmJobRecord) -> str:
    return (
        f"{r.job_id}"
        + (f"[{r.array_task_id}]" if r.array_task_id is not None else "")
        + (f" exit {r.exit_code}" if r.exit_code not in ("", "0:0") else "")
    )


def failure_word(records: Sequence[SlurmJobRecord]) -> str | None:
    """The Slurm state that explains a failure; the most specific cause wins (an infrastructure failure,
    or an array task cancelled under a run that was not, explains a collect job's FAILED)."""
    bad = (JobState.FAILED, JobState.CANCELLED)
    words = [r.state.split()[0].upper() for r in records if r.mapped in bad]
    for word in ("NODE_FAIL", "BOOT_FAIL", "PREEMPTED", "TIMEOUT", "OUT_OF_MEMORY", "DEADLINE", "CANCELLED"):
        if word in words:
            return word
    return words[0] if words else None


def task_ends(records: Sequence[SlurmJobRecord], groups: int) -> str:
    """What happened to the array tasks that did not complete: ``group 2/3 was cancelled (CANCELLED by
    0)``; the task id is the group's index."""
    bad = [r for r in records if r.array_task_id is not None and r.mapped in (JobState.FAILED, JobState.CANCELLED)]
    return "; ".join(
        f"group {r.array_task_id}/{groups} {TASK_ENDS.get(r.state.split()[0].upper(), 'ended')} ({r.state})"
        for r in bad[:10]
    )


def compress(indices: Sequence[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``"0-2,5,7-8"`` (Slurm's --array syntax)."""
    # Consecutive indices share their offset from their position: each group is one span.
    spans = [[i for _, i in run] for _, run in groupby(enumerate(sorted(set(indices))), lambda p: p[1] - p[0])]
    return ",".join(f"{s[0]}-{s[-1]}" if len(s) > 1 else f"{s[0]}" for s in spans)
