"""Decoding pyarrow Expressions into the predicate tree, through their serialized form.

pyarrow offers no public way to walk an Expression, but pickling one gives an Arrow
IPC file whose schema metadata lists the tree in prefix order (literals and options
are batch columns). :func:`decode_expression` reads that.

Invariants:

* Decoding never guesses: the decoded tree must rebuild an Expression equal to the
  input, or the whole filter is :class:`~.tree.Unknown` (pruning keeps every file).
* A sub-expression lakelog does not model becomes an ``Unknown`` holding exactly that
  sub-expression, so rows are still filtered by it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from .bind import column_type
from .tree import (
    FLIP,
    And,
    Compare,
    CompareOp,
    Const,
    In,
    IsNull,
    Not,
    NullMatching,
    Or,
    Predicate,
    Unknown,
    to_expression,
)

_META = re.compile(r"(call|end|field_ref|nested_field_ref|literal|options): '(.*)'")
_CMP_CALLS: dict[str, CompareOp] = {
    "equal": "=",
    "not_equal": "!=",
    "less": "<",
    "less_equal": "<=",
    "greater": ">",
    "greater_equal": ">=",
}
_LOGIC: dict[str, type[And] | type[Or]] = {"and_kleene": And, "or_kleene": Or}


class _Undecodable(Exception):
    """The serialized form is not what this decoder expects."""


@dataclass
class _Node:
    """One node of a serialized Expression; ``start:end`` is its span of entries."""

    kind: str  # call, field, nested, literal
    start: int
    end: int = 0
    name: str = ""
    index: int = -1
    args: list[_Node] = field(default_factory=list)
    options: int | None = None


def decode_expression(expr: pc.Expression, schema: pa.Schema) -> Predicate:
    """``expr`` as a predicate over ``schema`` (:class:`~.tree.Unknown` where not understood)."""
    try:
        decoder = _Decoder(expr)
        pred = decoder.convert(decoder.root)
        if not to_expression(pred).equals(expr):
            return Unknown(expr)
    except Exception:  # noqa: BLE001 - anything unexpected: prune nothing, never guess
        return Unknown(expr)
    for name in set(decoder.columns).difference(schema.names):
        column_type(schema, name, f" in filter {expr}")  # raises
    return pred if not isinstance(pred, Unknown) else Unknown(expr)


def expression_columns(expr: pc.Expression) -> list[str]:
    """The top-level columns ``expr`` refers to, in order of first use (empty where its
    serialized form cannot be read)."""
    try:
        return list(dict.fromkeys(_Decoder(expr).columns))
    except Exception:  # noqa: BLE001 - only for messages: no names rather than an error
        return []


class _Decoder:
    """Reads the tree from an Expression's serialized form (an Arrow IPC file whose
    schema metadata lists it in prefix order, literals and options as batch columns)."""

    def __init__(self, expr: pc.Expression) -> None:
        self.rebuild, (buf,) = expr.__reduce__()
        reader = ipc.open_file(buf)
        self.batch = reader.get_batch(0)
        text = reader.schema.to_string(
            show_field_metadata=False, show_schema_metadata=True, truncate_metadata=False
        )
        marker = "-- schema metadata --\n"
        at = text.find(marker)
        if at < 0 or (at > 0 and text[at - 1] != "\n"):
            raise _Undecodable("no metadata")
        self.entries: list[tuple[str, str]] = []
        for line in text[at + len(marker) :].split("\n"):
            m = _META.fullmatch(line)
            if m is None:
                raise _Undecodable(line)
            self.entries.append((m.group(1), m.group(2)))
        self.columns: list[str] = []
        self.root = self.tree()

    def tree(self) -> _Node:
        entries, stack = self.entries, [_Node("call", -1, name="")]  # a sentinel parent
        i = 0
        while i < len(entries):
            key, value = entries[i]
            parent = stack[-1]
            if key == "call":
                stack.append(_Node("call", i, name=value))
                i += 1
                continue
            if key == "end":
                if len(stack) < 2 or value != parent.name:
                    raise _Undecodable("unbalanced")
                stack.pop()
                parent.end = i + 1
                stack[-1].args.append(parent)
            elif key == "options":
                parent.options = int(value)
            elif key == "literal":
                parent.args.append(_Node("literal", i, i + 1, index=int(value)))
            elif key == "field_ref":
                self.columns.append(value)
                parent.args.append(_Node("field", i, i + 1, name=value))
            else:  # nested_field_ref: its count of field_ref entries follows
                n = int(value)
                names = entries[i + 1 : i + 1 + n]
                if len(names) != n or any(k != "field_ref" for k, _ in names):
                    raise _Undecodable("nested field")
                self.columns.append(names[0][1])
                parent.args.append(_Node("nested", i, i + 1 + n))
                i += n
            i += 1
        if len(stack) != 1 or len(stack[0].args) != 1:
            raise _Undecodable("not one tree")
        return stack[0].args[0]

    def scalar(self, index: int) -> pa.Scalar:
        return self.batch.column(index)[0]

    def unknown(self, node: _Node) -> Unknown:
        """The original sub-expression of ``node``, re-read from its span."""
        entries: list[tuple[str, str]] = []
        used: dict[int, int] = {}  # only the batch columns the span uses, renumbered
        for key, value in self.entries[node.start : node.end]:
            if key in ("literal", "options"):
                value = str(used.setdefault(int(value), len(used)))
            entries.append((key, value))
        batch = self.batch.select(list(used)).replace_schema_metadata(pa.KeyValueMetadata(entries))
        sink = pa.BufferOutputStream()
        with ipc.new_file(sink, batch.schema) as writer:
            writer.write_batch(batch)
        return Unknown(self.rebuild(sink.getvalue()))

    def convert(self, node: _Node) -> Predicate:
        if node.kind == "literal":
            s = self.scalar(node.index)
            if pa.types.is_boolean(s.type) and s.is_valid:
                return Const(bool(s.as_py()))
            return self.unknown(node)
        if node.kind != "call":
            return self.unknown(node)
        name, args = node.name, node.args
        if name in _LOGIC and len(args) == 2:
            kind = _LOGIC[name]
            spine = [args[1]]
            left = args[0]
            while left.kind == "call" and left.name == name and len(left.args) == 2:
                spine.append(left.args[1])
                left = left.args[0]
            spine.append(left)
            return kind(tuple(self.convert(a) for a in reversed(spine)))
        if name == "invert" and len(args) == 1:
            return Not(self.convert(args[0]))
        fields = [a for a in args if a.kind == "field"]
        if name in _CMP_CALLS and len(args) == 2 and len(fields) == 1:
            lit = args[1] if args[0].kind == "field" else args[0]
            if lit.kind == "literal":
                op = _CMP_CALLS[name]
                if args[0].kind == "field":
                    return Compare(args[0].name, op, self.scalar(lit.index))
                return Compare(args[1].name, FLIP[op], self.scalar(lit.index), True)
        if len(args) == 1 and args[0].kind == "field":
            column = args[0].name
            if name == "is_valid":
                return IsNull(column, negated=True)
            if name == "is_null" and node.options is not None:  # pc.is_null(f) has none
                nan_is_null = self.scalar(node.options)["nan_is_null"].as_py()
                return IsNull(column, nan_is_null=bool(nan_is_null))
            if name == "is_in" and node.options is not None:
                return self.is_in(node, column, node.options)
        return self.unknown(node)

    def is_in(self, node: _Node, column: str, index: int) -> Predicate:
        options = self.scalar(index)
        value_set = options["value_set"].values
        keys = {f.name for f in options.type}
        if "null_matching_behavior" in keys:
            behavior = options["null_matching_behavior"].as_py()
            known: dict[int, NullMatching] = {0: "match", 1: "skip"}
            nulls = known.get(behavior)
        else:  # older pyarrow
            nulls = "skip" if options["skip_nulls"].as_py() else "match"
        if nulls is None or value_set is None or len(value_set) == 0:
            return self.unknown(node)
        return In(column, tuple(value_set), nulls=nulls)
