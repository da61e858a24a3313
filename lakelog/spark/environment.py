"""Make Spark's Python workers import lakelog before any work is shipped to them.

Every Spark path that runs lakelog in Python workers (maintenance, row-level changes,
``replace_where`` writes, the ``lakelog`` data source with its change feed, streaming
source and sink) calls :func:`check_executors` first. It runs a one-task Spark job,
through the DataFrame API so that it works on Spark Connect too, that imports lakelog
in a worker and reports its version.

* Workers whose Python imports the driver's lakelog version: nothing to do.
* Workers that would start PySpark's default interpreter (``python3`` on the PATH,
  because ``PYSPARK_PYTHON`` was not set when the SparkContext started) on a local or
  standalone master: lakelog points the session's workers at the driver's own
  interpreter (``SparkContext.pythonExec``, which PySpark reads for every job it
  submits), and on a local master also puts the driver's lakelog first on their
  ``PYTHONPATH`` when it does not come from that interpreter's site-packages; then
  checks again. A session's workers are set before its first lakelog call, so the
  ``lakelog`` data source registers with them.
* Otherwise (an interpreter set on purpose, a YARN or Kubernetes master, Spark
  Connect, whose server starts its workers): one
  :class:`~lakelog.errors.SparkEnvironmentError` saying what to set.

The result is cached per session and per worker setup (the Python executable, the
executor environment variables and the files added with ``addPyFile``: Spark starts
separate workers when these change), so the check costs one tiny job per session.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import re
import site
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..__about__ import __version__
from ..errors import SparkEnvironmentError
from .jobs import short_error

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

__all__ = ["SHIP_ENVIRONMENT", "check_executors", "import_problem"]

log = logging.getLogger("lakelog.spark")

SHIP_ENVIRONMENT = (
    f"Ship the driver's Python environment to the executors: set PYSPARK_PYTHON (or "
    f"spark.pyspark.python) to an interpreter that has lakelog {__version__} and its "
    f"dependencies installed on every node (the driver's own, {sys.executable}, when the "
    f"executors run on this machine), or pack the virtualenv with venv-pack "
    f"(venv-pack -o env.tar.gz) and submit it with --conf spark.archives=env.tar.gz#env and "
    f"PYSPARK_PYTHON=./env/bin/python; see docs/spark.md."
)
"""What to do when executors cannot import lakelog (ends the error messages)."""

_DEFAULT_PYTHON = "python3"
"""PySpark's workers' interpreter when ``PYSPARK_PYTHON`` is not set."""

_CONFIGURABLE = re.compile(r"^(local(\[.*\])?|local-cluster\[.*\]|spark://.*)$")
_LOCAL = re.compile(r"^(local(\[.*\])?|local-cluster\[.*\])$")

_checked: set[tuple[Any, ...]] = set()
_lock = threading.Lock()


def _context(spark: Any) -> SparkContext | None:
    """The session's SparkContext; None on Spark Connect (no driver JVM in reach)."""
    if hasattr(spark, "pythonExec"):  # a SparkContext itself
        return spark  # type: ignore[no-any-return]
    try:
        return spark.sparkContext  # type: ignore[no-any-return]
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
        return None


def _session(spark: Any, sc: SparkContext | None) -> SparkSession:
    if sc is None or spark is not sc:
        return spark  # type: ignore[no-any-return]
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession() or SparkSession(sc)


def _worker_key(spark: SparkSession, sc: SparkContext | None) -> tuple[Any, ...]:
    """What decides which Python workers Spark starts for this session's jobs."""
    if sc is None:
        return ("connect", getattr(spark, "session_id", id(spark)))
    return (
        sc.applicationId,
        sc.pythonExec,
        tuple(sorted(sc.environment.items())),
        tuple(getattr(sc, "_python_includes", None) or ()),
    )


def _probe() -> Callable[[], str]:
    """The probe run in a worker. Nested, so that cloudpickle ships it by value: it must
    not need lakelog to be unpickled, since importing lakelog is what it checks."""

    def probe() -> str:
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
        return json.dumps(found)

    return probe


def import_problem(error: str) -> bool:
    """Whether a task's error says that the worker's Python lacks a module."""
    return "ModuleNotFoundError" in error or "ImportError" in error or "No module named" in error


