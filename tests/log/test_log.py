"""The commit log as data: encoding round trips and replay properties.

Hypothesis drives random add/remove sequences through the real replay and the
real snapshot resolution (manifests + commits on the memory filesystem) and
compares every version against a plain Python set model.
"""

from __future__ import annotations

import gc
import uuid
from collections.abc import Iterator
from typing import Any

import msgspec
import pyarrow as pa
import pytest
from fsspec.implementations.memory import MemoryFileSystem
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakelog.errors import CorruptLogError, UnsupportedFormatError
from lakelog.log.actions import (
    Action,
    AddFile,
    Commit,
    CommitHeader,
    DataFile,
    FileStats,
    Metadata,
    RemoveFile,
    decode_schema,
    encode_schema,
)
from lakelog.log.commits import (
    commit_path,
    decode_commit,
    encode_commit,
    list_log,
    read_commit,
    read_header,
)
from lakelog.log.filelist import FileList
from lakelog.log.files import files_from_adds
from lakelog.log.format import CURRENT
from lakelog.log.leaves import entries_from_files
from lakelog.log.manifests import (
    LAST_MANIFEST,
    ManifestHeader,
    read_hint,
    read_manifest,
    write_manifest,
)
from lakelog.log.snapshot import advance, load_snapshot
from lakelog.paths import bad_data_path
from lakelog.storage import Storage

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("day", pa.date32())])
META = Metadata(table_id="t" * 32, schema=encode_schema(SCHEMA), partition_by=("day",))


def _header(version: int, **kw: Any) -> CommitHeader:
    base: dict[str, Any] = {
        "version": version,
        "timestamp_ms": 1_000 + version,
        "operation": "TEST",
        "txn_id": f"txn-{version}",
    }
    base.update(kw)
    return CommitHeader(**base)


def _add(path: str, **kw: Any) -> AddFile:
    kw.setdefault("num_rows", 1)
    kw.setdefault("partition", {"day": None})  # the table is partitioned by day
    return AddFile(path=path, size_bytes=10, **kw)


@pytest.fixture
def mem_storage() -> Iterator[Storage]:
    root = f"/lakelog-log-{uuid.uuid4().hex}"
    yield Storage(f"memory://{root}")
    _drop_memory(root)


def _decoded(files: pa.Table) -> list[DataFile]:
    """DataFiles the way a snapshot builds them: the file table as typed entries."""
    entries = entries_from_files(files, META.arrow_schema(), META.partition_by)
    return list(FileList.of_entries(entries))


def _drop_memory(root: str) -> None:
    for key in [k for k in list(MemoryFileSystem.store) if k.startswith(root)]:
        MemoryFileSystem.store.pop(key, None)
    MemoryFileSystem.pseudo_dirs[:] = [
        d for d in MemoryFileSystem.pseudo_dirs if not d.startswith(root)
    ]


# -- encoding -------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.text(max_size=8)
)
names = st.text("abcxyz_/=.-%é", min_size=1, max_size=12)
file_paths = names.filter(lambda p: not bad_data_path(p))  # a path outside is damage
stats_st = st.builds(
    FileStats,
    min=st.dictionaries(st.sampled_from(["id", "name"]), st.integers(-100, 100), max_size=2),
    max=st.dictionaries(st.sampled_from(["id", "name"]), st.integers(-100, 100), max_size=2),
    null_count=st.dictionaries(st.sampled_from(["id", "name"]), st.integers(0, 9), max_size=2),
)
add_st = st.builds(
    AddFile,
    path=file_paths,
    size_bytes=st.integers(0, 2**40),
    num_rows=st.integers(0, 2**31),
    partition=st.dictionaries(st.sampled_from(["day", "k"]), st.none() | names, max_size=2),
    stats=st.none() | stats_st,
    data_change=st.booleans(),
    modification_ms=st.integers(0, 2**42),
    tags=st.dictionaries(names, names, max_size=2),
)
remove_st = st.builds(
    RemoveFile,
    path=file_paths,
    deletion_ms=st.integers(0, 2**42),
    data_change=st.booleans(),
    partition=st.dictionaries(st.sampled_from(["day"]), st.none() | names, max_size=1),
    size_bytes=st.none() | st.integers(0, 2**40),
)
meta_st = st.builds(
    Metadata,
    table_id=names,
    schema=st.just(encode_schema(SCHEMA)),
    partition_by=st.sampled_from([(), ("day",)]),
    properties=st.dictionaries(names, names, max_size=3),
)
action_st: st.SearchStrategy[Action] = st.one_of(add_st, remove_st, meta_st)


