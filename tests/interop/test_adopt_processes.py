"""Adopting files with real processes: writers racing to add the same file, a convert
racing another, a SIGKILL before the commit, and the ``lakelog`` commands (exit codes,
messages, ``--json``/``--csv`` output) run as a user runs them."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakelog

pytestmark = pytest.mark.processes

CLI = [sys.executable, "-m", "lakelog.cli"]

ADDER = textwrap.dedent(
    """
    import sys
    import lakelog
    from lakelog.errors import LakelogError

    uri, path = sys.argv[1], sys.argv[2]
    try:
        r = lakelog.open_table(uri).add_files([path])
        print("added", r.version)
    except LakelogError as e:
        print("refused", type(e).__name__, e)
    """
)

CONVERTER = textwrap.dedent(
    """
    import sys
    import lakelog
    from lakelog.errors import TableExistsError

    try:
        print("converted", lakelog.convert(sys.argv[1]).version)
    except TableExistsError as e:
        print("refused", e)
    """
)


def _spawn(code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def _table(tmp_path: Path) -> lakelog.Table:
    uri = str(tmp_path / "t")
    lakelog.write_table(uri, pa.table({"id": [0], "v": ["a"]}))
    return lakelog.open_table(uri)


def test_racing_adders_add_a_file_once(tmp_path: Path) -> None:
    """The adder paused right before its put checked the file was new; another adds it
    meanwhile: on release the paused one must fail, not add the file a second time."""
    t = _table(tmp_path)
    pq.write_table(pa.table({"id": [1, 2], "v": ["b", "c"]}), tmp_path / "t" / "new.parquet")
    gate = tmp_path / "gate"
    paused = _spawn(
        ADDER, t.uri, "new.parquet", env={"LAKELOG_PAUSE_AT": f"commit:before-put:{gate}"}
    )
    _wait_for(Path(f"{gate}.paused"), paused)
    rival = _spawn(ADDER, t.uri, "new.parquet")
    out, err = rival.communicate(timeout=120)
    assert out.startswith("added 1"), out + err
    gate.touch()
    out, err = paused.communicate(timeout=120)
    assert out.startswith("refused CommitConflictError"), out + err
    assert "added by version 1 (ADD FILES) concurrently" in out
    snap = t.refresh().snapshot()
    assert snap.version == 1 and snap.paths().count("new.parquet") == 1
    assert snap.num_rows == 3 and sorted(snap.to_arrow()["id"].to_pylist()) == [0, 1, 2]

    # free for all: four processes adding the same file, one wins
    pq.write_table(pa.table({"id": [3], "v": ["d"]}), tmp_path / "t" / "more.parquet")
    procs = [_spawn(ADDER, t.uri, "more.parquet") for _ in range(4)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert sum(o.startswith("added") for o in outs) == 1, outs
    assert all(o.startswith(("added", "refused")) for o in outs), outs
    snap = t.refresh().snapshot()
    assert snap.version == 2 and snap.num_rows == 4


def test_add_files_rebases_over_appends(tmp_path: Path) -> None:
    t = _table(tmp_path)
    pq.write_table(pa.table({"id": [1], "v": ["b"]}), tmp_path / "t" / "new.parquet")
    gate = tmp_path / "gate"
    paused = _spawn(
        ADDER, t.uri, "new.parquet", env={"LAKELOG_PAUSE_AT": f"commit:before-put:{gate}"}
    )
    _wait_for(Path(f"{gate}.paused"), paused)
    t.append(pa.table({"id": [2], "v": ["c"]}))
    gate.touch()
    out, err = paused.communicate(timeout=120)
    assert out.startswith("added 2"), out + err
    assert sorted(t.refresh().snapshot().to_arrow()["id"].to_pylist()) == [0, 1, 2]


def test_racing_converts_make_one_table(tmp_path: Path) -> None:
    folder = tmp_path / "raw"
    folder.mkdir()
    for i in range(3):
        pq.write_table(pa.table({"id": [i]}), folder / f"{i}.parquet")
    gate = tmp_path / "gate"
    paused = _spawn(CONVERTER, str(folder), env={"LAKELOG_PAUSE_AT": f"commit:before-put:{gate}"})
    _wait_for(Path(f"{gate}.paused"), paused)
    rival = _spawn(CONVERTER, str(folder))
    out, err = rival.communicate(timeout=120)
    assert out.startswith("converted 0"), out + err
    gate.touch()
    out, err = paused.communicate(timeout=120)
    assert out.startswith("refused") and "created concurrently" in out, out + err
    table = lakelog.open_table(str(folder))
    assert table.version == 0 and table.snapshot().num_rows == 3


def test_a_killed_adder_commits_nothing_and_can_run_again(tmp_path: Path) -> None:
    t = _table(tmp_path)
    pq.write_table(pa.table({"id": [1], "v": ["b"]}), tmp_path / "t" / "new.parquet")
    killed = _spawn(ADDER, t.uri, "new.parquet", env={"LAKELOG_CRASH_AT": "commit:before-put"})
    killed.communicate(timeout=120)
    assert killed.returncode == -9
    assert t.refresh().version == 0 and (tmp_path / "t" / "new.parquet").exists()
    again = _spawn(ADDER, t.uri, "new.parquet")
    assert again.communicate(timeout=120)[0].startswith("added 1")


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_cli_convert_add_files_and_metadata_tables(tmp_path: Path) -> None:
    folder = tmp_path / "raw"
    for day in ("2026-11-01", "2026-11-02"):
        (folder / f"day={day}").mkdir(parents=True)
        pq.write_table(
            pa.table({"id": [1, 2], "x": [0.5, 1.5]}), folder / f"day={day}" / "a.parquet"
        )
    p = _cli("convert", str(folder), "--partition-by", "day:string", "--json")
    assert p.returncode == 0, p.stderr
    info = json.loads(p.stdout)
    assert info["num_files"] == 2 and info["num_rows"] == 4 and info["partition_by"] == ["day"]
    assert {"name": "day", "type": "string"} in info["schema"]

    p = _cli("convert", str(folder))
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.startswith("lakelog: error: expected a folder of Parquet files")
    assert "`lakelog add-files`" in p.stderr and "Traceback" not in p.stderr

    (folder / "day=2026-11-03").mkdir()
    pq.write_table(pa.table({"id": [3], "x": [2.5]}), folder / "day=2026-11-03" / "b.parquet")
    p = _cli("add-files", str(folder), "day=2026-11-03/b.parquet")
    assert p.returncode == 0, p.stderr
    assert "files added   1" in p.stdout and "version       1 (ADD FILES)" in p.stdout
    p = _cli("add-files", str(folder), "day=2026-11-03/b.parquet", "--json")
    assert p.returncode == 1 and "already in version 1" in p.stderr and p.stderr.count("\n") == 1

    p = _cli("partitions", str(folder), "--csv")
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    assert [r["partition.day"] for r in rows] == ["2026-11-01", "2026-11-02", "2026-11-03"]
    assert [r["num_rows"] for r in rows] == ["2", "2", "1"] and rows[2]["stats.x.max"] == "2.5"
    p = _cli("partitions", str(folder), "--json", "--filter", "x > 2")
    assert [r["partition"]["day"] for r in json.loads(p.stdout)] == ["2026-11-03"]
    p = _cli("partitions", str(folder))
    assert p.stdout.splitlines()[0].split() == ["day", "files", "rows", "size"]

    p = _cli("snapshots", str(folder), "--json")
    snaps = json.loads(p.stdout)
    assert [(s["version"], s["operation"], s["num_rows"]) for s in snaps] == [
        (1, "ADD FILES", 5),
        (0, "CONVERT", 4),
    ]
    p = _cli("snapshots", str(folder), "--csv")
    assert next(csv.DictReader(io.StringIO(p.stdout)))["files_added"] == "1"

    p = _cli("history", str(folder), "--csv", "--limit", "1")
    (row,) = list(csv.DictReader(io.StringIO(p.stdout)))
    assert row["operation"] == "ADD FILES" and json.loads(row["metrics"])["num_files"] == 1
    p = _cli("files", str(folder), "--csv", "--filter", "day = '2026-11-01'")
    (row,) = list(csv.DictReader(io.StringIO(p.stdout)))
    assert row["path"] == "day=2026-11-01/a.parquet" and row["stats.id.min"] == "1"

    p = _cli("convert", str(tmp_path / "raw2"), "--partition-by", "day:float")
    assert p.returncode == 1 and "--partition-by" in p.stderr and "'float'" in p.stderr


VACUUM = textwrap.dedent(
    """
    import datetime as dt, json, sys
    import lakelog

    r = lakelog.open_table(sys.argv[1]).vacuum(older_than=dt.timedelta(hours=1), dry_run=False)
    print(json.dumps({"deleted": list(r.files), "leased": r.files_leased}))
    """
)


def _old_file(tmp_path: Path, name: str) -> Path:
    """A file another tool wrote three hours ago: old enough for vacuum to take."""
    path = tmp_path / "t" / name
    pq.write_table(pa.table({"id": [7, 8], "v": ["x", "y"]}), path)
    then = time.time() - 3 * 3600
    os.utime(path, (then, then))
    return path


def test_a_vacuum_during_adoption_keeps_the_files(tmp_path: Path) -> None:
    """add_files names the files in its writer lease: a vacuum that runs while it adopts
    old files (unreferenced, older than ``older_than``) keeps them, and the commit
    lands on files that exist."""
    t = _table(tmp_path)
    path = _old_file(tmp_path, "old.parquet")
    gate = tmp_path / "gate"
    adder = _spawn(
        ADDER, t.uri, "old.parquet", env={"LAKELOG_PAUSE_AT": f"commit:before-put:{gate}"}
    )
    _wait_for(Path(f"{gate}.paused"), adder)
    vac = _spawn(VACUUM, t.uri)
    out, err = vac.communicate(timeout=120)
    assert vac.returncode == 0, err
    report = json.loads(out)
    assert report["deleted"] == [] and report["leased"] == 1 and path.exists(), report
    gate.touch()
    out, err = adder.communicate(timeout=120)
    assert out.startswith("added 1"), out + err
    assert sorted(t.refresh().snapshot().to_arrow()["id"].to_pylist()) == [0, 7, 8]


def test_a_vacuum_that_read_the_leases_first_never_leaves_a_missing_file(tmp_path: Path) -> None:
    """The interleaving the lease alone cannot cover, forced: a vacuum read the leases
    (none) and stops before deleting; an adder takes its lease on an old file; the vacuum
    goes on and, within its recheck window, deletes the file. The adder waits out that
    window and checks its files before committing: it fails with
    AdoptedFilesMissingError and commits nothing, or (the vacuum re-read the leases
    because the machine was slow) the file is kept and it lands. Never a version that
    references a missing file."""
    t = _table(tmp_path)
    path = _old_file(tmp_path, "old.parquet")
    gate = tmp_path / "gate"
    vac = _spawn(VACUUM, t.uri, env={"LAKELOG_PAUSE_AT": f"vacuum:before-batch:{gate}"})
    _wait_for(Path(f"{gate}.paused"), vac)
    adder = _spawn(ADDER, t.uri, "old.parquet")
    leases = tmp_path / "t" / "_lakelog" / "_leases"  # the vacuum's own lease is there too
    deadline = time.monotonic() + 60
    while not [f for f in leases.glob("*.json") if '"VACUUM"' not in f.read_text()]:
        assert adder.poll() is None, adder.communicate()
        assert time.monotonic() < deadline, "the adder never took its lease"
        time.sleep(0.01)
    gate.touch()
    out, err = vac.communicate(timeout=120)
    assert vac.returncode == 0, err
    deleted = json.loads(out)["deleted"]
    out, err = adder.communicate(timeout=120)
    snap = t.refresh().snapshot()
    if deleted:  # before or after the adder read its footer: the same refusal
        assert deleted == ["old.parquet"] and not path.exists()
        assert out.startswith("refused AdoptedFilesMissingError"), out + err
        assert "old.parquet" in out and "Nothing was committed" in out
        assert snap.version == 0
    else:
        assert out.startswith("added 1"), out + err
    assert sorted(snap.to_arrow()["id"].to_pylist()) == ([0] if deleted else [0, 7, 8])
