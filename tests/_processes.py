"""Helpers for tests that race real OS processes on one table: the environment of a
child (this checkout on its path, no failpoints inherited), starting one, and waiting
until it reached a pause point (``lakelog._failpoints``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = str(Path(__file__).resolve().parents[1])


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment with the checkout importable, without any
    ``LAKELOG_CRASH_AT``/``LAKELOG_PAUSE_AT``/``LAKELOG_FAULT_AT`` of the parent, plus
    ``extra``."""
    env = {**os.environ, "PYTHONPATH": REPO}
    for armed in ("LAKELOG_CRASH_AT", "LAKELOG_PAUSE_AT", "LAKELOG_FAULT_AT"):
        env.pop(armed, None)
    env.update(extra)
    return env


def spawn(script: str, *args: str, gated: bool = False, **env: str) -> subprocess.Popen[str]:
    """``python -c script args...`` with :func:`child_env` and captured text output;
    ``gated``: with a stdin pipe, for scripts that print ``ready`` and wait for a line
    (:func:`race`)."""
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        env=child_env(**env),
        stdin=subprocess.PIPE if gated else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def race(procs: list[subprocess.Popen[str]], timeout: float = 240) -> list[Any]:
    """Start gated processes at once: wait until each printed ``ready``, send every one
    a line, then collect the JSON each prints last (each must exit 0)."""
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=timeout)
        assert p.returncode == 0, stderr[-3000:]
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def wait_paused(gate: Path, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    """Until ``proc`` paused at the point armed with ``gate`` (it created
    ``<gate>.paused``); fails if it exits first or never gets there."""
    deadline = time.monotonic() + timeout
    while not Path(f"{gate}.paused").exists():
        if proc.poll() is not None:
            raise AssertionError(f"process exited before its pause point: {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("process never reached its pause point")
        time.sleep(0.01)
