"""A merge's conditions and values as its tasks evaluate them: Spark Columns computed by
Spark, SQL text analysed by Spark (or read by lakelog on Connect)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ...errors import InvalidArgumentError
from ...rowlevel.clauses import (
    MergeClause,
    legacy,
    when_matched_delete,
    when_matched_update,
)
from ...rowlevel.predicate import Where, check_assignments
from ..filters import analysis_error, exact_expression, is_spark_column, spark_expression
from ..schema import to_spark_schema

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


__all__ = ["SparkValues", "matched_clauses"]

SOURCE_PREFIX = "source."
"""Prefix of the source row's columns in merge expressions (``pc.field("source.amount")``)."""


class SparkValues:
    """A merge's conditions and values as its tasks evaluate them: a Spark Column is
    computed by Spark over the source DataFrame (a hidden source column, read as
    ``source.<hidden>``); a SQL string is analysed by Spark over the target's columns and
    the source's as ``source.<col>`` and evaluated by lakelog (on Spark Connect, read by
    lakelog's own reader); anything else as the embedded merge takes it."""

    def __init__(
        self, spark: SparkSession, source: DataFrame, schema: pa.Schema, given: pa.Schema
    ) -> None:
        self.spark = spark
        self.source = source
        self.schema = schema
        self.given = given
        """The source's columns clauses may read (the table's types for the table's)."""
        self.both = pa.schema([*schema, *(pa.field(SOURCE_PREFIX + f.name, f.type) for f in given)])
        self.computed: list[tuple[str, Column]] = []
        self.shown: dict[str, Any] = {}

    def column(self, value: Any, parameter: str) -> pc.Expression | None:
        """A Spark Column computed by Spark over the source (None: not a Column)."""
        column = spark_expression(value, parameter) if is_spark_column(value) else None
        if column is None:
            return None
        _check_source_expression(self.source, column, parameter, value)
        hidden = f"__lakelog_value_{len(self.computed)}"
        self.computed.append((hidden, column))
        return pc.field(SOURCE_PREFIX + hidden)

    def over_source(self, value: Any, parameter: str) -> pc.Expression:
        """A Spark Column or SQL string over the source DataFrame's columns, computed by
        Spark (``when_matched={col: "amount * 2"}``)."""
        column = spark_expression(value, parameter)
        assert column is not None
        _check_source_expression(self.source, column, parameter, value)
        hidden = f"__lakelog_value_{len(self.computed)}"
        self.computed.append((hidden, column))
        return pc.field(SOURCE_PREFIX + hidden)

    def text(self, value: str, parameter: str, when: str) -> Any:
        """SQL text over the target's columns and ``source.<col>``."""
        if when == "not_matched_by_source" or "source" in self.schema.names:
            return self._own(value, parameter, when)
        from pyspark.sql import types as T

        target = to_spark_schema(self.schema)
        with_source = T.StructType(
            [*target.fields, T.StructField("source", to_spark_schema(self.given))]
        )
        try:
            expression = exact_expression(
                self.spark, self.both, value, parameter, spark_schema=with_source
            )
        except InvalidArgumentError as refused:
            try:
                return self._own(value, parameter, when)
            except InvalidArgumentError:
                raise refused from None
        if expression is None:  # Spark Connect: lakelog's own reader
            return self._own(value, parameter, when)
        return expression

    def _own(self, value: str, parameter: str, when: str) -> Any:
        from ...sql.values import merge_text

        schema = self.schema if when == "not_matched_by_source" else self.both
        return merge_text(value, parameter, schema)

    def clause(self, c: MergeClause, when: str) -> MergeClause:
        """``c`` with its Spark Columns and SQL strings resolved."""
        name = f"{when}_{c.action}"

        def one(value: Any, parameter: str) -> Any:
            if is_spark_column(value):
                if when == "not_matched_by_source":
                    raise InvalidArgumentError(
                        f"expected {parameter} as a SQL string or a pyarrow Expression over "
                        f"the target's columns (a Spark Column is computed over the source "
                        f"DataFrame, and no source row matched these rows), found {value}"
                    )
                return self.column(value, parameter)
            if isinstance(value, str):
                return self.text(value, parameter, when)
            return value

        condition = c.condition
        if condition is not None:
            condition = one(condition, f"the condition of {name}")
        new = None
        if c.values is not None:
            new = {k: one(v, f"the value of {k!r} in {name}") for k, v in c.values.items()}
        return dataclasses.replace(c, values=new, condition=condition)


