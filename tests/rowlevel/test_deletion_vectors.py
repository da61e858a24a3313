"""Deletion vectors (format version 5): the codec, every reader, the change paths that
write vectors, compaction's purge, restore, old readers and the CLI.

``docs/format.md``, "Deletion vectors (version 5)". The random sequences of changes
checked against a model at every version, vectors on and off, are in ``test_model.py``.
"""

from __future__ import annotations

import base64
import json
import math
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

import lakelog
import lakelog.log.commits as log_commits
import lakelog.log.leaves as log_leaves
import lakelog.log.manifests as log_manifests
from lakelog.errors import (
    CorruptLogError,
    DeletedRowsError,
    InvalidArgumentError,
    UnsupportedFormatError,
)
from lakelog.log.actions import AddFile, DeletionVector, RemoveFile
from lakelog.log.commits import read_commit
from lakelog.log.deletion_vectors import (
    deleted_positions,
    encode_vector,
    keep_mask,
    union_vector,
)
from lakelog.log.format import check_readable

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("part", pa.string()),
        ("k", pa.int64()),
        ("x", pa.float64()),
        ("s", pa.string()),
    ]
)
VECTORS = "lakelog.deletion_vectors"
CLI = [sys.executable, "-m", "lakelog.cli"]


def data(ids: Any, *, part: str | None = None, x: float | None = None) -> pa.Table:
    """Rows ``ids``: part ``p<id % 3>``, ``k`` with nulls, ``x`` with nulls and NaNs."""
    ids = list(ids)
    return pa.table(
        {
            "id": ids,
            "part": [part or f"p{i % 3}" for i in ids],
            "k": [None if i % 11 == 0 else i % 7 for i in ids],
            "x": [
                x
                if x is not None
                else (None if i % 13 == 0 else math.nan if i % 17 == 5 else float(i))
                for i in ids
            ],
            "s": [f"s{i}" for i in ids],
        },
        schema=SCHEMA,
    )


def create(
    path: Path, *, vectors: bool = True, partition_by: tuple[str, ...] = ("part",), **props: str
) -> lakelog.Table:
    properties = {VECTORS: "true" if vectors else "false"}  # explicit: on is the default
    properties.update(props)
    return lakelog.create_table(str(path), SCHEMA, partition_by=partition_by, properties=properties)


def _norm(v: Any) -> Any:
    return "NaN" if isinstance(v, float) and math.isnan(v) else v


def _key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is None, isinstance(v, str), "" if v is None else v) for v in row)


def rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """A table's rows as sorted tuples (NaN comparable), with its column names first."""
    names = tuple(table.column_names)
    got = [tuple(_norm(r[c]) for c in names) for r in table.to_pylist()]
    return [names, *sorted(got, key=_key)]


def ids(t: lakelog.Table, version: int | None = None) -> list[int]:
    return sorted(t.refresh().snapshot(version).to_arrow(columns=["id"]).column(0).to_pylist())


def marked(t: lakelog.Table) -> list[lakelog.DataFile]:
    return [f for f in t.refresh().snapshot().files() if f.deleted is not None]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


# -- the codec ---------------------------------------------------------------------------


@st.composite
def position_sets(draw: st.DrawFn) -> tuple[np.ndarray, int]:
    """A proper, non-empty subset of ``0..num_rows-1`` (shuffled), sparse or dense."""
    num_rows = draw(st.integers(1, 3000))
    if num_rows < 64 and draw(st.booleans()):  # small: let hypothesis shrink the set
        chosen = draw(
            st.sets(st.integers(0, num_rows - 1), min_size=1, max_size=max(1, num_rows - 1))
        )
        if len(chosen) >= num_rows:
            chosen.discard(max(chosen))
        if not chosen:  # num_rows == 1: no proper non-empty subset
            num_rows += 1
            chosen = {0}
        pos = np.array(sorted(chosen), dtype=np.int64)
    else:
        density = draw(
            st.sampled_from([0.001, 0.01, 0.05, 0.2, 0.5, 0.9, 0.999])
            | st.floats(0.0, 1.0, allow_nan=False)
        )
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        mask = rng.random(num_rows) < density
        if num_rows == 1:
            num_rows, mask = 2, np.array([True, False])
        if mask.all():
            mask[rng.integers(num_rows)] = False
        if not mask.any():
            mask[rng.integers(num_rows)] = True
        pos = np.flatnonzero(mask).astype(np.int64)
    shuffled = draw(st.permutations(pos.tolist())) if len(pos) < 50 else pos[::-1]
    return np.asarray(shuffled, dtype=np.int64), num_rows


