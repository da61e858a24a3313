"""One statement of Spark SQL (Delta's syntax where Delta has the statement) -> a plan.

sqlglot parses with ``dialect="spark"``; the statements it keeps as an opaque command
(Delta's ``DESCRIBE HISTORY``, ``OPTIMIZE``, ``VACUUM``, ``RESTORE``, ``SHOW TABLES``,
``UNSET TBLPROPERTIES``) are read from sqlglot's tokens by :mod:`.commands`. Pure: no
catalog, no table, no engine.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import pyarrow as pa
import sqlglot
from sqlglot import Token, TokenType, exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError

from ..errors import SqlSyntaxError, UnsupportedStatementError
from . import plan as p

DIALECT = "spark"

_TYPES: dict[Any, pa.DataType] = {
    exp.DataType.Type.BIGINT: pa.int64(),
    exp.DataType.Type.INT: pa.int32(),
    exp.DataType.Type.SMALLINT: pa.int16(),
    exp.DataType.Type.TINYINT: pa.int8(),
    exp.DataType.Type.DOUBLE: pa.float64(),
    exp.DataType.Type.FLOAT: pa.float32(),
    exp.DataType.Type.BOOLEAN: pa.bool_(),
    exp.DataType.Type.TEXT: pa.string(),
    exp.DataType.Type.VARCHAR: pa.string(),
    exp.DataType.Type.CHAR: pa.string(),
    exp.DataType.Type.BINARY: pa.binary(),
    exp.DataType.Type.DATE: pa.date32(),
    exp.DataType.Type.TIMESTAMP: pa.timestamp("us", tz="UTC"),
    exp.DataType.Type.TIMESTAMPTZ: pa.timestamp("us", tz="UTC"),
    exp.DataType.Type.TIMESTAMPLTZ: pa.timestamp("us", tz="UTC"),
    exp.DataType.Type.TIMESTAMPNTZ: pa.timestamp("us"),
}


def parse(statement: str) -> p.Plan:
    """The plan of one statement.

    Raises:
        SqlSyntaxError: it does not parse (the message says where).
        UnsupportedStatementError: it parses, but lakelog cannot run it (the message
            names the clause).
    """
    from .commands import command_plan

    tokens = tokenize(statement)
    plan = command_plan(statement, tokens)
    if plan is not None:
        return plan
    try:
        with quiet():
            trees = sqlglot.parse(statement, dialect=DIALECT)
    except ParseError as e:
        raise SqlSyntaxError(syntax_message(e)) from None
    trees = [t for t in trees if t is not None]
    if len(trees) != 1:
        raise SqlSyntaxError(f"expected one statement, found {len(trees)}; run them one by one")
    return _plan(trees[0])  # type: ignore[arg-type]


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """sqlglot's own warnings held back ("... Falling back to parsing as a 'Command'"):
    what lakelog does not run is its one-line error, nothing more on stderr."""
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def tokenize(statement: str) -> list[Token]:
    try:
        tokens = Dialect.get_or_raise(DIALECT).tokenize(statement)
    except TokenError as e:
        raise SqlSyntaxError(f"expected a SQL statement, found {_line(str(e))}") from None
    tokens = [t for t in tokens if t.token_type != TokenType.SEMICOLON or t is not tokens[-1]]
    if not tokens:
        raise SqlSyntaxError("expected a SQL statement, found nothing")
    return tokens


def _line(text: str) -> str:
    return " ".join(text.split())


def syntax_message(e: ParseError) -> str:
    if e.errors:
        first = e.errors[0]
        where = f"line {first.get('line')}, column {first.get('col')}"
        near = _line(
            f"{first.get('start_context', '')}{first.get('highlight', '')}"
            f"{first.get('end_context', '')}"
        )
        what = str(first.get("description", "")).split(" but got <Token")[0]
        return f"expected Spark SQL, found {what} at {where} near {near!r}"
    return f"expected Spark SQL, found {_line(str(e))}"


def unsupported(clause: str, instead: str = "") -> UnsupportedStatementError:
    more = f"; {instead}" if instead else ""
    return UnsupportedStatementError(
        f"expected a statement docs/sql.md lists, found {clause}, which lakelog does not "
        f"run yet{more}"
    )


# -- names -----------------------------------------------------------------------------


def table_name(node: exp.Table, clause: str) -> str:
    """``namespace.table`` of a table node (lower case, as the catalog keeps names)."""
    if node.args.get("catalog") is not None or not node.args.get("db") or not node.name:
        raise UnsupportedStatementError(
            f"expected a table name namespace.table in {clause}, found {node.sql(DIALECT)!r}"
        )
    return f"{node.db}.{node.name}".lower()


def table_ref(node: exp.Table) -> p.TableRef | None:
    """The reference a two-part table name in a query is, if it may be a lakelog table."""
    if node.args.get("catalog") is not None or not node.args.get("db"):
        return None
    if not isinstance(node.this, exp.Identifier):
        return None
    alias = node.args.get("alias")
    if isinstance(alias, exp.TableAlias) and isinstance(alias.this, exp.Parameter):
        raise unsupported(
            f"the version suffix {node.db}.{node.name}@{alias.this.name}",
            f"write {node.db}.{node.name} VERSION AS OF <n> (or TIMESTAMP AS OF '<ts>')",
        )
    version = node.args.get("version")
    name = f"{node.db}.{node.name}".lower()
    if version is None:
        return p.TableRef(name)
    value = version.expression
    kind = str(version.this).upper()
    if kind == "VERSION":
        return p.TableRef(name, version=_int(value, "VERSION AS OF"))
    return p.TableRef(name, timestamp=_text(value, "TIMESTAMP AS OF"))


def changes_ref(call: exp.Anonymous) -> p.ChangesRef | None:
    if str(call.this).lower() != "table_changes":
        return None
    args = call.expressions
    if len(args) not in (2, 3) or not isinstance(args[0], exp.Literal):
        raise UnsupportedStatementError(
            f"expected table_changes('namespace.table', start[, end]), found {call.sql(DIALECT)!r}"
        )
    bounds = [_bound(a) for a in args[1:]]
    return p.ChangesRef(args[0].this.lower(), bounds[0], bounds[1] if len(bounds) > 1 else None)


def _bound(value: exp.Expression) -> int | str:
    if isinstance(value, exp.Literal) and not value.is_string:
        return _int(value, "table_changes")
    return _text(value, "table_changes")


def _int(value: exp.Expression, clause: str) -> int:
    if isinstance(value, exp.Literal) and not value.is_string:
        try:
            return int(value.this)
        except ValueError:
            pass
    raise SqlSyntaxError(f"expected an integer in {clause}, found {value.sql(DIALECT)!r}")


def _text(value: exp.Expression, clause: str) -> str:
    if isinstance(value, exp.Cast):
        value = value.this
    if isinstance(value, exp.Literal) and value.is_string:
        return str(value.this)
    raise SqlSyntaxError(
        f"expected a quoted timestamp such as '2026-11-02 10:00:00' in {clause}, found "
        f"{value.sql(DIALECT)!r}"
    )


def query(tree: Any) -> p.Query:
    """A query with its lakelog candidates (two-part names outside its CTE names)."""
    refs: dict[p.TableRef, None] = {}
    changes: dict[p.ChangesRef, None] = {}
    for node in tree.find_all(exp.Table):
        if isinstance(node.this, exp.Anonymous):
            c = changes_ref(node.this)
            if c is not None:
                changes[c] = None
            continue
        ref = table_ref(node)
        if ref is not None:
            refs[ref] = None
    return p.Query(tree, tuple(refs), tuple(changes))


# -- types -----------------------------------------------------------------------------


def arrow_type(kind: exp.DataType, column: str) -> pa.DataType:
    if kind.this == exp.DataType.Type.DECIMAL:
        params = [int(e.this.this) for e in kind.expressions] or [10, 0]
        return pa.decimal128(params[0], params[1] if len(params) > 1 else 0)
    t = _TYPES.get(kind.this)
    if t is None:
        raise unsupported(
            f"the type {kind.sql(DIALECT)} of column {column!r}",
            "use BIGINT, INT, SMALLINT, TINYINT, DOUBLE, FLOAT, DECIMAL(p, s), BOOLEAN, "
            "STRING, BINARY, DATE, TIMESTAMP or TIMESTAMP_NTZ, or create the table from "
            "Python with any Arrow type",
        )
    return t


def _schema(defs: Sequence[exp.Expression], clause: str) -> pa.Schema:
    return _columns(defs, clause)[0]


def _rule_text(e: exp.Expression) -> str:
    """The SQL text of a rule's expression as lakelog reads it (Spark's parser reads a
    CAST as a TRY_CAST: written back as the CAST it was)."""
    plain = e.transform(
        lambda n: exp.Cast(this=n.this, to=n.args["to"]) if isinstance(n, exp.TryCast) else n
    )
    return plain.sql(DIALECT)


def _rule_int(value: exp.Expression | None, default: int, what: str) -> int:
    if value is None:
        return default
    ok = isinstance(value, exp.Literal) and not value.is_string
    neg = isinstance(value, exp.Neg) and isinstance(value.this, exp.Literal)
    if not (ok or neg):
        raise SqlSyntaxError(f"expected an integer for {what}, found {value.sql(DIALECT)!r}")
    return int(value.sql(DIALECT))


def _columns(defs: Sequence[exp.Expression], clause: str) -> tuple[pa.Schema, Rules]:
    """The columns of a column list, and the rules it declares (NOT NULL is the field's
    nullability; CHECK constraints, generated and identity columns the rest)."""
    fields = []
    checks: list[tuple[str, str]] = []
    generated: list[tuple[str, str]] = []
    identity: list[tuple[str, int, int, bool]] = []
    for d in defs:
        if isinstance(d, exp.Constraint):
            for c in d.expressions:
                if not isinstance(c, exp.CheckColumnConstraint):
                    raise unsupported(f"the constraint {d.sql(DIALECT)!r} in {clause}",
                                      "lakelog keeps CHECK constraints and NOT NULL")  # fmt: skip
                checks.append((d.name, _rule_text(c.this)))
            continue
        if not isinstance(d, exp.ColumnDef) or d.args.get("kind") is None:
            raise SqlSyntaxError(
                f"expected column definitions 'name TYPE' in {clause}, found {d.sql(DIALECT)!r}"
            )
        nullable = True
        for c in d.constraints:
            kind = c.kind
            if isinstance(kind, exp.NotNullColumnConstraint):
                nullable = False
            elif isinstance(kind, exp.ComputedColumnConstraint):
                generated.append((d.name, _rule_text(kind.this)))
            elif isinstance(kind, exp.GeneratedAsIdentityColumnConstraint):
                if kind.args.get("expression") is not None:
                    generated.append((d.name, _rule_text(kind.args["expression"])))
                    continue
                start = _rule_int(kind.args.get("start"), 1, f"the START WITH of {d.name!r}")
                step = _rule_int(kind.args.get("increment"), 1, f"the INCREMENT BY of {d.name!r}")
                identity.append((d.name, start, step, bool(kind.this)))
            elif isinstance(kind, exp.CheckColumnConstraint):
                checks.append((f"{d.name}_check", _rule_text(kind.this)))
            else:
                raise unsupported(f"the column constraint {c.sql(DIALECT)!r} of {d.name!r}",
                                  "lakelog keeps NOT NULL, CHECK, GENERATED ALWAYS AS (...) "
                                  "and GENERATED ... AS IDENTITY")  # fmt: skip
        if d.args.get("position") is not None:
            raise unsupported(
                f"{d.args['position'].sql(DIALECT)} in {clause}", "new columns go at the end"
            )
        fields.append(pa.field(d.name, arrow_type(d.args["kind"], d.name), nullable=nullable))
    return pa.schema(fields), Rules(tuple(checks), tuple(generated), tuple(identity))


class Rules(NamedTuple):
    constraints: tuple[tuple[str, str], ...]
    generated: tuple[tuple[str, str], ...]
    identity: tuple[tuple[str, int, int, bool], ...]


def _literal(value: exp.Expression, clause: str) -> str:
    if isinstance(value, exp.Literal):
        return str(value.this)
    if isinstance(value, exp.Boolean):
        return "true" if value.this else "false"
    raise SqlSyntaxError(f"expected a literal value in {clause}, found {value.sql(DIALECT)!r}")


def _properties(props: Sequence[exp.Expression], clause: str) -> tuple[tuple[str, str], ...]:
    out = []
    for prop in props:
        if not isinstance(prop, exp.Property):
            raise SqlSyntaxError(f"expected 'key' = 'value' in {clause}, found {prop.sql()!r}")
        key = prop.this
        k = key.this if isinstance(key, exp.Literal) else key.sql(DIALECT)
        out.append((str(k), _literal(prop.args["value"], clause)))
    return tuple(out)


# -- statements sqlglot parses -----------------------------------------------------------


def _plan(tree: exp.Expression) -> p.Plan:
    if isinstance(tree, exp.Create):
        return _create(tree)
    if isinstance(tree, exp.Drop):
        return _drop(tree)
    if isinstance(tree, exp.Alter):
        return _alter(tree)
    if isinstance(tree, exp.Insert):
        return _insert(tree)
    if isinstance(tree, exp.Delete):
        where = tree.args.get("where")
        return p.Delete(
            table_name(tree.this, "DELETE FROM"), where.this.sql(DIALECT) if where else None
        )
    if isinstance(tree, exp.Update):
        return _update(tree)
    if isinstance(tree, exp.Merge):
        from .merge import merge_plan

        return merge_plan(tree)
    if isinstance(tree, exp.Query):
        return p.Select(query(tree))
    if isinstance(tree, exp.Condition | exp.Alias):
        raise SqlSyntaxError(
            f"expected a statement such as SELECT, INSERT, MERGE or CREATE TABLE, found "
            f"{_line(tree.sql(DIALECT))[:60]!r}"
        )
    if isinstance(tree, exp.Command):
        raise unsupported(f"{str(tree.this).upper()} {_line(str(tree.expression))[:40]}")
    raise unsupported(f"a {type(tree).__name__.upper()} statement")


def _create(tree: exp.Create) -> p.Plan:
    kind = str(tree.args.get("kind", "")).upper()
    exists = bool(tree.args.get("exists"))
    if kind in ("NAMESPACE", "SCHEMA", "DATABASE"):
        target = tree.this
        name = target.name or target.db if isinstance(target, exp.Table) else target.name
        given = tree.args["properties"].expressions if tree.args.get("properties") else []
        if given:
            raise unsupported(
                f"{given[0].sql(DIALECT)} in CREATE {kind}",
                "a namespace of lakelog's catalog is a name only: its tables go under the "
                "warehouse, or LOCATION per table",
            )
        return p.CreateNamespace(str(name).lower(), if_not_exists=exists)
    if kind != "TABLE":
        raise unsupported(f"CREATE {kind}")
    if tree.args.get("replace"):
        raise unsupported("CREATE OR REPLACE TABLE", "DROP TABLE, then CREATE TABLE")
    target = tree.this
    schema: pa.Schema | None = None
    rules = Rules((), (), ())
    if isinstance(target, exp.Schema):
        schema, rules = _columns(target.expressions, "CREATE TABLE")
        target = target.this
    name = table_name(target, "CREATE TABLE")
    using: str | None = None
    location: str | None = None
    parts: tuple[str, ...] = ()
    props: tuple[tuple[str, str], ...] = ()
    for prop in tree.args["properties"].expressions if tree.args.get("properties") else ():
        if isinstance(prop, exp.FileFormatProperty):
            using = prop.this.name.lower()
        elif isinstance(prop, exp.LocationProperty):
            location = _literal(prop.this, "LOCATION")
        elif isinstance(prop, exp.PartitionedByProperty):
            cols = prop.this.expressions if isinstance(prop.this, exp.Schema) else [prop.this]
            if any(isinstance(c, exp.ColumnDef) for c in cols):
                raise unsupported(
                    "PARTITIONED BY with column types",
                    "declare the columns in the column list and name them in PARTITIONED BY",
                )
            # a column (identity) or a transform, day(ts), bucket(16, id), ...: the
            # table checks the fields (docs/partitioning.md)
            parts = tuple(
                c.name if isinstance(c, exp.Column | exp.Identifier) else c.sql(DIALECT)
                for c in cols
            )
        elif isinstance(prop, exp.ClusterProperty):
            raise unsupported(
                "CLUSTER BY in CREATE TABLE",
                "use PARTITIONED BY, and OPTIMIZE ... ZORDER BY (cols) to cluster",
            )
        elif isinstance(prop, exp.SchemaCommentProperty):
            raise unsupported(
                "COMMENT in CREATE TABLE", "keep it as a property: TBLPROPERTIES ('comment' = '..')"
            )
        elif isinstance(prop, exp.Properties):
            props += _properties(prop.expressions, "TBLPROPERTIES")
        elif isinstance(prop, exp.Property):
            props += _properties([prop], "TBLPROPERTIES")
        else:
            raise unsupported(f"the clause {prop.sql(DIALECT)!r} of CREATE TABLE")
    if using != "lakelog":
        raise unsupported(
            f"CREATE TABLE {'USING ' + using if using else 'without USING'}",
            "write CREATE TABLE ... USING lakelog",
        )
    body = tree.expression
    q = query(body) if isinstance(body, exp.Query) else None
    if q is not None and schema is not None:
        raise unsupported("CREATE TABLE with both a column list and AS SELECT")
    if schema is None and q is None and location is None:
        raise SqlSyntaxError(
            f"expected columns, AS SELECT or LOCATION in CREATE TABLE {name}, found none"
        )
    return p.CreateTable(name, schema, parts, props, exists, location, q, *rules)


def _drop(tree: exp.Drop) -> p.Plan:
    kind = str(tree.args.get("kind", "")).upper()
    exists = bool(tree.args.get("exists"))
    targets = tree.args.get("tables") or [tree.this]
    if len(targets) != 1:
        raise unsupported(f"DROP {kind} of several names", "drop them one by one")
    if kind in ("NAMESPACE", "SCHEMA", "DATABASE"):
        t = targets[0]
        return p.DropNamespace(
            str(t.name or t.db).lower(), if_exists=exists, cascade=bool(tree.args.get("cascade"))
        )
    if kind == "TABLE":
        return p.DropTable(
            table_name(targets[0], "DROP TABLE"), exists, bool(tree.args.get("purge"))
        )
    raise unsupported(f"DROP {kind}")


def _alter(tree: exp.Alter) -> p.Plan:
    name = table_name(tree.this, "ALTER TABLE")
    actions = tree.args.get("actions") or []
    if len(actions) != 1:
        raise unsupported("ALTER TABLE with several actions", "run one ALTER TABLE per change")
    action = actions[0]
    if isinstance(action, exp.AlterRename):
        return p.RenameTable(name, table_name(action.this, "RENAME TO"))
    if isinstance(action, exp.RenameColumn):
        return p.RenameColumn(name, action.this.name, action.args["to"].name)
    if isinstance(action, exp.Schema):
        return p.AddColumns(name, _schema(action.expressions, "ADD COLUMNS"))
    if isinstance(action, exp.ColumnDef):
        return p.AddColumns(name, _schema([action], "ADD COLUMN"))
    if isinstance(action, exp.AlterColumn):
        return _alter_column(name, action)
    if isinstance(action, exp.AddConstraint):
        return _add_constraint(name, action)
    if isinstance(action, exp.Drop) and str(action.args.get("kind", "")).upper() == "CONSTRAINT":
        dropped = action.args.get("tables") or []
        if len(dropped) != 1:
            raise unsupported("DROP CONSTRAINT of several names", "drop them one by one")
        return p.DropConstraint(name, dropped[0].name, bool(action.args.get("exists")))
    if isinstance(action, exp.Drop) and str(action.args.get("kind", "")).upper() in (
        "COLUMN",
        "COLUMNS",
    ):
        names: list[str] = []
        for c in action.args.get("tables") or []:  # DROP COLUMN a, DROP COLUMNS (a, b)
            names += [e.name for e in c.expressions] if isinstance(c, exp.Schema) else [c.name]
        return p.DropColumns(name, tuple(names))
    if isinstance(action, exp.AlterSet):
        props = [e for e in action.expressions if isinstance(e, exp.Properties)]
        if len(props) == 1:
            return p.SetProperties(name, _properties(props[0].expressions, "SET TBLPROPERTIES"))
    raise unsupported(f"ALTER TABLE ... {action.sql(DIALECT)[:40]}")


def _add_constraint(name: str, action: exp.AddConstraint) -> p.Plan:
    """``ADD CONSTRAINT c CHECK (expr)`` (Delta's syntax; no other kind of constraint)."""
    found = action.expressions
    if len(found) != 1 or not isinstance(found[0], exp.Constraint):
        raise unsupported(
            f"ALTER TABLE ... {action.sql(DIALECT)[:60]}",
            "lakelog adds one named constraint: ADD CONSTRAINT c CHECK (expr)",
        )
    d = found[0]
    checks = [c for c in d.expressions if isinstance(c, exp.CheckColumnConstraint)]
    if len(checks) != 1 or len(d.expressions) != 1:
        raise unsupported(
            f"the constraint {d.sql(DIALECT)!r} in ALTER TABLE ... ADD CONSTRAINT",
            "lakelog adds CHECK constraints (and SET NOT NULL on a column)",
        )
    return p.AddConstraint(name, d.name, _rule_text(checks[0].this))


def _nullability(name: str, action: exp.AlterColumn) -> p.Plan:
    """``ALTER COLUMN c SET NOT NULL``; ``DROP NOT NULL`` is named as not run."""
    column = action.this
    if isinstance(column, exp.Identifier):
        path = column.name
    elif isinstance(column, (exp.Dot, exp.Column)):
        path = ".".join(i.name for i in column.find_all(exp.Identifier))
    else:
        raise SqlSyntaxError(
            f"expected a column name in ALTER TABLE {name} ALTER COLUMN, found "
            f"{column.sql(DIALECT)!r}"
        )
    if action.args.get("drop"):
        raise unsupported(
            f"ALTER TABLE {name} ALTER COLUMN {path} DROP NOT NULL",
            "lakelog keeps NOT NULL once declared (a table's readers may rely on it); "
            "copy the rows into a new table whose column is nullable",
        )
    return p.SetNotNull(name, path)


def _alter_column(name: str, action: exp.AlterColumn) -> p.Plan:
    """``ALTER COLUMN c TYPE t`` and Delta's ``CHANGE [COLUMN] c c t``: a type change (the
    table's widening); anything else an ALTER COLUMN says is named as not run."""
    column = action.this
    kind: Any = action.args.get("dtype")
    to: Any = action.args.get("rename_to")
    if action.args.get("allow_null") is not None and kind is None and to is None:
        return _nullability(name, action)
    change = to is not None
    words = f"ALTER TABLE {name} {'CHANGE' if change else 'ALTER'} COLUMN {column.sql(DIALECT)}"
    if not isinstance(column, exp.Identifier):
        raise unsupported(f"{words}, a nested field", "change a top-level column's type")
    others = ("comment", "collate", "using", "allow_null", "drop", "default")
    if kind is None or any(action.args.get(k) for k in others):
        raise unsupported(
            f"ALTER TABLE ... {action.sql(DIALECT)[:60]}",
            "lakelog runs ALTER COLUMN c TYPE t (a widening) and RENAME COLUMN",
        )
    if change and to.name.lower() != column.name.lower():
        raise unsupported(
            f"{words} {to.sql(DIALECT)}, a rename",
            f"rename with ALTER TABLE {name} RENAME COLUMN {column.name} TO {to.name}",
        )
    type_text = kind.sql(DIALECT)
    clause = f"{words} {column.sql(DIALECT) + ' ' if change else 'TYPE '}{type_text}"
    return p.AlterColumnType(name, column.name, arrow_type(kind, column.name), clause)


def _insert(tree: exp.Insert) -> p.Plan:
    target = tree.this
    columns: tuple[str, ...] | None = None
    if isinstance(target, exp.Schema):
        columns = tuple(c.name for c in target.expressions)
        target = target.this
    name = table_name(target, "INSERT INTO")
    if tree.args.get("by_name"):
        raise unsupported(
            "INSERT ... BY NAME", "list the columns: INSERT INTO t (a, b) SELECT a, b ..."
        )
    if tree.args.get("partition") or target.args.get("partition"):
        raise unsupported("INSERT ... PARTITION (...)", "use INSERT ... REPLACE WHERE")
    body = tree.expression
    if not isinstance(body, exp.Query | exp.Values):
        raise unsupported(f"INSERT of {type(body).__name__}")
    q = query(body)
    where = tree.args.get("where")
    if where is not None:
        if tree.args.get("overwrite"):
            raise unsupported("INSERT OVERWRITE ... REPLACE WHERE")
        return p.Insert(name, q, "replace_where", where.sql(DIALECT), columns)
    return p.Insert(name, q, "overwrite" if tree.args.get("overwrite") else "append", None, columns)


def _update(tree: exp.Update) -> p.Plan:
    name = table_name(tree.this, "UPDATE")
    if tree.args.get("from_") or tree.args.get("from"):
        raise unsupported("UPDATE ... FROM", "use MERGE INTO")
    sets: list[tuple[str, exp.Expression]] = []
    for eq in tree.expressions:
        if not isinstance(eq, exp.EQ) or not isinstance(eq.this, exp.Column):
            raise SqlSyntaxError(f"expected column = value in SET, found {eq.sql(DIALECT)!r}")
        sets.append((eq.this.name, eq.expression))
    where = tree.args.get("where")
    return p.Update(name, tuple(sets), where.this.sql(DIALECT) if where else None)
