"""The package layout's rules, checked on the imports of every module of lakelog/.

Data flows one way (docs/architecture.md): ``log/`` resolves versions and imports
nothing above it; reading rows (``scan/``) and everything that writes sits above the
log; the operations take the table core (``lakelog.core.TableHandle``), and nothing below
the ``Table`` facade imports it, even for type hints; and no package imports another
package's private (``_``) names. Elsewhere imports under ``TYPE_CHECKING`` are for type
hints only and do not count.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "lakelog"

BELOW_LOG = {
    "errors",
    "filters",
    "paths",
    "stats",
    "storage",
    "partitioning",
    "transforms",
    "_failpoints",
}
"""What ``lakelog.log`` may import besides itself: leaf modules with no table logic."""

FACADE_USERS = {
    "lakelog",
    "lakelog.__main__",
    "lakelog.table",
    "lakelog.tables",
    "lakelog.spark",
}
"""Modules that may import ``lakelog.table`` (the ``Table`` facade): the facade itself, its
entry points by URI (``lakelog.tables``: ``create_table``, ``open_table``...), the
public API (``lakelog/__init__``) and the Spark engine's public surface
(``lakelog/spark/__init__``: ``lakelog.spark.convert`` hands the user a ``Table``, wrapped
by ``lakelog.table.returning_table``)."""

FACADE_USER_PACKAGES = {"cli", "catalog", "sql"}
"""Packages above the facade: the command line; the catalog, which hands out ``Table``
objects by name (as pyiceberg's ``Catalog.load_table`` returns its ``Table``); and the
SQL statements, which run on the tables the catalog hands out through their public
methods, as the command line does."""

FACADE_PENDING: set[str] = set()
"""Modules still typed with the facade, allowed until they move onto the core (none
left: ``lakelog.spark.rowlevel`` takes the handle)."""

CATALOG_USES = {"catalog", "core", "errors", "properties", "storage", "table", "_failpoints"}
"""What ``lakelog.catalog`` may import: names -> locations on top of the core's create
and load, and the ``Table`` facade it hands out; nothing of the commit protocol (log,
transaction) itself."""

CATALOG_USERS = {"catalog", "cli", "__init__", "sql"}
"""Who may import ``lakelog.catalog``: the public API, the command line and the SQL
statements over its names."""

SQL_USES = {"sql", "catalog", "rowlevel", "errors", "filters", "properties", "scan", "transforms"}
"""What ``lakelog.sql`` may import: it sits beside ``spark/`` under the facade, maps
statements onto the catalog and the tables' own operations (reached through the tables
the catalog loads), reads through the scan's engine adapters, turns OPTIMIZE's WHERE
into a filter, names partition fields as the table does (ALTER TABLE ... PARTITION
FIELD), builds a MERGE's clauses (``lakelog.rowlevel.clauses``, plain values) and reads a
table property's value as the table does (VACUUM's least RETAIN); no engine of its own."""

SQL_USERS = {"sql", "cli", "__init__"}
SQL_MODULE_USERS = {
    "lakelog",
    "lakelog.table",
    "lakelog.spark.sql",
    "lakelog.spark.rowlevel.predicate",
    "lakelog.spark.rowlevel.values",
}
"""Who may import ``lakelog.sql``: the command line, ``lakelog.spark.sql`` (the Spark
engine of the statements) and the Spark row-level changes' ``predicate`` and ``values``
(on Spark Connect a SET value's or a merge clause's SQL text is read by
``lakelog.sql.values``; ``lakelog.table`` likewise for a merge clause's SQL text),
nothing else of ``spark/``."""


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(current: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = current.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _runtime_imports(path: Path) -> Iterator[tuple[str, list[str], int]]:
    """(imported module, names, line) of each import not under ``if TYPE_CHECKING``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    current, is_package = _module(path), path.name == "__init__.py"
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                for sub in ast.walk(inner):
                    typing_only.add(id(sub))
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            target = _resolve(current, is_package, node)
            yield target, [a.name for a in node.names], node.lineno
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, [], node.lineno


def _modules() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if "__pycache__" not in p.parts)


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


@pytest.mark.parametrize("path", [p for p in _modules() if _top(_module(p)) == "log"], ids=str)
def test_the_log_imports_nothing_above_it(path: Path) -> None:
    bad = [
        f"line {line}: {target}"
        for target, _, line in _runtime_imports(path)
        if target.startswith("lakelog") and _top(target) not in {"log", *BELOW_LOG}
    ]
    assert not bad, f"{_module(path)} imports above the log: {bad}"


