"""Table properties: every ``lakelog.*`` value is checked where a caller passes it, and
no stored value, however wrong, can lock a table."""

from __future__ import annotations

import datetime as dt
import logging
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lakelog
from lakelog import InvalidArgumentError, TableNotFoundError, properties
from lakelog.log.actions import Metadata, encode_schema
from lakelog.properties import DEFAULTS, PROPERTIES, validate_properties
from lakelog.storage import Storage
from lakelog.transaction import Transaction

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])

# values users have stored by mistake, and a few more of each kind
BAD = [
    ("lakelog.commit.timeout_seconds", "5 minutes", "a number > 0"),
    ("lakelog.compression", "bogus", "one of 'none', 'snappy', 'gzip', 'brotli', 'lz4', 'zstd'"),
    ("lakelog.vacuum.min_age_seconds", "-5", "a number >= 0"),
    ("lakelog.commit.max_attempts", "0", "an integer >= 1"),
    ("lakelog.manifest_interval", "ten", "an integer >= 1"),
    ("lakelog.target_file_size", "1.5", "an integer >= 1"),
    ("lakelog.compaction.min_file_size_ratio", "1.5", "a number in (0, 1]"),
    ("lakelog.expire.older_than_seconds", "nan", "a number >= 0"),
]


def rows(start: int, n: int = 3) -> pa.Table:
    return pa.table({"id": range(start, start + n), "p": ["a"] * n}, schema=SCHEMA)


def ids(table: lakelog.Table) -> list[int]:
    return sorted(table.snapshot().to_arrow(columns=["id"]).column("id").to_pylist())


# -- a value a caller passes is checked -------------------------------------------------


@pytest.mark.parametrize(("key", "value", "expected"), BAD)
def test_bad_values_are_refused_at_create(
    tmp_path: Path, key: str, value: str, expected: str
) -> None:
    message = f"expected table property {key} to be {expected}, found '{value}'; "
    with pytest.raises(InvalidArgumentError, match=re.escape(message)) as e:
        lakelog.create_table(str(tmp_path / "t"), SCHEMA, properties={key: value})
    assert DEFAULTS[key] in str(e.value)  # says what would do
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        lakelog.write_table(str(tmp_path / "t"), rows(0), properties={key: value})
    with pytest.raises(TableNotFoundError):
        lakelog.open_table(str(tmp_path / "t"))
    assert not (tmp_path / "t").exists() or not any((tmp_path / "t").rglob("*.parquet"))


@pytest.mark.parametrize(("key", "value", "expected"), BAD)
def test_bad_values_are_refused_at_set(tmp_path: Path, key: str, value: str, expected: str) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    message = f"expected table property {key} to be {expected}, found '{value}'; "
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        t.set_properties({key: value})
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        lakelog.write_table(t.uri, rows(0), properties={key: value})  # existing table too
    assert lakelog.open_table(t.uri).version == 0
    t.append(rows(0))  # and the table works as before


def test_unknown_lakelog_key_names_the_closest(tmp_path: Path) -> None:
    closest = "did you mean 'lakelog.target_file_size'?"
    with pytest.raises(InvalidArgumentError, match=re.escape(closest)):
        lakelog.create_table(
            str(tmp_path / "t"), SCHEMA, properties={"lakelog.target_filesize": "1000"}
        )
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    with pytest.raises(InvalidArgumentError, match=re.escape(closest)):
        t.set_properties({"lakelog.target_filesize": "1000"})
    with pytest.raises(InvalidArgumentError, match=re.escape("'lakelog.commit.timeout_seconds'")):
        t.set_properties({"Lakelog.Commit.Timeout": "10"})
    assert lakelog.open_table(t.uri).version == 0


def test_user_properties_stay_free_form_and_values_are_normalized(tmp_path: Path) -> None:
    t = lakelog.create_table(
        str(tmp_path / "t"),
        SCHEMA,
        properties={"owner": "5 minutes", "lakelog.compression": "GZIP"},
    )
    t.set_properties({"lakelogs.x": "anything", "lakelog.commit.timeout_seconds": " 7.5 "})
    assert lakelog.open_table(t.uri).properties == {
        "owner": "5 minutes",
        "lakelog.compression": "gzip",
        "lakelog.deletion_vectors": "true",  # the default of new tables
        "lakelogs.x": "anything",
        "lakelog.commit.timeout_seconds": "7.5",
    }


# -- a stored bad value never locks the table -----------------------------------------------


def _store(table: lakelog.Table, props: dict[str, str]) -> None:
    """Commit ``props`` as they are, the way an older lakelog's set_properties did."""
    snap = table.snapshot()
    md = snap.metadata
    new = Metadata(
        table_id=md.table_id,
        schema=md.schema,
        partition_by=md.partition_by,
        properties={**md.properties, **props},
        format_version=md.format_version,
        created_ms=md.created_ms,
    )
    Transaction(
        table.storage, snap, operation="SET PROPERTIES", kind="metadata", actions=[new]
    ).commit()


