"""``merge`` of a Spark DataFrame into a lakelog table (see :mod:`lakelog.spark.rowlevel`)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...errors import InvalidArgumentError
from ...io.guards import guards_of, refuse_given_identity
from ...rowlevel.clauses import (
    MergeClause,
    When,
    legacy,
)
from ...rowlevel.merge import check_keys, refuse_assigned_identity
from ...rowlevel.result import MergeReport
from ..read import columns_of
from .commit import DriverMerge, run_merge
from .jobs import open_target
from .source import (
    ORDER,
    keep_one_per_key,
    prepared_source,
    raise_duplicates,
    source_columns,
    source_facts,
)
from .tasks import MergeSpec
from .values import SparkValues, matched_clauses

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


__all__ = ["merge"]


def merge(
    spark: SparkSession,
    uri: str,
    source: DataFrame,
    on: str | Sequence[str],
    *,
    when_matched: str | Mapping[str, Any] | Sequence[MergeClause] | None = "update",
    when_not_matched: str | Sequence[MergeClause] | None = "insert",
    when_not_matched_by_source: str | Sequence[MergeClause] | None = None,
    matched_condition: Any = None,
    duplicates: str = "error",
    storage_options: Mapping[str, Any] | None = None,
) -> MergeReport:
    """:meth:`lakelog.Table.merge` of a Spark DataFrame, run by Spark tasks (see the
    module doc); the driver never collects the source or the target rows.

    Args:
        spark: the session that runs the tasks.
        uri: the target table's URI.
        source: the rows to merge, with the table's columns and types.
        on: the key column(s) matching source rows to target rows.
        when_matched: ``"update"`` (default: every column from the source row),
            ``"delete"``, None (or ``"ignore"``), a list of ``lakelog.when_matched_update``
            / ``when_matched_delete`` clauses, or a mapping of columns to new values,
            each a Spark Column or a Spark SQL string over the source DataFrame's columns
            (computed by Spark: ``F.col("amount") * 2`` or ``"amount * 2"``; a string is
            SQL, so a text literal is ``"'closed'"`` or ``F.lit("closed")``), a Python
            literal, or a pyarrow Expression over the target row (its column names) and
            the source row (``pc.field("source.<col>")``).
        when_not_matched: ``"insert"`` (default), None, or a list of
            ``lakelog.when_not_matched_insert`` clauses.
        when_not_matched_by_source: ``"delete"``, None (default), or a list of
            ``lakelog.when_not_matched_by_source_update`` / ``..._delete`` clauses.
            In clauses, a SQL string is over the target's columns and the source's as
            ``source.<col>`` (evaluated by lakelog with Spark's meaning), a Spark Column
            is computed by Spark over the source DataFrame's columns.
        matched_condition: with a string or mapping ``when_matched``: only matched rows
            where it is true are updated or deleted (the others stay, and count as
            matched: they are not inserted); a Spark SQL string over the target's columns
            and the source's as ``source.<col>`` (``"status != 'closed' and source.amount
            > amount"``, evaluated by lakelog as :func:`delete`'s ``where``), a pyarrow
            Expression over the same, or a Spark Column over the source DataFrame's
            columns (computed by Spark). Default None.
        duplicates: what several source rows with one key mean: ``"error"`` (default,
            before anything is written), ``"last"`` or ``"first"`` (in the DataFrame's
            order).
        storage_options: fsspec options for the table; default none.

    Returns:
        The merge's figures and commit.
    """
    start = time.monotonic()
    from pyspark.sql import functions as F

    from ..schema import to_arrow_schema

    table = open_target(uri, storage_options)
    snap = table.snapshot()
    schema, parts = snap.schema, snap.partition_by
    keys = check_keys(on, schema)
    if duplicates not in ("error", "last", "first"):
        raise InvalidArgumentError(
            f"expected duplicates to be one of 'error', 'last', 'first', found {duplicates!r}"
        )
    forms = (when_matched, when_not_matched, when_not_matched_by_source)
    plain = all(f is None or isinstance(f, str | Mapping) for f in forms)
    own, others, missing, given = source_columns(source, schema, keys, exact=plain)
    values = SparkValues(spark, source, schema, given)
    on_match = matched_clauses(values, keys, when_matched, matched_condition)
    not_matched = [values.clause(c, "not_matched") for c in legacy("not_matched", when_not_matched)]
    by_source = [
        values.clause(c, "not_matched_by_source")
        for c in legacy("not_matched_by_source", when_not_matched_by_source)
    ]
    refuse_given_identity(source.columns, schema, where="the merge's source")
    identity = guards_of(schema).identity
    numbers = tuple(c for c in identity if c in missing)
    spec = MergeSpec(
        keys=keys,
        matched=tuple(on_match),
        not_matched=tuple(not_matched),
        by_source=tuple(by_source),
        computed=(*others, *(c for c, _ in values.computed)),
        missing=missing,
        numbers=numbers,
        firsts=tuple((c, identity[c].first(), identity[c].step) for c in numbers),
    )
    # the source as the tasks see it; Spark reads it again in each job (route, inserts)
    prepared = prepared_source(source, schema, own, others, missing, values.computed)
    extra = (
        to_arrow_schema(prepared.select(*columns_of(spec.computed)).schema)
        if spec.computed
        else None
    )
    clauses = spec.clauses(schema, extra)  # refused here, before anything runs
    refuse_assigned_identity(clauses, schema)
    parameters = _parameters(keys, forms, values, duplicates, matched_condition)
    if duplicates != "error":
        prepared = prepared.withColumn(ORDER, F.monotonically_increasing_id())
    facts = source_facts(prepared, keys, parts, schema)
    if facts.repeated and duplicates == "error":
        raise_duplicates(prepared, keys, facts.repeated)
    deduped = keep_one_per_key(prepared, keys, duplicates) if facts.repeated else prepared
    if duplicates != "error":
        deduped = deduped.drop(ORDER)
    if numbers:  # each insert task's range of identity values (MergeSpec.reserved)
        spec = dataclasses.replace(spec, reserved=max(facts.given, 1))
    change = DriverMerge(spec, schema, facts, parameters, extra)
    noop = clauses.noop
    candidates = [] if noop else change.candidates(snap)
    return run_merge(
        spark, table, snap, change, candidates, deduped, spec.insert and not noop, start
    )


def _parameters(
    keys: tuple[str, ...],
    forms: tuple[Any, Any, Any],
    values: SparkValues,
    duplicates: str,
    matched_condition: Any,
) -> dict[str, Any]:
    """The merge's options as its commit header records them (the text the user wrote)."""
    parameters: dict[str, Any] = {"on": list(keys)}
    kinds: tuple[When, When, When] = ("matched", "not_matched", "not_matched_by_source")
    for option, when, form in zip(
        ("when_matched", "when_not_matched", "when_not_matched_by_source"),
        kinds,
        forms,
        strict=True,
    ):
        if isinstance(form, str) or form is None:
            parameters[option] = "ignore" if form is None else form
        elif isinstance(form, Mapping):
            parameters[option] = values.shown
        else:
            parameters[option] = [c.describe() for c in legacy(when, form)]
    parameters["duplicates"] = duplicates
    parameters["engine"] = "spark"
    if matched_condition is not None:
        parameters["matched_condition"] = str(matched_condition)
    return parameters