@pytest.mark.parametrize("path", _modules(), ids=str)
def test_no_package_imports_another_packages_private_names(path: Path) -> None:
    here = _top(_module(path))
    bad = []
    for target, names, line in _runtime_imports(path):
        if not target.startswith("lakelog") or _top(target) == here:
            continue
        private = [n for n in names if n.startswith("_") and not n.startswith("__")]
        hidden = [
            p
            for p in target.split(".")[1:]
            if p.startswith("_") and not p.startswith("__") and p != "_failpoints"
        ]
        if private or hidden:
            bad.append(f"line {line}: from {target} import {', '.join(names)}")
    assert not bad, f"{_module(path)} reaches into another package's private names: {bad}"


def _all_imports(path: Path, module: str | None = None) -> Iterator[tuple[str, list[str], int]]:
    """(imported module, names, line) of every import: at import time, inside functions
    and under ``if TYPE_CHECKING``; ``importlib.import_module("...")`` with a literal too."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    current, is_package = module or _module(path), path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            yield _resolve(current, is_package, node), [a.name for a in node.names], node.lineno
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, [], node.lineno
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func).endswith("import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value, [], node.lineno


def _below_the_facade(module: str) -> bool:
    return (
        module not in FACADE_USERS
        and module not in FACADE_PENDING
        and _top(module) not in FACADE_USER_PACKAGES
    )


def _imports_the_facade(target: str, names: list[str]) -> bool:
    return target == "lakelog.table" or (target == "lakelog" and "table" in names)


@pytest.mark.parametrize("path", [p for p in _modules() if _below_the_facade(_module(p))], ids=str)
def test_nothing_below_the_facade_imports_it(path: Path) -> None:
    """Operations take the table core (``lakelog.core.TableHandle``), never the ``Table``
    facade: not at import time, not inside a function, not for type hints."""
    bad = [
        f"line {line}: {target}"
        for target, names, line in _all_imports(path)
        if _imports_the_facade(target, names)
    ]
    assert not bad, f"{_module(path)} imports the Table facade (take a TableHandle): {bad}"


def test_the_facade_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The walk above finds the facade imported for type hints, inside a function and by
    name, so a module cannot slip past it."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from ..table import Table\n"
        "def f():\n"
        "    from .. import table\n"
        "    import lakelog.table\n"
        "    importlib.import_module('lakelog.table')\n",
        encoding="utf-8",
    )
    imports = _all_imports(sample, "lakelog.maintenance.sample")
    found = [(t, n) for t, n, _ in imports if _imports_the_facade(t, n)]
    assert len(found) == 4, found


def test_the_pending_facade_users_still_need_it() -> None:
    """An exemption is removed once its module no longer imports the facade."""
    for module in FACADE_PENDING:
        path = ROOT.parent / (module.replace(".", "/") + ".py")
        assert any(_imports_the_facade(t, n) for t, n, _ in _all_imports(path)), (
            f"{module} no longer imports lakelog.table: remove it from FACADE_PENDING"
        )


@pytest.mark.parametrize("path", [p for p in _modules() if _top(_module(p)) == "catalog"], ids=str)
def test_the_catalog_builds_on_the_core_only(path: Path) -> None:
    bad = [
        f"line {line}: {target}"
        for target, _, line in _runtime_imports(path)
        if target.startswith("lakelog") and _top(target) not in CATALOG_USES
    ]
    assert not bad, f"{_module(path)} imports beyond the core: {bad}"


@pytest.mark.parametrize("path", _modules(), ids=str)
def test_only_the_api_and_the_cli_import_the_catalog(path: Path) -> None:
    module = _module(path)
    if _top(module) in CATALOG_USERS or module == "lakelog":
        return
    bad = [
        f"line {line}: {target}"
        for target, _, line in _runtime_imports(path)
        if _top(target) == "catalog" and target.startswith("lakelog")
    ]
    assert not bad, f"{module} imports the catalog: {bad}"


@pytest.mark.parametrize("path", [p for p in _modules() if _top(_module(p)) == "sql"], ids=str)
def test_the_sql_statements_build_on_the_catalog_and_the_core(path: Path) -> None:
    bad = [
        f"line {line}: {target}"
        for target, _, line in _runtime_imports(path)
        if target.startswith("lakelog") and _top(target) not in SQL_USES
    ]
    assert not bad, f"{_module(path)} imports beyond the catalog and the scan: {bad}"


@pytest.mark.parametrize("path", _modules(), ids=str)
def test_only_the_cli_and_spark_sql_import_the_sql_package(path: Path) -> None:
    module = _module(path)
    if _top(module) in SQL_USERS or module in SQL_MODULE_USERS:
        return
    bad = [
        f"line {line}: {target}"
        for target, _, line in _runtime_imports(path)
        if _top(target) == "sql" and target.startswith("lakelog")
    ]
    assert not bad, f"{module} imports lakelog.sql: {bad}"


PRIVATE_IMPORTS_PENDING = {
    ("lakelog.log.manifests", "_FILES_SCHEMA"),  # version-1 manifests: the codec's one user
}
"""Private names still imported between modules, each to go with its package's next
change."""


def _imports_with_functions(path: Path) -> Iterator[tuple[str, list[str], int]]:
    """Every run-time import of a module, at its top or inside a function, each name of
    ``from package import module`` as the module it is."""
    for target, names, line in _runtime_imports(path):
        yield target, names, line
        for n in names:
            sub = ROOT.parent.joinpath(*target.split("."), n)
            if sub.with_suffix(".py").exists() or (sub / "__init__.py").exists():
                yield f"{target}.{n}", [], line


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (its modules in order, the first repeated last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_the_spark_modules_import_each_other_without_a_cycle() -> None:
    """The modules of ``lakelog.spark`` form no import cycle, counting the imports made
    inside functions (a cycle held together by deferred imports is still one): the
    Python data source is registered by one module that nothing below imports back."""
    graph: dict[str, set[str]] = {}
    for path in _modules():
        module = _module(path)
        if _top(module) != "spark" or path.name == "__init__.py":
            continue
        graph[module] = {
            t
            for t, _, _ in _imports_with_functions(path)
            if t.startswith("lakelog.spark.") and t != module
        }
    cycle = _cycle(graph)
    assert cycle is None, f"the Spark modules import each other in a cycle: {' -> '.join(cycle)}"


@pytest.mark.parametrize("path", _modules(), ids=str)
def test_no_module_imports_another_modules_private_names(path: Path) -> None:
    """A ``_`` name is its module's own, also for the modules of the same package."""
    module = _module(path)
    bad = [
        f"line {line}: from {target} import {n}"
        for target, names, line in _runtime_imports(path)
        if target.startswith("lakelog") and target != module
        for n in names
        if n.startswith("_") and not n.startswith("__")
        if (module, n) not in PRIVATE_IMPORTS_PENDING
    ]
    assert not bad, f"{module} imports another module's private names: {bad}"


