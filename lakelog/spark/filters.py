"""A Spark filter (SQL string or Column) -> a pyarrow expression for pruning files.

Spark analyzes the filter against the table schema (names resolved, types
coerced, constants foldable) and the resolved Catalyst tree is walked over
py4j. The pruning expression never has to be exact: Spark still applies the
original filter, so the expression only has to keep every file that holds a
row Spark would select. Each node is translated with a *polarity*:

* positive: every row the Spark predicate makes TRUE must be TRUE here;
* negative (below a NOT): every row it makes FALSE must be FALSE here.

A node that cannot be translated becomes TRUE (positive) or FALSE
(negative), which keeps every file. Leaves follow Spark's semantics where
they differ from Arrow's: NaN is equal to itself and greater than every
number, and ``<=>`` never returns null.
"""

from __future__ import annotations

import datetime as dt
import decimal
import logging
import re
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["check_filter", "connect_pruning", "translate_filter"]

log = logging.getLogger("lakelog.spark")

_EPOCH = dt.date(1970, 1, 1)
_CMP = {
    "EqualTo": "==",
    "LessThan": "<",
    "LessThanOrEqual": "<=",
    "GreaterThan": ">",
    "GreaterThanOrEqual": ">=",
}
_SWAP = {"==": "==", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_INT_RANK = {"tinyint": 1, "smallint": 2, "int": 3, "bigint": 4}
_FLOAT_RANK = {"float": 1, "double": 2}


def check_filter(filter: object) -> None:
    """Raise unless ``filter`` is None, a Spark SQL string or a Spark Column."""
    if filter is None or isinstance(filter, str):
        return
    if type(filter).__name__ == "Column" and type(filter).__module__.startswith("pyspark."):
        return
    raise InvalidArgumentError(
        f"expected filter to be a Spark SQL string such as \"day >= '2024-01-02'\" or a "
        f"pyspark Column such as F.col('day') >= '2024-01-02', found {type(filter).__name__}"
    )


def translate_filter(
    spark: SparkSession, spark_schema: StructType, schema: pa.Schema, filter: str | Column
) -> pc.Expression | None:
    """Pruning expression for ``filter`` over a table of ``schema`` (None: prune nothing).

    With a classic (py4j) session, Spark's analyzed plan is translated. With Spark
    Connect, whose plans a client cannot reach, see :func:`connect_pruning`. A filter
    Spark refuses for its types (an array column compared with a number) is an
    :class:`~lakelog.errors.InvalidArgumentError` naming the columns and their types.
    """
    from pyspark.errors import AnalysisException

    empty = spark.createDataFrame([], spark_schema)
    try:
        filtered = empty.where(filter)
    except AnalysisException as e:
        condition = str(_condition(e) or "")
        if not condition.startswith("DATATYPE_MISMATCH"):
            raise
        raise InvalidArgumentError(_mismatch_message(filter, schema, e)) from None
    jdf = getattr(filtered, "_jdf", None)
    if jdf is None:  # Spark Connect: the plan is not reachable from Python
        return connect_pruning(filter, schema)
    plan = jdf.queryExecution().analyzed()
    if plan.getClass().getSimpleName() != "Filter":
        return None
    return _Translator(schema).run(plan.condition())


def _condition(e: Exception) -> str | None:
    for getter in ("getCondition", "getErrorClass"):  # the second before Spark 4
        get = getattr(e, getter, None)
        if get is not None:
            try:
                return str(get())
            except Exception:  # noqa: BLE001 - py4j or a deprecated getter: try the next
                continue
    return None


def _mismatch_message(filter: str | Column, schema: pa.Schema, e: Exception) -> str:
    """Spark's type mismatch in ``filter``, with the table columns it names and their
    types (the ones nothing compares with first), and what to write instead."""
    from ..filters.bind import comparable

    text = filter if isinstance(filter, str) else str(filter)
    words = {a or b for a, b in re.findall(r"`([^`]+)`|([^\W\d][\w.]*)", text)}
    named = [n for n in schema.names if n in words]
    odd = [n for n in named if not comparable(schema.field(n).type)]
    typed = ", ".join(f"{n!r} of type {schema.field(n).type}" for n in (odd or named))
    spark_says = " ".join(str(e).splitlines()[0].split()) if str(e) else type(e).__name__
    columns = f" ({'column' if len(odd or named) == 1 else 'columns'} {typed})" if typed else ""
    return (
        f"expected filter to compare each column with a value of its own type, found "
        f"filter={filter!r}{columns}, which Spark refuses: {spark_says}. Compare an array "
        f"or struct column only with a value of the same shape (array(1, 2), "
        f"named_struct('a', 1)); a map column compares with nothing. Test their parts "
        f"instead, such as size(tags) > 1, array_contains(tags, 1), st.a = 1, "
        f"m['key'] = 1, or 'is null'."
    )


class _Translator:
    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.empty = schema.empty_table()

    def run(self, condition: Any) -> pc.Expression | None:
        return self.node(condition, True)

    # -- tree ----------------------------------------------------------------------
    def node(self, e: Any, positive: bool) -> pc.Expression | None:
        kind = e.getClass().getSimpleName()
        if kind in ("And", "Or"):
            left = self.node(e.left(), positive)
            right = self.node(e.right(), positive)
            # None is TRUE when positive and FALSE when negative
            absorbing = (kind == "And") != positive  # where None swallows the other side
            if left is None or right is None:
                if absorbing:
                    return None
                return left if right is None else right
            return (left & right) if kind == "And" else (left | right)
        if kind == "Not":
            inner = self.node(e.child(), not positive)
            return None if inner is None else ~inner
        try:
            leaf = self.leaf(kind, e, positive)
        except Exception as exc:  # noqa: BLE001 - anything odd: prune nothing here
            log.debug("filter node %s not used for pruning: %r", kind, exc)
            return None
        if leaf is None:
            return None
        try:
            self.empty.filter(leaf)  # binds types: refuses what Arrow cannot evaluate
        except (pa.ArrowException, TypeError, ValueError):
            return None
        return leaf

    def leaf(self, kind: str, e: Any, positive: bool) -> pc.Expression | None:
        if kind in _CMP:
            return self.comparison(_CMP[kind], e.left(), e.right())
        if kind == "EqualNullSafe":
            return self.null_safe_equal(e.left(), e.right())
        if kind in ("IsNull", "IsNotNull"):
            name = self.column(e.child())
            if name is None:
                return None
            f = pc.field(name)
            return f.is_null() if kind == "IsNull" else f.is_valid()
        if kind == "In":
            return self.isin(e)
        if kind == "AttributeReference":
            name = self.column(e)
            if name is not None and pa.types.is_boolean(self.schema.field(name).type):
                return pc.field(name)
            return None
        if kind == "Literal" or bool(e.foldable()):
            value = self.literal(e)
            return (
                pc.scalar(value.as_py()) if value is not None and value.type == pa.bool_() else None
            )
        replacement = _replacement(e)  # e.g. BETWEEN: a runtime-replaceable expression
        return None if replacement is None else self.node(replacement, positive)

    # -- leaves --------------------------------------------------------------------
    def comparison(self, op: str, left: Any, right: Any) -> pc.Expression | None:
        name = self.column(left)
        value_side = right
        if name is None:
            name, value_side, op = self.column(right), left, _SWAP[op]
        if name is None:
            return None
        value = self.literal(value_side)
        if value is None:
            return None
        if not value.is_valid:
            return _compare(op, pc.field(name), value)  # always null, as in Spark
        value = self.coerce(value, name)
        if _is_nan(value):
            return None
        f = pc.field(name)
        expr = _compare(op, f, value)
        if op in (">", ">=") and self.nan_capable(name):
            expr = expr | f.is_nan()  # Spark: NaN is greater than any number
        return expr

    def null_safe_equal(self, left: Any, right: Any) -> pc.Expression | None:
        name = self.column(left)
        value = self.literal(right)
        if name is None:
            name, value = self.column(right), self.literal(left)
        if name is None or value is None:
            return None
        f = pc.field(name)
        if not value.is_valid:
            return f.is_null()
        value = self.coerce(value, name)
        if _is_nan(value):
            return None
        return (f == value) & f.is_valid()

    def isin(self, e: Any) -> pc.Expression | None:
        name = self.column(e.value())
        if name is None:
            return None
        items = e.list()
        values: list[pa.Scalar] = []
        for i in range(items.size()):
            v = self.literal(items.apply(i))
            if v is None:
                return None
            if v.is_valid:
                v = self.coerce(v, name)
                if _is_nan(v):
                    return None
                values.append(v)
        if not values:
            return None
        col_type = self.schema.field(name).type
        if any(v.type != col_type for v in values):
            return None
        # is_in is FALSE for null rows where Spark says NULL: fine for both
        # polarities (see the module docstring)
        return pc.field(name).isin(pa.array([v.as_py() for v in values], col_type))

    # -- pieces --------------------------------------------------------------------
    def column(self, e: Any) -> str | None:
        """The table column ``e`` reads, unchanged or through a widening numeric cast."""
        kind = e.getClass().getSimpleName()
        if kind == "Cast":
            source = e.child()
            if source.getClass().getSimpleName() != "AttributeReference":
                return None
            src = source.dataType().simpleString()
            dst = e.dataType().simpleString()
            widening = (
                (src in _INT_RANK and dst in _INT_RANK and _INT_RANK[dst] >= _INT_RANK[src])
                or (src in _INT_RANK and dst in _FLOAT_RANK)
                or (
                    src in _FLOAT_RANK
                    and dst in _FLOAT_RANK
                    and _FLOAT_RANK[dst] >= _FLOAT_RANK[src]
                )
            )
            return self.column(source) if widening else None
        if kind != "AttributeReference":
            return None
        name = str(e.name())
        if name not in self.schema.names:
            return None
        if e.dataType().simpleString().startswith("string collate"):
            return None  # non-binary collations compare differently from Arrow
        return name

    def nan_capable(self, name: str) -> bool:
        return bool(pa.types.is_floating(self.schema.field(name).type))

    def coerce(self, value: pa.Scalar, name: str) -> pa.Scalar:
        """``value`` in the column's type when that is lossless (so stats apply directly)."""
        t = self.schema.field(name).type
        if value.type == t:
            return value
        try:
            cast = value.cast(t)
            if cast.cast(value.type) == value:
                return cast
        except (pa.ArrowException, ValueError, TypeError, OverflowError):
            pass
        return value

    def literal(self, e: Any) -> pa.Scalar | None:
        """Arrow scalar of a constant Catalyst expression (None if not a constant)."""
        if not bool(e.foldable()):
            return None
        text = e.dataType().simpleString()
        raw = e.eval(None)
        t = _arrow_literal_type(text)
        if t is None:
            return None
        if raw is None:
            return pa.scalar(None, t)
        if text == "string":
            return pa.scalar(str(raw.toString()), t)
        if text == "date":
            return pa.scalar(_EPOCH + dt.timedelta(days=int(raw)), t)
        if text in ("timestamp", "timestamp_ntz"):
            return pa.scalar(int(raw), pa.int64()).cast(t)
        if text.startswith("decimal"):
            return pa.scalar(decimal.Decimal(str(raw.toJavaBigDecimal().toPlainString())), t)
        if text == "binary":
            return pa.scalar(bytes(raw), t)
        return pa.scalar(raw, t)


def _arrow_literal_type(text: str) -> pa.DataType | None:
    simple = {
        "boolean": pa.bool_(),
        "tinyint": pa.int8(),
        "smallint": pa.int16(),
        "int": pa.int32(),
        "bigint": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "string": pa.string(),
        "binary": pa.binary(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "timestamp_ntz": pa.timestamp("us"),
    }
    if text in simple:
        return simple[text]
    if text.startswith("decimal(") and text.endswith(")"):
        p, s = text[len("decimal(") : -1].split(",")
        return pa.decimal128(int(p), int(s))
    return None


def _replacement(e: Any) -> Any:
    try:
        return e.replacement()
    except Exception:  # noqa: BLE001 - py4j: not a RuntimeReplaceable
        return None


def _is_nan(value: pa.Scalar) -> bool:
    if not pa.types.is_floating(value.type) or not value.is_valid:
        return False
    v = value.as_py()
    return bool(v != v)


def _compare(op: str, f: pc.Expression, value: pa.Scalar) -> pc.Expression:
    if op == "==":
        return f == value
    if op == "<":
        return f < value
    if op == "<=":
        return f <= value
    if op == ">":
        return f > value
    return f >= value


def connect_pruning(filter: str | Column, schema: pa.Schema) -> pc.Expression:
    """Pruning for a Spark Connect client: the top-level AND terms of a SQL string that
    lakelog's own SQL-like parser reads and that mean the same in Spark.

    Left out (they keep files): terms over floating-point columns other than ``=``,
    ``<``, ``<=``, ``in`` (NaN sorts above every number in Spark), terms over timestamps
    with a time zone (Spark reads a literal in the session's zone), and any ``not``. A
    Column filter, a string lakelog cannot parse, or one with no usable term is refused:
    pruning nothing silently would hide the cost.
    """
    from ..filters import And, Compare, In, IsNull, parse_filter, to_expression

    where = " on Spark Connect"
    if not isinstance(filter, str):
        raise InvalidArgumentError(
            f"expected filter as a SQL string{where} (lakelog cannot see a Column's plan "
            f"there to prune files), found a {type(filter).__name__}; pass the same "
            f"condition as a string such as \"day = '2024-01-02' AND id > 5\"."
        )
    try:
        pred = parse_filter(filter, schema)
    except InvalidArgumentError as e:
        raise InvalidArgumentError(
            f"expected a filter lakelog's SQL-like parser reads{where} (comparisons, IN, "
            f"BETWEEN, IS [NOT] NULL, AND/OR/NOT over columns and literals), found "
            f"{filter!r}: {e}. Simplify the filter passed to lakelog.spark.read and apply "
            f"the rest with .where(...) on the DataFrame."
        ) from e
    terms = list(pred.parts) if isinstance(pred, And) else [pred]
    usable = []
    for term in terms:
        if not isinstance(term, (Compare, In, IsNull)):
            continue
        t = schema.field(term.column).type
        if pa.types.is_timestamp(t) and t.tz is not None:
            continue
        if pa.types.is_floating(t) and (
            (isinstance(term, Compare) and term.op in (">", ">=", "!="))
            or (isinstance(term, In) and term.negated)
        ):
            continue
        usable.append(term)
    if not usable:
        raise InvalidArgumentError(
            f"expected a filter with at least one term lakelog can prune files with"
            f"{where}, found {filter!r}: none of its AND terms compares a column (other "
            f"than a float column with >, >= or !=, or a time-zoned timestamp) with a "
            f"literal. Pass no filter and apply it with .where(...), or read through "
            f"spark.read.format('lakelog'), whose pushed filters prune."
        )
    return to_expression(usable[0] if len(usable) == 1 else And(tuple(usable)))
