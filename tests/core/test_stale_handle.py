"""A table handle whose snapshot predates a property change still appends.

``Table`` caches a snapshot; its writes commit on top of the latest version. A property
change that leaves the schema, partitioning and format version as they were does not
change what an append writes, so an append rebases over it. A change of any of those is
a conflict whose message says to refresh. Both in one process (two handles) and with
real processes: the appender paused right before its put while another process changes
the table.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pyarrow as pa
import pytest
from _processes import spawn, wait_paused

import lakelog
from lakelog.log.actions import Action, AddFile, Commit, CommitHeader, Metadata, encode_schema
from lakelog.transaction import Kind, check_conflicts

SCHEMA = pa.schema([("k", pa.int64())])


def _batch(*keys: int) -> pa.Table:
    return pa.table({"k": list(keys)}, schema=SCHEMA)


def _keys(uri: str) -> list[int]:
    return sorted(lakelog.open_table(uri).snapshot().to_arrow().column("k").to_pylist())


def test_stale_handle_appends_after_a_property_change(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    lakelog.create_table(uri, SCHEMA).append(_batch(1))
    stale = lakelog.open_table(uri)
    lakelog.open_table(uri).set_properties({"lakelog.target_file_size": 64 << 20, "owner": "x"})
    for k in (2, 3):  # every append, not only the first after the change
        stale.append(_batch(k))
    assert _keys(uri) == [1, 2, 3]
    latest = lakelog.open_table(uri).snapshot()
    assert latest.properties["owner"] == "x"  # the property change is not undone
    assert stale.snapshot().properties["owner"] == "x"


def test_stale_handle_append_conflicts_on_a_schema_change_and_says_refresh(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "t")
    lakelog.create_table(uri, SCHEMA).append(_batch(1))
    stale = lakelog.open_table(uri)
    lakelog.open_table(uri).add_columns([pa.field("extra", pa.string())])
    with pytest.raises(lakelog.CommitConflictError, match=r"refresh"):
        stale.append(_batch(2))
    stale.refresh().append(_batch(2), schema_mode="merge")
    assert _keys(uri) == [1, 2]


def _commit(version: int, *actions: Action) -> Commit:
    header = CommitHeader(
        format_version=1, version=version, timestamp_ms=version, operation="X", txn_id="w"
    )
    return Commit(header, list(actions))


def test_conflict_rules_for_a_winning_metadata_change() -> None:
    """Pure rules: a data append rebases over a winner that changed properties only;
    a schema, partitioning or format change, an append that itself changes metadata, and
    every other kind still conflict."""
    read = Metadata(table_id="t", schema=encode_schema(SCHEMA))
    props = msgspec.structs.replace(read, properties={"owner": "x"})
    wider = msgspec.structs.replace(
        read, schema=encode_schema(SCHEMA.append(pa.field("extra", pa.string())))
    )
    parted = msgspec.structs.replace(read, partition_by=("k",))
    v5 = msgspec.structs.replace(read, format_version=5)
    add = AddFile(path="a.parquet", size_bytes=1, num_rows=1)

    def check(kind: Kind, actions: list[Action], winner: Metadata) -> None:
        check_conflicts(
            kind=kind, actions=actions, winners=[_commit(3, winner)], read_metadata=read
        )

    check("append", [add], props)
    for changed in (wider, parted, v5):
        with pytest.raises(lakelog.CommitConflictError, match="refresh"):
            check("append", [add], changed)
    with pytest.raises(lakelog.CommitConflictError):
        check("append", [props, add], props)  # an append that evolves the schema
    for kind in ("rewrite", "overwrite", "delete", "rowlevel", "metadata"):
        with pytest.raises(lakelog.CommitConflictError):
            check(kind, [add], props)  # type: ignore[arg-type]


APPEND = r"""
import sys
import pyarrow as pa
import lakelog
t = lakelog.open_table(sys.argv[1])
try:
    r = t.append(pa.table({"k": [int(sys.argv[2])]}))
    print("landed", r.version)
except lakelog.CommitConflictError as e:
    print("conflict", str(e).replace("\n", " "))
"""


@pytest.mark.processes
@pytest.mark.parametrize(
    ("change", "lands"),
    [
        ("properties", True),
        ("turn-on-vectors", False),  # declares format version 5
        ("add-column", False),
    ],
)
def test_paused_appender_and_a_concurrent_table_change(
    tmp_path: Path, change: str, lands: bool
) -> None:
    uri = str(tmp_path / "t")
    # without vectors (on by default), so turning them on changes the format version
    cow = {"lakelog.deletion_vectors": "false"}
    lakelog.create_table(uri, SCHEMA, properties=cow).append(_batch(1))
    gate = tmp_path / "gate"
    proc = spawn(APPEND, uri, "2", LAKELOG_PAUSE_AT=f"commit:before-put:APPEND:{gate}")
    try:
        wait_paused(gate, proc)
        other = lakelog.open_table(uri)
        if change == "properties":
            other.set_properties({"lakelog.compression": "snappy"})
        elif change == "turn-on-vectors":
            other.set_properties({"lakelog.deletion_vectors": "true"})
        else:
            other.add_columns([pa.field("extra", pa.string())])
        gate.touch()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    if lands:
        assert out.startswith("landed"), out
        assert _keys(uri) == [1, 2]
    else:
        assert out.startswith("conflict"), out
        assert "refresh" in out
        assert _keys(uri) == [1]
