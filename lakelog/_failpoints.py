"""Crash points for tests: kill this process for real at a named step.

Set ``LAKELOG_CRASH_AT=<name>`` (comma-separated names allowed) in a child
process's environment and it SIGKILLs itself when it reaches
``failpoint("<name>")``: no cleanup, no ``finally`` blocks, as a crash or an
OOM kill would. Unset, a failpoint costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

__all__ = ["failpoint"]


def failpoint(name: str) -> None:
    wanted = os.environ.get("LAKELOG_CRASH_AT")
    if wanted and name in wanted.split(","):
        os.kill(os.getpid(), signal.SIGKILL)
