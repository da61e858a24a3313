"""Racing a rival against a writer in this process: the writer runs in a thread that
stops at a pause point (``lakelog._failpoints``), the rival commits meanwhile, then the
writer goes on. No production global is patched: the pause point is armed through the
environment, as for the process races."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


def race_at(
    monkeypatch: pytest.MonkeyPatch,
    point: str,
    gate: Path,
    writer: Callable[[], T],
    rival: Callable[[], Any],
    timeout: float = 60,
) -> T:
    """Run ``writer`` in a thread paused at ``point`` (armed with ``gate``, a path unique
    to the race), run ``rival`` while it waits, then let it go on: what ``writer``
    returned, or its error raised here. Fails if the writer never reaches ``point``."""
    monkeypatch.setenv("LAKELOG_PAUSE_AT", f"{point}:{gate}")
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = writer()
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            out["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    paused = Path(f"{gate}.paused")
    deadline = time.monotonic() + timeout
    while not paused.exists() and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        assert paused.exists(), f"the writer never paused at {point} ({out})"
        rival()
    finally:
        gate.touch()
        thread.join(timeout)
    if "error" in out:
        raise out["error"]
    return out["value"]  # type: ignore[no-any-return]
