"""The statements sqlglot keeps as an opaque command (Delta's ``DESCRIBE HISTORY`` and
``DETAIL``, ``OPTIMIZE``, ``VACUUM``, ``RESTORE``, ``SHOW``, ``ALTER TABLE ... UNSET
TBLPROPERTIES``), read from sqlglot's own tokens by a small cursor. Pure.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import sqlglot
from sqlglot import Token, TokenType, exp
from sqlglot.errors import ParseError

from ..errors import SqlSyntaxError
from . import plan as p
from .parser import DIALECT, syntax_message, tokenize, unsupported


def command_plan(statement: str, tokens: Sequence[Token]) -> p.Plan | None:
    """The plan of a command statement, or None for a statement sqlglot parses."""
    words = [t.text.upper() for t in tokens[:3]]
    head = " ".join(words[:2])
    if head in ("DESCRIBE HISTORY", "DESC HISTORY", "DESCRIBE DETAIL", "DESC DETAIL"):
        return _describe(_after(statement, tokens, 2, f"DESCRIBE {words[1]}"), words[1])
    if words[0] == "OPTIMIZE":
        return _optimize(_after(statement, tokens, 1, "OPTIMIZE"))
    if words[0] == "VACUUM":
        return _vacuum(_after(statement, tokens, 1, "VACUUM"))
    if words[0] == "RESTORE":
        return _restore(_after(statement, tokens, 1, "RESTORE"))
    if words[0] == "SHOW":
        return _show(_after(statement, tokens, 1, "SHOW"))
    texts = [t.text.upper() for t in tokens]
    if head == "ALTER TABLE" and any(
        a == "PARTITION" and b == "FIELD" for a, b in itertools.pairwise(texts)
    ):
        return _partition_field(_Tokens(statement, tokens[2:], "ALTER TABLE"))
    if head == "ALTER TABLE" and any(t.text.upper() == "UNSET" for t in tokens):
        return _unset(_Tokens(statement, tokens[2:], "ALTER TABLE"))
    return None


def _after(statement: str, tokens: Sequence[Token], n: int, clause: str) -> _Tokens:
    """The tokens after the first ``n``, read again: sqlglot's tokenizer keeps the rest of
    a command (SHOW, OPTIMIZE, ...) as one string."""
    rest = statement[tokens[n - 1].end + 1 :]
    return _Tokens(rest, tokenize(rest) if rest.strip() else [], clause)


# -- statements read from tokens -------------------------------------------------------


class _Tokens:
    """A cursor over the tokens of a statement sqlglot keeps as an opaque command."""

    def __init__(self, statement: str, tokens: Sequence[Token], clause: str) -> None:
        self.statement = statement
        self.tokens = list(tokens)
        self.i = 0
        self.clause = clause

    def peek(self) -> str:
        return self.tokens[self.i].text.upper() if self.i < len(self.tokens) else ""

    def done(self) -> bool:
        return self.i >= len(self.tokens)

    def take(self, *words: str) -> bool:
        n = len(words)
        got = [t.text.upper() for t in self.tokens[self.i : self.i + n]]
        if got == list(words):
            self.i += n
            return True
        return False

    def expect(self, *words: str) -> None:
        if not self.take(*words):
            raise SqlSyntaxError(
                f"expected {' '.join(words)} in {self.clause}, found {self.rest()!r}"
            )

    def rest(self) -> str:
        if self.done():
            return "the end of the statement"
        return self.statement[self.tokens[self.i].start :].strip()

    def end(self) -> None:
        if not self.done():
            raise SqlSyntaxError(f"expected the end of {self.clause}, found {self.rest()!r}")

    def name(self) -> str:
        parts = [self._identifier()]
        while self.peek() == ".":
            self.i += 1
            parts.append(self._identifier())
        if len(parts) != 2:
            raise SqlSyntaxError(
                f"expected a table name namespace.table in {self.clause}, found {'.'.join(parts)!r}"
            )
        return ".".join(parts).lower()

    def _identifier(self) -> str:
        if self.done() or self.tokens[self.i].token_type in (TokenType.NUMBER, TokenType.STRING):
            raise SqlSyntaxError(f"expected a name in {self.clause}, found {self.rest()!r}")
        tok = self.tokens[self.i]
        self.i += 1
        return tok.text

    def number(self) -> float:
        if self.done() or self.tokens[self.i].token_type != TokenType.NUMBER:
            raise SqlSyntaxError(f"expected a number in {self.clause}, found {self.rest()!r}")
        self.i += 1
        return float(self.tokens[self.i - 1].text)

    def string(self) -> str:
        if self.done() or self.tokens[self.i].token_type != TokenType.STRING:
            raise SqlSyntaxError(
                f"expected a quoted string in {self.clause}, found {self.rest()!r}"
            )
        self.i += 1
        return self.tokens[self.i - 1].text

    def until(self, *stop: str) -> str:
        """The text up to a stop word (or the end), checked to parse as an expression."""
        start = self.i
        while not self.done() and self.peek() not in stop:
            self.i += 1
        if start == self.i:
            raise SqlSyntaxError(f"expected a condition in {self.clause}, found {self.rest()!r}")
        text = self.statement[self.tokens[start].start : self.tokens[self.i - 1].end + 1]
        try:
            tree = sqlglot.parse_one(text, dialect=DIALECT, into=exp.Condition)
        except ParseError as e:
            raise SqlSyntaxError(syntax_message(e)) from None
        return tree.sql(DIALECT)

    def names(self) -> tuple[str, ...]:
        """``(a, b)`` or ``a, b``."""
        paren = self.take("(")
        out = [self._identifier()]
        while self.take(","):
            out.append(self._identifier())
        if paren:
            self.expect(")")
        return tuple(out)


def _describe(t: _Tokens, what: str) -> p.Plan:
    t.clause = f"DESCRIBE {what}"
    name = t.name()
    if what == "DETAIL":
        t.end()
        return p.DescribeDetail(name)
    limit = int(t.number()) if t.take("LIMIT") else None
    t.end()
    return p.DescribeHistory(name, limit)


def _optimize(t: _Tokens) -> p.Plan:
    name = t.name()
    where = t.until("ZORDER") if t.take("WHERE") else None
    zorder: tuple[str, ...] = ()
    if t.take("ZORDER", "BY"):
        zorder = t.names()
    t.end()
    return p.Optimize(name, where, zorder)


def _vacuum(t: _Tokens) -> p.Plan:
    name = t.name()
    hours = None
    if t.take("RETAIN"):
        hours = t.number()
        t.expect("HOURS")
    dry = t.take("DRY", "RUN")
    t.end()
    return p.Vacuum(name, hours, dry)


def _restore(t: _Tokens) -> p.Plan:
    t.take("TABLE")
    name = t.name()
    t.expect("TO")
    if t.take("VERSION", "AS", "OF"):
        version = int(t.number())
        t.end()
        return p.Restore(name, version=version)
    t.expect("TIMESTAMP", "AS", "OF")
    ts = t.string()
    t.end()
    return p.Restore(name, timestamp=ts)


def _show(t: _Tokens) -> p.Plan:
    if t.take("TABLES"):
        namespace = None
        if t.take("IN") or t.take("FROM"):
            namespace = t._identifier().lower()
        t.end()
        return p.ShowTables(namespace)
    if t.peek() in ("NAMESPACES", "DATABASES", "SCHEMAS"):
        t.i += 1
        t.end()
        return p.ShowNamespaces()
    raise unsupported(f"SHOW {t.rest()[:40]}", "lakelog runs SHOW TABLES and SHOW NAMESPACES")


def _partition_field(t: _Tokens) -> p.Plan:
    name = t.name()
    action = t.peek()
    if action not in ("ADD", "DROP", "REPLACE"):
        raise SqlSyntaxError(
            f"expected ADD, DROP or REPLACE PARTITION FIELD in ALTER TABLE, found {t.rest()!r}"
        )
    t.i += 1
    t.clause = f"ALTER TABLE ... {action} PARTITION FIELD"
    t.expect("PARTITION", "FIELD")
    rest = t.rest()
    field, new = rest, None
    if action == "REPLACE":
        at = [i for i, tok in enumerate(t.tokens) if i >= t.i and tok.text.upper() == "WITH"]
        if not at:
            raise SqlSyntaxError(f"expected WITH <new field> in {t.clause}, found {rest!r}")
        start = t.tokens[at[0]].start
        field = t.statement[t.tokens[t.i].start : start].strip()
        new = t.statement[t.tokens[at[0]].end + 1 :].strip()
    if any(x is not None and (not x or " AS " in f" {x.upper()} ") for x in (field, new)):
        raise unsupported(f"{t.clause} {rest}", "name the field as day(ts), bucket(16, id), ...")
    return p.ChangePartitionField(name, action.lower(), field.rstrip(";").strip(), new)


def _unset(t: _Tokens) -> p.Plan:
    t.clause = "ALTER TABLE ... UNSET TBLPROPERTIES"
    name = t.name()
    t.expect("UNSET", "TBLPROPERTIES")
    exists = t.take("IF", "EXISTS")
    t.expect("(")
    keys = [t.string()]
    while t.take(","):
        keys.append(t.string())
    t.expect(")")
    t.end()
    return p.UnsetProperties(name, tuple(keys), exists)
