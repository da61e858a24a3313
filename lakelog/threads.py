"""One factory for lakelog's thread pools, with one bound on their threads together.

Pools nest: each compaction or clustering group runs on a ``lakelog-rewrite`` worker
that keys, scatters and reads with helper pools of its own. Sized each on its own,
nested pools multiply (groups x helpers x readers). So every pool draws its workers
from one process-wide budget of :func:`max_threads` threads: a pool gets the workers
it asks for while the budget lasts, fewer when it is nearly spent, and none once it
is spent. A pool without workers runs each task in the calling thread when it is
submitted, in order. That cannot deadlock: no task of lakelog's pools waits on
another task of its own pool, and the caller of a nested pool is itself a worker
doing the same job.

The budget counts workers from the moment a pool starts until it has shut down
(its threads joined), so the live workers of all pools together never exceed it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

from .errors import InvalidArgumentError

__all__ = ["DEFAULT_MAX_THREADS", "limited", "max_threads", "pool", "set_max_threads", "spawn"]

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_MAX_THREADS = max(32, 4 * (os.cpu_count() or 1))
"""Enough for the widest single pool (16 footer reads on an object store) beside a
rewrite pool and its helpers; more cores, more room for their CPU-bound helpers."""

_lock = threading.Lock()
_limit = DEFAULT_MAX_THREADS
_used = 0


def max_threads() -> int:
    """The bound on worker threads of all lakelog pools alive at once in this process."""
    return _limit


def set_max_threads(n: int) -> int:
    """Bound the worker threads of all lakelog pools together to ``n`` (0: every pool
    runs its tasks in the calling thread); returns the bound before. Pools already
    running keep their workers; new pools get what is left under the new bound."""
    global _limit
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidArgumentError(
            f"expected the thread bound to be an integer >= 0, found {n!r}; pass e.g. 16, "
            f"or 0 to run every task in the calling thread."
        )
    with _lock:
        before, _limit = _limit, n
    return before


@contextmanager
def limited(n: int) -> Iterator[None]:
    """:func:`set_max_threads` for the duration of the block (process-wide)."""
    before = set_max_threads(n)
    try:
        yield
    finally:
        set_max_threads(before)


@contextmanager
def pool(name: str, max_workers: int) -> Iterator[Executor]:
    """An executor of up to ``max_workers`` threads named ``name`` (e.g. ``lakelog-read``),
    fewer if the process-wide budget is nearly spent, none (tasks run in the calling
    thread) once it is; shut down, its threads joined, when the block ends."""
    global _used
    with _lock:
        granted = max(0, min(max_workers, _limit - _used))
        _used += granted
    if not granted:
        yield _Inline()
        return
    try:
        with ThreadPoolExecutor(granted, thread_name_prefix=name) as executor:
            yield executor
    finally:
        with _lock:
            _used -= granted


def spawn(name: str, fn: Callable[[], T]) -> Future[T]:
    """Run ``fn`` in the background on one thread named ``name``, drawn from the
    process-wide budget until ``fn`` returns; once the budget is spent, ``fn`` runs in
    the calling thread (the future is then done when this returns). At interpreter
    exit Python waits for the thread (``concurrent.futures`` joins its workers), so a
    normal exit never cuts ``fn`` short; a killed process does."""
    global _used
    with _lock:
        granted = 1 if _limit - _used >= 1 else 0
        _used += granted
    if not granted:
        return _Inline().submit(fn)

    def release(_: Future[T]) -> None:
        global _used
        with _lock:
            _used -= 1

    executor = ThreadPoolExecutor(1, thread_name_prefix=name)
    try:
        future = executor.submit(fn)
    except BaseException:
        release(Future())
        raise
    finally:
        executor.shutdown(wait=False)
    with _lock:
        _spawned.add(future)
    future.add_done_callback(release)
    future.add_done_callback(_spawned.discard)
    return future


_spawned: set[Future[Any]] = set()


def _finish_spawned() -> None:
    """At interpreter exit, wait for :func:`spawn`'s work before ``concurrent.futures``
    refuses new tasks (its own exit hook, registered before this one, runs after it),
    so the pools that work opens still run."""
    with _lock:
        running = list(_spawned)
    wait(running)


# threading's exit hooks run last-registered first, before non-daemon threads are joined
threading._register_atexit(_finish_spawned)  # type: ignore[attr-defined]


class _Inline(Executor):
    """Runs each task when it is submitted, in the calling thread: what a pool is once
    the budget is spent. A task's exception is kept in its future, as a pool would."""

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        future: Future[T] = Future()
        future.set_running_or_notify_cancel()
        try:
            result = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - delivered by the future, as a pool would
            future.set_exception(e)
        else:
            future.set_result(result)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        del wait, cancel_futures  # nothing runs after submit returns
