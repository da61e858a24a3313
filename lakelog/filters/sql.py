"""The SQL-like string front end: ``"day = '2026-11-02' and sensor_id between 10 and 20"``.

Grammar: ``or``/``and``/``not`` with parentheses, ``true``/``false``, and predicates
``col op literal`` (or ``literal op col``; ops ``= == != <> < <= > >=``),
``col [not] between a and b``, ``col [not] in (a, b, ...)``, ``col is [not] null``,
and a boolean column alone. Keywords are case-insensitive; strings are in single
quotes (``''`` inside), columns may be in double quotes or backticks.

Invariants:

* ``in`` has SQL null semantics (a null row gives null, so ``not in`` never selects
  it); ``between`` is ``>= and <=``.
* Literals are bound to their column's type as they are read (:mod:`.bind`): a number
  is read as the column wants it (decimal, integer or float). Errors give the column
  of the filter text where parsing stopped and what was expected there.
"""

from __future__ import annotations

import decimal
import re
from typing import Any, NamedTuple

import pyarrow as pa

from ..errors import InvalidArgumentError
from .bind import bind_literal, bind_literals, column_type
from .tree import FLIP, And, Compare, CompareOp, Const, In, IsNull, Not, Or, Predicate

_TOKEN = re.compile(
    r"""(?P<ws>\s+)
    |(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    |(?P<string>'(?:[^']|'')*')
    |(?P<dquoted>"(?:[^"]|"")*")
    |(?P<bquoted>`(?:[^`]|``)*`)
    |(?P<ident>[^\W\d][\w.]*)
    |(?P<op>==|!=|<>|<=|>=|=|<|>|\(|\)|,|-)""",
    re.VERBOSE,
)
_KEYWORDS = {"and", "or", "not", "between", "in", "is", "null", "true", "false"}
_SQL_OPS: dict[str, CompareOp] = {
    "=": "=",
    "==": "=",
    "!=": "!=",
    "<>": "!=",
    "<": "<",
    "<=": "<=",
    ">": ">",
    ">=": ">=",
}


def parse_sql(text: str, schema: pa.Schema) -> Predicate:
    """The predicate a SQL-like filter string states over ``schema``."""
    return _SqlParser(text, schema).parse()


class _Token(NamedTuple):
    kind: str  # number, string, column, keyword, op, end
    text: str  # as written
    value: str  # unquoted; keywords lower-cased
    pos: int


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            ch = text[pos]
            if ch in "'\"`":
                raise InvalidArgumentError(
                    f"expected a closing {ch} for the {ch} at column {pos + 1}, found end of "
                    f"filter in filter {text!r}; double a quote inside quotes ('it''s')"
                )
            raise InvalidArgumentError(
                f"expected a column, literal, operator or parenthesis at column {pos + 1}, "
                f"found {ch!r} in filter {text!r}"
            )
        kind, raw = m.lastgroup or "", m.group()
        if kind == "string":
            out.append(_Token("string", raw, raw[1:-1].replace("''", "'"), pos))
        elif kind in ("dquoted", "bquoted"):
            q = raw[0]
            out.append(_Token("column", raw, raw[1:-1].replace(q + q, q), pos))
        elif kind == "ident":
            low = raw.lower()
            out.append(
                _Token("keyword", raw, low, pos)
                if low in _KEYWORDS
                else _Token("column", raw, raw, pos)
            )
        elif kind != "ws":
            out.append(_Token(kind, raw, raw, pos))
        pos = m.end()
    out.append(_Token("end", "", "", len(text)))
    return out


class _Lit(NamedTuple):
    value: Any  # str, int, float, bool (numbers keep their text in ``text``)
    text: str
    pos: int


