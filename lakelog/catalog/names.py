"""Names in the catalog: ``namespace.table``, each part a safe identifier.

A name becomes a folder under the warehouse (``<warehouse>/<namespace>/<table>``), so
it is checked before anything is read or written: letters, digits, ``_`` and ``-``,
not starting with ``-``, at most :data:`MAX_LENGTH` characters. That rules out ``..``,
``/``, ``\\``, empty parts and anything else a filesystem or shell reads specially.
Names are case-insensitive and kept in lower case (two names differing in case would
share a folder on a case-insensitive filesystem).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

from ..errors import InvalidNameError

__all__ = ["MAX_LENGTH", "check_identifier", "close_names", "looks_like_name", "split_name"]

MAX_LENGTH = 128
_IDENTIFIER = re.compile(r"[a-z0-9_][a-z0-9_-]*")


def check_identifier(value: object, *, what: str = "namespace") -> str:
    """``value`` as a lower-case identifier, or :class:`InvalidNameError`."""
    if not isinstance(value, str):
        raise InvalidNameError(
            f"expected the {what} to be a string such as 'sales', found "
            f"{type(value).__name__} {value!r}"
        )
    lowered = value.lower()
    if len(lowered) > MAX_LENGTH:
        raise InvalidNameError(
            f"expected a {what} of at most {MAX_LENGTH} characters, found {len(value)} "
            f"({value[:20]!r}...); choose a shorter name."
        )
    if not _IDENTIFIER.fullmatch(lowered):
        found = "an empty name" if not value else repr(value)
        raise InvalidNameError(
            f"expected a {what} of letters, digits, '_' and '-' (not starting with '-'), "
            f"found {found}; names become folders under the warehouse, so paths such as "
            f"'..' or '/' are refused."
        )
    return lowered


def split_name(name: object) -> tuple[str, str]:
    """``"namespace.table"`` as its two checked, lower-case parts."""
    if not isinstance(name, str):
        raise InvalidNameError(
            f"expected a table name 'namespace.table' such as 'sales.orders', found "
            f"{type(name).__name__} {name!r}"
        )
    if name.count(".") != 1:
        raise InvalidNameError(
            f"expected a table name 'namespace.table' (exactly one '.') such as "
            f"'sales.orders', found {name!r}"
        )
    namespace, table = name.split(".")
    return check_identifier(namespace), check_identifier(table, what="table name")


def looks_like_name(text: str) -> bool:
    """Whether ``text`` reads as a valid ``namespace.table`` (no error raised)."""
    parts = text.lower().split(".")
    return len(parts) == 2 and all(len(p) <= MAX_LENGTH and _IDENTIFIER.fullmatch(p) for p in parts)


def close_names(wanted: str, names: Iterable[str], *, limit: int = 3) -> tuple[str, ...]:
    """The names most like ``wanted`` (for "did you mean" hints)."""
    return tuple(difflib.get_close_matches(wanted, list(names), n=limit, cutoff=0.6))
