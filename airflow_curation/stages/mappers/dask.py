"""A Dask mapper: units run on a ``LocalCluster`` sized from the memory budget, or on an existing
cluster at ``scheduler_address``. Where the plan gives one local worker (one unit, one core, or memory
for one), the units run in this process: a cluster of one worker would only add its start-up (a
scheduler, a nanny and a worker process), paid by every task of an array.

Results come back in submission order (``StageRunner`` zips them with its units). A cluster this
mapper started is closed when the iteration ends, also when the caller stops early.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from airflow_curation.stages.base import local_mapper
from airflow_curation.stages.mappers.budget import plan_workers

log = logging.getLogger(__name__)


def dask_mapper(
    scheduler_address: str | None = None,
    *,
    workers: int | None = None,
    unit_bytes: Callable[[tuple], int] | None = None,
    expansion: float = 8.0,
    memory: int | None = None,
) -> Callable[[Callable[..., Any], Iterable[tuple]], Iterator[Any]]:
    """:param scheduler_address: use this running cluster (``tcp://host:8786``); else start a LocalCluster.
    :param workers: at most this many local workers (the memory plan may choose fewer).
    :param unit_bytes: input bytes of a unit, from its argument tuple (for the memory plan).
    :param expansion: a unit's peak memory per input byte.
    :param memory: bytes the local workers may use together (default: measured available memory).
    """

    def run(fn: Callable[..., Any], arg_tuples: Iterable[tuple]) -> Iterator[Any]:
        args = list(arg_tuples)
        if not args:
            return
        if not scheduler_address:
            sizes = [unit_bytes(a) if unit_bytes else 0 for a in args]
            plan = plan_workers(sizes, expansion, memory=memory, max_workers=workers)
            if plan.workers == 1:
                log.info(
                    "dask: %d units in this process (the worker plan gives one worker: %s)", len(args), plan.to_dict()
                )
                yield from local_mapper(1)(fn, args)
                return
        from distributed import Client, LocalCluster

        cluster = None
        if scheduler_address:
            client = Client(scheduler_address)
            log.info("dask: %d units on the cluster at %s", len(args), scheduler_address)
        else:
            cluster = LocalCluster(
                n_workers=plan.workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                memory_limit=plan.memory_limit,
                silence_logs=logging.WARNING,
            )
            client = Client(cluster)
            log.info("dask: %d units on a LocalCluster of %d workers (%s)", len(args), plan.workers, plan.to_dict())
        try:
            # pure=False: a rerun of the same unit must run again, not reuse a cached result
            futures = client.map(fn, *zip(*args), pure=False)
            for f in futures:
                yield f.result()
        finally:
            client.close()
            if cluster is not None:
                cluster.close()

    return run