def _run_probe(spark: SparkSession, sc: SparkContext | None) -> str | None:
    """What keeps this session's workers from running lakelog; None if nothing."""
    # a Connect session takes the client's own udf, whatever else the process runs
    functions: Any = importlib.import_module(
        "pyspark.sql.connect.functions" if sc is None else "pyspark.sql.functions"
    )
    probe = functions.udf(_probe(), "string", useArrow=False)
    if sc is not None:
        sc.setLocalProperty("spark.job.description", "lakelog: check that workers import lakelog")
    try:
        raw = spark.range(1, numPartitions=1).select(probe().alias("found")).collect()
    except Exception as e:  # noqa: BLE001 - Py4J / PySpark errors of a worker that did not start
        return f"that a one-task Spark job to check this failed: {short_error(e)}"
    finally:
        if sc is not None:
            sc.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]
    found = json.loads(raw[0]["found"])
    worker = f"Python {found['python']} {found['python_version']} on {found['host']}"
    if found["version"] is not None and found["version"] != __version__:
        problem = f"lakelog {found['version']} ({found['location']}) in the executors' {worker}"
        if found["error"] is not None:
            problem += f", which fails to import lakelog's tasks: {found['error']}"
        return problem
    if found["error"] is not None:
        return f"that the executors' {worker} cannot import it: {found['error']}"
    return None


def _configurable(sc: SparkContext | None) -> bool:
    """Whether lakelog may point the session's workers at the driver's interpreter: the
    workers run PySpark's default ``python3`` (``PYSPARK_PYTHON`` was not set) on a
    master whose executors take the interpreter from each job (local, standalone)."""
    if sc is None or sc.pythonExec != _DEFAULT_PYTHON or "PYSPARK_PYTHON" in os.environ:
        return False
    return sys.executable != "" and bool(_CONFIGURABLE.match(sc.master or ""))


def _driver_lakelog_dir() -> str | None:
    """The folder the driver imported lakelog from, unless it is one of the interpreter's
    own site-packages (where the same interpreter finds it anyway)."""
    folder = str(Path(__file__).resolve().parents[2])
    own = {str(Path(p).resolve()) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    return None if folder in own else folder


def _configure(sc: SparkContext) -> Callable[[], None]:
    """Point the context's workers at the driver's interpreter (and, on a local master,
    the driver's lakelog); return what undoes it."""
    python, env = sc.pythonExec, sc.environment
    before = env.get("PYTHONPATH")
    sc.pythonExec = sys.executable
    folder = _driver_lakelog_dir() if _LOCAL.match(sc.master or "") else None
    if folder is not None:
        env["PYTHONPATH"] = os.pathsep.join([folder, *([before] if before else [])])

    def undo() -> None:
        sc.pythonExec = python
        if before is None:
            env.pop("PYTHONPATH", None)
        else:
            env["PYTHONPATH"] = before

    return undo


def _advice(sc: SparkContext | None) -> str:
    if sc is None:
        return (
            f"On Spark Connect the server starts the Python workers: start it with "
            f"PYSPARK_PYTHON set to an interpreter that has lakelog {__version__} (this "
            f"client's is {sys.executable}). {SHIP_ENVIRONMENT}"
        )
    if sc.pythonExec == _DEFAULT_PYTHON and "PYSPARK_PYTHON" not in os.environ:
        return (
            f"Spark starts its workers with the python3 on the PATH because PYSPARK_PYTHON "
            f"was not set: set PYSPARK_PYTHON={sys.executable} (or activate that "
            f"environment) before the SparkSession starts. {SHIP_ENVIRONMENT}"
        )
    return SHIP_ENVIRONMENT


def check_executors(spark: SparkSession | SparkContext) -> None:
    """Make the session's Python workers import the driver's lakelog version, or raise
    :class:`~lakelog.errors.SparkEnvironmentError` saying what to set (see the module
    doc); once per session and worker setup."""
    sc = _context(spark)
    session = _session(spark, sc)
    key = _worker_key(session, sc)
    with _lock:
        if key in _checked:
            return
    problem = _run_probe(session, sc)
    if problem is not None and sc is not None and _configurable(sc):
        undo = _configure(sc)
        if _run_probe(session, sc) is None:
            log.info(
                "lakelog: Spark's Python workers (%s) could not run lakelog: they now start "
                "with the driver's interpreter, %s. Set PYSPARK_PYTHON to choose another.",
                _DEFAULT_PYTHON,
                sys.executable,
            )
            problem, key = None, _worker_key(session, sc)
        else:
            undo()
    if problem is None:
        with _lock:
            _checked.add(key)
        return
    raise SparkEnvironmentError(
        f"expected Spark's executors to import lakelog {__version__} as the driver does "
        f"(Python {sys.executable}), found {problem}. Nothing was changed. {_advice(sc)}"
    )
