"""The Delta view of a table with rules (format.md, "The Delta view" bullet of
"Constraints, generated and identity columns"): Delta's own table features, read by
deltalake (delta-rs), a real Delta reader."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest

import lakelog

deltalake = pytest.importorskip("deltalake")

TS = dt.datetime(2026, 1, 2, 3, tzinfo=dt.timezone.utc)


def test_deltalake_reads_the_rules_as_delta_table_features(tmp_path: Path) -> None:
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("amount", pa.float64()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("day", pa.date32()),
            pa.field("name", pa.string(), nullable=False),
            pa.field("s", pa.struct([pa.field("x", pa.string(), nullable=False)])),
        ]
    )
    t = lakelog.create_table(
        str(tmp_path / "t"),
        schema,
        constraints={"Positive": "amount > 0"},
        generated={"day": "CAST(ts AS DATE)"},
        identity={"id": {"start": 5, "step": 2}},
        properties={"lakelog.delta_view": "true"},
    )
    t.append(
        pa.table({"amount": [1.0, 2.0], "ts": [TS, TS], "name": ["a", "b"], "s": [{"x": "a"}] * 2})
    )
    table = deltalake.DeltaTable(str(tmp_path / "t"))
    protocol = table.protocol()
    assert protocol.min_writer_version == 7
    assert {"checkConstraints", "generatedColumns", "identityColumns"} <= set(
        protocol.writer_features or []
    )
    assert table.metadata().configuration["delta.constraints.positive"] == "amount > 0"
    fields = {f["name"]: f for f in json.loads(table.schema().to_json())["fields"]}
    assert fields["day"]["metadata"]["delta.generationExpression"] == "CAST(ts AS DATE)"
    ident = fields["id"]["metadata"]
    assert ident["delta.identity.start"] == 5 and ident["delta.identity.step"] == 2
    assert ident["delta.identity.allowExplicitInsert"] is False
    assert ident["delta.identity.highWaterMark"] == 7
    assert fields["name"]["nullable"] is False and fields["id"]["nullable"] is False
    assert fields["s"]["type"]["fields"][0]["nullable"] is False
    rows = table.to_pyarrow_table().sort_by("id").to_pylist()
    assert [(r["id"], r["day"]) for r in rows] == [
        (5, dt.date(2026, 1, 2)),
        (7, dt.date(2026, 1, 2)),
    ]
    # dropping the constraint takes it out of the view's configuration and features
    t.drop_constraint("positive")
    table = deltalake.DeltaTable(str(tmp_path / "t"))
    assert "delta.constraints.positive" not in table.metadata().configuration
    assert "checkConstraints" not in (table.protocol().writer_features or [])
