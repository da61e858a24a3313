"""Writers killed for real (SIGKILL via ``LAKELOG_CRASH_AT``) at the two risky moments.

* between writing the data files and committing: the table is unchanged and
  readable; the orphan files are invisible to it;
* right after the commit landed (before the manifest and any cleanup): the
  commit counts exactly once and the table is readable, manifest or not.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
from lakelog.log.commits import list_log
from lakelog.log.manifests import manifest_path

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])

WRITER = textwrap.dedent(
    """
    import json, sys
    import pyarrow as pa
    import lakelog

    args = json.loads(sys.argv[1])
    t = lakelog.open_table(args["uri"], storage_options=args["opts"])
    ids = list(range(args["start"], args["start"] + args["n"]))
    data = pa.table({"id": ids, "p": ["a" if i % 2 else "b" for i in ids]})
    r = getattr(t, args["op"])(data)
    print("survived", r.version, flush=True)
    """
)


def _run_writer(backend: Any, crash_at: str, *, op: str = "append", start: int, n: int) -> int:
    env = dict(os.environ, LAKELOG_CRASH_AT=crash_at)
    arg = json.dumps(
        {"uri": backend.uri, "opts": backend.storage_options, "op": op, "start": start, "n": n}
    )
    proc = subprocess.run(
        [sys.executable, "-c", WRITER, arg], env=env, capture_output=True, text=True, timeout=120
    )
    assert "survived" not in proc.stdout, proc.stdout
    return proc.returncode


def _ids(t: lakelog.Table, version: int | None = None) -> list[int]:
    return sorted(t.snapshot(version).to_arrow().column("id").to_pylist())


def _table(backend: Any, **props: Any) -> lakelog.Table:
    t = lakelog.create_table(
        backend.uri,
        SCHEMA,
        partition_by=["p"],
        properties=props or None,
        storage_options=backend.storage_options,
    )
    t.append(pa.table({"id": [0, 1], "p": ["b", "a"]}))
    return t


def _data_files(t: lakelog.Table) -> set[str]:
    return {f.path for f in t.storage.walk() if not f.path.startswith("_lakelog/")}


@pytest.mark.processes
@pytest.mark.parametrize("name", ["local", "s3"])
def test_killed_between_data_files_and_commit(request: pytest.FixtureRequest, name: str) -> None:
    backend = request.getfixturevalue(f"{name}_backend")
    t = _table(backend)
    before_files = _data_files(t)
    code = _run_writer(backend, "append:before-commit", start=100, n=10)
    assert code == -signal.SIGKILL
    fresh = lakelog.open_table(backend.uri, storage_options=backend.storage_options)
    assert fresh.version == 1
    assert list_log(fresh.storage).commits == (0, 1)
    assert _ids(fresh) == [0, 1]
    # the killed writer's files are on storage but not in the table
    orphans = _data_files(fresh) - before_files
    assert len(orphans) == 2  # one per partition
    assert orphans.isdisjoint(f.path for f in fresh.snapshot().files())
    # and the table keeps working
    assert fresh.append(pa.table({"id": [2], "p": ["a"]})).version == 2
    assert _ids(fresh) == [0, 1, 2]


@pytest.mark.processes
def test_killed_overwrite_before_commit_leaves_table_unchanged(local_backend: Any) -> None:
    _table(local_backend)
    code = _run_writer(local_backend, "commit:before-put", op="overwrite", start=50, n=4)
    assert code == -signal.SIGKILL
    fresh = lakelog.open_table(local_backend.uri)
    assert fresh.version == 1 and _ids(fresh) == [0, 1]


@pytest.mark.processes
@pytest.mark.parametrize("name", ["local", "s3"])
def test_killed_right_after_commit_counts_once(request: pytest.FixtureRequest, name: str) -> None:
    backend = request.getfixturevalue(f"{name}_backend")
    # version 2 is due a manifest: the kill also skips writing it
    t = _table(backend, **{"lakelog.manifest_interval": 2})
    code = _run_writer(backend, "commit:after-put", start=100, n=6)
    assert code == -signal.SIGKILL
    fresh = lakelog.open_table(backend.uri, storage_options=backend.storage_options)
    assert fresh.version == 2
    listing = list_log(fresh.storage)
    assert listing.commits == (0, 1, 2)
    assert 2 not in listing.manifests  # the writer died before writing it
    assert _ids(fresh) == [0, 1, *range(100, 106)]
    assert [h.operation for h in fresh.history()] == ["APPEND", "APPEND", "CREATE TABLE"]
    assert _ids(fresh, 1) == [0, 1]
    # the next writer carries on; the next due manifest is written and right
    fresh.append(pa.table({"id": [7], "p": ["a"]}))
    fresh.append(pa.table({"id": [8], "p": ["b"]}))
    assert 4 in list_log(fresh.storage).manifests
    assert _ids(lakelog.open_table(backend.uri, storage_options=backend.storage_options)) == [
        0,
        1,
        7,
        8,
        *range(100, 106),
    ]
    del t


def test_torn_manifest_leaves_a_readable_table(local_backend: Any) -> None:
    """A torn manifest (as a crash on a filesystem without atomic replace could
    leave) and a hint pointing at it are skipped in favour of replay."""
    t = _table(local_backend, **{"lakelog.manifest_interval": 2})
    t.append(pa.table({"id": [5], "p": ["a"]}))  # version 2 with a manifest
    root = Path(local_backend.uri)
    m = root / manifest_path(2)
    m.write_bytes(m.read_bytes()[:100])
    fresh = lakelog.open_table(local_backend.uri)
    assert fresh.version == 2
    assert _ids(fresh) == [0, 1, 5]
    assert _ids(fresh, 2) == [0, 1, 5]
