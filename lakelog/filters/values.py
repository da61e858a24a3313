"""SQL value expressions over a table's rows: the text of a CHECK constraint or of a
generated column (``amount >= 0 AND currency IN ('EUR', 'USD')``,
``CAST(ts AS DATE)``), parsed once against a schema and evaluated over record batches
with pyarrow compute, vectorized.

Grammar (keywords case-insensitive): literals (numbers, ``'text'`` with ``''`` inside,
``true``, ``false``, ``null``, ``DATE '2026-01-02'``, ``TIMESTAMP '2026-01-02 10:00'``),
columns (``a`` or a nested field ``a.b``; names in double quotes or backticks),
``+ - * / %``, ``||``, comparisons ``= == != <> < <= > >=``, ``AND``, ``OR``, ``NOT``,
``IS [NOT] NULL``, ``[NOT] IN (...)``, ``[NOT] BETWEEN a AND b``,
``CAST(x AS type)`` (Spark's type names), ``COALESCE``, ``ABS``, ``LOWER``, ``UPPER``,
``LENGTH``, ``YEAR``, ``MONTH``, ``DAY``, ``HOUR``.

Invariants:

* SQL's three-valued logic: a comparison with a null is null; ``AND``/``OR`` are
  Kleene's. Arithmetic on integers is checked (an overflow is an error, never a wrap).
* :func:`parse_value` refuses, with :class:`~lakelog.errors.InvalidArgumentError`, an
  unknown column (naming the closest), a syntax error (naming the column of the text)
  and an expression Arrow cannot compute over the schema's types (found by evaluating it
  over no rows), so a stored expression always evaluates.
* A literal compared with a column of another type is read as that type
  (``d >= '2026-01-01'`` on a date column compares dates).
"""

from __future__ import annotations

import datetime
import decimal
import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidArgumentError

__all__ = ["ValueExpression", "parse_value"]

Value: TypeAlias = Any
"""A pyarrow Array, ChunkedArray or Scalar."""

