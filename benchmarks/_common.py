"""Shared helpers for the lakelog benchmark scripts.

* :func:`median_time` - repeat a callable and report the median wall time.
* :func:`run_in_subprocess_peak_rss` - run a code snippet or a ``module:function``
  in a fresh interpreter and report its wall time, its own peak RSS and its
  stdout.  The child reports its peak RSS itself (Linux ``VmHWM``, see
  ``_DRIVER``) on a final marker line, so several children never mix numbers.
* :func:`fmt_bytes`, :func:`print_table` - plain text output.
* :func:`write_json_result` - append one result record to
  ``benchmarks/results/<name>.json`` (a JSON list).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, NamedTuple

__all__ = [
    "BENCH_DIR",
    "REPO_ROOT",
    "RESULTS_DIR",
    "ChildRun",
    "fmt_bytes",
    "median_time",
    "print_table",
    "run_in_subprocess_peak_rss",
    "write_json_result",
]

BENCH_DIR: Path = Path(__file__).resolve().parent
REPO_ROOT: Path = BENCH_DIR.parent
RESULTS_DIR: Path = BENCH_DIR / "results"

# --------------------------------------------------------------------------- timing


def median_time(
    fn: Callable[[], object], *, repeat: int = 5, warmup: int = 1
) -> tuple[float, list[float]]:
    """Call ``fn()`` ``warmup`` times untimed, then ``repeat`` times timed.

    Returns ``(median_seconds, samples)`` where ``samples`` holds every timed run
    (``time.perf_counter`` deltas) in call order.
    """
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    for _ in range(warmup):
        fn()
    samples: list[float] = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), samples


# ------------------------------------------------------------- subprocess + peak RSS

# Prefix of the last line the child writes on stdout.  The parent strips that line
# (and the newline written just before it) so ``ChildRun.stdout`` is exactly what
# the snippet / function printed.
_MARKER = "__LAKELOG_CHILD_REPORT__ "

# Program run by the child interpreter.  It reads its job (JSON) from stdin, runs
# it, then prints the marker line with its own peak RSS.
#
# Peak RSS source: on Linux ``VmHWM`` from /proc/self/status (high-water mark of
# the child's own address space).  ``getrusage(RUSAGE_SELF).ru_maxrss`` is NOT
# used there: Linux carries the pre-exec high-water mark across fork/vfork+exec,
# so a fresh child reports at least the *parent's* RSS (measured: a 330 MiB parent
# made an idle child report 330 MiB, while its VmHWM was 9 MiB).  Elsewhere
# ``ru_maxrss`` is the fallback (KiB on Linux, bytes on macOS).
_DRIVER = r"""
import importlib, json, os, resource, sys

job = json.loads(sys.stdin.read())
sys.stdin = open(os.devnull)
for entry in reversed(job["sys_path"]):
    if entry not in sys.path:
        sys.path.insert(0, entry)
try:
    if job["kind"] == "code":
        namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        exec(compile(job["code"], "<lakelog-bench-snippet>", "exec"), namespace)
    else:
        module_name, _, attr = job["func"].partition(":")
        target = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
        result = target(*job["args"], **job["kwargs"])
        if result is not None:
            print(json.dumps(result))
except SystemExit as exc:
    if exc.code not in (None, 0):
        raise
sys.stdout.flush()
peak = None
try:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                peak = int(line.split()[1]) * 1024
except OSError:
    pass
if peak is None:
    scale = 1 if sys.platform == "darwin" else 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
