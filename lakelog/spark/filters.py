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

The one rule of the Spark read and change APIs for expressions
(:func:`spark_expression`): a filter, condition or SET value is a Spark Column or a
Spark SQL string (``F.expr(s)``). Where lakelog itself evaluates one, in the tasks of
``delete`` and ``update``, :func:`exact_expression` turns Spark's analyzed expression into
a pyarrow expression with Spark's meaning, or refuses it, naming the parameter.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import difflib
import logging
import re
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "analysis_error",
    "check_filter",
    "connect_pruning",
    "exact_expression",
    "is_spark_column",
    "quiet_analysis",
    "spark_expression",
    "translate_filter",
]

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


def is_spark_column(value: object) -> bool:
    """Whether ``value`` is a pyspark Column (classic or Spark Connect)."""
    return type(value).__name__ == "Column" and type(value).__module__.startswith("pyspark.")


def check_filter(filter: object, parameter: str = "filter") -> None:
    """Raise unless ``filter`` is None, a Spark SQL string or a Spark Column."""
    if filter is None or isinstance(filter, str) or is_spark_column(filter):
        return
    raise InvalidArgumentError(
        f"expected {parameter}= to be a Spark SQL string such as \"day >= '2024-01-02'\" or "
        f"a pyspark Column such as F.col('day') >= '2024-01-02', found "
        f"{type(filter).__name__} {filter!r}"
    )


def spark_expression(value: object, parameter: str) -> Column | None:
    """The one rule for expressions in the Spark APIs: a Spark Column as it is, a Spark
    SQL string as ``F.expr(value)`` (on Spark Connect too); None for anything else
    (the caller takes it as a literal or a lakelog filter, or refuses it). ``parameter``
    is the caller's name for it in messages (``where``, ``set={'v': ...}``)."""
    if is_spark_column(value):
        return value  # type: ignore[return-value]
    if not isinstance(value, str):
        return None
    from pyspark.errors import PySparkException
    from pyspark.sql import functions as F

    try:
        with quiet_analysis():
            return F.expr(value)
    except PySparkException as e:  # a classic session parses at once
        raise InvalidArgumentError(
            f"expected {parameter} to be a Spark SQL expression, found {value!r}, which "
            f"Spark cannot parse: {_first_line(e)}. A string literal is quoted inside the "
            f"SQL (\"'closed'\") or given as F.lit('closed')."
        ) from e


_QUIET_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
_quiet_lock = threading.Lock()
_quiet_depth = 0


@contextlib.contextmanager
def quiet_analysis() -> Iterator[None]:
    """PySpark logs every analysis error that has a query context (a JSON record of
    about a hundred lines on stderr, Java stack included) when it raises it; lakelog
    turns the errors of the expressions it analyzes into its own one-line errors, so
    those loggers are off while it does (in this process, for every thread)."""
    global _quiet_depth
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # a PySpark without its JSON logger logs nothing of the kind
        yield
        return
    loggers = [PySparkLogger.getLogger(name) for name in _QUIET_LOGGERS]
    with _quiet_lock:
        _quiet_depth += 1
        for logger in loggers:
            logger.disabled = True
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet_depth -= 1
            if not _quiet_depth:
                for logger in loggers:
                    logger.disabled = False


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return " ".join(text.splitlines()[0].split()) if text else type(e).__name__


def analysis_error(
    e: Exception, parameter: str, value: object, columns: Sequence[str]
) -> InvalidArgumentError:
    """Spark's refusal of the expression ``value`` (given as ``parameter``) as one
    line: an unknown column named with the closest of ``columns``; else Spark's reason."""
    condition = str(_condition(e) or "")
    shown = value if isinstance(value, str) else str(value)
    if condition.startswith("UNRESOLVED_COLUMN"):
        name = _unresolved_name(e)
        close = difflib.get_close_matches(name, list(columns), n=1, cutoff=0.5)
        lowered = {c.lower(): c for c in columns}
        hint = close[0] if close else lowered.get(name.lower())
        did = f" (did you mean {hint!r}?)" if hint else ""
        text = ""
        if isinstance(value, str) and value.strip() == name:  # meant as a text value?
            text = f" A text value is SQL too: write \"'{name}'\" or F.lit({name!r})."
        return InvalidArgumentError(
            f"expected {parameter} to name columns of the table, found column {name!r} in "
            f"{shown!r}, which the table does not have{did}. The table's columns are "
            f"{list(columns)}.{text}"
        )
    return InvalidArgumentError(
        f"expected {parameter} to be a Spark SQL expression over the table's columns "
        f"{list(columns)}, found {shown!r}, which Spark refuses: {_first_line(e)}"
    )