class _SqlParser:
    """Recursive descent: or_expr := and_expr ('or' and_expr)*; and_expr := not_expr
    ('and' not_expr)*; not_expr := 'not' not_expr | '(' or_expr ')' | true | false |
    predicate. Literals bind to their column's type as they are read."""

    def __init__(self, text: str, schema: pa.Schema) -> None:
        self.text = text
        self.schema = schema
        self.toks = _tokens(text)
        self.i = 0

    # -- tokens --------------------------------------------------------------------------
    def peek(self, ahead: int = 0) -> _Token:
        return self.toks[min(self.i + ahead, len(self.toks) - 1)]

    def take(self) -> _Token:
        tok = self.toks[self.i]
        self.i = min(self.i + 1, len(self.toks) - 1)
        return tok

    def is_kw(self, word: str, ahead: int = 0) -> bool:
        tok = self.peek(ahead)
        return tok.kind == "keyword" and tok.value == word

    def fail(self, expected: str, tok: _Token | None = None) -> InvalidArgumentError:
        tok = tok or self.peek()
        found = "end of filter" if tok.kind == "end" else repr(tok.text)
        return InvalidArgumentError(
            f"expected {expected} at column {tok.pos + 1}, found {found} in filter {self.text!r}"
        )

    def expect_kw(self, word: str, after: str) -> None:
        if not self.is_kw(word):
            raise self.fail(f"'{word}' after {after}")
        self.take()

    def expect_op(self, op: str, after: str) -> None:
        if self.peek().kind != "op" or self.peek().value != op:
            raise self.fail(f"'{op}' after {after}")
        self.take()

    # -- grammar -------------------------------------------------------------------------
    def parse(self) -> Predicate:
        pred = self.or_expr()
        if self.peek().kind != "end":
            raise self.fail("'and', 'or' or the end of the filter")
        return pred

    def or_expr(self) -> Predicate:
        parts = [self.and_expr()]
        while self.is_kw("or"):
            self.take()
            parts.append(self.and_expr())
        return parts[0] if len(parts) == 1 else Or(tuple(parts))

    def and_expr(self) -> Predicate:
        parts = [self.not_expr()]
        while self.is_kw("and"):
            self.take()
            parts.append(self.not_expr())
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def not_expr(self) -> Predicate:
        if self.is_kw("not"):
            self.take()
            return Not(self.not_expr())
        tok = self.peek()
        if tok.kind == "op" and tok.value == "(":
            self.take()
            inner = self.or_expr()
            self.expect_op(")", "the condition in parentheses")
            return inner
        after = self.peek(1)
        if (self.is_kw("true") or self.is_kw("false")) and not (
            after.kind == "op" and after.value in _SQL_OPS
        ):
            self.take()
            return Const(tok.value == "true")
        if tok.kind == "column":
            return self.predicate()
        if self.is_literal_start():
            lit = self.literal("a literal")
            op = self.peek()
            if op.kind != "op" or op.value not in _SQL_OPS:
                raise self.fail(f"a comparison operator after {lit.text}")
            self.take()
            col = self.peek()
            if col.kind != "column":
                raise self.fail(f"a column after {op.text!r} (one side must be a column)")
            self.take()
            t = column_type(self.schema, col.value, f" at column {col.pos + 1}")
            cmp = FLIP[_SQL_OPS[op.value]]
            return Compare(col.value, cmp, self.bind(col.value, t, lit, cmp), True)
        raise self.fail("a condition (a column, 'not', 'true', 'false' or '(')")

    def predicate(self) -> Predicate:
        col = self.take()
        name = col.value
        t = column_type(self.schema, name, f" at column {col.pos + 1}")
        tok = self.peek()
        if tok.kind == "op" and tok.value in _SQL_OPS:
            self.take()
            if self.peek().kind == "column":
                raise self.fail(
                    f"a literal after {tok.text!r} (comparing two columns is not supported)"
                )
            lit = self.literal(f"a literal after {tok.text!r}")
            cmp = _SQL_OPS[tok.value]
            return Compare(name, cmp, self.bind(name, t, lit, cmp))
        negated = False
        if self.is_kw("not") and (self.is_kw("between", 1) or self.is_kw("in", 1)):
            self.take()
            negated = True
        if self.is_kw("between"):
            self.take()
            lo = self.literal("a literal after 'between'")
            self.expect_kw("and", f"between {lo.text}")
            hi = self.literal("a literal after 'and'")
            both = And(
                (
                    Compare(name, ">=", self.bind(name, t, lo, "between")),
                    Compare(name, "<=", self.bind(name, t, hi, "between")),
                )
            )
            return Not(both) if negated else both
        if self.is_kw("in"):
            self.take()
            self.expect_op("(", "'in'")
            lits = [self.literal("a literal in the list")]
            while self.peek().kind == "op" and self.peek().value == ",":
                self.take()
                lits.append(self.literal("a literal after ','"))
            self.expect_op(")", "the list of values")
            values = bind_literals(
                name,
                t,
                [self.value_for(t, lit) for lit in lits],
                f" at column {col.pos + 1}",
                op="not in" if negated else "in",
            )
            return In(name, values, negated=negated, nulls="sql")
        if self.is_kw("is"):
            self.take()
            is_not = self.is_kw("not")
            if is_not:
                self.take()
            self.expect_kw("null", "'is not'" if is_not else "'is'")
            return IsNull(name, negated=is_not)
        if pa.types.is_boolean(t):  # a boolean column alone: column = true
            return Compare(name, "=", pa.scalar(True))
        raise self.fail(
            f"a comparison (=, !=, <, <=, >, >=), 'between', 'in' or 'is' after {col.text}"
        )

    # -- literals ------------------------------------------------------------------------
    def is_literal_start(self) -> bool:
        tok = self.peek()
        return (
            tok.kind in ("number", "string")
            or (tok.kind == "op" and tok.value == "-")
            or self.is_kw("true")
            or self.is_kw("false")
        )

    def literal(self, expected: str) -> _Lit:
        tok = self.peek()
        if tok.kind == "op" and tok.value == "-" and self.peek(1).kind == "number":
            self.take()
            num = self.take()
            return _Lit(None, "-" + num.text, tok.pos)
        if tok.kind == "number":
            self.take()
            return _Lit(None, tok.text, tok.pos)
        if tok.kind == "string":
            self.take()
            return _Lit(tok.value, tok.text, tok.pos)
        if self.is_kw("true") or self.is_kw("false"):
            self.take()
            return _Lit(tok.value == "true", tok.text, tok.pos)
        if self.is_kw("null"):
            raise self.fail(f"{expected} ('is null' tests for nulls)")
        raise self.fail(expected)

    @staticmethod
    def value_for(t: pa.DataType, lit: _Lit) -> Any:
        """The Python value of a literal; a number is read as the column wants it."""
        if lit.value is not None:
            return lit.value
        if pa.types.is_decimal(t):
            return decimal.Decimal(lit.text)
        if re.fullmatch(r"-?\d+", lit.text) and not pa.types.is_floating(t):
            return int(lit.text)
        return float(lit.text)

    def bind(self, name: str, t: pa.DataType, lit: _Lit, op: str) -> pa.Scalar:
        return bind_literal(name, t, self.value_for(t, lit), f" at column {lit.pos + 1}", op=op)