@settings(max_examples=60, deadline=None)
@given(
    version=st.integers(0, 10**12),
    actions=st.lists(action_st, max_size=6),
    params=st.dictionaries(names, json_scalars, max_size=3),
    read_version=st.none() | st.integers(0, 10**6),
)
def test_commit_round_trip(
    version: int, actions: list[Action], params: dict[str, Any], read_version: int | None
) -> None:
    header = _header(
        version, parameters=params, read_version=read_version, metrics={"n": 1}, engine="e"
    )
    data = encode_commit(header, actions)
    back = decode_commit(data, version)
    assert back == Commit(header, actions)
    # the same document decodes with a plain JSON reader
    plain = msgspec.json.decode(data)
    assert plain["header"]["version"] == version
    assert [a["type"] for a in plain["actions"]] == [
        {AddFile: "add", RemoveFile: "remove", Metadata: "metadata"}[type(a)] for a in actions
    ]


def test_schema_and_datafile_round_trips() -> None:
    assert decode_schema(encode_schema(SCHEMA)).equals(SCHEMA)
    stats = FileStats(min={"id": 1}, max={"id": 9}, null_count={"id": 0})
    add = _add("day=2024-01-01/a.parquet", partition={"day": "2024-01-01"}, stats=stats)
    df = DataFile.from_add(add)
    assert df.to_add() == add
    rm = df.to_remove(deletion_ms=5, data_change=False)
    assert (rm.path, rm.partition, rm.size_bytes, rm.data_change) == (
        add.path,
        add.partition,
        10,
        False,
    )
    decoded = _decoded(files_from_adds([add, _add("b")]))
    assert decoded == [df, DataFile.from_add(_add("b"))]
    # a snapshot materializes one per live file: untracked by the GC on purpose
    assert not gc.is_tracked(decoded[0]) and not gc.is_tracked(decoded[0].stats)


def test_commit_names_sort_and_listing_ignores_other_files(mem_storage: Storage) -> None:
    assert commit_path(3) == "_lakelog/00000000000000000003.json"
    assert sorted(commit_path(v) for v in (10, 9, 100)) == [commit_path(v) for v in (9, 10, 100)]
    for v in (0, 1, 2, 11):
        mem_storage.put_if_absent(commit_path(v), encode_commit(_header(v), [META]))
    mem_storage.write_bytes("_lakelog/.00000000000000000003.json.abc.tmp", b"partial")
    mem_storage.write_bytes("_lakelog/00000000000000000004.json.bak", b"x")
    mem_storage.write_bytes("_lakelog/notes.txt", b"x")
    mem_storage.write_bytes(LAST_MANIFEST, b'{"version": 0}')
    header = ManifestHeader(version=0, timestamp_ms=1000, num_files=0, metadata=META)
    write_manifest(mem_storage, header, files_from_adds([]))
    listing = list_log(mem_storage)
    assert listing.commits == (0, 1, 2, 11)
    assert listing.manifests == (0,)
    assert read_header(mem_storage, 11).txn_id == "txn-11"
    assert read_commit(mem_storage, 2).actions == [META]


