"""Start and stop the real services that the test session shares.

Nothing here imports pytest: the fixtures in ``tests/conftest.py`` wrap these
helpers. Two services are provided:

* a moto S3 server running as a separate OS process on 127.0.0.1
  (:func:`start_moto_server` / :class:`MotoServer`), reached through s3fs with
  :meth:`MotoServer.storage_options`;
* a local Spark session tuned for small, fast tests
  (:func:`build_spark_session`);
* a throwaway PostgreSQL server (:func:`start_postgres_server` /
  :class:`PostgresServer`) in a temporary folder, on a free port of 127.0.0.1, run as
  the ``postgres`` OS user when this process is root (PostgreSQL refuses root).
* a Spark Connect server in a process of its own on a free port
  (:func:`start_connect_server`), and a client process that runs
  ``_connect_ops`` functions on a Connect session (:class:`ConnectClient`).

Spark facts that the helpers encode (checked against pyspark 4.3.0, Java 17):

* In local mode ``spark.task.maxFailures`` is ignored: a plain ``local[N]``
  master never retries a failed task. Retries need the ``local[N,F]`` master
  form (F = max attempts per task), so :data:`LOCAL_MASTER` is ``local[2,3]``.
* ``local-cluster[W,C,M]`` (W worker JVMs with C cores and M MiB each) works
  from the pip-installed pyspark without any extra setup; there
  ``spark.task.maxFailures`` is honoured (:func:`local_cluster_master`).
  Start-up takes roughly twice as long as ``local[...]``.
* The pyspark wheel ships ``hadoop-client-api``/``hadoop-client-runtime`` but
  neither ``hadoop-aws`` nor any AWS SDK jar, so the ``s3a://`` filesystem is
  unavailable unless those jars are supplied locally (see
  :func:`find_s3a_jars`); nothing here downloads jars.
* JVM-level settings (driver memory, Java options, ``SPARK_LOCAL_IP``) only
  take effect for the first Spark session of a Python process: pyspark keeps
  its JVM alive after ``SparkSession.stop()`` and reuses it.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "AWS_REGION",
    "LOCAL_MASTER",
    "MOTO_ACCESS_KEY",
    "MOTO_SECRET_KEY",
    "LOOPBACK",
    "MotoServer",
    "PostgresServer",
    "PostgresUnavailableError",
    "S3AUnavailableError",
    "S3A_JARS_ENV",
    "ServiceStartError",
    "TASK_MAX_FAILURES",
    "REPO_ROOT",
    "TESTS_DIR",
    "build_spark_session",
    "configure_offline_environment",
    "find_free_port",
    "find_s3a_jars",
    "local_cluster_master",
    "pyspark_jars_dir",
    "s3a_spark_conf",
    "spark_test_conf",
    "find_postgres_bin",
    "start_moto_server",
    "start_postgres_server",
    "stop_spark_session",
    "worker_python_path",
]

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent

LOOPBACK = "127.0.0.1"
AWS_REGION = "us-east-1"
MOTO_ACCESS_KEY = "testing"
MOTO_SECRET_KEY = "testing"

#: Two worker threads; every task may be attempted up to 3 times. In local
#: mode this is the only way to get task retries: ``spark.task.maxFailures``
#: is ignored there.
LOCAL_MASTER = "local[2,3]"
#: Maximum attempts per task, used for ``spark.task.maxFailures`` on masters
#: that honour it (``local-cluster[...]``), to match :data:`LOCAL_MASTER`.
TASK_MAX_FAILURES = 3

#: Environment variable with extra jars (os.pathsep- or comma-separated paths)
#: searched for ``hadoop-aws`` and the AWS SDK bundle, for machines that have
#: them locally.
S3A_JARS_ENV = "LAKELOG_S3A_JARS"


class ServiceStartError(RuntimeError):
    """A test service could not be started."""


class S3AUnavailableError(RuntimeError):
    """The jars for Spark's ``s3a://`` filesystem are not available locally."""