def _unresolved_name(e: Exception) -> str:
    params: Any = None
    get = getattr(e, "getMessageParameters", None)
    if get is not None:
        with contextlib.suppress(Exception):
            params = get()
    raw = str((params or {}).get("objectName", ""))
    if not raw:
        found = re.search(r"name (`[^`]*`(?:\.`[^`]*`)*)", str(e))
        raw = found.group(1) if found else "?"
    parts = re.findall(r"`((?:[^`]|``)*)`", raw) or [raw]
    return ".".join(p.replace("``", "`") for p in parts)


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
        with quiet_analysis():
            filtered = empty.where(filter)
    except AnalysisException as e:
        condition = str(_condition(e) or "")
        if not condition.startswith("DATATYPE_MISMATCH"):
            raise analysis_error(e, "filter=", filter, schema.names) from None
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
            return _compare_expr(op, pc.field(name), value)  # always null, as in Spark
        value = self.coerce(value, name)
        if _is_nan(value):
            return None
        f = pc.field(name)
        expr = _compare_expr(op, f, value)
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


def connect_pruning(filter: str | Column, schema: pa.Schema) -> pc.Expression:
    """Pruning for a Spark Connect client, whose plans it cannot reach.

    A Column: the parts of its own expression tree lakelog reads
    (:func:`lakelog.spark.pushdown.translate_column`: comparisons with literals, IN,
    IS [NOT] NULL, AND/OR/NOT), with Spark's rules for NaN and zoned timestamps; the
    parts left out are logged. A SQL string: the top-level AND terms that lakelog's own
    SQL-like parser reads and that mean the same in Spark.

    Left out of a string (they keep files): terms over floating-point columns other than
    ``=``, ``<``, ``<=``, ``in`` (NaN sorts above every number in Spark), terms over
    timestamps with a time zone (Spark reads a literal in the session's zone), and any
    ``not``. A filter of which no part can prune is refused, naming the parts: pruning
    nothing silently would hide the cost.
    """
    from ..filters import And, Compare, In, IsNull, parse_filter, to_expression

    where = " on Spark Connect"
    if not isinstance(filter, str):
        from .pushdown import translate_column

        found, unused = translate_column(filter, schema)
        if found is None:
            raise InvalidArgumentError(
                f"expected a filter with at least one part lakelog can prune files with"
                f"{where} (a column compared with a literal, IN, IS [NOT] NULL, under "
                f"AND/OR/NOT), found {_printed(filter)} of which it could not use "
                f"{'; '.join(unused) or 'any part'}. Pass no filter and apply it with "
                f".where(...), or read through spark.read.format('lakelog'), whose "
                f"pushed filters prune."
            )
        if unused:
            log.info("filter parts not used to prune files%s: %s", where, "; ".join(unused))
        return to_expression(found)
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


# -- exact translation (delete and update evaluate it in lakelog's tasks) ---------------

_NUMERIC_RANK = {**_INT_RANK, "float": 5, "double": 6}
_ARITHMETIC = {"Add": "add", "Subtract": "subtract", "Multiply": "multiply"}
_EXACT_KINDS = (
    "columns, literals, comparisons (= <> < <= > >= <=>), AND/OR/NOT, IN, IS [NOT] NULL, "
    "BETWEEN, + - * /, unary minus, CASE WHEN, IF, COALESCE and widening numeric casts"
)


def exact_expression(
    spark: SparkSession,
    schema: pa.Schema,
    value: object,
    parameter: str,
    *,
    spark_schema: StructType | None = None,
) -> pc.Expression | None:
    """``value`` (a Spark Column or SQL string, :func:`spark_expression`) over a table of
    ``schema``, as a pyarrow expression lakelog evaluates with Spark's meaning (three-
    valued logic, NaN equal to itself and above every number, ANSI overflow errors).

    Spark analyzes it (names resolved case-insensitively, implicit casts made explicit,
    constants folded); an unknown column or a type Spark refuses is an
    :class:`InvalidArgumentError` naming ``parameter`` and the columns, as is a part
    lakelog does not evaluate itself (a function call, ...). Returns None on Spark
    Connect, whose plans a client cannot reach (the caller decides)."""
    from pyspark.errors import AnalysisException

    from .schema import to_spark_schema

    column = spark_expression(value, parameter)
    if column is None:
        raise InvalidArgumentError(
            f"expected {parameter} to be a Spark Column or a Spark SQL string, found "
            f"{type(value).__name__} {value!r}"
        )
    empty = spark.createDataFrame([], spark_schema or to_spark_schema(schema))
    try:
        with quiet_analysis():
            projected = empty.select(column.alias("__lakelog_value"))
    except AnalysisException as e:
        raise analysis_error(e, parameter, value, schema.names) from e
    jdf = getattr(projected, "_jdf", None)
    if jdf is None:
        return None
    alias = jdf.queryExecution().analyzed().projectList().apply(0)
    ansi = str(spark.conf.get("spark.sql.ansi.enabled", "true")).lower() == "true"
    shown = value if isinstance(value, str) else str(value)
    return _Exact(schema, parameter, shown, ansi).node(alias.child())


