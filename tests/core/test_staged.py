"""The staged-files rule (``lakelog.core.staged``): the files of a write whose commit did
not land are deleted, those of a commit whose outcome is unknown are kept."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import fsspec
import pyarrow as pa
import pytest
from _races import race_at
from fsspec.implementations.memory import MemoryFileSystem

import lakelog
from lakelog.core import staged
from lakelog.errors import CommitConflictError, InvalidArgumentError, TableExistsError
from lakelog.log.commits import commit_path


class _Deletes:
    """A storage that records what is deleted."""

    def __init__(self) -> None:
        self.deleted: list[str] = []

    def delete(self, paths: list[str]) -> None:
        self.deleted.extend(paths)


def test_a_lakelog_error_deletes_the_staged_files_any_other_keeps_them() -> None:
    store = _Deletes()
    with pytest.raises(CommitConflictError), staged(store) as files:  # type: ignore[arg-type]
        files.add_paths(["a.parquet", "b.parquet", "a.parquet"])
        files.track(lambda: ["rebased.parquet"])
        raise CommitConflictError("lost the race")
    assert store.deleted == ["a.parquet", "b.parquet", "rebased.parquet"]

    kept = _Deletes()
    with pytest.raises(TimeoutError), staged(kept) as files:  # type: ignore[arg-type]
        files.add_paths(["c.parquet"])
        raise TimeoutError("the put may have landed")
    assert kept.deleted == []

    done = _Deletes()
    with staged(done) as files:  # type: ignore[arg-type]
        files.add_paths(["d.parquet"])
    assert done.deleted == []


def test_any_error_before_the_commit_deletes_the_staged_files() -> None:
    store = _Deletes()
    with (
        pytest.raises(KeyboardInterrupt),
        staged(store) as files,  # type: ignore[arg-type]
        files.before_commit(),
    ):
        files.add_paths(["a.parquet"])
        raise KeyboardInterrupt
    assert store.deleted == ["a.parquet"]


def _data_files(uri: str) -> set[str]:
    storage = lakelog.open_table(uri).storage
    return {f.path for f in storage.walk() if not f.path.startswith("_lakelog/")}


def _live(uri: str) -> set[str]:
    return {f.path for f in lakelog.open_table(uri).snapshot().files()}


def test_an_append_that_loses_to_a_schema_change_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "t")
    lakelog.write_table(uri, pa.table({"id": [0]}))
    writer, rival = lakelog.open_table(uri), lakelog.open_table(uri)
    with pytest.raises(CommitConflictError):
        race_at(
            monkeypatch,
            "commit:before-put:APPEND",
            tmp_path / "gate",
            lambda: writer.append(pa.table({"id": [1, 2]})),
            lambda: rival.add_columns({"note": pa.string()}),
        )
    assert _data_files(uri) == _live(uri) and len(_live(uri)) == 1


def test_an_overwrite_refused_before_its_commit_leaves_no_file(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    lakelog.write_table(uri, pa.table({"p": ["a"], "x": [0]}), partition_by=["p"])
    t = lakelog.open_table(uri)
    with pytest.raises(InvalidArgumentError, match="other partitions"):
        t.overwrite(pa.table({"p": ["a", "b"], "x": [1, 2]}), partitions=[{"p": "a"}])
    assert _data_files(uri) == _live(uri) and len(_live(uri)) == 1


def test_a_create_that_loses_the_race_with_mode_error_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "t")
    with pytest.raises(TableExistsError):
        race_at(
            monkeypatch,
            "commit:before-put:CREATE TABLE AS WRITE",
            tmp_path / "gate",
            lambda: lakelog.write_table(uri, pa.table({"id": [1, 2]}), mode="error"),
            lambda: lakelog.write_table(uri, pa.table({"id": [9]})),
        )
    assert _data_files(uri) == _live(uri) and len(_live(uri)) == 1
    assert lakelog.open_table(uri).snapshot().to_arrow()["id"].to_pylist() == [9]


class _InterruptedAfterPut(MemoryFileSystem):  # type: ignore[misc]
    """An in-memory store where the put of one commit lands and then the writer is
    interrupted: the outcome is unknown to the writer."""

    protocol = "lakelog-interrupted"
    store: ClassVar[dict[str, Any]] = {}
    pseudo_dirs: ClassVar[list[str]] = [""]
    interrupt: ClassVar[set[str]] = set()

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        prefix = f"{cls.protocol}://"
        return str(
            super()._strip_protocol(path[len(prefix) :] if path.startswith(prefix) else path)
        )

    def pipe_file(self, path: str, value: bytes, *args: Any, **kwargs: Any) -> None:
        super().pipe_file(path, value, *args, **kwargs)
        if path in self.interrupt:
            self.interrupt.discard(path)
            raise KeyboardInterrupt


@pytest.fixture
def interrupted_uri() -> Iterator[str]:
    fsspec.register_implementation(
        _InterruptedAfterPut.protocol, _InterruptedAfterPut, clobber=True
    )
    root = f"/t-{uuid.uuid4().hex}"
    yield f"{_InterruptedAfterPut.protocol}://{root}"
    for key in [k for k in _InterruptedAfterPut.store if k.startswith(root)]:
        del _InterruptedAfterPut.store[key]


def _interrupt_commit(uri: str, version: int) -> None:
    root = _InterruptedAfterPut._strip_protocol(uri)
    _InterruptedAfterPut.interrupt.add(f"{root}/{commit_path(version)}")


@pytest.mark.parametrize("write", ["append", "overwrite", "create"])
def test_the_files_of_a_commit_whose_outcome_is_unknown_are_kept(
    interrupted_uri: str, write: str
) -> None:
    uri = interrupted_uri
    data = pa.table({"id": [1, 2, 3]})
    if write == "create":
        _interrupt_commit(uri, 0)
        with pytest.raises(KeyboardInterrupt):
            lakelog.write_table(uri, data)
    else:
        lakelog.write_table(uri, pa.table({"id": [0]}))
        _interrupt_commit(uri, 1)
        t = lakelog.open_table(uri)
        with pytest.raises(KeyboardInterrupt):
            t.append(data) if write == "append" else t.overwrite(data)
    # the commit landed: its files must still be there (an overwrite's old file stays too)
    rows = lakelog.open_table(uri).snapshot().to_arrow()["id"].to_pylist()
    assert sorted(rows) == ([0, 1, 2, 3] if write == "append" else [1, 2, 3])
    assert _live(uri) <= _data_files(uri)