@pytest.mark.parametrize(("key", "value", "expected"), BAD)
def test_a_table_holding_a_bad_value_stays_usable_and_fixable(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    key: str,
    value: str,
    expected: str,
) -> None:
    monkeypatch.setattr(properties, "_warned", set(), raising=False)  # once per process
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(0))
    _store(t, {key: value})
    caplog.set_level(logging.WARNING, logger="lakelog")
    t = lakelog.open_table(t.uri)
    assert t.properties[key] == value
    t.append(rows(10))
    t.overwrite(rows(20))
    lakelog.write_table(t.uri, rows(30))
    lakelog.write_table(t.uri, rows(40), mode="overwrite")
    t.refresh().append(rows(50))
    assert ids(t.refresh()) == [40, 41, 42, 50, 51, 52]
    t.compact(dry_run=True)  # the maintenance properties are read too
    t.expire_snapshots(dry_run=True)
    t.vacuum()
    # one warning naming the property, the value and the fix
    warned = [r.getMessage() for r in caplog.records if key in r.getMessage()]
    assert len(warned) == 1
    assert f"expected table property {key} to be {expected}, found '{value}'" in warned[0]
    assert "table.set_properties(" in warned[0]
    # a bad value passed explicitly is still refused, and a good one fixes the table
    with pytest.raises(InvalidArgumentError, match=re.escape(key)):
        t.set_properties({key: value + "x"})
    t.set_properties({key: DEFAULTS[key]})
    assert lakelog.open_table(t.uri).properties[key] == DEFAULTS[key]


def test_a_table_created_with_bad_values_is_usable(tmp_path: Path) -> None:
    """Version 0 itself holds the bad values (an older lakelog's create_table)."""
    storage = Storage(str(tmp_path / "t"))
    md = Metadata(
        table_id="old",
        schema=encode_schema(SCHEMA),
        partition_by=(),
        properties={key: value for key, value, _ in BAD},
    )
    Transaction(storage, None, operation="CREATE TABLE", kind="metadata", actions=[md]).commit()
    lakelog.write_table(storage.uri, rows(0))
    t = lakelog.open_table(storage.uri)
    t.append(rows(3))
    assert ids(t) == list(range(6))
    t.set_properties({key: DEFAULTS[key] for key, _, _ in BAD})
    t.append(rows(6))
    assert ids(t) == list(range(9))


def test_maintenance_falls_back_to_the_defaults(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA)
    for i in range(3):
        t.append(rows(3 * i))
    _store(
        t,
        {
            "lakelog.expire.older_than_seconds": "soon",
            "lakelog.vacuum.min_age_seconds": "-5",
            "lakelog.compaction.min_input_files": "two",
            "lakelog.clustering.max_group_bytes": "1 GiB",
        },
    )
    t = lakelog.open_table(t.uri)
    assert t.expire_snapshots().versions_expired == 0  # the 7-day default
    with pytest.raises(InvalidArgumentError, match="min_age_seconds"):
        t.vacuum(older_than=dt.timedelta(minutes=1))  # below the 1-hour default minimum
    assert t.compact().compacted_file_count == 3  # at least 2 input files by default
    for i in range(3, 5):
        t.append(rows(3 * i))
    t.optimize(zorder_by=["id", "p"])  # groups of up to 1 GiB by default
    assert ids(t.refresh()) == list(range(15))


# -- every declared property -----------------------------------------------------------------


def test_docs_list_every_property_with_its_default() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "format.md").read_text()
    section = docs[docs.index("## Table properties") :]
    for name, p in PROPERTIES.items():
        row = re.search(rf"^\| `{re.escape(name)}` \|([^|]*)\| ([^ |]*)", section, re.M)
        assert row is not None, f"{name} is missing from docs/format.md"
        assert row.group(2) == p.default


@given(st.sampled_from(sorted(PROPERTIES)))
def test_every_default_passes_its_own_validator(name: str) -> None:
    p = PROPERTIES[name]
    assert validate_properties({name: p.default}) == {name: p.default}
    assert properties._lookup({}, name) == (p.default, p.parse(p.default))


values = st.one_of(
    st.text(max_size=12),
    st.text(alphabet="0123456789+-.eE _", max_size=8),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.sampled_from(["zstd", "LZ4", "true", "1e3", "0", "-0", ".5", "1_000"]),
)


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(sorted(PROPERTIES)), value=values)
def test_values_either_validate_or_raise_invalid_argument(name: str, value: Any) -> None:
    try:
        stored = validate_properties({name: value})[name]
    except InvalidArgumentError as e:
        assert str(e).startswith(f"expected table property {name} to be ")
        # stored anyway (by hand), it reads as the default instead of failing
        raw = str(value).lower() if isinstance(value, bool) else str(value)
        assert properties._lookup({name: raw}, name)[1] == PROPERTIES[name].parse(
            PROPERTIES[name].default
        )
        return
    # a value that validated reads back as itself, and validates again unchanged
    assert validate_properties({name: stored}) == {name: stored}
    assert properties._lookup({name: stored}, name) == (stored, PROPERTIES[name].parse(stored))


@settings(max_examples=200, deadline=None)
@given(suffix=st.text(max_size=30))
def test_lakelog_names_are_known_or_refused(suffix: str) -> None:
    name = "lakelog." + suffix
    try:
        validate_properties({name: DEFAULTS.get(name, "1")})
    except InvalidArgumentError as e:
        assert name not in PROPERTIES
        assert "did you mean 'lakelog." in str(e)


# -- Spark creates tables through the same check -----------------------------------------------


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_spark_write_checks_properties_and_survives_a_stored_bad_value(
    spark: Any, tmp_path: Path
) -> None:
    import lakelog.spark as lspark

    uri = str(tmp_path / "t")
    df = spark.createDataFrame([(1, "a")], "id long, p string")
    with pytest.raises(InvalidArgumentError, match=re.escape("lakelog.vacuum.min_age_seconds")):
        lspark.write(df, uri, properties={"lakelog.vacuum.min_age_seconds": "-5"})
    with pytest.raises(TableNotFoundError):
        lakelog.open_table(uri)
    lspark.write(df, uri)
    _store(lakelog.open_table(uri), {"lakelog.compression": "bogus"})
    lspark.write(df, uri)  # the default codec instead of the stored typo
    assert ids(lakelog.open_table(uri)) == [1, 1]
