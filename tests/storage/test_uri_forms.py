"""Every spelling of a table's location that Spark, Hadoop or a user writes opens the
same table: ``file:/abs`` (Hadoop's ``Path.toUri()``, ``_metadata.file_path``),
``file:///abs`` (``input_file_name()``), ``file://localhost/abs``, %-escaped paths, and
``s3a://``/``s3n://`` for ``s3://``."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakelog
from lakelog.cli import main
from lakelog.errors import InvalidArgumentError
from lakelog.storage import Storage, normalize_uri


def _forms(path: Path) -> list[str]:
    """The spellings of a local folder, escaped as Java's URI escapes a path."""
    escaped = urllib.parse.quote(str(path))
    return [
        str(path),
        f"file:{escaped}",
        f"file://{escaped}",
        f"file://localhost{escaped}",
        f"file://LOCALHOST{escaped}/",
        f"FILE:{escaped}",
    ]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A table root whose path needs escaping in a URI (a space and a percent sign)."""
    return tmp_path / "a b%c" / "t"


def _fill(uri: str) -> lakelog.Table:
    lakelog.write_table(uri, pa.table({"id": [1, 2, 3], "v": ["x", "y", "z"]}))
    t = lakelog.open_table(uri)
    t.append(pa.table({"id": [4], "v": ["w"]}))
    return t


def test_every_form_opens_the_same_table(folder: Path) -> None:
    made = _fill(str(folder))
    assert (folder / "_lakelog").is_dir()  # the decoded folder, not 'a%20b%25c'
    for form in _forms(folder):
        t = lakelog.open_table(form)
        assert t.uri == made.uri, form
        assert t.version == 1, form
        assert sorted(t.snapshot().to_arrow()["id"].to_pylist()) == [1, 2, 3, 4], form


@pytest.mark.parametrize("index", range(1, 6))
def test_every_form_creates_where_the_plain_path_reads(folder: Path, index: int) -> None:
    form = _forms(folder)[index]
    _fill(form)
    assert not (Path.cwd() / "file:").exists()
    t = lakelog.open_table(str(folder))
    assert t.version == 1
    assert t.snapshot().num_rows == 4


def test_normalizing_twice_changes_nothing(folder: Path) -> None:
    for form in [*_forms(folder), "s3a://b/k%20ey/t/", "s3://b/a%20b", "memory://x/t"]:
        once = normalize_uri(form)
        assert normalize_uri(once) == once, form
    assert normalize_uri(f"file:{urllib.parse.quote(str(folder))}") == (
        "file://" + str(folder).replace("%", "%25")
    )
    assert Storage(str(folder)).root == str(folder)


def test_s3a_and_s3n_spell_s3() -> None:
    assert normalize_uri("s3a://bucket/a%20b/t/") == "s3://bucket/a b/t"
    assert normalize_uri("S3N://bucket/t") == "s3://bucket/t"
    assert normalize_uri("s3://bucket/a%20b") == "s3://bucket/a%20b"  # fsspec: literal


@pytest.mark.parametrize(
    "uri", ["file://otherhost/tmp/t", "file://10.0.0.1/tmp/t", "file:relative/t"]
)
def test_a_file_uri_of_another_host_or_relative_is_refused(uri: str) -> None:
    with pytest.raises(InvalidArgumentError, match="file:"):
        lakelog.open_table(uri)


def test_the_cli_takes_every_form(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fill(str(folder))
    for form in _forms(folder):
        assert main(["info", form, "--json"]) == 0, form
        info: dict[str, Any] = json.loads(capsys.readouterr().out)
        assert info["version"] == 1 and info["num_rows"] == 4, form


def test_paths_spark_reports_match_the_log(folder: Path) -> None:
    """A data file's URL as ``_metadata.file_path``/``input_file_name()`` spell it is a
    file under the root: vacuum counts it referenced, add_files adopts it."""
    from lakelog.maintenance.cleanup.vacuum import normalize_path

    t = _fill(str(folder))
    st = Storage(str(folder))
    rel = t.snapshot().paths()[0]
    escaped = urllib.parse.quote(f"{folder}/{rel}")
    for url in (f"file:{escaped}", f"file://{escaped}", f"file://localhost{escaped}"):
        assert st.relative_url(url) == rel, url
        assert normalize_path(url, st) == rel, url
    assert st.relative_url(f"file:{urllib.parse.quote(str(folder.parent))}/x") is None
    assert "://" in normalize_path(f"file://otherhost{folder}/{rel}", st)  # never ours

    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": [9], "v": ["n"]}), folder / "adopted.parquet")
    t.add_files([f"file:{urllib.parse.quote(str(folder))}/adopted.parquet"])
    assert sorted(lakelog.open_table(str(folder)).snapshot().to_arrow()["id"].to_pylist()) == [
        1,
        2,
        3,
        4,
        9,
    ]


def test_s3a_opens_the_s3_table(s3_backend: Any) -> None:
    lakelog.write_table(
        s3_backend.uri + "/a b",
        pa.table({"id": [1, 2]}),
        storage_options=s3_backend.storage_options,
    )
    made = lakelog.open_table(s3_backend.uri + "/a b", storage_options=s3_backend.storage_options)
    escaped = "s3a://" + urllib.parse.quote(s3_backend.uri[len("s3://") :] + "/a b")
    t = lakelog.open_table(escaped, storage_options=s3_backend.storage_options)
    assert t.uri == made.uri
    assert t.version == 0 and t.snapshot().num_rows == 2
