"""A curation pipeline as an Airflow DAG, wired from what each stage declares.

Every stage added is a TaskGroup named after it: ``<stage>.launch`` submits the stage's job and returns at
once; ``<stage>.checkpoints`` (a :class:`ShardCheckpointSensor`) is done when every shard of the run has a
checkpoint; ``<stage>.first_shards`` (the same gate with a quorum) is there only when a later stage streams
on this one. A stage that reports on the whole run (validate, ``AFTER_ALL``) is one task, after every group.

Nothing about the order is written here or in the DAG file: the stage classes declare it.

* ``UPSTREAM``: the stages it reads, nearest first. Its input is the manifest of the first of those in the
  pipeline that ran; the list stops at the first that always runs (a later one could never be read).
* ``OPTIONAL_WITHOUT``: the setting without which it has nothing to do. Such a stage, and one that reads
  only optional stages, is ``optional``: its launch skips itself when unconfigured (or when nothing it reads
  ran), its gates skip with it, and the stages after it run anyway (``trigger_rule="none_failed"``).
* ``STREAMS``: it starts on its upstream's ``first_shards`` gate instead of the full one.

A stage registered by a plugin (an entry point of ``airflow_curation.stages``) lands where its ``UPSTREAM``
puts it: ``pipeline.add(TextLengthOperator, min_chars=200)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow.sdk import TaskGroup

from airflow_curation.operators.base import CurationStageOperator
from airflow_curation.sensors.shard_checkpoint import ShardCheckpointSensor
from airflow_curation.stages import stage_class

LAUNCH, CHECKPOINTS, FIRST_SHARDS = "launch", "checkpoints", "first_shards"


def gate_id(stage: str, gate: str = CHECKPOINTS) -> str:
    """The task id of a stage's gate (``dedup.checkpoints``), or of its launch (``gate="launch"``)."""
    return f"{stage}.{gate}"


def first_that_ran(task_ids: list[str], key: str = "manifest_uri") -> str:
    """A template: the ``key`` XCom of the first of ``task_ids`` that has one (a skipped task has none)."""
    return "{{ " + " or ".join(f"ti.xcom_pull(task_ids='{t}', key='{key}')" for t in task_ids) + " }}"


@dataclass
class StageTasks:
    """What the pipeline made of one stage (its gates are None where it has none)."""

    name: str
    launch: CurationStageOperator
    reads: list[str]
    optional: bool
    checkpoints: ShardCheckpointSensor | None = None
    first_shards: ShardCheckpointSensor | None = None