def _architecture() -> str:
    return (ROOT.parent / "docs" / "architecture.md").read_text(encoding="utf-8")


def _tree_block(text: str) -> str:
    start = text.index("## The tree")
    begin = text.index("```text\n", start) + len("```text\n")
    return text[begin : text.index("```", begin)]


def _tree_paths(tree: str) -> set[str]:
    """The module paths (relative to ``lakelog/``) the tree lists: a line that starts with
    ``folder/`` opens that package (its modules follow on the line and on lines indented
    deeper); a module belongs to the innermost package above it."""
    listed: set[str] = set()
    stack: list[tuple[int, str]] = [(-1, "")]
    for line in tree.splitlines():
        tokens = line.split()
        if not tokens or tokens[0] == "lakelog/":
            continue
        indent = len(line) - len(line.lstrip())
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        owner = stack[-1][1]
        if tokens[0].endswith("/"):
            owner += tokens[0]
            stack.append((indent, owner))
            listed.add(owner)
            tokens = tokens[1:]
        listed.update(owner + t for t in tokens if t.endswith(".py"))
    return listed


def test_the_architecture_tree_lists_every_module() -> None:
    """docs/architecture.md's tree lists every module of ``lakelog/`` under its own
    package (a newcomer finds every file there)."""
    listed = _tree_paths(_tree_block(_architecture()))
    missing = set()
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if "__pycache__" in rel.parts or (rel.name == "__init__.py" and len(rel.parts) > 1):
            continue
        if rel.as_posix() not in listed:
            missing.add(rel.as_posix())
    assert not missing, f"add to docs/architecture.md's tree: {sorted(missing)}"


def test_the_architecture_names_every_test_folder() -> None:
    text = _architecture()
    tests = text[text.index("## Tests") :]
    folders = [
        p.relative_to(ROOT.parent).as_posix()
        for p in sorted((ROOT.parent / "tests").iterdir())
        if p.is_dir() and p.name != "__pycache__" and any(p.glob("test_*.py"))
    ]
    missing = [f for f in folders if f"`{f}" not in tests]
    assert not missing, f"add to docs/architecture.md's Tests section: {missing}"