_TOKEN = re.compile(
    r"""(?P<ws>\s+)
    |(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    |(?P<string>'(?:[^']|'')*')
    |(?P<dquoted>"(?:[^"]|"")*")
    |(?P<bquoted>`(?:[^`]|``)*`)
    |(?P<ident>[^\W\d][\w]*)
    |(?P<op>\|\||==|!=|<>|<=|>=|=|<|>|\(|\)|,|-|\+|\*|/|%|\.)""",
    re.VERBOSE,
)
_KEYWORDS = {
    "and", "or", "not", "between", "in", "is", "null", "true", "false", "cast", "as",
    "date", "timestamp",
}  # fmt: skip
_COMPARE = {
    "=": "equal",
    "==": "equal",
    "!=": "not_equal",
    "<>": "not_equal",
    "<": "less",
    "<=": "less_equal",
    ">": "greater",
    ">=": "greater_equal",
}
_ARITH = {
    "+": "add_checked",
    "-": "subtract_checked",
    "*": "multiply_checked",
    "/": "divide_checked",
    "%": "mod",
}
_TYPES: dict[str, pa.DataType] = {
    "tinyint": pa.int8(),
    "byte": pa.int8(),
    "smallint": pa.int16(),
    "short": pa.int16(),
    "int": pa.int32(),
    "integer": pa.int32(),
    "bigint": pa.int64(),
    "long": pa.int64(),
    "float": pa.float32(),
    "real": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "varchar": pa.string(),
    "char": pa.string(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}
_FUNCTIONS: dict[str, tuple[int, Callable[..., Value]]] = {
    "abs": (1, lambda x: pc.abs_checked(x)),
    "lower": (1, lambda x: pc.utf8_lower(x)),
    "upper": (1, lambda x: pc.utf8_upper(x)),
    "length": (1, lambda x: pc.utf8_length(x)),
    "year": (1, lambda x: pc.year(x)),
    "month": (1, lambda x: pc.month(x)),
    "day": (1, lambda x: pc.day(x)),
    "hour": (1, lambda x: pc.hour(x)),
}


class _Token(NamedTuple):
    kind: str  # number, string, column, keyword, op, end
    value: str
    pos: int


def _tokens(text: str, what: str) -> list[_Token]:
    out: list[_Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise InvalidArgumentError(
                f"expected a column, literal or operator at column {pos + 1}, found "
                f"{text[pos]!r} in {what} {text!r}"
            )
        kind, raw = m.lastgroup or "", m.group()
        if kind == "string":
            out.append(_Token("string", raw[1:-1].replace("''", "'"), pos))
        elif kind in ("dquoted", "bquoted"):
            out.append(_Token("column", raw[1:-1].replace(raw[0] * 2, raw[0]), pos))
        elif kind == "ident":
            low = raw.lower()
            out.append(
                _Token(
                    "keyword" if low in _KEYWORDS else "column",
                    low if low in _KEYWORDS else raw,
                    pos,
                )
            )
        elif kind != "ws":
            out.append(_Token(kind, raw, pos))
        pos = m.end()
    out.append(_Token("end", "", len(text)))
    return out


# -- the tree: each node evaluates itself over a batch ---------------------------------


@dataclass(frozen=True)
class _Lit:
    value: Any

    def eval(self, batch: pa.RecordBatch) -> Value:
        return pa.scalar(self.value)


@dataclass(frozen=True)
class _Col:
    path: tuple[str, ...]

    def eval(self, batch: pa.RecordBatch) -> Value:
        out: Any = batch.column(self.path[0])
        for name in self.path[1:]:
            out = pc.struct_field(out, [name])
        return out  # type: ignore[no-any-return]


@dataclass(frozen=True)
class _Call:
    fn: Callable[..., Value]
    args: tuple[Any, ...]

    def eval(self, batch: pa.RecordBatch) -> Value:
        return self.fn(*(a.eval(batch) for a in self.args))


def _typed(value: Value, like: Value) -> Value:
    """A string literal read as the type of the other side of a comparison."""
    if isinstance(value, pa.Scalar) and pa.types.is_string(value.type):
        t = like.type
        if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
            return value.cast(t)
    return value


def _compare(name: str) -> Callable[..., Value]:
    def run(a: Value, b: Value) -> Value:
        return pc.call_function(name, [_typed(a, b), _typed(b, a)])

    return run


def _in(negated: bool) -> Callable[..., Value]:
    def run(x: Value, *values: Value) -> Value:
        lits = [_typed(v, x) for v in values]
        known = [v.as_py() for v in lits if isinstance(v, pa.Scalar) and v.is_valid]
        hit = pc.is_in(x, value_set=pa.array(known, type=x.type))
        # SQL: a null row gives null (and so does no match when the list holds a null)
        hit = pc.if_else(pc.is_null(x), pa.scalar(None, pa.bool_()), hit)
        if len(known) < len(lits):
            hit = pc.if_else(hit, True, pa.scalar(None, pa.bool_()))
        return pc.invert(hit) if negated else hit

    return run


def _concat(a: Value, b: Value) -> Value:
    return pc.binary_join_element_wise(a, b, "")


def _cast(t: pa.DataType) -> Callable[..., Value]:
    def run(x: Value) -> Value:
        if pa.types.is_date32(t) and pa.types.is_timestamp(x.type):
            # CAST(ts AS DATE): the date of the timestamp (in UTC for an aware one)
            return pc.cast(pc.cast(x, pa.timestamp(x.type.unit)), t)
        return pc.cast(x, t)

    return run


def _coalesce(*xs: Value) -> Value:
    return pc.coalesce(*xs)


@dataclass(frozen=True)
class ValueExpression:
    """A parsed expression: its ``text`` as given, the top-level ``columns`` it reads,
    and :meth:`evaluate` over a batch of the schema it was parsed against."""

    text: str
    columns: frozenset[str]
    type: pa.DataType
    _root: Any

    def evaluate(self, batch: pa.RecordBatch) -> pa.Array:
        """The expression's value for each row of ``batch`` (a literal repeated)."""
        try:
            out = self._root.eval(batch)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
            raise InvalidArgumentError(
                f"expected {self.text!r} to compute over the rows, found an error: {e}"
            ) from None
        if isinstance(out, pa.Scalar):
            return pa.array([out.as_py()] * batch.num_rows, type=out.type)
        if isinstance(out, pa.ChunkedArray):
            return out.combine_chunks()
        return out


class _Parser:
    def __init__(self, text: str, schema: pa.Schema, what: str) -> None:
        self.text, self.schema, self.what = text, schema, what
        self.toks = _tokens(text, what)
        self.i = 0
        self.columns: set[str] = set()

    # -- helpers
    def peek(self) -> _Token:
        return self.toks[self.i]

    def take(self) -> _Token:
        t = self.toks[self.i]
        self.i += 1
        return t

    def at(self, kind: str, value: str | None = None) -> bool:
        t = self.peek()
        return t.kind == kind and (value is None or t.value == value)

    def expect(self, kind: str, value: str) -> None:
        if not self.at(kind, value):
            self.fail(f"{value!r}")
        self.take()

    def fail(self, expected: str) -> Any:
        t = self.peek()
        found = "the end" if t.kind == "end" else repr(t.value)
        raise InvalidArgumentError(
            f"expected {expected} at column {t.pos + 1}, found {found} in {self.what} {self.text!r}"
        )

    # -- grammar
    def parse(self) -> Any:
        node = self.or_()
        if not self.at("end"):
            self.fail("an operator or the end")
        return node

    def or_(self) -> Any:
        node = self.and_()
        while self.at("keyword", "or"):
            self.take()
            node = _Call(pc.or_kleene, (node, self.and_()))
        return node

    def and_(self) -> Any:
        node = self.not_()
        while self.at("keyword", "and"):
            self.take()
            node = _Call(pc.and_kleene, (node, self.not_()))
        return node

    def not_(self) -> Any:
        if self.at("keyword", "not"):
            self.take()
            return _Call(pc.invert, (self.not_(),))
        return self.predicate()

    def predicate(self) -> Any:
        left = self.concat()
        t = self.peek()
        if t.kind == "op" and t.value in _COMPARE:
            self.take()
            return _Call(_compare(_COMPARE[t.value]), (left, self.concat()))
        if self.at("keyword", "is"):
            self.take()
            negated = self.at("keyword", "not")
            if negated:
                self.take()
            self.expect("keyword", "null")
            return _Call(pc.is_valid if negated else pc.is_null, (left,))
        negated = False
        if self.at("keyword", "not"):
            self.take()
            negated = True
            if not (self.at("keyword", "in") or self.at("keyword", "between")):
                self.fail("IN or BETWEEN after NOT")
        if self.at("keyword", "in"):
            self.take()
            self.expect("op", "(")
            values = [self.concat()]
            while self.at("op", ","):
                self.take()
                values.append(self.concat())
            self.expect("op", ")")
            if not all(isinstance(v, _Lit) for v in values):
                self.fail("literals in the IN list")
            return _Call(_in(negated), (left, *values))
        if self.at("keyword", "between"):
            self.take()
            low = self.concat()
            self.expect("keyword", "and")
            high = self.concat()
            both = _Call(
                pc.and_kleene,
                (
                    _Call(_compare("greater_equal"), (left, low)),
                    _Call(_compare("less_equal"), (left, high)),
                ),
            )
            return _Call(pc.invert, (both,)) if negated else both
        return left

    def concat(self) -> Any:
        node = self.additive()
        while self.at("op", "||"):
            self.take()
            node = _Call(_concat, (node, self.additive()))
        return node

    def additive(self) -> Any:
        node = self.multiplicative()
        while self.peek().kind == "op" and self.peek().value in ("+", "-"):
            op = self.take().value
            node = _Call(getattr(pc, _ARITH[op]), (node, self.multiplicative()))
        return node

    def multiplicative(self) -> Any:
        node = self.unary()
        while self.peek().kind == "op" and self.peek().value in ("*", "/", "%"):
            op = self.take().value
            node = _Call(getattr(pc, _ARITH[op]), (node, self.unary()))
        return node

    def unary(self) -> Any:
        if self.at("op", "-"):
            self.take()
            inner = self.unary()
            if isinstance(inner, _Lit) and isinstance(inner.value, (int, float, decimal.Decimal)):
                return _Lit(-inner.value)
            return _Call(pc.negate_checked, (inner,))
        return self.primary()

    def primary(self) -> Any:
        t = self.take()
        if t.kind == "number":
            if any(c in t.value for c in ".eE"):
                return _Lit(float(t.value))
            return _Lit(int(t.value))
        if t.kind == "string":
            return _Lit(t.value)
        if t.kind == "op" and t.value == "(":
            node = self.or_()
            self.expect("op", ")")
            return node
        if t.kind == "keyword":
            if t.value in ("true", "false"):
                return _Lit(t.value == "true")
            if t.value == "null":
                return _Lit(None)
            if t.value in ("date", "timestamp") and self.at("string"):
                return self.typed_literal(t.value, self.take())
            if t.value == "cast":
                self.expect("op", "(")
                inner = self.or_()
                self.expect("keyword", "as")
                target = self.type_name()
                self.expect("op", ")")
                return _Call(_cast(target), (inner,))
        if t.kind == "column":
            if self.at("op", "("):
                return self.function(t)
            return self.column(t)
        self.i -= 1
        return self.fail("a column, literal, CAST, function or '('")

    def typed_literal(self, kind: str, t: _Token) -> Any:
        try:
            if kind == "date":
                return _Lit(datetime.date.fromisoformat(t.value))
            stamp = datetime.datetime.fromisoformat(t.value)
        except ValueError:
            self.i -= 1
            return self.fail(f"a {kind.upper()} literal in ISO form")
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=datetime.timezone.utc)
        return _Lit(stamp)

    def type_name(self) -> pa.DataType:
        t = self.take()
        name = t.value.lower()
        if name == "decimal":
            self.expect("op", "(")
            p = int(self.take().value)
            self.expect("op", ",")
            s = int(self.take().value)
            self.expect("op", ")")
            return pa.decimal128(p, s)
        if name not in _TYPES:
            self.i -= 1
            return self.fail(f"a type name ({', '.join(sorted(_TYPES))}, decimal(p, s))")
        return _TYPES[name]

    def function(self, t: _Token) -> Any:
        name = t.value.lower()
        self.expect("op", "(")
        args = [self.or_()]
        while self.at("op", ","):
            self.take()
            args.append(self.or_())
        self.expect("op", ")")
        if name == "coalesce":
            return _Call(_coalesce, tuple(args))
        if name not in _FUNCTIONS:
            raise InvalidArgumentError(
                f"expected a function of {sorted([*_FUNCTIONS, 'coalesce'])}, found "
                f"{t.value!r} at column {t.pos + 1} in {self.what} {self.text!r}"
            )
        arity, fn = _FUNCTIONS[name]
        if len(args) != arity:
            raise InvalidArgumentError(
                f"expected {arity} argument(s) to {name}, found {len(args)} in {self.what} "
                f"{self.text!r}"
            )
        return _Call(fn, tuple(args))

    def column(self, t: _Token) -> Any:
        path = [t.value]
        while self.at("op", "."):
            self.take()
            nxt = self.take()
            if nxt.kind not in ("column", "keyword"):
                self.i -= 1
                self.fail("a field name after '.'")
            path.append(nxt.value)
        names = self.schema.names
        if path[0] not in names:
            close = difflib.get_close_matches(path[0], names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidArgumentError(
                f"expected a column of the table {names}, found {path[0]!r}{hint} in "
                f"{self.what} {self.text!r}"
            )
        t_ = self.schema.field(path[0]).type
        for i, name in enumerate(path[1:], start=1):
            if not pa.types.is_struct(t_) or t_.get_field_index(name) < 0:
                raise InvalidArgumentError(
                    f"expected a field of the struct {'.'.join(path[:i])!r}, found {name!r} "
                    f"in {self.what} {self.text!r}"
                )
            t_ = t_.field(name).type
        self.columns.add(path[0])
        return _Col(tuple(path))


def parse_value(
    text: Any, schema: pa.Schema, *, what: str = "expression", boolean: bool = False
) -> ValueExpression:
    """``text`` parsed over ``schema``, and checked by evaluating it over no rows.

    Args:
        text: the SQL text.
        schema: the columns it may read.
        what: what the text is, in error messages (``"CHECK constraint 'positive'"``).
        boolean: refuse an expression whose value is not a boolean.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgumentError(f"expected {what} as SQL text, found {text!r}")
    parser = _Parser(text, schema, what)
    root = parser.parse()
    empty = pa.RecordBatch.from_pylist([], schema=schema)
    try:
        probe = root.eval(empty)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
        raise InvalidArgumentError(
            f"expected {what} {text!r} to compute over the table's columns "
            f"({', '.join(f'{f.name}: {f.type}' for f in schema)}), found: "
            f"{str(e).splitlines()[0]}"
        ) from None
    if boolean and not pa.types.is_boolean(probe.type) and not pa.types.is_null(probe.type):
        raise InvalidArgumentError(
            f"expected {what} {text!r} to be true or false for each row, found a value of "
            f"type {probe.type}; write a comparison (e.g. 'amount >= 0')"
        )
    return ValueExpression(text, frozenset(parser.columns), probe.type, root)
