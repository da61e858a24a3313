"""Dropping the rows of deletion vectors from a Spark Parquet scan (format version 5).

A data file with a vector (``docs/format.md``, "Deletion vectors") still holds the
rows that are gone; every reader drops their positions. Spark's Parquet reader
gives each row its position in its file (``_metadata.row_index``, counted across
row groups as lakelog counts) and its file's URL (``_metadata.file_path``), so a
scan of files that all carry a vector is cut down by two broadcast joins:

1. each row gets the number of its file, matched on its name and the end of its
   URL (the file's path below the table root, quoted as ``java.net.URI`` quotes a
   path, which is how Spark spells it; the scheme and root are never compared, so
   ``file:/`` against ``file:///`` or a qualified authority cannot matter). A row
   whose file matches none stops the query with an error naming its URL: a read
   never returns the rows of a file whose vector it could not apply;
2. a left anti join on (file number, ``row_index // 64``) with a 64-bit mask per
   block of 64 positions drops the deleted rows (one row of the broadcast per block
   holding a deleted row, not one per row).

Files without a vector are read by a scan of their own, untouched.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ..errors import InvalidArgumentError
from ..log.actions import DataFile
from ..log.deletion_vectors import deleted_positions

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["drop_deleted", "java_uri_path", "scan_layers", "spark_supports_row_index"]

_BLOCK_BITS = 6
"""Positions per broadcast row: 2**6 = 64, one bit each in a ``bigint`` mask."""

# java.net.URI's legal characters of a path component (RFC 2396: unreserved, the
# punctuation of pchar, and ';' '/'); every other ASCII character is %-quoted
_PATH_ASCII = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!~*'()" + ":@&=+$," + ";/"
)
_SPACE_CATEGORIES = frozenset({"Zs", "Zl", "Zp"})
"""Java's ``Character.isSpaceChar``: quoted even where other non-ASCII text is kept."""


def java_uri_path(path: str) -> str:
    """``path`` quoted as ``java.net.URI``'s multi-argument constructors quote a path
    (and so as Hadoop's ``Path.toUri()`` and Spark's ``_metadata.file_path`` spell it):
    ASCII outside the legal set, ``%`` included, becomes ``%XX``; other characters
    stay, except space and control characters, which become their UTF-8 bytes as
    ``%XX``."""
    out: list[str] = []
    for c in path:
        if ord(c) < 0x80:
            out.append(c if c in _PATH_ASCII else f"%{ord(c):02X}")
        elif unicodedata.category(c) in _SPACE_CATEGORIES or 0x80 <= ord(c) <= 0x9F:
            out.append("".join(f"%{b:02X}" for b in c.encode("utf-8")))
        else:
            out.append(c)
    return "".join(out)


def spark_supports_row_index(spark: SparkSession) -> bool:
    """True if this Spark gives Parquet rows their ``_metadata.row_index`` (3.5 and later)."""
    raw = str(getattr(spark, "version", "0"))
    try:
        major, minor = (int(x) for x in raw.split(".")[:2])
    except ValueError:
        return True  # a build with an unusual version string: let Spark answer
    return (major, minor) >= (3, 5)


def check_row_index(spark: SparkSession, files: Sequence[DataFile]) -> None:
    """Refuse (:class:`InvalidArgumentError`) to read files with vectors on a Spark
    that cannot number their rows."""
    if files and not spark_supports_row_index(spark):
        raise InvalidArgumentError(
            f"expected Spark 3.5 or later to read {len(files)} data files with deletion "
            f"vectors (their rows are matched by _metadata.row_index), found Spark "
            f"{spark.version}; upgrade Spark, or compact the table (lakelog's compaction "
            f"rewrites files without their deleted rows) before reading it with this Spark."
        )


def _tails(path: str) -> list[str]:
    """The proper ``/``-suffixes of a root-relative path (``a/b/c`` -> ``b/c``, ``c``)."""
    parts = path.split("/")
    return ["/".join(parts[i:]) for i in range(1, len(parts))]


def scan_layers(files: Sequence[DataFile]) -> list[list[DataFile]]:
    """``files`` cut into scans in which no file's path ends with ``/`` and another
    file's whole path (``sub/x.parquet`` and ``x.parquet``): within a scan a row's URL
    then matches exactly one file. Lakelog's own layouts make one scan."""
    layers: list[tuple[set[str], set[str], list[DataFile]]] = []
    for f in sorted(files, key=lambda f: f.path.count("/")):
        tails = set(_tails(f.path))
        for paths, all_tails, members in layers:
            if f.path not in all_tails and not (tails & paths):
                paths.add(f.path)
                all_tails.update(tails)
                members.append(f)
                break
        else:
            layers.append(({f.path}, tails, [f]))
    return [members for _, _, members in layers]


def _unused(base: str, taken: set[str]) -> str:
    name, i = base, 0
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name


def _quoted(name: str) -> str:
    """A column name for ``F.col`` (backquoted: a dot in a name is not a struct field)."""
    return "`" + name.replace("`", "``") + "`"


