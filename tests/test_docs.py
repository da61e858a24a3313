"""The documentation runs as written: every ```python block of README.md and docs/*.md.

Each file's blocks run in order in one namespace (later blocks build on earlier
ones), in a fresh temporary directory that is also the working directory, so the
relative table paths of the docs ("telemetry", "events") land there. Blocks that
use Spark run in the Spark group with the session's SparkSession as ``spark``;
the other blocks of a file also run without Spark (``make test-fast``). A block
that cannot run on a test machine (S3 credentials, a script submitted with
spark-submit) is preceded by ``<!-- no-run: reason -->`` in the markdown. The
``lakelog ...`` command lines of the README run against the table its
quickstart made.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```\s*([\w+-]*)")
NO_RUN = re.compile(r"^<!--\s*no-run\b:?\s*(.*?)\s*-->\s*$")
USES_SPARK = re.compile(r"\bspark\b|\bpyspark\b|\blspark\b")


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, first code line (1-based) and text."""

    path: Path
    lang: str
    line: int
    code: str
    no_run: str | None
    """The reason given by a ``<!-- no-run: ... -->`` line right before the fence."""

    @property
    def spark(self) -> bool:
        return bool(USES_SPARK.search(self.code))

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a markdown file, in order."""
    out: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        before = next((s for s in reversed(lines[:i]) if s.strip()), "")
        marker = NO_RUN.match(before.strip())
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        out.append(
            Block(
                path=path,
                lang=m.group(1),
                line=i + 2,
                code="\n".join(lines[i + 1 : end]) + "\n",
                no_run=None if marker is None else marker.group(1),
            )
        )
        i = end + 1
    return out


def _python(path: Path) -> list[Block]:
    return [b for b in blocks(path) if b.lang == "python" and b.no_run is None]


def _run(block: Block, namespace: dict[str, Any]) -> None:
    """Run a block as if pasted into a script; line numbers in a traceback are the
    markdown file's."""
    code = compile("\n" * (block.line - 1) + block.code, str(block.path), "exec")
    try:
        exec(code, namespace)
    except Exception:  # noqa: BLE001 (any error is a failing doc block: say which)
        pytest.fail(
            f"the block at {block.where} fails as written:\n{block.code}\n{traceback.format_exc()}",
            pytrace=False,
        )


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory; ``tempfile`` also creates its folders there."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in paths]


PLAIN = [p for p in DOCS if any(not b.spark for b in _python(p))]
SPARK = [p for p in DOCS if any(b.spark for b in _python(p))]


def _run_plain(path: Path) -> None:
    namespace: dict[str, Any] = {"__name__": "__main__"}
    for block in _python(path):
        if not block.spark:
            _run(block, namespace)


@pytest.mark.parametrize("path", PLAIN, ids=_ids(PLAIN))
def test_doc_blocks_run(path: Path, workdir: Path) -> None:
    """The blocks that need no Spark, in order."""
    _run_plain(path)


@pytest.mark.slow  # a dozen real `lakelog` processes
def test_readme_command_lines_run(workdir: Path) -> None:
    """The README's blocks that need no Spark, then its command lines against the table
    they made."""
    readme = ROOT / "README.md"
    _run_plain(readme)
    _run_command_lines(readme, workdir)


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
@pytest.mark.parametrize("path", SPARK, ids=_ids(SPARK))
def test_doc_blocks_run_with_spark(path: Path, workdir: Path, spark: Any) -> None:
    """Every block of a file that uses Spark, in order, with the test session's ``spark``."""
    namespace: dict[str, Any] = {"__name__": "__main__", "spark": spark}
    for block in _python(path):
        _run(block, namespace)


def _command_lines(path: Path) -> list[tuple[Block, list[str]]]:
    return [
        (b, shlex.split(line))
        for b in blocks(path)
        if b.lang == "sh" and b.no_run is None
        for line in b.code.splitlines()
        if line.startswith("lakelog ")
    ]


def _run_command_lines(path: Path, cwd: Path) -> None:
    """Each ``lakelog ...`` line of the README's shell blocks, through the installed
    entry point, against the table the quickstart made."""
    script = Path(sys.executable).with_name("lakelog")
    prefix = [str(script)] if script.exists() else [sys.executable, "-m", "lakelog.cli"]
    lines = _command_lines(path)
    assert lines, f"expected `lakelog ...` command lines in {path.name}"
    for block, argv in lines:
        done = subprocess.run(
            prefix + argv[1:], cwd=cwd, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, (
            f"`{shlex.join(argv)}` ({block.where}) exited {done.returncode}:\n"
            f"{done.stdout}{done.stderr}"
        )


def test_no_run_markers_are_few_and_explained() -> None:
    """Every ``<!-- no-run -->`` says why and stands right before a block; the parser
    finds the README's examples (so a broken parser cannot make this file pass)."""
    readme = blocks(ROOT / "README.md")
    assert sum(b.lang == "python" for b in readme) >= 3
    skipped = [b for p in DOCS for b in blocks(p) if b.no_run is not None]
    for b in skipped:
        assert b.no_run, f"the no-run marker before {b.where} gives no reason"
    for p in DOCS:
        lines = p.read_text().splitlines()
        for i, line in enumerate(lines):
            if "no-run" in line and line.strip().startswith("<!--"):
                assert NO_RUN.match(line.strip()), f"{p.name}:{i + 1}: malformed marker"
                rest = [s for s in lines[i + 1 :] if s.strip()]
                assert rest and FENCE.match(rest[0]), f"{p.name}:{i + 1}: no block follows"
    python = [b for p in DOCS for b in blocks(p) if b.lang == "python"]
    assert len([b for b in skipped if b.lang == "python"]) <= len(python) // 4
