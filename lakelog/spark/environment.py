"""Check that Spark's executors can run lakelog's tasks before any work is shipped to them.

Every maintenance task runs lakelog inside a Python worker on an executor. If
that worker's Python cannot import lakelog (``PYSPARK_PYTHON`` is not the
driver's environment, the package was never installed on the nodes), every
task fails in the same way after Spark's retries. :func:`check_executors`
finds this out first with a one-task Spark job that imports lakelog in a
worker and reports its version, and raises
:class:`~lakelog.errors.SparkEnvironmentError` saying how to ship the
environment.

The result is cached per SparkContext and per worker setup (the Python
executable, the executor environment variables and the files added with
``addPyFile``: Spark starts separate workers when these change), so the check
costs one tiny job per context.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ..__about__ import __version__
from ..errors import SparkEnvironmentError
from .jobs import short_error

if TYPE_CHECKING:
    from pyspark import SparkContext

__all__ = ["SHIP_ENVIRONMENT", "check_executors", "import_problem"]

SHIP_ENVIRONMENT = (
    f"Ship the driver's Python environment to the executors: set PYSPARK_PYTHON (or "
    f"spark.pyspark.python) to an interpreter that has lakelog {__version__} and its "
    f"dependencies installed on every node (the driver's own, {sys.executable}, when the "
    f"executors run on this machine), or pack the virtualenv with venv-pack "
    f"(venv-pack -o env.tar.gz) and submit it with --conf spark.archives=env.tar.gz#env and "
    f"PYSPARK_PYTHON=./env/bin/python; see docs/spark-maintenance.md."
)
"""What to do when executors cannot import lakelog (ends the error messages)."""

_checked: set[tuple[Any, ...]] = set()
_lock = threading.Lock()


def _worker_key(sc: SparkContext) -> tuple[Any, ...]:
    """What decides which Python workers Spark starts for this context's jobs."""
    return (
        sc.applicationId,
        sc.pythonExec,
        tuple(sorted(sc.environment.items())),
        tuple(getattr(sc, "_python_includes", None) or ()),
    )


def _probe() -> Callable[[Iterable[Any]], Iterator[str]]:
    """The probe run in a worker. Nested, so that cloudpickle ships it by value: it must
    not need lakelog to be unpickled, since importing lakelog is what it checks."""

    def probe(_: Iterable[Any]) -> Iterator[str]:
        import importlib
        import json
        import os
        import socket
        import sys

        found: dict[str, str | None] = {
            "python": sys.executable,
            "python_version": sys.version.split()[0],
            "host": f"{socket.gethostname()}:{os.getpid()}",
            "version": None,
            "location": None,
            "error": None,
        }
        try:
            module = importlib.import_module("lakelog")
            found["version"] = str(getattr(module, "__version__", "unknown"))
            found["location"] = str(getattr(module, "__file__", "unknown"))
            importlib.import_module("lakelog.spark.tasks")  # and what its tasks import
        except Exception as e:  # noqa: BLE001  # any failure is reported to the driver
            found["error"] = f"{type(e).__name__}: {e}"
        yield json.dumps(found)

    return probe


def import_problem(error: str) -> bool:
    """Whether a task's error says that the worker's Python lacks a module."""
    return "ModuleNotFoundError" in error or "ImportError" in error or "No module named" in error


def check_executors(sc: SparkContext) -> None:
    """Raise :class:`~lakelog.errors.SparkEnvironmentError` unless an executor's Python
    worker imports the same lakelog version as the driver (once per context and setup)."""
    key = _worker_key(sc)
    with _lock:
        if key in _checked:
            return
    expected = (
        f"expected Spark's executors to import lakelog {__version__} as the driver does "
        f"(Python {sys.executable})"
    )
    sc.setLocalProperty("spark.job.description", "lakelog: check that executors import lakelog")
    try:
        raw = sc.parallelize([0], 1).mapPartitions(_probe()).collect()
    except Exception as e:  # Py4J / PySpark errors of a worker that did not start
        raise SparkEnvironmentError(
            f"{expected}, found that a one-task Spark job to check this failed: "
            f"{short_error(e)}. Nothing was rewritten. {SHIP_ENVIRONMENT}"
        ) from e
    finally:
        sc.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]
    found = json.loads(raw[0])
    worker = f"Python {found['python']} {found['python_version']} on {found['host']}"
    if found["version"] is not None and found["version"] != __version__:
        problem = f"lakelog {found['version']} ({found['location']}) in the executors' {worker}"
        if found["error"] is not None:
            problem += f", which fails to import lakelog's tasks: {found['error']}"
    elif found["error"] is not None:
        problem = f"that the executors' {worker} cannot import it: {found['error']}"
    else:
        with _lock:
            _checked.add(key)
        return
    raise SparkEnvironmentError(
        f"{expected}, found {problem}. Nothing was rewritten. {SHIP_ENVIRONMENT}"
    )