def _decode_by_spec(bitmap: str, num_rows: int) -> tuple[int, list[int]]:
    """The form and positions of a bitmap, read as format.md describes it (not with
    lakelog's decoder)."""
    payload = base64.b64decode(bitmap)
    raw = zlib.decompress(payload[1:])
    if payload[0] == 0:
        return 0, [int(x) for x in np.frombuffer(raw, dtype="<u4")]
    assert payload[0] == 1 and len(raw) == (num_rows + 7) // 8
    return 1, [i for i in range(num_rows) if raw[i // 8] >> (i % 8) & 1]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(position_sets())
@example((np.array([3]), 1000))  # sparse: the sorted positions (form 0)
@example((np.arange(0, 1000, 2), 1000))  # dense: one bit per row (form 1)
def test_codec_round_trip(case: tuple[np.ndarray, int]) -> None:
    positions, num_rows = case
    expected = sorted(set(positions.tolist()))
    v = encode_vector(positions, num_rows)
    assert v.rows == len(expected)
    assert deleted_positions(v, num_rows).tolist() == expected
    keep = keep_mask(v, num_rows)
    assert keep is not None and np.flatnonzero(~keep).tolist() == expected
    # the text is the spec's: base64 of a form byte and zlib of the smaller form
    form, by_spec = _decode_by_spec(v.bitmap, num_rows)
    event(f"form {form}")
    assert by_spec == expected
    assert form == (0 if 4 * len(expected) <= (num_rows + 7) // 8 else 1)


def test_codec_picks_both_forms() -> None:
    sparse = encode_vector(np.array([5, 900]), 1000)
    dense = encode_vector(np.arange(0, 1000, 3), 1000)
    assert base64.b64decode(sparse.bitmap)[0] == 0
    assert base64.b64decode(dense.bitmap)[0] == 1
    assert deleted_positions(dense, 1000).tolist() == list(range(0, 1000, 3))
    assert keep_mask(None, 7) is None


@pytest.mark.parametrize(
    ("positions", "num_rows"),
    [([], 5), ([0, 1, 2, 3, 4], 5), ([5], 5), ([-1], 5), ([0], 1)],
    ids=["empty", "every-row", "past-the-end", "negative", "single-row-file"],
)
def test_encode_refuses_what_is_not_a_proper_subset(positions: list[int], num_rows: int) -> None:
    with pytest.raises(ValueError, match="proper subset"):
        encode_vector(np.array(positions, dtype=np.int64), num_rows)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(position_sets(), st.booleans(), st.data())
def test_union_vector(case: tuple[np.ndarray, int], with_old: bool, more: st.DataObject) -> None:
    old_positions, num_rows = case
    old = encode_vector(old_positions, num_rows) if with_old else None
    new = more.draw(
        st.lists(st.integers(0, num_rows - 1), min_size=1, max_size=num_rows + 3)
        | st.just(list(range(num_rows))),  # everything: the file goes
        label="new",
    )
    both = set(new) | (set(old_positions.tolist()) if with_old else set())
    got = union_vector(old, np.array(new, dtype=np.int64), num_rows)
    if len(both) == num_rows:
        assert got is None
    else:
        assert got is not None and got.rows == len(both)
        assert deleted_positions(got, num_rows).tolist() == sorted(both)


def _b64(form: int, raw: bytes) -> str:
    return base64.b64encode(bytes([form]) + zlib.compress(raw)).decode("ascii")


@pytest.mark.parametrize(
    ("vector", "num_rows"),
    [
        (DeletionVector(rows=2, bitmap="not base64!"), 10),
        (DeletionVector(rows=2, bitmap=""), 10),
        (DeletionVector(rows=2, bitmap=base64.b64encode(b"\x00").decode()), 10),
        (DeletionVector(rows=2, bitmap=base64.b64encode(b"\x00garbage").decode()), 10),
        (DeletionVector(rows=2, bitmap=_b64(2, b"\x03\x00")), 10),  # unknown form
        (DeletionVector(rows=2, bitmap=_b64(0, b"\x01\x00\x00\x00\x02\x00\x00")), 10),  # 7 bytes
        (DeletionVector(rows=2, bitmap=_b64(0, np.array([4, 1], "<u4").tobytes())), 10),
        (DeletionVector(rows=2, bitmap=_b64(0, np.array([1, 1], "<u4").tobytes())), 10),
        (DeletionVector(rows=2, bitmap=_b64(0, np.array([1, 10], "<u4").tobytes())), 10),
        (DeletionVector(rows=3, bitmap=_b64(0, np.array([1, 2], "<u4").tobytes())), 10),
        (DeletionVector(rows=1, bitmap=_b64(0, np.array([1, 2], "<u4").tobytes())), 10),
        (DeletionVector(rows=-2, bitmap=_b64(0, np.array([1, 2], "<u4").tobytes())), 10),
        (DeletionVector(rows=2, bitmap=_b64(1, b"\x06")), 10),  # 1 byte for 10 rows
        (DeletionVector(rows=2, bitmap=_b64(1, b"\x06\x00\x00")), 10),  # 3 bytes
        (DeletionVector(rows=3, bitmap=_b64(1, b"\x06\x04")), 10),  # bit 10 is past the end
        (DeletionVector(rows=3, bitmap=_b64(1, b"\x06\x00")), 10),  # count disagrees
    ],
)
def test_damaged_vectors_are_corrupt_log_errors(vector: DeletionVector, num_rows: int) -> None:
    with pytest.raises(CorruptLogError, match="deletion vector"):
        deleted_positions(vector, num_rows, path="part-0.parquet")
    with pytest.raises(CorruptLogError):
        keep_mask(vector, num_rows)


@pytest.mark.parametrize(
    ("vector", "num_rows"),
    [
        (DeletionVector(rows=3, bitmap=_b64(1, b"\x07")), 3),  # deletes every row
        (DeletionVector(rows=3, bitmap=_b64(0, np.array([0, 1, 2], "<u4").tobytes())), 3),
        (DeletionVector(rows=0, bitmap=_b64(0, b"")), 3),  # deletes nothing
    ],
    ids=["every-row-bits", "every-row-positions", "no-row"],
)
def test_vectors_outside_0_lt_rows_lt_num_rows_are_refused(
    vector: DeletionVector, num_rows: int
) -> None:
    """format.md: ``0 < rows < num_rows``; a writer removes a file instead of deleting
    its every row, and never writes an empty vector."""
    with pytest.raises(CorruptLogError):
        deleted_positions(vector, num_rows)


def test_a_non_ascii_bitmap_is_a_corrupt_log_error() -> None:
    with pytest.raises(CorruptLogError):
        deleted_positions(DeletionVector(rows=1, bitmap="AXic\u00e9"), 10)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(position_sets(), st.data())
def test_random_damage_is_refused_or_harmless(
    case: tuple[np.ndarray, int], draw: st.DataObject
) -> None:
    """Any damage to the bitmap text or the counts: a ``CorruptLogError``, or (a flip
    zlib's checksum cannot see) positions that agree with ``rows`` and ``num_rows``;
    never another exception. Damage that must be caught is asserted to be."""
    positions, num_rows = case
    v = encode_vector(positions, num_rows)
    payload = bytearray(base64.b64decode(v.bitmap))
    how = draw.draw(
        st.sampled_from(["rows", "num_rows", "flip", "truncate", "form", "text", "append"])
    )
    must_fail = how in ("rows", "num_rows", "truncate", "form")
    rows, n, text = v.rows, num_rows, v.bitmap
    if how == "rows":
        rows = draw.draw(st.integers(-3, num_rows + 3).filter(lambda r: r != v.rows))
    elif how == "num_rows":
        n = draw.draw(st.integers(0, int(positions.max())))
    elif how == "flip":
        i = draw.draw(st.integers(0, len(payload) - 1))
        payload[i] ^= draw.draw(st.integers(1, 255))
        text = base64.b64encode(bytes(payload)).decode()
    elif how == "truncate":
        text = base64.b64encode(bytes(payload[: draw.draw(st.integers(0, 2))])).decode()
    elif how == "form":
        payload[0] = draw.draw(st.integers(2, 255))
        text = base64.b64encode(bytes(payload)).decode()
    elif how == "text":
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=!-_ "
        text = draw.draw(st.text(alphabet, max_size=40))
    else:
        tail = draw.draw(st.binary(min_size=1, max_size=8))
        text = base64.b64encode(bytes(payload) + tail).decode()
    damaged = DeletionVector(rows=rows, bitmap=text)
    try:
        got = deleted_positions(damaged, n)
    except CorruptLogError:
        return
    assert not must_fail, (how, damaged, n)
    assert len(got) == rows and rows >= 0
    assert (np.diff(got) > 0).all() and (not len(got) or (got[0] >= 0 and got[-1] < n))


@pytest.mark.parametrize(
    "damage",
    ["bitmap", "rows", "every-row"],
)
def test_a_damaged_vector_in_the_log_is_a_corrupt_log_error(tmp_path: Path, damage: str) -> None:
    t = create(tmp_path / "t", partition_by=())
    t.append(data(range(10)))
    r = t.delete("id = 3 or id = 4")
    path = t.storage.full(log_commits.commit_path(r.version))
    text = Path(path).read_text()
    actions = read_commit(t.storage, r.version).actions
    (vector,) = [a.deleted for a in actions if isinstance(a, AddFile) and a.deleted]
    if damage == "bitmap":  # valid base64 and zlib, other positions
        bad = DeletionVector(rows=2, bitmap=_b64(0, np.array([3, 12], "<u4").tobytes()))
    elif damage == "rows":
        bad = DeletionVector(rows=3, bitmap=vector.bitmap)
    else:  # every row of the file, as a vector (a writer removes the file instead)
        bad = DeletionVector(rows=10, bitmap=_b64(1, b"\xff\x03"))
    assert text.count(vector.bitmap) == 1
    old = json.dumps({"rows": vector.rows, "bitmap": vector.bitmap}, separators=(",", ":"))
    damaged = text.replace(old, json.dumps({"rows": bad.rows, "bitmap": bad.bitmap}))
    assert damaged != text
    Path(path).write_text(damaged)
    snap = lakelog.open_table(t.uri).snapshot()
    with pytest.raises(CorruptLogError, match="deletion vector"):
        snap.to_arrow()
    with pytest.raises(CorruptLogError, match="deletion vector"):
        list(snap.to_batches())


# -- the change paths --------------------------------------------------------------------


def test_turning_vectors_on_declares_version_5_and_changes_mark_files(tmp_path: Path) -> None:
    t = create(tmp_path / "t", vectors=False)
    t.append(data(range(30)))
    assert t.metadata.format_version == 3
    t.set_properties({VECTORS: "true"})
    assert t.refresh().snapshot().metadata.format_version == 5
    assert t.history(limit=1)[0].format_version == 5
    before = {f.path: f for f in t.snapshot().files()}
    r = t.delete("id = 4 or id = 5 or id = 9")  # one row in each of p1, p2 and p0
    assert r.committed and r.deleted_rows == 3
    assert (r.files_marked, r.files_removed, r.files_added) == (3, 0, 0)
    h = read_commit(t.storage, r.version)
    assert h.header.format_version == 5
    assert h.header.metrics["num_deletion_vectors"] == 3
    assert h.header.metrics["num_removed_files"] == 0
    # each marked file: a remove and an add of the same path, with the vector, in order
    adds = [a for a in h.actions if isinstance(a, AddFile)]
    removes = [a.path for a in h.actions if isinstance(a, RemoveFile)]
    assert sorted(removes) == sorted(a.path for a in adds)
    for a in adds:
        old = before[a.path]
        assert a.deleted is not None and a.deleted.rows == 1
        assert (a.num_rows, a.size_bytes, a.stats) == (old.num_rows, old.size_bytes, old.stats)
        assert h.actions.index(a) > h.actions.index(
            next(x for x in h.actions if isinstance(x, RemoveFile) and x.path == a.path)
        )
    assert ids(t) == [i for i in range(30) if i not in (4, 5, 9)]
    # a second change of a marked file: its vector grows, keeping every old position
    p = next(f for f in marked(t) if f.partition == {"part": "p1"})
    old = set(deleted_positions(p.deleted, p.num_rows).tolist())  # type: ignore[arg-type]
    r = t.update("id = 7", set={"s": "seven"})  # p1
    assert (r.files_marked, r.files_removed, r.files_added, r.updated_rows) == (1, 0, 1, 1)
    (q,) = [f for f in marked(t) if f.path == p.path]
    assert q.deleted is not None and q.deleted.rows == 2
    assert old < set(deleted_positions(q.deleted, q.num_rows).tolist())
    got = {r["id"]: r["s"] for r in t.snapshot().to_arrow().to_pylist()}
    assert got[7] == "seven" and len(got) == 27


def test_vectors_on_by_default_off_when_set_or_with_the_delta_view(tmp_path: Path) -> None:
    # no property: vectors on from version 0, a delete marks instead of rewriting
    t = lakelog.create_table(str(tmp_path / "on"), SCHEMA, partition_by=("part",))
    assert t.properties[VECTORS] == "true" and t.metadata.format_version >= 5
    assert read_commit(t.storage, 0).header.format_version >= 5
    t.append(data(range(30)))
    r = t.delete("id = 4")
    assert (r.files_marked, r.files_removed, r.files_added) == (1, 0, 0)
    assert t.history(limit=1)[0].metrics["num_deletion_vectors"] == 1
    assert ids(t) == [i for i in range(30) if i != 4]
    # the creator's other properties do not turn the default off
    t = lakelog.create_table(str(tmp_path / "team"), SCHEMA, properties={"team": "a"})
    assert t.properties == {"team": "a", VECTORS: "true"}
    # write_table creating a table follows the same default
    lakelog.write_table(str(tmp_path / "written"), data(range(30)), partition_by=["part"])
    t = lakelog.open_table(str(tmp_path / "written"))
    assert t.properties[VECTORS] == "true" and t.metadata.format_version >= 5
    r = t.delete("id = 4")
    assert (r.files_marked, r.files_removed) == (1, 0)
    lakelog.write_table(
        str(tmp_path / "written-cow"), data(range(30)), properties={VECTORS: "false"}
    )
    t = lakelog.open_table(str(tmp_path / "written-cow"))
    assert t.properties[VECTORS] == "false" and t.metadata.format_version < 5
    # explicitly off, or created with the Delta view: copy-on-write, every change
    for name, props in [
        ("off", {VECTORS: "false"}),
        ("delta", {"lakelog.delta_view": "true"}),
    ]:
        t = lakelog.create_table(
            str(tmp_path / name), SCHEMA, partition_by=("part",), properties=props
        )
        assert t.properties == props, name
        assert t.metadata.format_version < 5, name
        t.append(data(range(30)))
        for r in [
            t.delete("id = 4"),
            t.update("id = 5", set={"s": "five"}),
            t.merge(data([6, 100]), on="id", when_matched="update", when_not_matched="insert"),
            t.overwrite(data([7], part="p1"), where="id = 7"),
        ]:
            assert r.committed and r.files_marked == 0 and r.files_removed >= 1, name
            assert "num_deletion_vectors" not in t.history(limit=1)[0].metrics, name
            assert t.history(limit=1)[0].format_version < 5, name
        assert marked(t) == [] and t.metadata.format_version < 5, name
        assert ids(t) == [i for i in range(30) if i != 4] + [100], name


def test_turning_vectors_off_rewrites_again_and_keeps_version_5(tmp_path: Path) -> None:
    t = create(tmp_path / "t", partition_by=())
    t.append(data(range(20)))
    t.append(data(range(20, 40)))
    t.delete("id = 1")
    (f,) = marked(t)
    t.set_properties({VECTORS: "false"})
    assert t.refresh().metadata.format_version == 5  # never goes back
    r = t.delete("id = 30")
    assert (r.files_marked, r.files_removed) == (0, 1)
    assert marked(t) == [f]  # the vector already written stays
    assert ids(t) == [i for i in range(40) if i not in (1, 30)]


def test_a_vector_past_the_cap_rewrites_the_file(tmp_path: Path) -> None:
    t = create(tmp_path / "t", partition_by=())
    t.append(data(range(50)))
    r = t.delete("id = 1")
    assert (r.files_marked, r.files_removed) == (1, 0)  # under the real cap: marked
    t.set_properties({"lakelog.deletion_vectors.max_vector_bytes": 4})
    r = t.delete("id = 2 or id = 40")
    assert (r.files_marked, r.files_removed, r.files_added) == (0, 1, 1)
    assert "num_deletion_vectors" not in t.history(limit=1)[0].metrics
    assert marked(t) == []
    assert ids(t) == [i for i in range(50) if i not in (1, 2, 40)]
    r = t.update("id = 3", set={"s": "three"})  # the cap applies to updates too
    assert (r.files_marked, r.files_removed) == (0, 1) and marked(t) == []
    got = {x["id"]: x["s"] for x in t.snapshot().to_arrow().to_pylist()}
    assert got[3] == "three" and len(got) == 47


def test_deleting_every_remaining_row_removes_the_file(tmp_path: Path) -> None:
    t = create(tmp_path / "t", partition_by=())
    t.append(data(range(10)))
    t.append(data(range(10, 20)))
    t.append(data(range(20, 30)))
    first, second, third = (f.path for f in sorted(t.snapshot().files(), key=_min_id))
    t.delete("id < 3")
    assert [f.path for f in marked(t)] == [first]
    r = t.delete("id < 10")  # the rest of the first file
    assert (r.files_marked, r.files_removed, r.deleted_rows) == (0, 1, 7)
    actions = read_commit(t.storage, r.version).actions
    assert [type(a) for a in actions] == [RemoveFile] and actions[0].path == first
    # all of a file at once (no vector yet), and an update of a marked file's rest
    t.delete("id >= 10 and id < 20")
    assert second not in t.snapshot().paths()
    t.delete("id = 20")
    r = t.update("id > 20", set={"s": "late"})
    assert (r.files_marked, r.files_removed, r.files_added) == (0, 1, 1)
    assert third not in t.snapshot().paths()
    files = t.snapshot().files()
    assert all(f.deleted is None or f.deleted.rows < f.num_rows for f in files)
    assert [x["s"] for x in t.snapshot().to_arrow().to_pylist()] == ["late"] * 9


def _min_id(f: lakelog.DataFile) -> Any:
    assert f.stats is not None
    return f.stats.min["id"]


def test_schema_evolution_with_vectors(tmp_path: Path) -> None:
    got = {}
    for vectors in (True, False):
        t = create(tmp_path / str(vectors), vectors=vectors, partition_by=("part",))
        t.append(data(range(12)))
        t.add_columns(pa.field("extra", pa.string()))
        t.append(
            data(range(12, 24)).append_column(
                "extra", pa.array([f"e{i}" if i % 2 else None for i in range(12, 24)])
            )
        )
        t.delete("id < 2 or extra = 'e13'")
        t.delete("extra is null and id >= 20")
        t.update("id = 5 or id = 15", set={"extra": "set"})
        t.update("extra is null and part = 'p0'", set={"x": -1.0})
        assert bool(marked(t)) is vectors
        got[vectors] = rows(t.snapshot().to_arrow(columns=["id", "extra", "x"]))
    assert got[True] == got[False]
    by_id = {r[0]: r[1:] for r in got[True][1:]}
    expected_ids = [i for i in range(24) if i >= 2 and i != 13 and not (i >= 20 and i % 2 == 0)]
    assert sorted(by_id) == expected_ids
    assert by_id[4] == (None, 4.0) and by_id[5] == ("set", "NaN") and by_id[15] == ("set", 15.0)
    assert by_id[6] == (None, -1.0) and by_id[21] == ("e21", 21.0) and by_id[12] == (None, -1.0)


# -- readers -----------------------------------------------------------------------------


def build(path: Path, *, vectors: bool, interval: int) -> lakelog.Table:
    """The same changes on either kind of table; small row groups, so vectors span
    several of them."""
    t = create(
        path,
        vectors=vectors,
        **{"lakelog.row_group_size": "8", "lakelog.manifest_interval": str(interval)},
    )
    t.append(data(range(0, 60)))
    t.append(data(range(60, 120)))
    t.delete("k = 3 or id = 7")
    t.update("x >= 100", set={"x": pc.multiply(pc.field("x"), 2)})
    t.update("id = 10 or id = 11", set={"part": "p9"})  # moves rows to a new partition
    source = data([20, 21, 200, 201], x=999.0)
    t.merge(source, on="id", when_matched="update", when_not_matched="insert")
    t.overwrite(data([61, 64, 300], part="p1"), where="part = 'p1' and id >= 60")
    t.delete("s = 's45'")
    t.delete("part = 'p2' and id < 30")
    return t


def read_everything(t: lakelog.Table, version: int | None = None) -> dict[str, Any]:
    """Every reader's rows of one snapshot (sorted, comparable)."""
    import duckdb
    import polars as pl

    snap = t.refresh().snapshot(version)
    out: dict[str, Any] = {"num_rows": snap.num_rows}
    out["to_arrow"] = rows(snap.to_arrow())
    out["to_arrow columns"] = rows(snap.to_arrow(columns=["x", "id"]))
    out["to_arrow partition column only"] = rows(snap.to_arrow(columns=["part"]))
    out["to_arrow partition filter"] = rows(snap.to_arrow(filter="part = 'p1'"))
    out["to_arrow data filter"] = rows(snap.to_arrow(filter="x >= 50 and k != 2"))
    out["to_arrow both"] = rows(snap.to_arrow(columns=["s"], filter="part != 'p0' and id < 90"))
    out["to_arrow expression (NaN)"] = rows(snap.to_arrow(filter=pc.field("x") != 5.0))
    out["to_batches"] = rows(pa.Table.from_batches(snap.to_batches(batch_size=5)))
    out["to_batches filter"] = rows(
        pa.Table.from_batches(
            snap.to_batches(columns=["id"], filter="k = 2", batch_size=3),
            schema=pa.schema([SCHEMA.field("id")]),
        )
    )
    out["scanner"] = rows(snap.scanner(filter="part = 'p0' or s = 's61'").to_table())
    con = duckdb.connect()
    try:
        snap.to_duckdb(con, name="tbl")
        q = "select id, part, x from tbl where x >= 50 and part <> 'p2'"
        out["duckdb where"] = sorted(tuple(map(_norm, r)) for r in con.sql(q).fetchall())
        out["duckdb count"] = con.sql("select count(*) from tbl").fetchall()
        out["duckdb group"] = sorted(
            con.sql("select part, count(*), sum(id) from tbl group by part").fetchall()
        )
    finally:
        con.close()
    out["polars filter"] = rows(
        snap.to_polars().filter((pl.col("id") < 70) & (pl.col("part") != "p1")).collect().to_arrow()
    )
    out["polars columns"] = rows(snap.to_polars(columns=["id"]).collect().to_arrow())
    df = snap.to_pandas(filter="part = 'p1'")
    out["pandas"] = rows(pa.Table.from_pandas(df, preserve_index=False))
    files = t.inspect.files(version=version)
    out["files live rows"] = (
        pc.sum(files["num_rows"]).as_py() - pc.sum(files["deleted_rows"]).as_py()
    )
    parts = t.inspect.partitions(version=version)
    out["partitions"] = sorted(
        zip(
            [p["part"] for p in parts["partition"].to_pylist()],
            parts["num_rows"].to_pylist(),
            strict=True,
        )
    )
    return out


@pytest.mark.parametrize("interval", [2, 100], ids=["manifests", "commits"])
def test_every_reader_sees_the_rows_of_a_table_without_vectors(
    tmp_path: Path, interval: int
) -> None:
    with_vectors = build(tmp_path / "dv", vectors=True, interval=interval)
    plain = build(tmp_path / "cow", vectors=False, interval=interval)
    assert with_vectors.version == plain.version
    assert marked(with_vectors) and not marked(plain)
    assert len(marked(with_vectors)) >= 3  # several files, several partitions
    got = read_everything(lakelog.open_table(with_vectors.uri))
    expected = read_everything(plain)
    for name in expected:
        assert got[name] == expected[name], name
    # the reads are not vacuous
    assert got["num_rows"] == len(got["to_arrow"]) - 1 and got["num_rows"] > 50
    assert got["files live rows"] == got["num_rows"]
    assert sum(n for _, n in got["partitions"]) == got["num_rows"]
    for name in ("to_arrow partition filter", "to_arrow data filter", "scanner", "pandas"):
        assert len(got[name]) > 5, name
    # every version, by time travel and in the metadata tables
    for v in range(plain.version + 1):
        a, b = with_vectors.snapshot(v), plain.snapshot(v)
        assert rows(a.to_arrow()) == rows(b.to_arrow()), v
        assert a.num_rows == b.num_rows == b.to_arrow().num_rows, v
    snaps = with_vectors.inspect.snapshots()
    expected_snaps = plain.inspect.snapshots()
    for column in ("version", "operation", "num_rows"):
        assert snaps[column].to_pylist() == expected_snaps[column].to_pylist(), column
    added, removed = snaps["rows_added"].to_pylist(), snaps["rows_removed"].to_pylist()
    net = [(a or 0) - (r or 0) for a, r in zip(added, removed, strict=True)]
    counts = snaps["num_rows"].to_pylist()
    assert net[:-1] == [counts[i] - counts[i + 1] for i in range(len(counts) - 1)]
    for column in ("version", "operation"):
        got_history = with_vectors.inspect.history()[column].to_pylist()
        assert got_history == plain.inspect.history()[column].to_pylist()

    def deleted(t: lakelog.Table) -> list[Any]:
        return [h.metrics.get("num_deleted_rows") for h in t.history()]

    assert deleted(with_vectors) == deleted(plain)
    marks = [h.metrics.get("num_deletion_vectors") for h in with_vectors.history()]
    assert sum(1 for m in marks if m) >= 4


def test_dataset_refuses_files_with_vectors_or_includes_their_rows(tmp_path: Path) -> None:
    t = create(tmp_path / "t")
    t.append(data(range(30)))
    snap = t.snapshot()
    assert snap.dataset().count_rows() == 30  # no vector yet
    t.delete("part = 'p1' and id < 10")  # 1, 4, 7
    snap = t.refresh().snapshot()
    with pytest.raises(DeletedRowsError, match="deletion vector"):
        snap.dataset()
    with pytest.raises(DeletedRowsError):
        snap.dataset(filter="part = 'p1'")
    physical = snap.dataset(deleted="include").to_table()
    assert physical.num_rows == 30 and {1, 4, 7} <= set(physical["id"].to_pylist())
    assert snap.num_rows == 27
    # a filter that selects only files without a vector reads as usual
    assert snap.dataset(filter="part = 'p0'").count_rows() == 10
    with pytest.raises(InvalidArgumentError, match="'refuse' or 'include'"):
        snap.dataset(deleted="drop")


def _read_as_version_4(table: lakelog.Table, paths: tuple[str, ...]) -> None:
    """What a reader of version 4 sees, by reader path: every commit (``log``), the
    table's metadata (``table``), every manifest and its leaves (``manifest``), each
    read with ``reader_version=4``; all of them when ``paths`` is empty."""
    paths = paths or ("log", "table", "manifest")
    storage = table.storage
    listing = log_commits.list_log(storage)
    if "log" in paths:
        for v in listing.commits:
            log_commits.read_commit(storage, v, reader_version=4)
    if "table" in paths:
        metadata = lakelog.open_table(table.uri).snapshot().metadata
        check_readable(metadata.format_version, what="table", reader_version=4)
    if "manifest" in paths:
        for v in listing.manifests:
            m = log_manifests.read_manifest(storage, v, reader_version=4)
            for leaf in m.leaves if isinstance(m, log_manifests.Root) else []:
                log_leaves.Leaf.decode(storage.read_bytes(leaf), leaf, reader_version=4)


@pytest.mark.parametrize(
    ("interval", "paths", "where"),
    [
        (100, (), "format version"),
        (100, ("log",), "log format version <= 4"),
        (1, (), "format version"),
        (1, ("manifest",), "manifest format version <= 4"),
    ],
    ids=["commits", "commits-only", "manifest", "manifest-only"],
)
def test_readers_of_version_4_refuse_the_table(
    tmp_path: Path, interval: int, paths: tuple[str, ...], where: str
) -> None:
    props = {"lakelog.manifest_interval": str(interval)}
    plain = create(tmp_path / "plain", vectors=False, **props)
    plain.append(data(range(10)))
    plain.delete("id = 1")
    t = create(tmp_path / "t", vectors=False, **props)
    t.append(data(range(10)))
    t.set_properties({VECTORS: "true"})
    t.delete("id = 1")
    t.set_properties({VECTORS: "false"})  # still version 5
    t.append(data(range(10, 20)))
    if interval == 1:
        assert log_manifests.read_manifest_header(t.storage, t.version) is not None
    _read_as_version_4(plain, paths)  # a version-4 reader reads the plain table
    assert lakelog.open_table(plain.uri).snapshot().num_rows == 9
    with pytest.raises(UnsupportedFormatError, match=where):
        _read_as_version_4(t, paths)


def test_compaction_purges_heavily_deleted_files(tmp_path: Path) -> None:
    t = create(tmp_path / "t", partition_by=())
    t.append(data(range(20)))
    r = t.delete("id < 3")  # 15%: below the default purge ratio (0.2)
    assert r.files_marked == 1 and t.history(limit=1)[0].metrics["num_deletion_vectors"] == 1
    v = t.version
    report = t.compact()
    assert report.compacted_file_count == 0 and t.refresh().version == v
    (f,) = marked(t)
    t.delete("id = 3")  # 20%: purged, though alone and whatever its size
    before = rows(t.snapshot().to_arrow())
    report = t.compact()
    assert (report.compacted_file_count, report.output_file_count) == (1, 1)
    assert marked(t) == [] and f.path not in t.snapshot().paths()
    (out,) = t.snapshot().files()
    assert out.num_rows == 16 and out.deleted is None
    assert rows(t.snapshot().to_arrow()) == before
    # restoring the version before the purge brings the file back with its vector
    t.restore(t.version - 1)
    assert [g.path for g in marked(t)] == [f.path]
    assert rows(t.snapshot().to_arrow()) == before
    # back to 15% deleted: kept by the default ratio, rewritten alone under a lower one
    t.restore(v)
    t.compact()
    assert [g.path for g in marked(t)] == [f.path]
    t.set_properties({"lakelog.deletion_vectors.purge_ratio": "0.1"})
    report = t.compact()
    assert report.compacted_file_count == 1 and marked(t) == []
    assert ids(t) == list(range(3, 20))


def test_compaction_of_marked_files_drops_their_rows(tmp_path: Path) -> None:
    t = create(tmp_path / "t", **{"lakelog.deletion_vectors.purge_ratio": "0.9"})
    for i in range(3):
        t.append(data(range(i * 30, i * 30 + 30)))
    t.delete("k = 1")
    t.update("k = 2", set={"s": "two"})
    assert len(marked(t)) >= 6
    before = rows(t.snapshot().to_arrow())
    report = t.compact()
    assert report.compacted_file_count >= 9
    assert marked(t) == []
    assert rows(t.snapshot().to_arrow()) == before
    assert t.snapshot().num_rows == len(before) - 1


def test_restore_across_vectors(tmp_path: Path) -> None:
    t = create(tmp_path / "t", vectors=False, partition_by=())
    t.append(data(range(20)))
    plain = t.version
    t.set_properties({VECTORS: "true"})
    t.append(data(range(20, 30)))
    va = t.version
    t.delete("id < 5")
    vb = t.version
    t.delete("id >= 10 and id < 13 or id = 25")
    vc = t.version
    expected = {
        va: list(range(30)),
        vb: list(range(5, 30)),
        vc: [i for i in range(5, 30) if i not in (10, 11, 12, 25)],
    }
    for target in (va, vc, vb, va, vc):
        t.restore(target)
        assert ids(t) == expected[target], target
        assert t.snapshot().num_rows == len(expected[target])
        assert {f.path: f.deleted for f in t.snapshot().files()} == {
            f.path: f.deleted for f in t.snapshot(target).files()
        }
    # the restores' commits: a remove and an add of each file whose vector differs
    r = read_commit(t.storage, t.version)
    assert r.header.operation == "RESTORE" and r.header.parameters == {"version": vc}
    assert (
        sorted(type(a).__name__ for a in r.actions) == ["AddFile", "AddFile"] + ["RemoveFile"] * 2
    )
    for target, expect in expected.items():  # time travel is unaffected
        assert ids(t, target) == expect
    # restoring a version before the property: rows and properties back, version 5 stays
    t.restore(plain)
    assert ids(t) == list(range(20)) and t.properties[VECTORS] == "false"
    assert t.metadata.format_version == 5 and marked(t) == []
    r2 = t.delete("id = 1")
    assert (r2.files_marked, r2.files_removed) == (0, 1)


def test_vectors_survive_manifests_and_reopening(tmp_path: Path) -> None:
    t = create(
        tmp_path / "t",
        **{"lakelog.manifest_interval": "1", "lakelog.manifest.leaf_files": "2"},
    )
    for i in range(4):
        t.append(data(range(i * 12, i * 12 + 12)))
    t.delete("k = 4")
    t.delete("k = 5 and part = 'p0'")
    expected = ids(t)
    vectors = {f.path: f.deleted for f in marked(t)}
    assert len(vectors) >= 6
    again = lakelog.open_table(t.uri)
    snap = again.snapshot()
    assert {f.path: f.deleted for f in snap.files() if f.deleted} == vectors
    assert ids(again) == expected and snap.num_rows == len(expected)
    assert snap.files(filter="part = 'p0'") and all(
        f.partition == {"part": "p0"} for f in snap.files(filter="part = 'p0'")
    )
    for v in range(t.version + 1):
        assert again.snapshot(v).num_rows == again.snapshot(v).to_arrow().num_rows


# -- CLI ---------------------------------------------------------------------------------


def test_cli_delete_and_history_on_a_vector_table(tmp_path: Path) -> None:
    t = create(tmp_path / "t", partition_by=())
    t.append(data(range(10)))
    t.append(data(range(10, 20)))
    p = run("delete", t.uri, "--where", "id < 3 or id = 15", "--dry-run")
    assert p.returncode == 0, p.stderr
    assert "files to rewrite       0" in p.stdout and "files to mark          2" in p.stdout
    assert marked(t) == []
    dry = t.delete("id < 10", dry_run=True)  # every row of the first file: it would go
    assert (dry.files_removed, dry.files_marked) == (1, 0)
    p = run("delete", t.uri, "--where", "id < 3 or id = 15")
    assert p.returncode == 0, p.stderr
    assert "rows deleted           4" in p.stdout and "files rewritten        0" in p.stdout
    assert "files marked           2" in p.stdout
    assert ids(t) == [i for i in range(20) if i not in (0, 1, 2, 15)]
    assert len(marked(t)) == 2
    p = run("delete", t.uri, "--where", "id = 16", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["committed"] and out["files_marked"] == 1 and out["files_removed"] == 0
    p = run("history", t.uri, "--json", "--limit", "2")
    assert p.returncode == 0, p.stderr
    newest, first = json.loads(p.stdout)
    assert newest["operation"] == first["operation"] == "DELETE"
    assert first["parameters"] == {"predicate": "id < 3 or id = 15"}
    assert first["metrics"]["num_deletion_vectors"] == 2
    assert first["metrics"]["num_deleted_rows"] == 4
    assert first["metrics"]["num_removed_files"] == 0
    p = run("history", t.uri, "--limit", "1")
    assert "DELETE" in p.stdout and '"num_deletion_vectors":1' in p.stdout


def test_updated_rows_of_many_marked_files_are_written_together(tmp_path: Path) -> None:
    # one new file per partition for the whole change, not one per marked file (breaks if
    # _mark writes each file's updated rows itself); a small sink buffer writes as it goes
    t = create(tmp_path / "t", partition_by=())
    for start in range(0, 50, 10):
        t.append(data(range(start, start + 10)))
    r = t.update("id = 3 or id = 13 or id = 23 or id = 33", set={"s": "u"})
    assert (r.files_marked, r.files_added, r.updated_rows) == (4, 1, 4)
    t.set_properties({"lakelog.deletion_vectors.update_buffer_bytes": 1})
    r = t.update("id = 4 or id = 14 or id = 24", set={"s": "v"})
    assert (r.files_marked, r.files_added, r.updated_rows) == (3, 3, 3)
    got = {row["id"]: row["s"] for row in t.snapshot().to_arrow().to_pylist()}
    assert len(got) == 50
    assert [got[i] for i in (3, 13, 23, 33, 4, 14, 24)] == ["u"] * 4 + ["v"] * 3