def test_decode_rejects_damage_and_newer_formats() -> None:
    good = encode_commit(_header(4), [META, _add("a")])
    with pytest.raises(CorruptLogError, match="commit 4"):
        decode_commit(good[: len(good) // 2], 4)
    with pytest.raises(CorruptLogError):
        decode_commit(b"\x00\xff garbage", 4)
    with pytest.raises(CorruptLogError, match="version 5"):
        decode_commit(good, 5)  # header says 4: copied or renamed by hand
    newer = encode_commit(_header(4, format_version=CURRENT + 1), [META])
    with pytest.raises(UnsupportedFormatError, match="upgrade lakelog"):
        decode_commit(newer, 4)
    unknown_action = good.replace(b'"type":"add"', b'"type":"deletion_vector"')
    with pytest.raises(UnsupportedFormatError):
        decode_commit(unknown_action, 4)
    # a newer writer may add fields to known structs: older readers ignore them
    extended = good.replace(b'"operation":"TEST"', b'"operation":"TEST","future":{"x":1}')
    assert decode_commit(extended, 4).header.operation == "TEST"


def test_manifest_round_trip_and_hint(mem_storage: Storage) -> None:
    adds = [_add(f"f{i}", stats=FileStats(min={"id": i}, max={"id": i})) for i in range(5)]
    files = files_from_adds(adds)
    for v in (10, 5):
        write_manifest(
            mem_storage,
            ManifestHeader(version=v, timestamp_ms=v, num_files=5, metadata=META),
            files,
        )
    assert read_hint(mem_storage) == 10  # an older manifest never moves the hint back
    m = read_manifest(mem_storage, 10)
    assert m.header.metadata == META
    assert _decoded(m.files) == [DataFile.from_add(a) for a in adds]
    with pytest.raises(FileNotFoundError):
        read_manifest(mem_storage, 7)
    mem_storage.write_bytes(LAST_MANIFEST, b"{not json")
    assert read_hint(mem_storage) is None


# -- replay properties ------------------------------------------------------------

PATHS = [f"p{i}.parquet" for i in range(12)]


@st.composite
def op_sequences(draw: st.DrawFn) -> list[list[tuple[str, str]]]:
    """Commits of ("add" | "remove", path) ops; removes name live or dead files."""
    n = draw(st.integers(1, 25))
    return [
        draw(
            st.lists(
                st.tuples(st.sampled_from(["add", "remove"]), st.sampled_from(PATHS)), max_size=5
            )
        )
        for _ in range(n)
    ]


def _commits(ops: list[list[tuple[str, str]]]) -> list[Commit]:
    """Version 0 creates the table; commit i+1 carries ops[i]. Adds carry the version."""
    out = [Commit(_header(0), [META])]
    for i, commit_ops in enumerate(ops, start=1):
        actions: list[Action] = [
            _add(p, num_rows=i) if kind == "add" else RemoveFile(path=p, deletion_ms=i)
            for kind, p in commit_ops
        ]
        out.append(Commit(_header(i), actions))
    return out


def _model(ops: list[list[tuple[str, str]]]) -> list[dict[str, int]]:
    """Live path -> version that added it, after each version (index = version)."""
    live: dict[str, int] = {}
    states = [dict(live)]
    for i, commit_ops in enumerate(ops, start=1):
        for kind, p in commit_ops:
            if kind == "add":
                live[p] = i
            else:
                live.pop(p, None)
        states.append(dict(live))
    return states


def _live(files: pa.Table) -> dict[str, int]:
    paths = files.column("path").to_pylist()
    assert len(paths) == len(set(paths)), "a live path appears twice"
    return dict(zip(paths, files.column("num_rows").to_pylist(), strict=True))


def _store(commits: list[Commit]) -> tuple[str, Storage]:
    root = f"/lakelog-prop-{uuid.uuid4().hex}"
    storage = Storage(f"memory://{root}")
    for c in commits:
        storage.put_if_absent(commit_path(c.header.version), encode_commit(c.header, c.actions))
    return root, storage


def _live_files(files: Any) -> dict[str, int]:
    paths = [f.path for f in files]
    assert len(paths) == len(set(paths)), "a live path appears twice"
    return {f.path: f.num_rows for f in files}


@settings(max_examples=80, deadline=None)
@given(ops=op_sequences(), split=st.integers(0, 30))
def test_replay_matches_set_model(ops: list[list[tuple[str, str]]], split: int) -> None:
    """Every version resolved from the log, and a snapshot advanced over the commits
    after an intermediate version (what a long-lived reader does), hold the model's
    live files: the production path, from commit bytes to ``files()``."""
    commits = _commits(ops)
    model = _model(ops)
    root, storage = _store(commits)
    try:
        for v in range(len(commits)):
            snap = load_snapshot(storage, v)
            assert snap.version == v
            assert _live_files(snap.files()) == model[v]
            assert _live(snap.file_table) == model[v]
            assert snap.num_files == len(model[v])
        k = min(split, len(commits) - 1)
        second = advance(load_snapshot(storage, k), commits[k + 1 :])
        assert second.version == len(commits) - 1
        assert _live_files(second.files()) == model[-1]
        assert second.paths() == second.files().paths()
        assert second.metadata == META
    finally:
        _drop_memory(root)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    ops=op_sequences(),
    manifest_at=st.sets(st.integers(0, 25), max_size=4),
    damaged=st.sets(st.integers(0, 25), max_size=2),
    hint=st.none() | st.integers(0, 30),
)
def test_manifests_plus_replay_equal_full_replay_at_every_version(
    ops: list[list[tuple[str, str]]],
    manifest_at: set[int],
    damaged: set[int],
    hint: int | None,
) -> None:
    """Resolution through any mix of good, damaged and missing manifests and a
    hint that may be stale, missing or wrong gives the replayed answer."""
    commits = _commits(ops)
    model = _model(ops)
    last = len(commits) - 1
    root, storage = _store(commits)
    try:
        for v in sorted(m for m in manifest_at if m <= last):
            resolved = load_snapshot(storage, v)
            header = ManifestHeader(
                version=v,
                timestamp_ms=resolved.timestamp_ms,
                num_files=resolved.num_files,
                metadata=resolved.metadata,
            )
            write_manifest(storage, header, resolved.file_table)
            if v in damaged:
                data = storage.read_bytes(f"_lakelog/{v:020d}.manifest.parquet")
                storage.write_bytes(f"_lakelog/{v:020d}.manifest.parquet", data[: len(data) // 3])
        if hint is not None:
            storage.write_bytes(LAST_MANIFEST, msgspec.json.encode({"version": hint}))
        for v in range(last + 1):
            snap = load_snapshot(storage, v)
            assert snap.version == v
            assert snap.timestamp_ms == 1_000 + v
            assert _live(snap.file_table) == model[v]
        latest = load_snapshot(storage)
        assert latest.version == last
        assert _live(latest.file_table) == model[-1]
        assert {f.path for f in latest.files()} == set(model[-1])
    finally:
        _drop_memory(root)


def test_commit_header_says_the_format_version_its_actions_need() -> None:
    """Absent means 1: a plain add needs 1 and omits it, so a version-1 reader reads
    it; a metadata action declaring 2, or an action type of version 2, writes 2."""
    import msgspec

    from lakelog.log.actions import AddFile, Metadata
    from lakelog.log.format import BASE, commit_version

    add = AddFile(path="a.parquet", size_bytes=1, num_rows=1)
    assert commit_version([add]) == BASE == 1
    old_meta = msgspec.structs.replace(META, format_version=1)
    assert commit_version([old_meta, add]) == 1
    assert commit_version([msgspec.structs.replace(META, format_version=2)]) == 2

    class Future(msgspec.Struct, tag="future_v2_action"):
        FORMAT = 2

    assert commit_version([add, Future()]) == 2  # type: ignore[list-item]
    header = _header(3)
    assert b"format_version" not in msgspec.json.encode(header)  # 1 is omitted
    assert isinstance(old_meta, Metadata)
