"""Where the model runs: in this process (``local``) or on Ray Data with engine actors (``ray``).

Both take the shard's chunks (``checkpoint_rows`` rows each, with the positions of the rows to
enrich) and yield each chunk's task columns in chunk order, so the stage can write one part file per
chunk as soon as it is complete.

Ray: one ``map_batches`` over an actor class per shard. Each actor loads the engine once and serves
batches of ``batch_size`` rows; ``replicas`` actors run side by side (data parallel), each with
``gpus_per_replica`` GPUs (tensor parallel inside vLLM when above one) and ``cpus_per_replica`` CPUs,
placed (``auto`` resolved, the cluster checked) by ``resources.place`` before any actor starts.
Each chunk is one input block and order is preserved, so a chunk's results come back to the driver as
soon as it is done and its part is written while later chunks still run (a kill mid-shard keeps them).
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from airflow_curation.core import faults
from airflow_curation.core.faults import fault_point
from airflow_curation.core.schema import TEXT
from airflow_curation.stages.enrich.model_runtimes import EngineSpec, get_engine
from airflow_curation.stages.enrich.resources import Placement, local_available, place, ray_available
from airflow_curation.stages.enrich.tasks import make_task
from airflow_curation.stages.mappers import ray as ray_cluster

log = logging.getLogger(__name__)


@dataclass
class Chunk:
    start: int  # first shard row of the chunk
    end: int  # one past its last row
    positions: list[int]  # shard rows to enrich (the others were filtered out upstream or are empty)
    texts: list[str]


def _concat(parts: list[dict[str, list]]) -> dict[str, list]:
    out: dict[str, list] = {}
    for p in parts:
        for k, v in p.items():
            out.setdefault(k, []).extend(v)
    return out


def run_batches(task, engine, texts: list[str], batch_size: int) -> dict[str, list]:
    """Batches of similar lengths (less padding for engines that pad, as sentence-transformers does), with
    the results put back in the input order."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    ordered = [texts[i] for i in order]
    out = _concat([task.run(engine, ordered[i : i + batch_size]) for i in range(0, len(ordered), batch_size)])
    restored: dict[str, list] = {}
    for key, values in out.items():
        col: list = [None] * len(texts)
        for pos, v in zip(order, values):
            col[pos] = v
        restored[key] = col
    return restored


class LocalExecutor:
    """The engine in this process (cached per process: one model load for every shard and run)."""

    def __init__(self, config: dict[str, Any], spec: EngineSpec) -> None:
        self.task = make_task(config)
        self.placement = place(config, local_available(), replicas=1)
        self.spec = replace(spec, device=self.placement.device)
        self.batch_size = int(config["batch_size"])
        self.rows_computed = 0

    def run_chunks(self, chunks: Iterable[Chunk]) -> Iterator[tuple[Chunk, dict[str, list]]]:
        engine = None
        for chunk in chunks:
            cols: dict[str, list] = {}
            if chunk.texts:
                engine = engine or get_engine(self.spec)
                cols = run_batches(self.task, engine, chunk.texts, self.batch_size)
                self.rows_computed += len(chunk.texts)
            yield chunk, cols

    def close(self) -> None:
        """Engines stay cached for the process; see ``model_runtimes.release_engines``."""


class _EngineActor:
    """A Ray Data actor: loads the engine once, then enriches batches of rows."""

    def __init__(self, config: dict[str, Any], spec: dict[str, Any]) -> None:
        self.task = make_task(config)
        self.engine = get_engine(EngineSpec(**spec))
        self.chunk_rows = int(config.get("checkpoint_rows") or 0)

    def __call__(self, batch: pa.Table) -> pa.Table:
        fault_point("enrich.actor_batch")
        # A test holds the first batch past the shard's first chunk to kill the driver mid-shard (by position:
        # a chunk's rows come in one or more batches).
        if self.chunk_rows and batch.num_rows and batch.column("_pos")[0].as_py() >= self.chunk_rows:
            fault_point("enrich.actor_batch_after_first_chunk")
        cols = self.task.run(self.engine, batch.column(TEXT).to_pylist())
        return pa.table({"_pos": batch.column("_pos"), **cols})


def _fault_env() -> dict[str, str]:
    """The fault-injection variables of this process, for the engine actors (unset in production)."""
    return {k: v for k in (faults.ENV, faults.HOLD_ENV) if (v := os.environ.get(k))}


def _in_order() -> dict[str, Any]:
    """The engine actors' options: their tasks run in submission order (Ray Data lets an actor run them out of
    order by default). Chunks come back in order anyway (``preserve_order``), so a later chunk done first only
    waits, and a kill loses it; the blocks are in the object store before the first task, so no task waits on an
    argument behind another."""
    return {"allow_out_of_order_execution": False}


