"""``--executor dask://``: each rank's result is fetched as it is done and released on its
worker, so that a worker holds its tasks in flight, not every result it computed (issue 20:
at 1,024 ranks on 2 workers, holding them all until the end doubled a worker's memory)."""

from __future__ import annotations

import time

import pytest

from pipeaudit.trace.executor import run_dask

ITEMS = 40


def _slow_square(x: int) -> bytes:
    time.sleep(0.05)
    return bytes(1000) * x  # a result of its own size, as a rank's timeline is


def _in_memory(dask_scheduler) -> int:
    return sum(1 for ts in dask_scheduler.tasks.values() if ts.state == "memory")


@pytest.mark.slow
def test_results_are_released_on_the_workers_as_they_arrive() -> None:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as watcher:
        held: list[int] = []
        out = run_dask(_slow_square, list(range(ITEMS)), cluster.scheduler_address,
                       on_done=lambda _value: held.append(watcher.run_on_scheduler(_in_memory)))
        assert out == [bytes(1000) * x for x in range(ITEMS)]  # in the items' order
        assert len(held) == ITEMS
        # all results were held until the end before: ITEMS at the last result
        assert max(held[ITEMS // 2:]) < ITEMS // 2, held
