"""A Spark Connect client process for the tests: runs :mod:`_connect_ops` functions on a
Connect session, one request per line of stdin, one ``RESULT <json>`` line per answer.

``python _connect_client.py sc://127.0.0.1:<port>``. The client cannot share the test
process: PySpark decides per process (``SPARK_CONNECT_MODE_ENABLED``) whether
``pyspark.sql.functions`` build Connect or classic Columns, so a Connect session beside
the tests' classic one would get classic Columns.
"""

from __future__ import annotations

import json
import sys
import traceback
import warnings


def main(url: str) -> None:
    warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas")
    import _connect_ops
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(url).getOrCreate()
    out = sys.stdout
    out.write("READY " + json.dumps({"session": type(spark).__module__}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            fn = getattr(_connect_ops, request["op"])
            answer = {"ok": fn(spark, **request["args"])}
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the test
            answer = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        out.write("RESULT " + json.dumps(answer, default=str) + "\n")
        out.flush()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
