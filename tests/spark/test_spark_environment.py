"""Spark's Python workers import lakelog without ceremony, or every path says what to set.

A script run as ``<venv>/bin/python script.py``, no virtualenv activated, ``PYSPARK_PYTHON``
unset, and a ``python3`` first on the PATH that lacks lakelog (the virtualenv's base
interpreter): PySpark starts its workers with that ``python3``. Each lakelog path that runs
Python workers then either works, its workers running the driver's interpreter and the
driver's lakelog (lakelog set the session up at its first call), or, with ``PYSPARK_PYTHON``
chosen on purpose, fails at once with one ``SparkEnvironmentError`` saying what to set, and
changes nothing. One child process runs every path (one JVM); before each path the session
is put back as PySpark set it up, so each path is the first lakelog call of its setup.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, sys.argv[1])  # the lakelog under test, for the driver only
    work = sys.argv[2]
    import pyarrow as pa
    from pyspark.sql import SparkSession, functions as F
    import lakelog
    import lakelog.spark as lspark
    from lakelog.errors import SparkEnvironmentError

    spark = (SparkSession.builder.master("local[2]")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    sc = spark.sparkContext
    out = {"default_python": sc.pythonExec, "driver_lakelog": lakelog.__file__, "results": {}}
    default_env = dict(sc.environment)

    def as_pyspark_set_it_up():
        sc.pythonExec = "python3"
        sc.environment.clear()
        sc.environment.update(default_env)

    def workers():
        def where():
            import json, sys
            try:
                import lakelog
                return json.dumps([sys.executable, lakelog.__file__])
            except ImportError as e:
                return json.dumps([sys.executable, str(e)])
        u = F.udf(where, "string", useArrow=False)
        return json.loads(spark.range(1, numPartitions=1).select(u().alias("w")).collect()[0][0])

    base = os.path.join(work, "base")
    rows = {"id": pa.array(range(10), pa.int64()), "k": pa.array(["a", "b"] * 5)}
    lakelog.write_table(base, pa.table(rows), properties={"lakelog.change_data_feed": "true"})
    for _ in range(2):  # small files: compaction has work
        lakelog.open_table(base).append(pa.table(rows))
    cols = "id long, k string"

    def target(name):
        return os.path.join(work, f"{mode}-{name}")

    def append():
        lspark.write(spark.createDataFrame([(20, "a")], cols), target("t"))

    def replace_where():
        lspark.write(spark.createDataFrame([(1, "a")], cols), target("t"), mode="overwrite",
                     replace_where="k = 'a'")

    def format_read():
        lspark.register(spark)
        spark.read.format("lakelog").load(base).collect()

    def format_write():
        lspark.register(spark)
        frame = spark.createDataFrame([(30, "c")], cols)
        frame.write.format("lakelog").mode("append").save(target("format"))

    def streaming():  # the source and the sink
        lspark.register(spark)
        query = (spark.readStream.format("lakelog").load(base)
                 .writeStream.format("lakelog").option("checkpointLocation", target("ck"))
                 .trigger(availableNow=True).start(target("sink")))
        query.awaitTermination()

    def compact():
        lspark.compact(spark, base)

    def merge():
        lspark.merge(spark, base, spark.createDataFrame([(1, "z"), (99, "n")], cols), on="id")

    def read_changes():
        lspark.read_changes(spark, base, 0).collect()

    PATHS = [append, replace_where, format_read, format_write, streaming, compact, merge,
             read_changes]
    for mode in ("auto", "explicit"):
        if mode == "explicit":
            os.environ["PYSPARK_PYTHON"] = "python3"  # chosen on purpose: lakelog keeps it
        results = out["results"][mode] = {}
        for fn in PATHS:
            as_pyspark_set_it_up()
            version = lakelog.open_table(base).version
            try:
                fn()
                results[fn.__name__] = {"ok": True, "workers": workers()}
            except SparkEnvironmentError as e:
                results[fn.__name__] = {"error": "SparkEnvironmentError", "message": str(e),
                                        "unchanged": lakelog.open_table(base).version == version}
            except Exception as e:
                results[fn.__name__] = {"error": type(e).__name__, "message": str(e)[:3000]}
        out["written"] = sorted(os.listdir(work))
    print("RESULT " + json.dumps(out), flush=True)
    spark.stop()
    """
)


def _python_without_lakelog(tmp_path: Path) -> Path:
    """A folder whose ``python3`` is this virtualenv's base interpreter, which does not
    see the virtualenv's packages."""
    base = Path(sys.base_prefix) / "bin" / "python3"
    probe = subprocess.run(
        [str(base), "-c", "import lakelog"], capture_output=True, cwd=tmp_path, check=False
    )
    if not base.exists() or probe.returncode == 0:
        pytest.skip(f"no interpreter without lakelog to start Spark's workers with ({base})")
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "python3").symlink_to(base)
    return folder


def test_every_path_sets_up_the_workers_or_says_what_to_set(tmp_path: Path) -> None:
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on the PATH")
    bin_dir = _python_without_lakelog(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "PYTHON"))}
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = os.pathsep.join([str(bin_dir), str(Path(java).parent), "/usr/bin", "/bin"])
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    work = tmp_path / "work"
    work.mkdir()
    script = tmp_path / "pipeline.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), str(REPO), str(work)],
        capture_output=True,
        text=True,
        timeout=540,
        env=env,
        cwd=tmp_path,  # not the checkout: the workers' python3 must not find lakelog there
        check=False,
    )
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    assert lines, done.stdout[-2000:] + done.stderr[-6000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    assert out["default_python"] == "python3"  # PySpark's default: python3 on the PATH
    assert out["driver_lakelog"] == str(REPO / "lakelog" / "__init__.py")

    auto = out["results"]["auto"]
    # lakelog pointed the workers at the driver's interpreter and lakelog, for every path
    for name, result in auto.items():
        assert result.get("ok"), (name, result)
        if name != "append":  # Spark's own Parquet writer: no Python workers needed
            assert result["workers"] == [sys.executable, out["driver_lakelog"]], name

    explicit = out["results"]["explicit"]
    assert explicit.pop("append").get("ok")
    for name, result in explicit.items():
        assert result["error"] == "SparkEnvironmentError", (name, result)
        message = result["message"]
        assert "No module named 'lakelog'" in message, name  # what was found
        assert str(bin_dir / "python3") in message, name  # the workers' interpreter
        assert "PYSPARK_PYTHON" in message and "venv-pack" in message, name  # what to set
        assert result["unchanged"], name
    # the refused writes left nothing behind
    assert not {"explicit-format", "explicit-sink", "explicit-ck"} & set(out["written"])
