"""One bound on the threads of all lakelog pools, nested pools included (lakelog.threads)."""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from lakelog import InvalidArgumentError, threads

POOL_THREAD = re.compile(r"^lakelog-[a-z-]+_\d+$")  # ThreadPoolExecutor names: prefix_N


def _pool_threads() -> int:
    return sum(1 for t in threading.enumerate() if POOL_THREAD.match(t.name))


class _Peak:
    """The most pool threads seen alive by any task."""

    def __init__(self) -> None:
        self.value = 0
        self._lock = threading.Lock()

    def sample(self) -> None:
        n = _pool_threads()
        with self._lock:
            self.value = max(self.value, n)


def _nested(outer: int, inner: int, peak: _Peak) -> list[int]:
    """``outer`` tasks on a pool, each running ``inner`` tasks on a pool of its own (a
    rewrite pool whose groups read with read pools): the results, in order."""

    def leaf(i: int) -> int:
        peak.sample()
        time.sleep(0.02)  # long enough for every thread of every pool to be alive at once
        peak.sample()
        return i

    def branch(j: int) -> list[int]:
        with threads.pool("lakelog-test-inner", inner) as pool:
            return list(pool.map(leaf, range(j * inner, (j + 1) * inner)))

    with threads.pool("lakelog-test-outer", outer) as pool:
        return [i for part in pool.map(branch, range(outer)) for i in part]


@pytest.mark.parametrize("bound", [1, 4, 6, 10])
def test_nested_pools_stay_within_the_bound(bound: int) -> None:
    before = _pool_threads()
    peak = _Peak()
    with threads.limited(bound):
        got = _nested(4, 4, peak)
    assert got == list(range(16))  # every task ran, results in order
    assert peak.value - before <= bound  # unbounded, 4 + 4 x 4 = 20 threads
    assert peak.value - before >= min(bound, 4)  # the outer pool did get its threads
    assert _pool_threads() == before  # every thread joined


def test_without_a_bound_nested_pools_multiply() -> None:
    """What the bound prevents: the same nesting on plain executors."""
    peak = _Peak()
    before = _pool_threads()

    def leaf(i: int) -> int:
        peak.sample()
        time.sleep(0.02)
        peak.sample()
        return i

    def branch(j: int) -> list[int]:
        with ThreadPoolExecutor(4, thread_name_prefix="lakelog-plain-inner") as pool:
            return list(pool.map(leaf, range(4)))

    with ThreadPoolExecutor(4, thread_name_prefix="lakelog-plain-outer") as pool:
        list(pool.map(branch, range(4)))
    assert peak.value - before > 10


def test_a_spent_budget_runs_tasks_in_the_calling_thread_in_order() -> None:
    seen: list[tuple[int, str]] = []

    def task(i: int) -> int:
        seen.append((i, threading.current_thread().name))
        if i == 2:
            raise ValueError("task 2")
        return i

    me = threading.current_thread().name
    with threads.limited(0), threads.pool("lakelog-test", 8) as pool:
        futures = [pool.submit(task, i) for i in range(4)]
        assert all(f.done() for f in futures)
    assert seen == [(i, me) for i in range(4)]
    assert [f.result() for f in futures if f.exception() is None] == [0, 1, 3]
    with pytest.raises(ValueError, match="task 2"):
        futures[2].result()


def test_workers_return_to_the_budget_when_a_pool_ends_in_an_error() -> None:
    with threads.limited(2):
        with pytest.raises(RuntimeError), threads.pool("lakelog-test", 2) as pool:
            pool.submit(time.sleep, 0.01)
            raise RuntimeError("the caller failed")
        with threads.pool("lakelog-test", 2) as pool:  # the whole budget again
            assert isinstance(pool, ThreadPoolExecutor)
            with threads.pool("lakelog-test-inner", 2) as inner:  # none left
                assert not isinstance(inner, ThreadPoolExecutor)
    assert threads.max_threads() == threads.DEFAULT_MAX_THREADS


@pytest.mark.parametrize("bad", [-1, 1.5, True, "4"])
def test_the_bound_is_a_count(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="integer >= 0"):
        threads.set_max_threads(bad)  # type: ignore[arg-type]
    assert threads.max_threads() == threads.DEFAULT_MAX_THREADS
