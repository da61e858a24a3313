"""lakelog's errors through Spark: the same class on the driver as in the worker.

A :class:`~lakelog.errors.LakelogError` raised in a Python worker (a task of a
``mapInArrow`` job, the ``lakelog`` data source, the streaming source or sink)
reaches the driver as one of Spark's exceptions (``AnalysisException``,
``PythonException``, ``StreamingQueryException``, ``Py4JJavaError``, or their
Spark Connect variants) whose message holds the worker's traceback as text.
This module carries the error across:

* in workers, :func:`carry` (a decorator for functions and classes) adds one
  note to a lakelog error leaving them: :data:`MARKER` and the error's class,
  message and details as one line of JSON. Python prints notes after the
  exception line, so Spark's message holds it;
* on the driver, :func:`lakelog_error` finds the last marker in an exception
  (its text, its causes), or, for an error raised by code without the marker,
  the ``lakelog.errors.Name: message`` line that ends a worker's traceback, and
  builds the same class with the same message and details;
  :func:`unwrap`, :func:`typed_errors` and :func:`raises_typed` give it to the
  caller, raised ``from None`` (no Spark traceback above it).

Every ``lakelog.spark`` function raises through :func:`raises_typed`; code that
calls Spark itself (``spark.read.format("lakelog")``, ``writeStream``,
``query.awaitTermination()``) wraps the call in ``with typed_errors():`` or
passes a caught exception to :func:`unwrap` (docs/spark.md).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import re
from collections.abc import Callable, Generator, Iterator
from types import TracebackType
from typing import Any, Literal, ParamSpec, TypeVar

from .. import errors as _errors
from ..errors import LakelogError

__all__ = ["MARKER", "carry", "lakelog_error", "raises_typed", "typed_errors", "unwrap"]

MARKER = "lakelog-error: "
"""Starts the note that carries a lakelog error through Spark's messages."""

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

_SCALARS = (str, int, float, bool, type(None))
_NOTE = re.compile(r"^\s*" + re.escape(MARKER) + r"(\{.*\})\s*$", re.M)
_LINE = re.compile(r"^(?:lakelog\.errors\.)([A-Z]\w*): (.*)$", re.M)
_LATER = re.compile(
    r"^(During handling of the above exception|The above exception was the direct cause)",
    re.M,
)


# -- in workers -------------------------------------------------------------------------


def _details(error: LakelogError) -> tuple[dict[str, Any], list[str]]:
    """The error's details that JSON carries (strings, numbers, lists of them); the names
    of those that are tuples."""
    details: dict[str, Any] = {}
    tuples: list[str] = []
    for name, value in vars(error).items():
        if name.startswith("_"):
            continue
        if isinstance(value, _SCALARS):
            details[name] = value
        elif isinstance(value, (list, tuple)) and all(isinstance(v, _SCALARS) for v in value):
            details[name] = list(value)
            if isinstance(value, tuple):
                tuples.append(name)
        elif isinstance(value, dict) and all(
            isinstance(k, str) and isinstance(v, _SCALARS) for k, v in value.items()
        ):
            details[name] = value
    return details, tuples


def mark(error: LakelogError) -> LakelogError:
    """Add the marker note to ``error`` (once) and return it."""
    if any(str(n).startswith(MARKER) for n in getattr(error, "__notes__", ())):
        return error
    details, tuples = _details(error)
    body = {"type": type(error).__name__, "message": str(error), "details": details}
    if tuples:
        body["tuples"] = tuples
    error.add_note(MARKER + json.dumps(body, separators=(",", ":"), default=str))
    return error


def _carry_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def generator(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            try:
                return (yield from fn(*args, **kwargs))
            except LakelogError as e:
                mark(e)
                raise

        return generator

    @functools.wraps(fn)
    def plain(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LakelogError as e:
            mark(e)
            raise

    return plain


def carry(target: T) -> T:
    """Mark a lakelog error leaving ``target`` (a function, or every public method a class
    defines) so that the driver raises it again as the same class."""
    if isinstance(target, type):
        for name, member in list(vars(target).items()):
            if name.startswith("_") or not inspect.isfunction(member):
                continue
            setattr(target, name, _carry_function(member))
        return target
    return _carry_function(target)  # type: ignore[arg-type,return-value]


# -- on the driver ----------------------------------------------------------------------


def _texts(error: BaseException) -> Iterator[str]:
    """The texts of ``error`` and its causes, outermost first."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        try:
            yield str(current)
        except Exception:  # noqa: BLE001 - a Py4J error whose JVM is gone
            yield repr(current)
        for note in getattr(current, "__notes__", None) or ():
            yield str(note)
        current = current.__cause__ or current.__context__


def _build(name: str, message: str, details: dict[str, Any]) -> LakelogError | None:
    cls = getattr(_errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, LakelogError)):
        return None
    # the classes take their details by keyword, differently: build without __init__
    error = cls.__new__(cls, message)
    BaseException.__init__(error, message)
    for key, value in details.items():
        setattr(error, key, value)
    return error


def _from_note(text: str) -> LakelogError | None:
    found = None
    for m in _NOTE.finditer(text):
        found = m
    if found is None:
        return None
    try:
        body = json.loads(found.group(1))
        details = dict(body.get("details") or {})
        for name in body.get("tuples") or ():
            if isinstance(details.get(name), list):
                details[name] = tuple(details[name])
        return _build(str(body["type"]), str(body["message"]), details)
    except (ValueError, KeyError, TypeError):
        return None


def _from_line(text: str) -> LakelogError | None:
    """The ``lakelog.errors.Name: message`` line that ends a worker's traceback (code that
    does not mark its errors): the class and the first line of the message."""
    found = None
    for m in _LINE.finditer(text):
        found = m
    if found is None or _LATER.search(text, found.end()):
        return None  # none, or another exception was raised while handling it
    message = found.group(2).removesuffix(" SQLSTATE: 38000").rstrip()
    return _build(found.group(1), message, {})


def lakelog_error(error: BaseException) -> LakelogError | None:
    """The lakelog error that ``error`` (one of Spark's) carries, as its own class; None
    if it carries none. A lakelog error is itself."""
    if isinstance(error, LakelogError):
        return error
    texts = list(_texts(error))
    for text in texts:
        found = _from_note(text)
        if found is not None:
            return found
    for text in texts:
        found = _from_line(text)
        if found is not None:
            return found
    return None


def unwrap(error: BaseException) -> BaseException:
    """The lakelog error that ``error`` carries (``lakelog.spark.unwrap(query.exception())``),
    or ``error`` itself."""
    found = lakelog_error(error)
    return error if found is None else found


class _TypedErrors(contextlib.ContextDecorator):
    def __enter__(self) -> _TypedErrors:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        if not isinstance(error, Exception) or isinstance(error, LakelogError):
            return False
        found = lakelog_error(error)
        if found is None:
            return False
        raise found from None


def typed_errors() -> contextlib.ContextDecorator:
    """``with typed_errors(): ...`` raises a lakelog error that a Spark exception of the
    block carries as that error (``except lakelog.errors.VersionExpiredError`` catches
    it); other exceptions pass unchanged."""
    return _TypedErrors()


def raises_typed(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` raising, through :func:`typed_errors`, the lakelog errors Spark carried."""

    @functools.wraps(fn)
    def typed(*args: P.args, **kwargs: P.kwargs) -> R:
        with _TypedErrors():
            return fn(*args, **kwargs)

    return typed
