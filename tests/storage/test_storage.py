"""The put-if-absent contract of :class:`lakelog.storage.Storage` on every backend.

The whole commit protocol rests on one promise: ``put_if_absent`` creates an
object whole or not at all, and raises :class:`FileExistsError` (changing
nothing) when the name exists. These tests hold every backend to it,
including many clients racing for the same name.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import fsspec
import pyarrow as pa
import pytest
from fsspec.implementations.dirfs import DirFileSystem
from fsspec.implementations.memory import MemoryFileSystem

import lakelog
from lakelog.errors import InvalidArgumentError, StorageNotSupportedError
from lakelog.log.snapshot import load_snapshot
from lakelog.storage import Storage, normalize_uri


def _storage(backend: Any) -> Storage:
    return Storage(backend.uri, backend.storage_options)


def test_put_if_absent_creates_then_refuses(backend: Any) -> None:
    st = _storage(backend)
    st.put_if_absent("_lakelog/00000000000000000000.json", b"first")
    assert st.read_bytes("_lakelog/00000000000000000000.json") == b"first"
    with pytest.raises(FileExistsError):
        st.put_if_absent("_lakelog/00000000000000000000.json", b"second")
    assert st.read_bytes("_lakelog/00000000000000000000.json") == b"first"
    # nothing but the published object is left in the folder (no temp files)
    assert st.list_names("_lakelog") == ["00000000000000000000.json"]


def test_put_if_absent_empty_and_large_payloads(backend: Any) -> None:
    st = _storage(backend)
    big = bytes(range(256)) * 8192  # 2 MiB, more than one write() call
    st.put_if_absent("a/empty", b"")
    st.put_if_absent("a/big", big)
    assert st.read_bytes("a/empty") == b""
    assert st.read_bytes("a/big") == big


def test_read_list_walk_delete(backend: Any) -> None:
    st = _storage(backend)
    with pytest.raises(FileNotFoundError):
        st.read_bytes("missing")
    assert st.list_names("nowhere") == []
    assert list(st.walk("nowhere")) == []
    st.write_bytes("d/x.bin", b"1")
    st.write_bytes("d/x.bin", b"22")  # write_bytes replaces
    st.write_bytes("d/sub/y.bin", b"333")
    assert st.read_bytes("d/x.bin") == b"22"
    assert st.exists("d/x.bin") and not st.exists("d/nope")
    found = {f.path: f.size for f in st.walk("d")}
    assert found == {"d/x.bin": 2, "d/sub/y.bin": 3}
    st.delete(["d/x.bin", "d/never-existed"])  # missing files are ignored
    st.delete([])
    assert not st.exists("d/x.bin")
    assert st.relative(st.full("d/sub/y.bin")) == "d/sub/y.bin"
    assert st.url("d/sub/y.bin").endswith("/d/sub/y.bin")
    # several at once, in order, None for a missing one (one batch of requests on S3)
    st.write_bytes("d/z.bin", b"4444")
    assert st.read_many(["d/z.bin", "d/x.bin", "d/sub/y.bin"]) == [b"4444", None, b"333"]
    assert st.read_many(["d/x.bin"]) == [None] and st.read_many([]) == []


def test_history_reads_every_commit_header_newest_first(backend: Any) -> None:
    t = lakelog.create_table(
        backend.uri, pa.schema([("a", pa.int64())]), storage_options=backend.storage_options
    )
    for i in range(5):
        t.append(pa.table({"a": [i]}))
    history = t.history()
    assert [h.version for h in history] == [5, 4, 3, 2, 1, 0]
    assert [h.operation for h in history[:2]] == ["APPEND", "APPEND"]
    assert [h.version for h in t.history(limit=2)] == [5, 4]
    t.storage.delete(["_lakelog/00000000000000000004.json"])  # as if expired meanwhile
    assert [h.version for h in t.history(limit=3)] == [5, 3, 2]


def test_many_clients_race_for_one_name(backend: Any) -> None:
    """10 clients (own Storage each) create the same name at once: one wins."""
    n = 10
    clients = [_storage(backend) for _ in range(n)]
    barrier = threading.Barrier(n)
    wins: list[int] = []
    losses: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        payload = f"writer-{i}".encode() * 100
        barrier.wait()
        try:
            clients[i].put_if_absent("_lakelog/00000000000000000007.json", payload)
        except FileExistsError:
            with lock:
                losses.append(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            with lock:
                errors.append(e)
        else:
            with lock:
                wins.append(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(wins) == 1, wins
    assert len(losses) == n - 1
    got = clients[0].read_bytes("_lakelog/00000000000000000007.json")
    assert got == f"writer-{wins[0]}".encode() * 100
    assert clients[0].list_names("_lakelog") == ["00000000000000000007.json"]


def test_race_for_successive_names(backend: Any) -> None:
    """Clients each claim the next free slot, as committers do: no slot is lost or doubled."""
    n_clients, per_client = 4, 8
    clients = [_storage(backend) for _ in range(n_clients)]
    claimed: dict[int, list[int]] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        slot = 0
        try:
            for _ in range(per_client):
                while True:
                    try:
                        clients[i].put_if_absent(f"slots/{slot:05d}", str(i).encode())
                    except FileExistsError:
                        slot += 1
                        continue
                    with lock:
                        claimed.setdefault(slot, []).append(i)
                    slot += 1
                    break
        except BaseException as e:  # noqa: BLE001 - reported below
            with lock:
                errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert {slot: owners for slot, owners in claimed.items() if len(owners) > 1} == {}
    assert sorted(claimed) == list(range(n_clients * per_client))
    for slot, owners in claimed.items():
        assert clients[0].read_bytes(f"slots/{slot:05d}") == str(owners[0]).encode()


def test_normalize_uri_spellings(tmp_path: Any) -> None:
    assert normalize_uri("s3a://bucket/t/") == "s3://bucket/t"
    assert normalize_uri("S3://bucket/t") == "s3://bucket/t"
    assert normalize_uri(str(tmp_path) + "/t/") == f"file://{tmp_path}/t"
    assert normalize_uri(f"file://{tmp_path}/t") == f"file://{tmp_path}/t"
    with pytest.raises(InvalidArgumentError):
        Storage("   ")


class _NoCasFS(DirFileSystem):
    """A filesystem lakelog does not know how to put-if-absent on."""

    protocol = "lakelog-nocas"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(path=f"/nocas-{uuid.uuid4().hex}", fs=MemoryFileSystem())


@pytest.fixture
def nocas_uri() -> Iterator[str]:
    fsspec.register_implementation(_NoCasFS.protocol, _NoCasFS, clobber=True)
    yield f"{_NoCasFS.protocol}://t"


def test_filesystem_without_put_if_absent_is_refused(nocas_uri: str) -> None:
    schema = pa.schema([("a", pa.int64())])
    with pytest.raises(StorageNotSupportedError, match="single_writer=True"):
        lakelog.create_table(nocas_uri, schema)
    with pytest.raises(StorageNotSupportedError):
        lakelog.open_table(nocas_uri)
    # opting into single-writer mode works end to end
    t = lakelog.create_table(nocas_uri, schema, single_writer=True)
    t.append(pa.table({"a": [1, 2]}))
    st = t.storage
    with pytest.raises(FileExistsError):
        st.put_if_absent("_lakelog/00000000000000000000.json", b"x")
    assert t.snapshot().to_arrow().column("a").to_pylist() == [1, 2]


class CountingStorage(Storage):
    """Records the names of every :meth:`read_many` call."""

    def __init__(self, uri: str, storage_options: Any = None) -> None:
        super().__init__(uri, storage_options)
        self.calls: list[list[str]] = []

    def read_many(self, rels: Any) -> list[bytes | None]:
        self.calls.append(list(rels))
        return super().read_many(rels)


def test_snapshot_replay_fetches_commits_in_batches(backend: Any) -> None:
    """Replaying commits after a manifest costs one read_many per batch, not one read per
    commit, and finds exactly the commits there are (probing past the last one)."""
    t = lakelog.create_table(
        backend.uri,
        pa.schema([("a", pa.int64())]),
        storage_options=backend.storage_options,
        properties={"lakelog.manifest_interval": "1000"},
    )
    for i in range(20):
        t.append(pa.table({"a": [i]}))
    counting = CountingStorage(backend.uri, backend.storage_options)
    calls = counting.calls
    fresh = lakelog.Table(counting, load_snapshot(counting))  # what open_table does
    snap = fresh.snapshot()
    assert snap.version == 20
    assert sorted(snap.to_arrow().column("a").to_pylist()) == list(range(20))
    # open (8 + 16 names, + a probe past the end for holes) and refresh (8 names)
    assert 1 <= len(calls) <= 4 and sum(len(c) for c in calls) >= 21
    calls.clear()
    old = fresh.snapshot(version=7)
    assert old.version == 7 and old.num_files == 7
    assert len(calls) == 1 and len(calls[0]) == 7  # commits 1..7 after manifest 0: one batch
    t.storage.delete(["_lakelog/00000000000000000005.json"])  # a hole: the log is incomplete
    with pytest.raises(lakelog.LakelogError, match="commit 5"):
        lakelog.open_table(backend.uri, storage_options=backend.storage_options).snapshot(version=7)