# --------------------------------------------------------------------------
# Environment
# --------------------------------------------------------------------------


def configure_offline_environment() -> None:
    """Make AWS and Spark clients in this process stay on the loopback.

    * ``AWS_EC2_METADATA_DISABLED=true``: botocore never asks the EC2 instance
      metadata service for credentials or a region.
    * ``NO_PROXY``/``no_proxy`` gain ``127.0.0.1`` and ``localhost`` so a proxy
      configured on the machine is never used for the local services.
    * ``SPARK_LOCAL_IP=127.0.0.1``: every Spark JVM (driver, and the master,
      workers and executors of ``local-cluster``) binds to the loopback; without
      it the standalone pieces bind to the machine's external address.
    * ``PYSPARK_PYTHON``/``PYSPARK_DRIVER_PYTHON``: Spark's Python workers run
      with this interpreter (and so this virtualenv).
    """
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    for var in ("NO_PROXY", "no_proxy"):
        entries = [e.strip() for e in os.environ.get(var, "").split(",") if e.strip()]
        for host in (LOOPBACK, "localhost"):
            if host not in entries:
                entries.append(host)
        os.environ[var] = ",".join(entries)
    os.environ["SPARK_LOCAL_IP"] = LOOPBACK
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


def find_free_port(host: str = LOOPBACK) -> int:
    """Return a TCP port on ``host`` that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _port_accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


# --------------------------------------------------------------------------
# moto S3 server
# --------------------------------------------------------------------------


class MotoServer:
    """A moto server (S3 and friends) running as a child process on 127.0.0.1.

    Use :func:`start_moto_server` to create one; :meth:`stop` (or leaving the
    ``with`` block) terminates it. Stopping is idempotent and also registered
    with :mod:`atexit`.
    """

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        port: int,
        log_path: Path,
        host: str = LOOPBACK,
    ) -> None:
        self.process = process
        self.host = host
        self.port = port
        self.log_path = log_path
        self._stopped = False

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://{self.host}:{self.port}"

    def storage_options(self) -> dict[str, Any]:
        """Keyword arguments for ``s3fs.S3FileSystem(**opts)`` / fsspec.

        Credentials, endpoint and region are explicit, so neither the AWS
        credential chain nor the instance-metadata service is consulted.
        Listings are not cached (``use_listings_cache=False``), since a
        transaction log must always see other writers' files, and every call
        builds a fresh filesystem instance (``skip_instance_cache=True``) so
        two instances behave like two independent clients. Values are plain
        data: the dict pickles and can be shipped to Spark tasks.
        """
        return {
            "key": MOTO_ACCESS_KEY,
            "secret": MOTO_SECRET_KEY,
            "anon": False,
            "client_kwargs": {
                "endpoint_url": self.endpoint_url,
                "region_name": AWS_REGION,
            },
            "config_kwargs": {"connect_timeout": 5, "read_timeout": 60},
            "cache_regions": False,
            "use_listings_cache": False,
            "skip_instance_cache": True,
        }

    def filesystem(self) -> Any:
        """A fresh ``s3fs.S3FileSystem`` connected to this server."""
        import s3fs

        return s3fs.S3FileSystem(**self.storage_options())

    def boto3_client(self) -> Any:
        """A boto3 S3 client connected to this server."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=MOTO_ACCESS_KEY,
            aws_secret_access_key=MOTO_SECRET_KEY,
            region_name=AWS_REGION,
        )

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name`` (through boto3: s3fs ``mkdir`` of a bucket
        fails against moto with InvalidLocationConstraint)."""
        client = self.boto3_client()
        try:
            client.create_bucket(Bucket=name)
        finally:
            client.close()

    def reset(self) -> None:
        """Drop every bucket and object (moto's ``/moto-api/reset``).

        This wipes the state of every client of this server: use it only on a
        server of your own, never on the session-wide one.
        """
        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(request, timeout=30) as response:
            response.read()

    def read_log(self) -> str:
        """The server's combined stdout/stderr so far."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def is_running(self) -> bool:
        """Whether the server process is still alive."""
        return self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate the server, wait for it, and delete its log."""
        if self._stopped:
            return
        self._stopped = True
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout)
        with contextlib.suppress(OSError):
            self.log_path.unlink()

    def __enter__(self) -> MotoServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"MotoServer(endpoint_url={self.endpoint_url!r}, pid={self.process.pid})"


def _wait_until_serving(server: MotoServer, deadline: float) -> None:
    """Block until the server answers an S3 request, or raise."""
    while time.monotonic() < deadline:
        if not server.is_running():
            raise ServiceStartError(
                f"moto server exited with code {server.process.returncode} "
                f"while starting on port {server.port}:\n{server.read_log()}"
            )
        if _port_accepts(server.host, server.port):
            break
        time.sleep(0.05)
    else:
        raise ServiceStartError(
            f"moto server did not accept connections on {server.endpoint_url} "
            f"in time:\n{server.read_log()}"
        )
    # The port is open; make one real S3 call so backends are loaded.
    client = server.boto3_client()
    try:
        client.list_buckets()
    except Exception as exc:
        raise ServiceStartError(
            f"moto server on {server.endpoint_url} does not answer S3 requests: "
            f"{exc}\n{server.read_log()}"
        ) from exc
    finally:
        client.close()


# moto's server checks ``If-None-Match: *`` and then stores the object in two
# steps, in a threaded server, without a lock: two clients racing for one key can
# both be told they created it (seen here: 2 of 4 threads "won" the same key).
# Real S3 makes the conditional put atomic and lakelog's commit protocol relies on
# exactly that, so the test server serializes ``put_object`` behind a lock.
_ATOMIC_MOTO_MAIN = """
import sys, threading
from moto.s3.responses import S3Response

_lock = threading.Lock()
_put_object = S3Response.put_object

def put_object(self):
    with _lock:
        return _put_object(self)

S3Response.put_object = put_object
from moto.server import main
main(sys.argv[1:])
"""


def start_moto_server(
    *,
    host: str = LOOPBACK,
    port: int | None = None,
    startup_timeout: float = 30.0,
    attempts: int = 3,
) -> MotoServer:
    """Start moto's S3 server (conditional put made atomic) on ``host``; wait until it serves.

    A free port is chosen when ``port`` is None (retried up to ``attempts``
    times if another process takes it first). Raises :class:`ServiceStartError`
    with the server's output if it does not come up within
    ``startup_timeout`` seconds.
    """
    configure_offline_environment()
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    last_error: ServiceStartError | None = None
    for _ in range(max(1, attempts)):
        chosen = port if port is not None else find_free_port(host)
        fd, log_name = tempfile.mkstemp(prefix="lakelog-moto-", suffix=".log")
        log_path = Path(log_name)
        with os.fdopen(fd, "wb") as log_file:
            process = subprocess.Popen(
                [sys.executable, "-c", _ATOMIC_MOTO_MAIN, "-H", host, "-p", str(chosen)],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
            )
        server = MotoServer(process, chosen, log_path, host=host)
        try:
            _wait_until_serving(server, time.monotonic() + startup_timeout)
        except ServiceStartError as exc:
            last_error = exc
            exited = not server.is_running()
            server.stop()
            if exited and port is None:
                continue  # most likely the port was taken meanwhile: retry
            raise
        atexit.register(server.stop)
        return server
    assert last_error is not None
    raise last_error


# --------------------------------------------------------------------------
# Spark
# --------------------------------------------------------------------------

_LOG4J2_PROPERTIES = """\
status = error
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{HH:mm:ss.SSS}} %p %c{{1}}: %m%n%ex
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
logger.parquet1.name = org.apache.parquet
logger.parquet1.level = error
logger.parquet2.name = parquet
logger.parquet2.level = error
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
"""

_scratch_dir: Path | None = None


def _spark_scratch_dir() -> Path:
    """A per-process temporary directory for Spark's warehouse and log config."""
    global _scratch_dir
    if _scratch_dir is None:
        _scratch_dir = Path(tempfile.mkdtemp(prefix="lakelog-spark-"))
        atexit.register(shutil.rmtree, _scratch_dir, True)
    return _scratch_dir