def matched_clauses(
    values: SparkValues, keys: tuple[str, ...], when_matched: Any, matched_condition: Any
) -> list[MergeClause]:
    """``when_matched`` (and ``matched_condition``) as resolved clauses."""
    schema = values.schema
    if not isinstance(when_matched, Mapping) and not isinstance(when_matched, str | None):
        if matched_condition is not None:
            raise InvalidArgumentError(
                "expected matched_condition= only with when_matched='update', 'delete' or "
                "a mapping, found it beside a list of clauses; give each clause its "
                "condition= instead"
            )
        return [values.clause(c, "matched") for c in legacy("matched", when_matched)]
    condition: Any = None
    if matched_condition is not None:
        if is_spark_column(matched_condition):
            condition = values.column(matched_condition, "matched_condition=")
        else:
            condition = _merge_where(
                values.spark, matched_condition, schema, values.both
            ).expression
    if not isinstance(when_matched, Mapping):
        action = _option("when_matched", when_matched, ("update", "delete"), ("ignore",))
        if action == "ignore":
            return []
        if action == "delete":
            return [when_matched_delete(condition=condition)]
        return [when_matched_update(condition=condition)]
    if not when_matched:
        raise InvalidArgumentError(
            "expected when_matched= to map columns to new values, such as "
            "{'status': 'closed'}, found an empty mapping; pass None to leave "
            "matched rows alone"
        )
    plain: dict[str, Any] = {}
    assigned: dict[str, Any] = {}
    for name, value in when_matched.items():
        if not isinstance(name, str) or name not in schema.names:
            raise InvalidArgumentError(
                f"expected columns of the table in when_matched=, found {name!r}; the "
                f"table's columns are {schema.names}"
            )
        if name in keys:
            raise InvalidArgumentError(
                f"expected when_matched= to leave the key columns {list(keys)} alone "
                f"(a matched row keeps its key), found {name!r}"
            )
        parameter = f"when_matched={{{name!r}: ...}}"
        if spark_expression(value, parameter) is not None:  # over the source's columns
            assigned[name] = values.over_source(value, parameter)
            values.shown[name] = value if isinstance(value, str) else str(value)
        else:
            plain[name] = value
    if plain:
        checked, texts = check_assignments(values.both, plain, argument="when_matched")
        values.shown.update(texts)
        assigned.update(checked)
    return [when_matched_update(set=assigned, condition=condition)]


def _merge_where(spark: SparkSession, value: Any, schema: pa.Schema, both: pa.Schema) -> Where:
    """``matched_condition`` given as anything but a Column: over the target row's columns
    and the source row's as ``source.<col>``. A string is Spark SQL, evaluated by lakelog
    (:func:`exact_expression` over the target's columns and a ``source`` struct), or,
    where Spark's side refuses a part of it that lakelog's own SQL-like filter reads (and
    on Spark Connect), that filter; DNF tuples and pyarrow Expressions as the embedded
    merge takes them."""
    if not isinstance(value, str) or "source" in schema.names:
        return Where(value, both, operation="MERGE")
    from pyspark.sql import types as T

    target = to_spark_schema(schema)
    with_source = T.StructType([*target.fields, T.StructField("source", target)])
    try:
        expression = exact_expression(
            spark, both, value, "matched_condition=", spark_schema=with_source
        )
    except InvalidArgumentError as refused:
        try:
            return Where(value, both, operation="MERGE")
        except InvalidArgumentError:
            raise refused from None
    if expression is None:  # Spark Connect: lakelog's own SQL-like filter
        try:
            return Where(value, both, operation="MERGE")
        except InvalidArgumentError as e:
            raise InvalidArgumentError(
                f"expected matched_condition= as a filter lakelog's SQL-like parser reads "
                f"on Spark Connect (a column or source.<col> compared with a literal, "
                f"IN, BETWEEN, IS [NOT] NULL, AND/OR/NOT; lakelog cannot see a plan "
                f"there), found {value!r}: {e}. Pass a Column over the source instead."
            ) from e
    chosen = Where(expression, both, operation="MERGE")
    chosen.text = value.strip()
    return chosen


def _check_source_expression(source: DataFrame, column: Column, parameter: str, value: Any) -> None:
    """Refuse (:class:`InvalidArgumentError`, naming ``parameter``) an expression Spark
    cannot evaluate over the source's columns (an unknown column, a type mismatch) before
    anything runs; on Spark Connect Spark answers when the merge's first job runs."""
    from pyspark.errors import AnalysisException

    from ..filters import quiet_analysis

    try:
        with quiet_analysis():
            source.select(column)
    except AnalysisException as e:
        raise analysis_error(e, parameter, value, source.columns) from e


def _option(name: str, value: Any, allowed: tuple[str, ...], ignore: tuple[str, ...]) -> str:
    if value is None or value in ignore:
        return "ignore"
    if isinstance(value, str) and value in allowed:
        return value
    listed = ", ".join(repr(a) for a in (*allowed, None))
    raise InvalidArgumentError(f"expected {name} to be one of {listed}, found {value!r}")
