"""Where the model runs: in this process (``local``) or on Ray Data with engine actors (``ray``).

Both take the shard's chunks (``checkpoint_rows`` rows each, with the positions of the rows to
enrich) and yield each chunk's task columns in chunk order, so the stage can write one part file per
chunk as soon as it is complete.

Ray: one ``map_batches`` over an actor class per shard. Each actor loads the engine once and serves
batches of ``batch_size`` rows; ``replicas`` actors run side by side (data parallel), each with
``gpus_per_replica`` GPUs (tensor parallel inside vLLM when above one) and ``cpus_per_replica`` CPUs,
placed (``auto`` resolved, the cluster checked) by ``resources.place`` before any actor starts.
Order is preserved, so results stream back to the driver and parts are written while later batches
still run.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from airflow_curation.core.schema import TEXT
from airflow_curation.stages.enrich.engines import EngineSpec, get_engine
from airflow_curation.stages.enrich.resources import local_available, place, ray_available
from airflow_curation.stages.enrich.tasks import make_task

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
        """Engines stay cached for the process; see ``engines.release_engines``."""


class _EngineActor:
    """A Ray Data actor: loads the engine once, then enriches batches of rows."""

    def __init__(self, config: dict[str, Any], spec: dict[str, Any]) -> None:
        self.task = make_task(config)
        self.engine = get_engine(EngineSpec(**spec))

    def __call__(self, batch: pa.Table) -> pa.Table:
        cols = self.task.run(self.engine, batch.column(TEXT).to_pylist())
        return pa.table({"_pos": batch.column("_pos"), **cols})


def ray_init(address: str | None, num_cpus: int | None, num_gpus: int | None = None) -> bool:
    """Connect to ``address`` or start a local Ray; returns True when this call started it."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # no token file for a local, loopback-only Ray
    import ray

    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"log_to_driver": True}
    address = address or os.environ.get("RAY_ADDRESS")  # set when this job runs on a cluster (Ray Jobs)
    if address:
        ray.init(address=address, **kwargs)
        return False
    kwargs["include_dashboard"] = False
    if num_cpus:
        kwargs["num_cpus"] = int(num_cpus)
    if num_gpus is not None:
        kwargs["num_gpus"] = int(num_gpus)
    ray.init(**kwargs)
    return True


class RayExecutor:
    """Ray Data ``map_batches`` with engine actors, one dataset per shard."""

    def __init__(self, config: dict[str, Any], spec: EngineSpec) -> None:
        self.config = config
        self.spec = spec
        self.rows_computed = 0
        self._started = ray_init(config.get("ray_address"), config.get("ray_num_cpus"), config.get("ray_num_gpus"))
        try:  # before any actor asks: Ray would wait forever for resources the cluster does not have
            self.placement = place(config, ray_available(config.get("ray_address")))
        except ValueError:
            self.close()
            raise
        self.spec = replace(spec, device=self.placement.device)

    def run_chunks(self, chunks: Iterable[Chunk]) -> Iterator[tuple[Chunk, dict[str, list]]]:
        import ray.data

        chunks = list(chunks)
        positions = [p for c in chunks for p in c.positions]
        texts = [t for c in chunks for t in c.texts]
        if not texts:
            for c in chunks:
                yield c, {}
            return
        c = self.config
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True  # rows come back in shard order: parts stream out
        ctx.enable_progress_bars = False
        ds = ray.data.from_arrow(pa.table({"_pos": pa.array(positions, pa.int64()), TEXT: texts}))
        ds = ds.map_batches(
            _EngineActor,
            fn_constructor_kwargs={"config": dict(c), "spec": self.spec.to_dict()},
            batch_size=int(c["batch_size"]),
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=self.placement.replicas),
            **self.placement.ray_map_args(),
        )
        queue = iter(chunks)
        current = next(queue)
        pending: list[dict[str, list]] = []
        have = 0
        while current is not None and not current.positions:
            yield current, {}
            current = next(queue, None)
        for batch in ds.iter_batches(batch_format="pyarrow", batch_size=None):
            offset = 0
            while offset < batch.num_rows:
                need = len(current.positions) - have
                take = batch.slice(offset, need)
                offset += take.num_rows
                have += take.num_rows
                pending.append({k: take.column(k).to_pylist() for k in take.column_names})
                if have == len(current.positions):
                    cols = _concat(pending)
                    if cols.pop("_pos") != current.positions:
                        raise RuntimeError("ray executor: rows came back out of order")
                    self.rows_computed += have
                    yield current, cols
                    pending, have = [], 0
                    current = next(queue, None)
                    while current is not None and not current.positions:
                        yield current, {}
                        current = next(queue, None)
        if current is not None:
            raise RuntimeError(f"ray executor: rows from {current.start} on never came back")

    def close(self) -> None:
        if self._started:
            import ray

            ray.shutdown()
            self._started = False


EXECUTORS = {"local": LocalExecutor, "ray": RayExecutor}
