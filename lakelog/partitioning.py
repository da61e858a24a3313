"""Hive-style partition values: folder names, string form and typed form."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.compute as pc

from .errors import InvalidArgumentError, SchemaMismatchError

__all__ = [
    "NAME_MAX",
    "NULL_PARTITION",
    "STAGING_DIR",
    "check_partition_columns",
    "check_partition_dir",
    "hidden_name",
    "partition_dir",
    "partition_expression",
    "partition_string",
    "typed_partition_value",
]

NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
NAME_MAX = 255
"""Longest folder name, in bytes, most filesystems accept (Linux, macOS, Windows)."""
_SAFE = "-_.~ "
STAGING_DIR = "_spark_staging"
"""Folder under the table root where lakelog's Spark jobs write before their commit."""


def hidden_name(name: str) -> bool:
    """Whether a file or folder name is hidden by the Hadoop/Spark convention: it starts
    with ``_`` (but is no ``_col=value`` partition folder) or ``.``, or is a copy in
    progress. Spark's file index skips such names; other tools keep markers and checksums
    (``_SUCCESS``, ``.crc``) under them."""
    return (
        (name.startswith("_") and "=" not in name)
        or name.startswith(".")
        or name.endswith("._COPYING_")
    )


def _partition_type_ok(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_date32(t)
        or pa.types.is_boolean(t)
    )


def check_partition_columns(schema: pa.Schema, partition_by: Sequence[str]) -> tuple[str, ...]:
    """Validate partition columns against a schema; returns them as a tuple."""
    if isinstance(partition_by, str):
        partition_by = (partition_by,)
    cols = tuple(partition_by)
    if len(set(cols)) != len(cols):
        raise InvalidArgumentError(f"expected distinct partition columns, found {list(cols)}")
    for c in cols:
        if c not in schema.names:
            raise SchemaMismatchError(
                f"expected partition column {c!r} in the schema, found columns {schema.names}; "
                f"pass partition_by with existing column names."
            )
        t = schema.field(c).type
        if not _partition_type_ok(t):
            raise InvalidArgumentError(
                f"expected partition column {c!r} to be an integer, string, date or boolean, "
                f"found {t}; partition on a derived column (e.g. a date) instead."
            )
    if len(cols) == len(schema.names) and cols:
        raise InvalidArgumentError("expected at least one column that is not a partition column")
    return cols


def partition_string(value: Any) -> str | None:
    """String form of a partition value (None for null).

    >>> partition_string(dt.date(2024, 1, 2)), partition_string(True), partition_string(7)
    ('2024-01-02', 'true', '7')
    """
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def partition_dir(partition_by: Sequence[str], values: Mapping[str, str | None]) -> str:
    """Relative folder of a partition, e.g. ``date=2024-01-02/kind=a%2Fb``."""
    parts = []
    for col in partition_by:
        v = values.get(col)
        text = NULL_PARTITION if v is None else (quote(v, safe=_SAFE) or "%00")
        parts.append(f"{quote(col, safe=_SAFE)}={text}")
    return "/".join(parts)


def check_partition_dir(partition_by: Sequence[str], values: Mapping[str, str | None]) -> str:
    """:func:`partition_dir` of a partition new data goes to, refusing folder names
    longer than :data:`NAME_MAX` bytes, so that such a write fails before it creates
    anything (instead of an ``OSError`` midway)."""
    if not partition_by:
        return ""
    folder = partition_dir(partition_by, values)
    for col, name in zip(partition_by, folder.split("/"), strict=True):
        size = len(name.encode())
        if size > NAME_MAX:
            v = values.get(col)
            shown = v if v is None or len(v) <= 40 else v[:40] + "..."
            raise InvalidArgumentError(
                f"expected partition folder names of at most {NAME_MAX} bytes (the usual "
                f"filesystem name limit), found {size} bytes for column {col!r} with value "
                f"{shown!r} (encoded as '{col}=...'); partition on a shorter derived value "
                f"(a prefix or a hash) instead. Nothing was written."
            )
    return folder


def typed_partition_value(text: str | None, type_: pa.DataType) -> Any:
    """Python value of a partition string for a column of ``type_``."""
    if text is None:
        return None
    return pa.array([text], pa.string()).cast(type_)[0].as_py()


def partition_scalar(text: str | None, type_: pa.DataType) -> pa.Scalar:
    if text is None:
        return pa.scalar(None, type_)
    return pa.array([text], pa.string()).cast(type_)[0]


def partition_expression(
    schema: pa.Schema, values: Mapping[str, str | None]
) -> pc.Expression | None:
    """``col == value`` (or ``is_null``) for every partition column, AND-ed."""
    expr: pc.Expression | None = None
    for col, text in values.items():
        term = (
            pc.field(col).is_null()
            if text is None
            else pc.field(col) == partition_scalar(text, schema.field(col).type)
        )
        expr = term if expr is None else expr & term
    return expr


def parse_partition_dir(path: str) -> dict[str, str | None]:
    """Inverse of :func:`partition_dir` for the folders of a relative file path."""
    out: dict[str, str | None] = {}
    for seg in path.split("/")[:-1]:
        if "=" not in seg:
            continue
        k, v = seg.split("=", 1)
        out[unquote(k)] = None if v == NULL_PARTITION else unquote(v)
    return out