class Pipeline:
    """Stages added in any order, built into the current DAG by :meth:`build`.

    :param common: arguments of every stage task (lake, dataset, snapshot, backend...).
    :param launch: more arguments of every launch task (``wait=False``, the failure budget, poll interval).
    :param gate: arguments of every gate (the failure budget, poll interval).
    :param quorum: the ``first_shards`` gates' quorum (a fraction of the upstream's units, or a template).
    """

    def __init__(
        self,
        *,
        common: dict[str, Any],
        launch: dict[str, Any] | None = None,
        gate: dict[str, Any] | None = None,
        quorum: float | str = 0.01,
    ) -> None:
        self.common, self.launch, self.gate, self.quorum = common, launch or {}, gate or {}, quorum
        self._added: dict[str, tuple[type[CurationStageOperator], dict[str, Any]]] = {}

    def add(self, operator: type[CurationStageOperator], **kwargs: Any) -> None:
        """Add ``operator``'s stage with these arguments (its settings and Airflow's; not its input)."""
        name = operator.stage
        if name in self._added:
            raise ValueError(f"stage {name!r} is in the pipeline twice")
        self._added[name] = (operator, kwargs)

    # -- what the declarations say --------------------------------------------------------------------
    def reads(self, name: str) -> list[str]:
        """The stages of this pipeline that ``name`` reads, nearest first, up to the first that always runs."""
        cls = stage_class(name)
        if cls.UPSTREAM is None:
            return []
        out: list[str] = []
        for upstream in cls.UPSTREAM:
            if upstream in self._added and upstream != name:
                out.append(upstream)
                if not self.optional(upstream):
                    break
        if not out:
            raise ValueError(f"stage {name!r} reads one of {list(cls.UPSTREAM)}, and none is in the pipeline")
        return out

    def optional(self, name: str, _seen: tuple[str, ...] = ()) -> bool:
        """Whether ``name`` may have nothing to do: it declares ``OPTIONAL_WITHOUT``, or all it reads is optional."""
        cls = stage_class(name)
        if cls.OPTIONAL_WITHOUT:
            return True
        if name in _seen:
            raise ValueError(f"the stages' UPSTREAM declarations form a cycle: {' -> '.join((*_seen, name))}")
        present = [u for u in (cls.UPSTREAM or ()) if u in self._added and u != name]
        return bool(present) and all(self.optional(u, (*_seen, name)) for u in present)

    def order(self) -> list[str]:
        """The stages, each after those it reads (``AFTER_ALL`` ones last); ties keep the order they were added."""
        done: list[str] = []

        def visit(name: str, path: tuple[str, ...]) -> None:
            if name in done:
                return
            if name in path:
                raise ValueError(f"the stages' UPSTREAM declarations form a cycle: {' -> '.join((*path, name))}")
            for upstream in reversed(self.reads(name)):
                visit(upstream, (*path, name))
            done.append(name)

        last = [n for n in self._added if stage_class(n).AFTER_ALL]
        for name in [n for n in self._added if n not in last] + last:
            visit(name, ())
        return done

    # -- the DAG ---------------------------------------------------------------------------------------
    def build(self) -> dict[str, StageTasks]:
        """Make every stage's tasks in the current DAG and wire them; returns them by stage name."""
        order = self.order()
        reads = {n: self.reads(n) for n in order}
        streams = {n: stage_class(n).STREAMS for n in order}
        readers = {n: [d for d in order if n in reads[d]] for n in order}
        built: dict[str, StageTasks] = {}
        for name in order:
            op_cls, kwargs = self._added[name]
            ups = reads[name]
            after_all = stage_class(name).AFTER_ALL
            gate = CHECKPOINTS if after_all or not streams[name] else FIRST_SHARDS
            args: dict[str, Any] = {**self.common, **({} if after_all else self.launch), **kwargs}
            if ups:
                args["input_manifest"] = first_that_ran([gate_id(u, gate) for u in ups])
            optional = self.optional(name)
            if optional:
                args["optional"] = True
            if any(self.optional(u) for u in ups) or after_all:
                args.setdefault("trigger_rule", "none_failed")  # runs when an optional upstream was skipped
            if after_all:
                task = op_cls(task_id=name, **args)
                tasks = StageTasks(name, task, ups, optional)
                for other in built.values():
                    (other.checkpoints or other.launch) >> task
            else:
                with TaskGroup(group_id=name, tooltip=_tooltip(name, ups, optional)):
                    task = op_cls(task_id=LAUNCH, **args)
                    tasks = StageTasks(name, task, ups, optional, checkpoints=self._gate(task, CHECKPOINTS))
                    if any(streams[d] and not stage_class(d).AFTER_ALL for d in readers[name]):
                        tasks.first_shards = self._gate(task, FIRST_SHARDS, quorum=self.quorum)
            for upstream in ups:
                source = built[upstream]
                (source.first_shards if gate == FIRST_SHARDS else source.checkpoints) >> task
                if gate == FIRST_SHARDS and not optional and source.checkpoints is not None:
                    # The full gate of a stage streamed on is watched once this reader is under way: it gates
                    # nothing the reader needs, and a serial runner (dag.test) must not block on it first. Only
                    # a reader that always runs: a skipped one would skip the gate with it.
                    task >> source.checkpoints
                if gate == FIRST_SHARDS and not self.optional(upstream) and source.checkpoints is not None:
                    # ...and before the reader's own full gate: a serial runner runs one gate's trigger at a time,
                    # to its end, and the reader's gate waits for the reader, which waits for the source's run,
                    # whose relaunch (a cancelled task) only the source's full gate makes. A deployment loses
                    # nothing: the reader cannot complete before its source. Not from an optional source: its
                    # skip would skip the reader's gate.
                    source.checkpoints >> tasks.checkpoints
            built[name] = tasks
        return built

    def _gate(self, launch: CurationStageOperator, which: str, **kwargs: Any) -> ShardCheckpointSensor:
        gate = ShardCheckpointSensor(
            task_id=which,
            manifest_uri=launch.output["manifest_uri"],
            job=launch.output["job"],
            **{**self.gate, **kwargs},
        )
        launch >> gate
        return gate


def _tooltip(name: str, reads: list[str], optional: bool) -> str:
    what = (
        f"reads the first of {', '.join(reads)} that ran"
        if len(reads) > 1
        else (f"reads {reads[0]}" if reads else "reads the input files")
    )
    return f"{name}: {what}{'; skipped when not configured' if optional else ''}"