def _log4j2_config(level: str) -> Path:
    path = _spark_scratch_dir() / f"log4j2-{level.lower()}.properties"
    if not path.exists():
        path.write_text(_LOG4J2_PROPERTIES.format(level=level.lower()), encoding="utf-8")
    return path


def local_cluster_master(workers: int = 2, cores_per_worker: int = 1, memory_mb: int = 1024) -> str:
    """``local-cluster[W,C,M]``: W executor JVMs under an in-process standalone
    master. Works from the pip pyspark; needs ``SPARK_LOCAL_IP=127.0.0.1``
    (set by :func:`configure_offline_environment`) to stay on the loopback."""
    return f"local-cluster[{workers},{cores_per_worker},{memory_mb}]"


def worker_python_path() -> str:
    """``PYTHONPATH`` for Spark's Python workers: ``tests/``, the repo root,
    then the current ``PYTHONPATH``.

    Functions defined in test modules (and ``_services``) are pickled by
    reference, so the workers must be able to import them; the repo root makes
    workers import ``lakelog`` from this working tree.
    """
    entries = [str(TESTS_DIR), str(REPO_ROOT)]
    entries += [e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e]
    return os.pathsep.join(dict.fromkeys(entries))


def spark_test_conf(log_level: str = "WARN") -> dict[str, str]:
    """The Spark configuration used by :func:`build_spark_session`."""
    java_options = " ".join(
        [
            f"-Dlog4j2.configurationFile=file:{_log4j2_config(log_level)}",
            # Short-lived test JVMs: C1 only and the serial collector start faster.
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
        ]
    )
    return {
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.driver.memory": "1g",
        "spark.driver.extraJavaOptions": java_options,
        "spark.executor.extraJavaOptions": java_options,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.catalogImplementation": "in-memory",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.warehouse.dir": str(_spark_scratch_dir() / "warehouse"),
        # Honoured by local-cluster only; local mode takes it from local[N,F].
        "spark.task.maxFailures": str(TASK_MAX_FAILURES),
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executorEnv.PYTHONPATH": worker_python_path(),
        # Spark 4 defaults Python UDFs to Arrow, which needs pandas (not a
        # lakelog dependency); without it every udf() emits a RuntimeWarning.
        "spark.sql.execution.pythonUDF.arrow.enabled": "false",
    }


