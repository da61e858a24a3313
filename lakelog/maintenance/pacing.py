"""Pacing of maintenance reads: a token bucket shared by the groups of one run.

Compaction beside a live workload must not take all the disk or network
bandwidth. Every reader calls :meth:`Pacer.acquire` with the bytes it is about
to read; a :class:`TokenBucket` lets bursts of up to one second through and
otherwise holds the total rate, over all threads that share it, at
``bytes_per_second``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from ..errors import InvalidArgumentError

__all__ = ["Pacer", "TokenBucket"]


class Pacer(Protocol):
    """Anything that may delay a read of ``nbytes`` (called before the read)."""

    def acquire(self, nbytes: int) -> None: ...


class TokenBucket:
    """Thread-safe token bucket; tokens are bytes, refilled at ``bytes_per_second``.

    A request larger than the bucket goes through after waiting off its debt, so
    a single large row group never blocks forever. ``clock`` and ``sleep`` are
    injectable for tests.
    """

    def __init__(
        self,
        bytes_per_second: float,
        *,
        burst_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if isinstance(bytes_per_second, bool) or not bytes_per_second > 0:
            raise InvalidArgumentError(
                f"expected max_bytes_per_second > 0, found {bytes_per_second!r}"
            )
        if not burst_seconds > 0:
            raise InvalidArgumentError(f"expected burst_seconds > 0, found {burst_seconds!r}")
        self.rate = float(bytes_per_second)
        self.capacity = self.rate * burst_seconds
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = self.capacity
        self._last = clock()
        self.bytes_acquired = 0
        self.waited_seconds = 0.0

    def acquire(self, nbytes: int) -> None:
        if nbytes <= 0:
            return
        with self._lock:
            now = self._clock()
            self._tokens = min(self.capacity, self._tokens + (now - self._last) * self.rate)
            self._last = now
            self._tokens -= nbytes
            self.bytes_acquired += nbytes
            wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
            self.waited_seconds += wait
        if wait > 0:
            self._sleep(wait)
