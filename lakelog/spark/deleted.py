"""Dropping the rows of deletion vectors from a Spark Parquet scan (format version 5).

A data file with a vector (``docs/format.md``, "Deletion vectors") still holds the
rows that are gone; every reader drops their positions. Spark's Parquet reader
gives each row its position in its file (``_metadata.row_index``, counted across
row groups as lakelog counts) and its file's name (``_metadata.file_name``), so a
scan of files that all carry a vector (one layer of :func:`scan_layers`) keeps its
rows by a filter and ONE broadcast hash anti join, without a shuffle, in Spark's vectorized
reader and whole-stage code:

1. each row's file is keyed by ``xxhash64`` of its name (lakelog computes the same
   hash of each file's name); a row whose key is none of the scan's files stops the
   query with an error naming its URL: a read never returns the rows of a file
   whose vector it could not apply;
2. a left anti join on one ``bigint``, the file's key XOR ``row_index >> 6`` (files of
   one scan differ in their keys' high bits, so one file's blocks never take another's
   keys), with a 64-bit mask per block of 64 positions, drops the deleted rows (one
   row of the broadcast per block holding a deleted row, not one per row). A left
   anti join and a filter keep the scan's size estimate, so the joins of a query over
   it are planned as over a plain scan (a broadcast of a small table stays a
   broadcast).

Files without a vector are read by a scan of their own, untouched.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ..errors import InvalidArgumentError
from ..io.bloom import xxh64
from ..log.actions import DataFile
from ..log.deletion_vectors import deleted_positions

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["drop_deleted", "scan_layers", "spark_supports_row_index", "spark_xxhash64"]

_BLOCK_BITS = 6
"""Positions per broadcast row: 2**6 = 64, one bit each in a ``bigint`` mask."""
_KEY_LOW_BITS = 26
"""A row's join key is its file's name hash XOR its block (< 2**26: files of fewer than
2**32 rows); files of one scan differ in the hash's bits above these, so the key of one
file's block is never another file's."""


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


def _high(name: str) -> int:
    return spark_xxhash64(name) >> _KEY_LOW_BITS


def scan_layers(files: Sequence[DataFile]) -> list[list[DataFile]]:
    """``files`` cut into scans in which no two files have the same name (``p=a/x.parquet``
    and ``p=b/x.parquet``) or the same high bits of its name's hash: within a scan a row's
    ``_metadata.file_name`` then names exactly one file, and one file's join keys are
    never another's. Lakelog's own file names are unique: one scan."""
    layers: list[tuple[set[int], list[DataFile]]] = []
    for f in files:
        high = _high(f.path.rsplit("/", 1)[-1])
        for highs, members in layers:
            if high not in highs:
                highs.add(high)
                members.append(f)
                break
        else:
            layers.append(({high}, [f]))
    return [members for _, members in layers]


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


def spark_xxhash64(text: str) -> int:
    """Spark's ``xxhash64`` of one string column (XXH64 of its UTF-8 bytes, seed 42,
    as a signed ``bigint``)."""
    h = xxh64(text.encode("utf-8"), seed=42)
    return h - (1 << 64) if h >= 1 << 63 else h


def _blocks(files: Iterable[DataFile], hashes: Sequence[int]) -> pa.Table:
    """Per block of 64 positions holding a deleted row: its key (the file's name hash
    XOR the block) and the mask of its deleted positions."""
    keys, masks = [], []
    for h, f in zip(hashes, files, strict=True):
        if f.deleted is None:
            continue
        pos = deleted_positions(f.deleted, f.num_rows, path=f.path)
        if not len(pos):
            continue
        block = pos >> _BLOCK_BITS
        if int(block[-1]) >> _KEY_LOW_BITS:
            raise InvalidArgumentError(
                f"expected data files of fewer than {1 << (_KEY_LOW_BITS + _BLOCK_BITS)} rows "
                f"to read with deletion vectors in Spark, found {f.path!r} with "
                f"{f.num_rows}; compact the table to rewrite it without its deleted rows."
            )
        bits = np.left_shift(np.uint64(1), (pos & 63).astype(np.uint64))
        starts = np.flatnonzero(np.r_[True, block[1:] != block[:-1]])
        keys.append(np.bitwise_xor(block[starts].astype(np.int64), np.int64(h)))
        masks.append(np.bitwise_or.reduceat(bits, starts).view(np.int64))
    empty = np.array([], dtype=np.int64)
    return pa.table(
        {
            "k": pa.array(np.concatenate(keys) if keys else empty, pa.int64()),
            "m": pa.array(np.concatenate(masks) if keys else empty, pa.int64()),
        }
    )


_UNMATCHED = (
    "whose name matches no file of the table as lakelog spells it, so its deletion vector "
    "cannot be applied; the read stopped rather than return deleted rows. Report this "
    "with your Spark version; compacting the table (which rewrites files without their "
    "deleted rows) avoids it."
)


def drop_deleted(spark: SparkSession, scan: DataFrame, files: Sequence[DataFile]) -> DataFrame:
    """``scan`` (a Spark Parquet scan of exactly ``files``, one layer of
    :func:`scan_layers`) without the rows the files' vectors delete; same columns.

    Lazy, like any DataFrame: a row whose URL is none of ``files``' fails the query
    when it runs (``raise_error``), it is never returned unfiltered.
    """
    from pyspark.sql import functions as F

    check_row_index(spark, files)
    keys = [spark_xxhash64(f.path.rsplit("/", 1)[-1]) for f in files]
    if len({k >> _KEY_LOW_BITS for k in keys}) != len(keys):
        raise InvalidArgumentError(
            f"expected the {len(files)} files of a Spark scan with deletion vectors to be "
            f"one layer of scan_layers (distinct names and name hashes), found a clash; "
            f"read them through lakelog.spark.read, which cuts them into such scans."
        )
    names = list(scan.columns)
    taken = set(names)
    c_path, c_row, c_key = (
        _unused(n, taken) for n in ("lakelog_url", "lakelog_row", "lakelog_key")
    )
    b_key, b_mask = (_unused(n, taken) for n in ("lakelog_bkey", "lakelog_mask"))

    meta = _metadata(scan)
    probe = scan.select(
        *(F.col(_quoted(n)) for n in names),
        meta.getField("file_path").alias(c_path),
        meta.getField("row_index").alias(c_row),
        F.xxhash64(meta.getField("file_name")).alias(c_key),
    )
    unknown = F.raise_error(
        F.concat(
            F.lit(
                "expected each row of a Spark scan of data files with deletion vectors to come "
                "from one of those files, found a row from "
            ),
            F.col(c_path),
            F.lit(", " + _UNMATCHED),
        )
    )
    checked = probe.where(F.when(F.col(c_key).isin(keys), F.lit(True)).otherwise(unknown))
    raw = _blocks(files, keys).rename_columns([b_key, b_mask])
    gone = F.broadcast(_frame(spark, raw))
    bit = F.col(c_row).bitwiseAND(F.lit(63)).cast("int")
    # one bigint key: Spark builds a LongHashedRelation, its fastest probe
    key = checked[c_key].bitwiseXOR(F.shiftright(checked[c_row], _BLOCK_BITS))
    live = checked.join(
        gone,
        on=(key == gone[b_key]) & (F.bit_get(gone[b_mask], bit) == 1),
        how="left_anti",
    )
    return live.select(*(F.col(_quoted(n)) for n in names))