def pyspark_jars_dir() -> Path:
    """The ``jars/`` folder of the installed pyspark package."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def find_s3a_jars() -> list[Path]:
    """Local jars that provide ``s3a://``: hadoop-aws plus the AWS SDK v2 bundle.

    Searches pyspark's ``jars/`` folder and the paths in ``$LAKELOG_S3A_JARS``.
    Returns ``[]`` unless both are found. The pyspark 4.3.0 wheel ships neither.
    """
    candidates: list[Path] = []
    jars_dir = pyspark_jars_dir()
    if jars_dir.is_dir():
        candidates.extend(jars_dir.glob("*.jar"))
    raw = os.environ.get(S3A_JARS_ENV, "")
    for item in raw.replace(",", os.pathsep).split(os.pathsep):
        if not item.strip():
            continue
        path = Path(item.strip())
        if path.is_dir():
            candidates.extend(path.glob("*.jar"))
        elif path.is_file():
            candidates.append(path)
    hadoop_aws = [p for p in candidates if p.name.startswith("hadoop-aws-")]
    sdk = [p for p in candidates if p.name.startswith(("bundle-", "aws-sdk-java-bundle"))]
    if not hadoop_aws or not sdk:
        return []
    return [hadoop_aws[0], sdk[0]]


def s3a_spark_conf(moto: MotoServer) -> dict[str, str]:
    """Spark/Hadoop settings pointing ``s3a://`` at ``moto`` (path-style, no SSL).

    Raises :class:`S3AUnavailableError` when :func:`find_s3a_jars` finds
    nothing: the jars are not bundled with pyspark and are never downloaded.
    """
    jars = find_s3a_jars()
    if not jars:
        raise S3AUnavailableError(
            f"s3a:// needs hadoop-aws and the AWS SDK v2 bundle jars, which pyspark "
            f"does not ship (looked in {pyspark_jars_dir()} and ${S3A_JARS_ENV}); "
            f"use the s3fs-based paths against moto instead"
        )
    prefix = "spark.hadoop.fs.s3a."
    return {
        "spark.jars": ",".join(str(p) for p in jars),
        f"{prefix}impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        f"{prefix}endpoint": moto.endpoint_url,
        f"{prefix}endpoint.region": AWS_REGION,
        f"{prefix}access.key": MOTO_ACCESS_KEY,
        f"{prefix}secret.key": MOTO_SECRET_KEY,
        f"{prefix}aws.credentials.provider": (
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        ),
        f"{prefix}path.style.access": "true",
        f"{prefix}connection.ssl.enabled": "false",
        f"{prefix}change.detection.mode": "none",
    }


def build_spark_session(
    app_name: str = "lakelog-tests",
    *,
    master: str = LOCAL_MASTER,
    extra_conf: Mapping[str, str] | None = None,
    s3a: MotoServer | None = None,
    log_level: str = "WARN",
    executor_timeout: float = 120.0,
) -> SparkSession:
    """Start a SparkSession for tests (default master ``local[2,3]``).

    Driver bound to 127.0.0.1, UI off, 2 shuffle partitions, in-memory catalog
    (no Hive), UTC session time zone, Python workers on ``sys.executable``.
    ``extra_conf`` overrides any setting. With ``s3a=moto`` the ``s3a://``
    filesystem points at that moto server (raises :class:`S3AUnavailableError`
    when the jars are missing, before any JVM starts). For a
    ``local-cluster[W,...]`` master it returns once all W executors have
    registered (at most ``executor_timeout`` seconds).

    Raises ``RuntimeError`` if a session is already active in this thread:
    ``getOrCreate`` would silently return it with its old settings. Stop it
    first with :func:`stop_spark_session`. Note that JVM-level options (driver
    memory, Java options) only apply to the first session of the process.
    """
    configure_offline_environment()
    conf = spark_test_conf(log_level)
    if s3a is not None:
        conf.update(s3a_spark_conf(s3a))
    if extra_conf:
        conf.update(extra_conf)

    from pyspark.sql import SparkSession

    if SparkSession.getActiveSession() is not None:
        raise RuntimeError("a SparkSession is already active; stop it before building another")
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level.upper())
    match = re.fullmatch(r"local-cluster\[\s*(\d+)\s*,.*\]", master)
    if match:
        _wait_for_executors(spark, int(match.group(1)), executor_timeout)
    return spark


def _executor_count(spark: SparkSession) -> int:
    """Registered executors (the driver excluded)."""
    sc = spark.sparkContext
    count: int = sc._jsc.sc().getExecutorMemoryStatus().size() - 1
    return count


def _wait_for_executors(spark: SparkSession, expected: int, timeout: float) -> None:
    """Block until ``expected`` executors have registered, or raise."""
    deadline = time.monotonic() + timeout
    while _executor_count(spark) < expected:
        if time.monotonic() > deadline:
            found = _executor_count(spark)
            spark.stop()
            raise ServiceStartError(
                f"only {found} of {expected} Spark executors registered in {timeout:.0f} s"
            )
        time.sleep(0.1)


def stop_spark_session(spark: SparkSession) -> None:
    """Stop ``spark`` (its JVM stays up for reuse by the next session)."""
    spark.stop()


# --------------------------------------------------------------------------
# PostgreSQL
# --------------------------------------------------------------------------


class PostgresUnavailableError(RuntimeError):
    """PostgreSQL's server binaries (initdb, pg_ctl) are not installed."""


