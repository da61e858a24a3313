"""Crash and pause points for tests: force a real process to die or wait at a named step.

Set ``LAKELOG_CRASH_AT=<name>`` (comma-separated names allowed) in a child
process's environment and it SIGKILLs itself when it reaches
``failpoint("<name>")``: no cleanup, no ``finally`` blocks, as a crash or an
OOM kill would.

Set ``LAKELOG_PAUSE_AT=<name>:<path>`` (comma-separated pairs allowed; the
path follows the last ``:``, so names may hold ``:``) and the process, on
reaching ``pausepoint("<name>")``, creates ``<path>.paused`` and then waits
until ``<path>`` exists (at most 60 s), so a test can run another process in
exactly that window and then let it go on. Each pause (a name with its path)
fires once per process, so tests in one process that pause at the same name with
their own paths do not disarm each other. The commit points also exist qualified by
the commit's operation (``commit:before-put:CLAIM``), to stop one kind of commit only.

Set ``LAKELOG_FAULT_AT=<name>:<folder>`` (comma-separated pairs allowed) and
``fault("<name>", path)`` is true for every ``path`` at or under ``<folder>``: the
code there then behaves as a faulty component would (``storage:ignore-put-condition``,
a store that accepts a conditional put and ignores the condition), for that folder
only and in any process that inherits the variable.

Unset, each costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal
import time

__all__ = ["failpoint", "fault", "pausepoint"]

_PAUSED: set[tuple[str, str]] = set()


def failpoint(name: str, qualifier: str | None = None) -> None:
    """Die here if ``name`` is listed, or ``<name>:<qualifier>`` (e.g. the commit points
    qualified by operation: ``commit:after-put:COMPACT`` fires only in that commit)."""
    wanted = os.environ.get("LAKELOG_CRASH_AT")
    if wanted:
        names = wanted.split(",")
        if name in names or (qualifier is not None and f"{name}:{qualifier}" in names):
            os.kill(os.getpid(), signal.SIGKILL)


def fault(name: str, path: str) -> bool:
    """Whether fault ``name`` is armed for ``path`` (at or under an armed folder)."""
    wanted = os.environ.get("LAKELOG_FAULT_AT")
    if not wanted:
        return False
    for pair in wanted.split(","):
        point, _, folder = pair.rpartition(":")  # names may hold ":", the folder not
        folder = folder.rstrip("/")
        if point == name and folder and (path == folder or path.startswith(folder + "/")):
            return True
    return False


def pausepoint(name: str) -> None:
    wanted = os.environ.get("LAKELOG_PAUSE_AT")
    if not wanted:
        return
    for pair in wanted.split(","):
        point, _, path = pair.rpartition(":")  # names may hold ":", the path not
        if point == name and path and (name, path) not in _PAUSED:
            _PAUSED.add((name, path))
            with open(f"{path}.paused", "w"):
                pass
            deadline = time.monotonic() + 60
            while not os.path.exists(path) and time.monotonic() < deadline:
                time.sleep(0.01)
            return