class _Exact:
    """Catalyst -> pyarrow, node by node, refusing what it cannot mean exactly."""

    def __init__(self, schema: pa.Schema, parameter: str, shown: str, ansi: bool) -> None:
        self.schema = schema
        self.parameter = parameter
        self.shown = shown
        self.ansi = ansi
        self.literals = _Translator(schema)
        self.shared: dict[str, pc.Expression] = {}

    def refuse(self, e: Any, why: str = "") -> InvalidArgumentError:
        try:
            sql = str(e.sql())
        except Exception:  # noqa: BLE001 - py4j: show the node's kind only
            sql = e.getClass().getSimpleName()
        reason = f" ({why})" if why else ""
        return InvalidArgumentError(
            f"expected {self.parameter} to be made of what lakelog evaluates itself in its "
            f"tasks ({_EXACT_KINDS}), found {sql}{reason} in {self.shown!r}. Write it with "
            f"those, or compute the value with lakelog.spark.read and write the result back."
        )

    def type_of(self, e: Any) -> pa.DataType:
        t = _arrow_literal_type(str(e.dataType().simpleString()))
        if t is None:
            raise self.refuse(e, f"of type {e.dataType().simpleString()}")
        return t

    def node(self, e: Any) -> pc.Expression:
        kind = str(e.getClass().getSimpleName())
        if kind == "Alias":
            return self.node(e.child())
        if kind == "AttributeReference":
            name = str(e.name())
            if name not in self.schema.names:
                raise self.refuse(e, "not a column of the table")
            return pc.field(name)
        if kind == "GetStructField":  # ``source.<col>`` of a merge's condition
            parent = e.child()
            if parent.getClass().getSimpleName() == "AttributeReference":
                name = f"{parent.name()}.{e.extractFieldName()}"
                if name in self.schema.names:
                    return pc.field(name)
            raise self.refuse(e, "a struct field")
        if kind == "Literal" or bool(e.foldable()):
            try:
                value = self.literals.literal(e)
            except Exception as exc:  # py4j: a constant Spark folds later
                raise self.refuse(e, "a constant lakelog cannot compute") from exc
            if value is None:
                raise self.refuse(e, f"a constant of type {e.dataType().simpleString()}")
            return pc.scalar(value)
        if kind in ("And", "Or"):
            left, right = self.node(e.left()), self.node(e.right())
            return (left & right) if kind == "And" else (left | right)
        if kind == "Not":
            return ~self.node(e.child())
        if kind in _CMP or kind == "EqualNullSafe":
            return self.compare(kind, e.left(), e.right())
        if kind in ("IsNull", "IsNotNull"):
            inner = self.node(e.child())
            return inner.is_null() if kind == "IsNull" else inner.is_valid()
        if kind == "In":
            items = e.list()
            if items.size() == 0:
                raise self.refuse(e, "an empty IN list")
            terms = [
                self.compare("EqualTo", e.value(), items.apply(i)) for i in range(items.size())
            ]
            out = terms[0]
            for t in terms[1:]:
                out = out | t  # OR of equalities: Spark's IN, nulls included
            return out
        if kind in _ARITHMETIC or kind == "Divide":
            return self.arithmetic(kind, e)
        if kind == "UnaryMinus":
            fn = "negate_checked" if self.ansi else "negate"
            return pc.Expression._call(fn, [self.node(e.child())]).cast(self.type_of(e))
        if kind == "Cast":
            return self.cast(e)
        if kind == "Coalesce":
            children = e.children()
            args = [self.node(children.apply(i)) for i in range(children.size())]
            return pc.Expression._call("coalesce", args)
        if kind == "If":
            return self.choose(e.predicate(), e.trueValue(), e.falseValue(), e)
        if kind == "CaseWhen":
            return self.case_when(e)
        if kind == "With":  # common subexpressions (BETWEEN): each definition once
            defs = e.defs()
            for i in range(defs.size()):
                d = defs.apply(i)
                self.shared[str(d.id())] = self.node(d.child())
            return self.node(e.child())
        if kind == "CommonExpressionRef" and str(e.id()) in self.shared:
            return self.shared[str(e.id())]
        replacement = _replacement(e)  # runtime-replaceable forms
        if replacement is not None:
            return self.node(replacement)
        raise self.refuse(e)

    def compare(self, kind: str, left_e: Any, right_e: Any) -> pc.Expression:
        left, right = self.node(left_e), self.node(right_e)
        floating = str(left_e.dataType().simpleString()) in _FLOAT_RANK
        if kind == "EqualNullSafe":
            equal = _float_equal(left, right) if floating else (left == right)
            either = left.is_null() | right.is_null()
            both = left.is_null() & right.is_null()
            return pc.Expression._call("if_else", [either, both, equal])
        op = _CMP[kind]
        if not floating:
            return _compare_expr(op, left, right)
        if op == "==":
            return _float_equal(left, right)
        if op in (">", ">="):
            left, right, op = right, left, _SWAP[op]
        if op == "<":  # NaN is above every number, and equal to itself
            return (left < right) | (~left.is_nan() & right.is_nan())
        return (left <= right) | (left.is_valid() & right.is_nan())

    def arithmetic(self, kind: str, e: Any) -> pc.Expression:
        left, right = self.node(e.left()), self.node(e.right())
        target = self.type_of(e)
        if kind == "Divide":
            if self.ansi:
                return pc.Expression._call("divide_checked", [left, right]).cast(target)
            zero = right == pc.scalar(pa.scalar(0).cast(self.type_of(e.right())))
            quotient = pc.Expression._call("divide", [left, right]).cast(target)
            return pc.Expression._call(
                "if_else", [zero, pc.scalar(pa.scalar(None, target)), quotient]
            )
        fn = _ARITHMETIC[kind] + ("_checked" if self.ansi else "")
        return pc.Expression._call(fn, [left, right]).cast(target)

    def cast(self, e: Any) -> pc.Expression:
        src = str(e.child().dataType().simpleString())
        dst = str(e.dataType().simpleString())
        inner = self.node(e.child())
        if src == dst:
            return inner
        widening = src in _NUMERIC_RANK and (
            (dst in _NUMERIC_RANK and _NUMERIC_RANK[dst] >= _NUMERIC_RANK[src])
            or (dst.startswith("decimal") and src in _INT_RANK)
        )
        decimal_wider = src.startswith("decimal") and (
            dst in ("double",) or (dst.startswith("decimal") and _decimal_fits(src, dst))
        )
        if not (widening or decimal_wider):
            raise self.refuse(e, f"a cast from {src} to {dst}")
        return inner.cast(self.type_of(e))

    def choose(self, predicate: Any, then: Any, otherwise: Any, e: Any) -> pc.Expression:
        target = self.type_of(e)
        test = pc.Expression._call("coalesce", [self.node(predicate), pc.scalar(False)])
        return pc.Expression._call(
            "if_else", [test, self.node(then).cast(target), self.node(otherwise).cast(target)]
        )

    def case_when(self, e: Any) -> pc.Expression:
        target = self.type_of(e)
        other = e.elseValue()
        out = (
            self.node(other.get()).cast(target)
            if other.isDefined()
            else pc.scalar(pa.scalar(None, target))
        )
        branches = e.branches()
        for i in reversed(range(branches.size())):
            branch = branches.apply(i)
            test = pc.Expression._call("coalesce", [self.node(branch._1()), pc.scalar(False)])
            out = pc.Expression._call("if_else", [test, self.node(branch._2()).cast(target), out])
        return out


def _float_equal(left: pc.Expression, right: pc.Expression) -> pc.Expression:
    return (left == right) | (left.is_nan() & right.is_nan())


def _compare_expr(op: str, left: pc.Expression, right: pc.Expression | pa.Scalar) -> pc.Expression:
    if op == "==":
        return left == right
    if op == "<":
        return left < right
    if op == "<=":
        return left <= right
    if op == ">":
        return left > right
    return left >= right


def _decimal_fits(src: str, dst: str) -> bool:
    """Whether every ``decimal(p,s)`` value of ``src`` is exact in ``dst``."""
    p1, s1 = (int(x) for x in src[len("decimal(") : -1].split(","))
    p2, s2 = (int(x) for x in dst[len("decimal(") : -1].split(","))
    return s2 >= s1 and p2 - s2 >= p1 - s1


def _printed(filter: Column) -> str:
    text = str(filter)
    return text[len("Column<") : -1] if text.startswith("Column<") else text