def find_postgres_bin() -> Path:
    """The folder holding ``initdb`` and ``pg_ctl`` (newest of /usr/lib/postgresql/*/bin,
    else the PATH); raises :class:`PostgresUnavailableError` when there is none."""
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).parent)
    for folder in candidates:
        if (folder / "initdb").exists() and (folder / "pg_ctl").exists():
            return folder
    raise PostgresUnavailableError(
        "PostgreSQL's server binaries (initdb, pg_ctl) are not installed: "
        "apt-get install postgresql (.ci/run does this on CI)"
    )


class PostgresServer:
    """A PostgreSQL server in its own temporary folder on 127.0.0.1 (no password:
    ``trust`` for local connections). :meth:`stop` shuts it down and removes the folder."""

    def __init__(self, bin_dir: Path, root: Path, port: int, user: str | None) -> None:
        self.bin_dir = bin_dir
        self.root = root
        self.data = root / "data"
        self.port = port
        self.host = LOOPBACK
        self._os_user = user
        self._stopped = False

    def url(self, database: str = "postgres") -> str:
        """``postgresql://postgres@127.0.0.1:<port>/<database>``."""
        return f"postgresql://postgres@{self.host}:{self.port}/{database}"

    def _run(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", self._os_user, "--"] if self._os_user else []
        return subprocess.run(
            [*prefix, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def create_database(self, name: str) -> str:
        """Create database ``name``; returns its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def restart(self) -> None:
        """Stop and start the server again (same port): every client connection drops."""
        done = self._run(
            str(self.bin_dir / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.root / "server.log"),  # else the server holds our output pipe open
            "-m",
            "fast",
            "-w",
            "restart",
        )
        if done.returncode != 0:
            raise ServiceStartError(f"PostgreSQL did not restart:\n{done.stderr}")

    def stop(self) -> None:
        """Stop the server (fast shutdown) and delete its folder; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def __repr__(self) -> str:
        return f"PostgresServer({self.url()!r})"


def start_postgres_server(*, attempts: int = 3) -> PostgresServer:
    """initdb into a temporary folder and start the server on a free port of 127.0.0.1
    (its socket in that folder too); waits until it accepts connections.

    Raises :class:`PostgresUnavailableError` when the binaries are missing and
    :class:`ServiceStartError` (with the server's log) when it does not start."""
    bin_dir = find_postgres_bin()
    user = "postgres" if os.geteuid() == 0 else None
    # as root, the server runs as `postgres`: its folder must be where that user can reach
    root = Path(tempfile.mkdtemp(prefix="lakelog-pg-", dir="/tmp" if user else None))
    if user is not None:
        shutil.chown(root, user=user)
    server = PostgresServer(bin_dir, root, 0, user)
    init = server._run(
        str(bin_dir / "initdb"),
        "-D",
        str(server.data),
        "-U",
        "postgres",
        "--auth=trust",
        "--no-sync",
        "-E",
        "UTF8",
        timeout=120,
    )
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise ServiceStartError(f"initdb failed:\n{init.stdout}\n{init.stderr}")
    log = root / "server.log"
    for _ in range(max(1, attempts)):
        server.port = find_free_port()
        options = (
            f"-p {server.port} -k {root} -c listen_addresses={LOOPBACK} "
            f"-c fsync=off -c full_page_writes=off -c max_connections=100"
        )
        started = server._run(
            str(bin_dir / "pg_ctl"),
            "-D",
            str(server.data),
            "-l",
            str(log),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
            timeout=90,
        )
        if started.returncode == 0 and _port_accepts(LOOPBACK, server.port):
            atexit.register(server.stop)
            return server
    output = log.read_text(errors="replace") if log.exists() else ""
    server.stop()
    raise ServiceStartError(f"PostgreSQL did not start:\n{started.stderr}\n{output}")


# -- Spark Connect -----------------------------------------------------------------------


def serve_spark_connect(port: int, master: str = LOCAL_MASTER) -> None:
    """Run a Spark Connect server on 127.0.0.1:``port`` (the tests' Spark settings) until
    stdin closes. Run in a process of its own: ``python -c "import _services;
    _services.serve_spark_connect(<port>)"``."""
    spark = build_spark_session(
        "lakelog-connect-server",
        master=master,
        extra_conf={
            "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
            "spark.connect.grpc.binding.address": LOOPBACK,
            "spark.connect.grpc.binding.port": str(port),
        },
    )
    print("READY", flush=True)
    try:
        sys.stdin.read()
    finally:
        spark.stop()


class ConnectServer:
    """A Spark Connect server in its own process on a free port (:func:`start_connect_server`)."""

    def __init__(self, process: subprocess.Popen[str], port: int) -> None:
        self.process = process
        self.port = port
        self.url = f"sc://{LOOPBACK}:{port}"

    def stop(self) -> None:
        _stop(self.process)


def _stop(process: subprocess.Popen[str]) -> None:
    """End a helper process by closing its stdin (it stops on its own), or kill it."""
    if process.poll() is None:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            pipe.close()


def _python_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": worker_python_path(), "PYSPARK_PYTHON": sys.executable}


def _wait_for_line(process: subprocess.Popen[str], prefix: str, what: str, timeout: float) -> str:
    """The first stdout line of ``process`` starting with ``prefix`` (others skipped)."""
    assert process.stdout is not None
    found: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith(prefix):
                found.append(line[len(prefix) :].strip())
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    if not found:
        process.kill()
        raise ServiceStartError(f"{what} did not answer within {timeout:.0f} s")
    return found[0]


def start_connect_server(master: str = LOCAL_MASTER, timeout: float = 180.0) -> ConnectServer:
    """Start :func:`serve_spark_connect` in a subprocess on a free port; returns once it
    serves."""
    port = find_free_port()
    code = f"import _services; _services.serve_spark_connect({port}, {master!r})"
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_python_env(),
        cwd=str(TESTS_DIR),
    )
    _wait_for_line(process, "READY", "the Spark Connect server", timeout)
    return ConnectServer(process, port)


class ConnectClient:
    """A process running :mod:`_connect_client` against a Connect server: :meth:`run`
    calls one :mod:`_connect_ops` function on its Connect session."""

    def __init__(self, server: ConnectServer, timeout: float = 120.0) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(TESTS_DIR / "_connect_client.py"), server.url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=_python_env(),
            cwd=str(TESTS_DIR),
        )
        self.session = json.loads(
            _wait_for_line(self.process, "READY ", "the Spark Connect client", timeout)
        )["session"]
        self._lock = threading.Lock()

    def run(self, op: str, timeout: float = 600.0, **args: Any) -> Any:
        with self._lock:
            assert self.process.stdin is not None
            self.process.stdin.write(json.dumps({"op": op, "args": args}) + "\n")
            self.process.stdin.flush()
            answer = json.loads(
                _wait_for_line(self.process, "RESULT ", f"the Connect client ({op})", timeout)
            )
        if "error" in answer:
            raise AssertionError(
                f"{op} failed on Spark Connect: {answer['error']}\n{answer['traceback']}"
            )
        return answer["ok"]

    def stop(self) -> None:
        _stop(self.process)
