"""Async auto-compaction's worker process: the rewrites of a writer's background runs,
out of the writer's process and at a lower CPU priority.

**Why a process.** Planning a compaction, reading its sources and committing it is
Python work; on a background *thread* it holds the writer's GIL in slices of
milliseconds, and every commit of the ingest that lands meanwhile waits for them (on 2
cores the ingest's commit p99 doubled). A process shares no GIL with the writer, and
runs at ``os.nice(NICE)``: when the cores are busy the ingest goes first.

**Protocol.** The writer starts ``python -m lakelog.maintenance.auto_worker`` (one per
table and writer process, on its first async run; it exits after :data:`IDLE_S`
without a run) and writes JSON lines to its stdin:
first ``{"uri", "storage_options"}`` (options travel on the pipe, not on the command
line, where other users could read them), then one request per run, ``{"trigger",
"partitions"}``. The worker answers each with one line, the run's
:class:`~lakelog.hooks.AutoCompaction` as a dict. It exits when its stdin closes (the
writer exited, or was killed: the run under way finishes first).

**What a kill leaves.** The worker commits through the same pipeline as any run
(claims, leases, rewrite commits that never touch acknowledged data). A SIGKILL of the
worker mid-run leaves at most a claim whose lease holder is gone: the next run's
planner takes the files again, ``Table.resume`` finishes the plan. The writer learns
it from the closed pipe: the runs waiting on that worker end ``failed``, and the next
commit starts a new worker.

A store another process cannot open (``memory://``, storage options that are not
JSON) runs on the writer's thread instead (:func:`shareable`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import select
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from ..hooks import AutoCompaction
from ..storage import Storage

__all__ = ["IDLE_S", "NICE", "Worker", "main", "shareable"]

NICE = 10
"""How much the worker lowers its CPU priority (``os.nice``)."""
IDLE_S = 60.0
"""A worker that got no run for this long exits (a writer that stopped writing keeps no
idle process); the writer's next async run starts a new one."""

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def shareable(storage: Storage) -> bool:
    """Whether another process can open ``storage`` from its URI and options."""
    if storage.protocol == "memory":
        return False
    try:
        json.dumps(storage.storage_options)
    except (TypeError, ValueError):
        return False
    return True


class Worker:
    """The writer's side of one worker process (not thread-safe: one caller at a time,
    the table's background drain)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        env = dict(os.environ)
        path = env.get("PYTHONPATH")
        env["PYTHONPATH"] = _PACKAGE_ROOT + (os.pathsep + path if path else "")
        proc = subprocess.Popen(
            [sys.executable, "-m", "lakelog.maintenance.auto_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
            bufsize=1,
        )
        assert proc.stdin is not None
        hello = {"uri": self.storage.uri, "storage_options": self.storage.storage_options}
        proc.stdin.write(json.dumps(hello) + "\n")
        proc.stdin.flush()
        return proc

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def run(
        self, partitions: Mapping[Any, Mapping[str, str | None]], trigger: int
    ) -> AutoCompaction:
        """One run in the worker (started if it is not running); a ``failed`` outcome
        if the worker dies before it answers."""
        request = {"trigger": trigger, "partitions": [dict(p) for p in partitions.values()]}
        for _ in range(2):  # a worker that exited idle as the request went out: once more
            if self.proc is None or self.proc.poll() is not None:
                self.proc = self._start()
            proc = self.proc
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(json.dumps(request) + "\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
            except OSError:
                line = ""
            if line:
                got = json.loads(line)
                got["versions"] = tuple(int(v) for v in got.get("versions") or ())
                return AutoCompaction(**got)
            code = proc.wait()
            self.proc = None
            _close_pipes(proc)
            if code != 0:  # killed or crashed inside the run, not an idle exit
                break
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        return AutoCompaction(
            status="failed",
            trigger_version=trigger,
            mode="async",
            partitions=len(partitions),
            error=f"the auto-compaction worker (process {proc.pid}) ended with {how} "
            "before it answered; the data commit stays, a claim it took is resumed by the "
            "next run once its lease holder is gone (or by Table.resume)",
        )

    def close(self, timeout: float | None = None) -> None:
        """Close the worker's stdin and wait for it to end (its run under way first)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout)
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            _close_pipes(proc)


def _close_pipes(proc: subprocess.Popen[str]) -> None:
    for pipe in (proc.stdin, proc.stdout):
        try:
            if pipe is not None:
                pipe.close()
        except OSError:  # a broken pipe's buffered write: the process is gone anyway
            pass


def _answer(out: IO[str], outcome: AutoCompaction) -> None:
    out.write(json.dumps(dataclasses.asdict(outcome)) + "\n")
    out.flush()


def _lines(fd: int) -> Iterator[str]:
    """The lines the writer sends on ``fd``, until it closes the pipe or sends nothing
    for :data:`IDLE_S` between runs (then the worker exits; the writer starts another
    when it needs one)."""
    buffer = b""
    while True:
        while b"\n" not in buffer:
            ready, _, _ = select.select([fd], [], [], IDLE_S)
            if not ready and not buffer:
                return
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return
            buffer += chunk
        line, _, buffer = buffer.partition(b"\n")
        yield line.decode()


def main() -> None:
    """The worker: open the table, then one run per request line until stdin closes."""
    from ..core import TableCore
    from .auto import run_once

    answers = sys.stdout
    sys.stdout = sys.stderr  # nothing but answers on the pipe
    logging.getLogger("lakelog").setLevel(logging.ERROR)  # the writer logs each outcome
    try:
        os.nice(NICE)
    except OSError:  # not permitted here: run at the writer's priority
        pass
    lines = _lines(sys.stdin.fileno())
    hello = json.loads(next(lines, "") or "{}")
    if not hello:
        return
    storage = Storage(hello["uri"], storage_options=hello.get("storage_options") or None)
    table = None
    for line in lines:
        request = json.loads(line)
        trigger = int(request["trigger"])
        parts = {tuple(sorted(p.items(), key=lambda kv: kv[0])): p for p in request["partitions"]}
        try:
            table = TableCore.load(storage) if table is None else table
        except Exception as e:  # noqa: BLE001 - answered, never raised
            _answer(
                answers,
                AutoCompaction(
                    status="failed", trigger_version=trigger, mode="async",
                    error=f"{type(e).__name__}: {e}",
                ),
            )  # fmt: skip
            continue
        _answer(answers, run_once(table, parts, trigger, "async"))


if __name__ == "__main__":
    threading.current_thread().name = "lakelog-auto-compact-worker"
    main()