def map_on_ray_data(
    config: dict[str, Any], spec: dict[str, Any], placement: Placement, chunks: list[Chunk]
) -> Iterator[dict[str, list]]:
    """Each chunk's columns, in chunk order, as soon as Ray Data has done the chunk.

    Two things make a chunk come back while later chunks still run (so a job killed mid-shard keeps the
    parts of the chunks done), both needed:

    - one input block per chunk: a map task returns its output block when its whole input is done, so
      with the shard as one block nothing comes back before the shard's last row;
    - ``prefetch_batches=0``: with Ray Data's default prefetch, ``iter_batches`` hands out a block only
      once the next one is ready too, i.e. a chunk only after the following chunk is done (the last two
      at the end), so a kill lost one chunk more than it should and a one-chunk-at-a-time test saw none.
      The actors run ahead regardless; only the driver's fetch of each small result block is not overlapped.

    Must run in a Ray driver or worker, not a Ray Client.
    """
    import ray.data

    blocks = [
        pa.table({"_pos": pa.array(c.positions, pa.int64()), TEXT: pa.array(c.texts, pa.string())})
        for c in chunks
        if c.positions
    ]
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True  # rows come back in shard order: parts stream out
    ctx.enable_progress_bars = False
    ds = ray.data.from_arrow(blocks) if blocks else None
    env = _fault_env()
    if ds is not None:
        ds = ds.map_batches(
            _EngineActor,
            fn_constructor_kwargs={"config": dict(config), "spec": spec},
            batch_size=int(config["batch_size"]),
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=placement.replicas),
            runtime_env={"env_vars": env} if env else None,
            ray_remote_args_fn=_in_order,
            **placement.ray_map_args(),
        )
    batches = iter(
        ds.iter_batches(batch_format="pyarrow", batch_size=None, prefetch_batches=0) if ds is not None else ()
    )
    pending: list[dict[str, list]] = []
    have = 0
    for chunk in chunks:
        while have < len(chunk.positions):
            batch = next(batches, None)
            if batch is None:
                raise RuntimeError(f"ray executor: rows from {chunk.start} on never came back")
            take = batch.slice(0, len(chunk.positions) - have)
            if take.num_rows < batch.num_rows:  # a batch spans chunks: keep its rest for the next one
                batches = itertools.chain([batch.slice(take.num_rows)], batches)
            have += take.num_rows
            pending.append({k: take.column(k).to_pylist() for k in take.column_names})
        cols = _concat(pending)
        if cols.pop("_pos", []) != chunk.positions:
            raise RuntimeError("ray executor: rows came back out of order")
        yield cols
        pending, have = [], 0


class _ShardDriver:
    """Runs :func:`map_on_ray_data` on the cluster for a Ray Client (``ray://``) driver, which cannot run
    Ray Data itself; the client pulls each chunk's columns with :meth:`next`."""

    def __init__(self, config: dict[str, Any], spec: dict[str, Any], placement: Placement, chunks: list[Chunk]) -> None:
        self._results = map_on_ray_data(config, spec, placement, chunks)

    def next(self) -> dict[str, list] | None:
        return next(self._results, None)


class RayExecutor:
    """Ray Data ``map_batches`` with engine actors, one dataset per shard (see ``stages/mappers/ray.py`` for
    which Ray: a new local one, or a cluster by address)."""

    def __init__(self, config: dict[str, Any], spec: EngineSpec) -> None:
        self.config = config
        self.spec = spec
        self.rows_computed = 0
        self.target, self._started = ray_cluster.connect(
            config.get("ray_address"), config.get("ray_num_cpus"), config.get("ray_num_gpus")
        )
        try:  # before any actor asks: Ray would wait forever for resources the cluster does not have
            self.placement = place(config, ray_available(config.get("ray_address")))
        except ValueError:
            self.close()
            raise
        self.spec = replace(spec, device=self.placement.device)

    def run_chunks(self, chunks: Iterable[Chunk]) -> Iterator[tuple[Chunk, dict[str, list]]]:
        chunks = list(chunks)  # the shard's chunks whole: Ray Data maps them as one dataset (the local one streams)
        if not any(c.positions for c in chunks):
            results: Iterator[dict[str, list]] = iter([{} for _ in chunks])
        elif self.target.client:
            results = self._through_client(chunks)
        else:
            results = map_on_ray_data(self.config, self.spec.to_dict(), self.placement, chunks)
        for chunk, cols in zip(chunks, results, strict=True):
            self.rows_computed += len(chunk.positions)
            yield chunk, cols

    def _through_client(self, chunks: list[Chunk]) -> Iterator[dict[str, list]]:
        import ray

        # num_cpus=0: the driver actor only coordinates; the engine actors hold the CPUs and GPUs. The
        # client's environment does not reach the cluster: the fault variables (tests) go along explicitly.
        options: dict[str, Any] = {"num_cpus": 0}
        if env := _fault_env():
            options["runtime_env"] = {"env_vars": env}
        driver = (
            ray.remote(_ShardDriver)
            .options(**options)
            .remote(dict(self.config), self.spec.to_dict(), self.placement, chunks)
        )
        try:
            for _ in chunks:
                yield ray.get(driver.next.remote())
        finally:
            ray.kill(driver)

    def close(self) -> None:
        if self._started:
            ray_cluster.disconnect()
            self._started = False


EXECUTORS = {"local": LocalExecutor, "ray": RayExecutor}