def _metadata(df: DataFrame) -> Column:
    """The scan's hidden ``_metadata`` struct, even where a table column has that name."""
    if hasattr(df, "metadataColumn"):
        return df.metadataColumn("_metadata")
    from pyspark.sql import functions as F

    if "_metadata" in df.columns:
        raise InvalidArgumentError(
            "expected no column named '_metadata' in a table read with deletion vectors on "
            "this Spark, found one; it hides Spark's row positions. Use Spark 4 "
            "(DataFrame.metadataColumn), or compact the table before reading it."
        )
    return F.col("_metadata")


def _frame(spark: SparkSession, table: pa.Table) -> DataFrame:
    """A small local DataFrame (Arrow where this PySpark takes it)."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    types = {pa.int32(): IntegerType(), pa.int64(): LongType(), pa.string(): StringType()}
    schema = StructType([StructField(f.name, types[f.type], False) for f in table.schema])
    major = int(str(getattr(spark, "version", "4")).split(".")[0] or 4)
    if major >= 4:
        return spark.createDataFrame(table, schema)  # type: ignore[call-overload,no-any-return]
    return spark.createDataFrame(list(zip(*table.to_pydict().values(), strict=True)), schema)


def _blocks(files: Iterable[DataFile]) -> pa.Table:
    """Per file number: (block of 64 positions, mask of its deleted positions)."""
    ids, blocks, masks = [], [], []
    for i, f in enumerate(files):
        if f.deleted is None:
            continue
        pos = deleted_positions(f.deleted, f.num_rows, path=f.path)
        if not len(pos):
            continue
        block = pos >> _BLOCK_BITS
        bits = np.left_shift(np.uint64(1), (pos & 63).astype(np.uint64))
        starts = np.flatnonzero(np.r_[True, block[1:] != block[:-1]])
        ids.append(np.full(len(starts), i, dtype=np.int32))
        blocks.append(block[starts])
        masks.append(np.bitwise_or.reduceat(bits, starts).view(np.int64))
    if not ids:
        return pa.table(
            {
                "f": pa.array([], pa.int32()),
                "b": pa.array([], pa.int64()),
                "m": pa.array([], pa.int64()),
            }
        )
    return pa.table(
        {
            "f": pa.array(np.concatenate(ids), pa.int32()),
            "b": pa.array(np.concatenate(blocks), pa.int64()),
            "m": pa.array(np.concatenate(masks), pa.int64()),
        }
    )


def drop_deleted(spark: SparkSession, scan: DataFrame, files: Sequence[DataFile]) -> DataFrame:
    """``scan`` (a Spark Parquet scan of exactly ``files``, one layer of
    :func:`scan_layers`) without the rows the files' vectors delete; same columns.

    Lazy, like any DataFrame: a row whose URL matches none of ``files`` fails the
    query when it runs (``raise_error``), it is never returned unfiltered.
    """
    from pyspark.sql import functions as F

    check_row_index(spark, files)
    names = list(scan.columns)
    taken = set(names)
    c_name, c_path, c_row = (
        _unused(n, taken) for n in ("lakelog_name", "lakelog_url", "lakelog_row")
    )
    d_id, d_name, d_tail = (
        _unused(n, taken) for n in ("lakelog_fid", "lakelog_fname", "lakelog_ftail")
    )
    b_id, b_block, b_mask = (
        _unused(n, taken) for n in ("lakelog_bfid", "lakelog_block", "lakelog_mask")
    )

    meta = _metadata(scan)
    probe = scan.select(
        *(F.col(_quoted(n)) for n in names),
        meta.getField("file_name").alias(c_name),
        meta.getField("file_path").alias(c_path),
        meta.getField("row_index").alias(c_row),
    )
    ident = pa.table(
        {
            d_id: pa.array(range(len(files)), pa.int32()),
            d_name: pa.array(
                [java_uri_path(f.path.rsplit("/", 1)[-1]) for f in files], pa.string()
            ),
            d_tail: pa.array(["/" + java_uri_path(f.path) for f in files], pa.string()),
        }
    )
    known = F.broadcast(_frame(spark, ident))
    matched = probe.join(
        known,
        on=(probe[c_name] == known[d_name]) & probe[c_path].endswith(known[d_tail]),
        how="left",
    )
    unknown = F.raise_error(
        F.concat(
            F.lit(
                "expected each row of a Spark scan of data files with deletion vectors to come "
                "from one of those files, found a row from "
            ),
            F.col(c_path),
            F.lit(
                ", whose URL matches no file of the table as lakelog spells it, so its "
                "deletion vector cannot be applied; the read stopped rather than return "
                "deleted rows. Report this with your Spark version; compacting the table "
                "(which rewrites files without their deleted rows) avoids it."
            ),
        )
    )
    checked = matched.where(F.when(F.col(d_id).isNull(), unknown).otherwise(F.lit(True)))
    raw = _blocks(files).rename_columns([b_id, b_block, b_mask])
    gone = F.broadcast(_frame(spark, raw))
    bit = F.col(c_row).bitwiseAND(F.lit(63)).cast("int")
    live = checked.join(
        gone,
        on=(checked[d_id] == gone[b_id])
        & (F.shiftright(checked[c_row], _BLOCK_BITS) == gone[b_block])
        & (F.bit_get(gone[b_mask], bit) == 1),
        how="left_anti",
    )
    return live.select(*(F.col(_quoted(n)) for n in names))