sys.stdout.write("\n" + MARKER + json.dumps({"peak_rss_bytes": peak}) + "\n")
sys.stdout.flush()
""".replace("MARKER", repr(_MARKER))


class ChildRun(NamedTuple):
    """Outcome of :func:`run_in_subprocess_peak_rss` (unpacks as a 3-tuple)."""

    wall_seconds: float
    """Wall time of the whole child, interpreter start-up included (measured by
    the parent).  Time a part of the work inside the snippet if start-up and
    imports must be excluded."""
    peak_rss_bytes: int
    """Peak resident set size of the child process itself."""
    stdout: str
    """Everything the snippet / function printed, without the report line."""

    def last_json(self) -> Any:
        """Parse the last non-empty stdout line as JSON.

        With ``func=...`` a non-``None`` return value is printed as that line.
        """
        for line in reversed(self.stdout.splitlines()):
            if line.strip():
                return json.loads(line)
        raise ValueError("the child printed nothing")


def run_in_subprocess_peak_rss(
    code: str | None = None,
    *,
    func: str | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float | None = None,
    extra_sys_path: Sequence[str | os.PathLike[str]] = (),
) -> ChildRun:
    """Run work in a fresh ``sys.executable`` and measure it.

    Give exactly one of:

    * ``code``: Python source executed as ``__main__`` in the child;
    * ``func``: ``"module:function"`` (dotted attributes allowed after the colon),
      called with the JSON-serialisable ``args`` / ``kwargs``.  If it returns
      something other than ``None`` the value is printed as one JSON line, which
      :meth:`ChildRun.last_json` reads back.

    The child's ``sys.path`` starts with the repository root and ``benchmarks/``
    (then ``extra_sys_path``), so both ``lakelog`` and ``_data`` /
    ``benchmarks._data`` import.  ``env`` replaces the environment when given.

    Raises :class:`subprocess.CalledProcessError` (with the child's stderr) if the
    child fails and :class:`subprocess.TimeoutExpired` on timeout.  On success the
    child's stderr, if any, is forwarded to this process's stderr.
    """
    if (code is None) == (func is None):
        raise TypeError("give exactly one of code= or func=")
    if func is not None and ":" not in func:
        raise ValueError(f"func must look like 'module:function', got {func!r}")
    sys_path = [str(REPO_ROOT), str(BENCH_DIR), *(os.fspath(p) for p in extra_sys_path)]
    job: dict[str, Any] = {"sys_path": sys_path}
    if code is not None:
        job |= {"kind": "code", "code": code}
    else:
        job |= {
            "kind": "func",
            "func": func,
            "args": list(args),
            "kwargs": dict(kwargs or {}),
        }
    payload = json.dumps(job)

    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _DRIVER],
        input=payload,
        capture_output=True,
        text=True,
        env=None if env is None else dict(env),
        cwd=REPO_ROOT if cwd is None else cwd,
        timeout=timeout,
        check=False,
    )
    wall = time.perf_counter() - start

    if proc.returncode != 0:
        raise subprocess.CalledProcessError(
            proc.returncode,
            [sys.executable, "-c", "<driver>"],
            proc.stdout,
            proc.stderr,
        )
    if proc.stderr:
        sys.stderr.write(proc.stderr)
    out = proc.stdout
    cut = out.rfind("\n" + _MARKER)
    if cut < 0:
        raise RuntimeError(f"child exited without its report line; stdout tail: {out[-500:]!r}")
    report = json.loads(out[cut + 1 + len(_MARKER) :].strip())
    return ChildRun(
        wall_seconds=wall,
        peak_rss_bytes=int(report["peak_rss_bytes"]),
        stdout=out[:cut],
    )


# ------------------------------------------------------------------------- output

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def fmt_bytes(n: float) -> str:
    """Human-readable binary size: ``fmt_bytes(1536) == '1.5 KiB'``."""
    if not math.isfinite(n):
        return str(n)
    sign = "-" if n < 0 else ""
    value = float(abs(n))
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            if unit == "B":
                return f"{sign}{int(value)} B"
            return f"{sign}{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _fmt_cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value != 0 and abs(value) < 1e-3:
            return f"{value:.3e}"
        if abs(value) >= 1000:
            return f"{value:,.1f}"
        return f"{value:.4f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def print_table(
    rows: Sequence[Mapping[str, object]],
    *,
    columns: Sequence[str] | None = None,
    file: IO[str] | None = None,
) -> None:
    """Print ``rows`` as an aligned plain-text table.

    Columns default to the union of keys in first-seen order; missing cells are
    blank.  Numbers are right-aligned (ints with thousands separators, floats
    with 4 decimals), everything else left-aligned.
    """
    out = sys.stdout if file is None else file
    if not rows:
        print("(no rows)", file=out)
        return
    if columns is None:
        seen: dict[str, None] = {}
        for row in rows:
            for key in row:
                seen.setdefault(key, None)
        columns = list(seen)
    cells = [[_fmt_cell(row.get(col)) for col in columns] for row in rows]
    numeric = [
        all(
            isinstance(row.get(col), (int, float)) and not isinstance(row.get(col), bool)
            for row in rows
            if row.get(col) is not None
        )
        for col in columns
    ]
    widths = [max(len(col), *(len(r[i]) for r in cells)) for i, col in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    print(line(list(columns)), file=out)
    print("  ".join("-" * w for w in widths), file=out)
    for r in cells:
        print(line(r), file=out)


# ------------------------------------------------------------------------ results


def _environment() -> dict[str, object]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }


def write_json_result(
    name: str,
    result: Mapping[str, Any],
    *,
    results_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Append ``result`` to ``benchmarks/results/<name>.json`` and return the path.

    The file holds a JSON list of records; each appended record is ``result``
    plus ``recorded_at`` (UTC ISO 8601) and ``environment`` unless the caller
    already set those keys.  The file is replaced atomically.
    """
    if not name or Path(name).name != name:
        raise ValueError(f"result name must be a plain file stem, got {name!r}")
    directory = RESULTS_DIR if results_dir is None else Path(results_dir)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{name}.json"

    records: list[Any] = []
    if target.exists() and target.stat().st_size > 0:
        existing = json.loads(target.read_text(encoding="utf-8"))
        if not isinstance(existing, list):
            raise ValueError(f"{target} does not hold a JSON list")
        records = existing
    record: dict[str, Any] = {
        "recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "environment": _environment(),
    }
    record.update(result)
    records.append(record)

    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(records, fh, indent=2, default=str)
            fh.write("\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
