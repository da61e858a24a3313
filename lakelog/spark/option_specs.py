"""The registries of the ``lakelog`` Spark entry points' options (:mod:`lakelog.spark.options`
resolves them): the parsers, :class:`Option`, :class:`Registry` and one registry per entry
point (:data:`READ`, :data:`WRITE`, :data:`STREAM_READ`, :data:`STREAM_WRITE`, :data:`LOAD`),
each option with its name, other spellings, parser, default and documentation line
(:func:`markdown_table` makes ``docs/spark.md``'s tables)."""

from __future__ import annotations

import datetime as dt
import difflib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import InvalidArgumentError, UnknownOptionError
from ..properties import PREFIX, validate_properties

__all__ = [
    "DEFAULT_MAX_FILES",
    "LOAD",
    "Option",
    "PARTITION_BYTES",
    "Parser",
    "READ",
    "REGISTRIES",
    "Registry",
    "Resolved",
    "STREAM_READ",
    "STREAM_WRITE",
    "WRITE",
    "markdown_table",
]

DEFAULT_MAX_FILES = 1000
PARTITION_BYTES = 128 << 20

Parser = Callable[[str, str], Any]
"""(the option's name, its text) to its value, or :class:`InvalidArgumentError`."""


# -- parsers -------------------------------------------------------------------------


def _text(name: str, raw: str) -> str:
    return raw


def _flag(name: str, raw: str) -> bool:
    text = raw.strip().lower()
    if text not in ("true", "false"):
        raise InvalidArgumentError(f"expected option {name} to be true or false, found {raw!r}")
    return text == "true"


def _whole(minimum: int, example: str) -> Parser:
    def parse(name: str, raw: str) -> int:
        text = raw.strip()
        if not text.isdigit() or int(text) < minimum:
            raise InvalidArgumentError(
                f"expected option {name} to be a whole number >= {minimum}, found {raw!r}; "
                f"for example .option({name!r}, {example!r})"
            )
        return int(text)

    return parse


def _timestamp(name: str, raw: str) -> dt.datetime:
    try:
        when = dt.datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError as e:
        raise InvalidArgumentError(
            f"expected option {name} as ISO 8601, such as '2026-01-02T03:04:05Z', found {raw!r}"
        ) from e
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.timezone.utc)


def _stream_start(name: str, raw: str) -> int | Literal["latest"]:
    text = raw.strip().lower()
    if text == "latest":
        return "latest"
    if text.isdigit():
        return int(text)
    raise InvalidArgumentError(
        f"expected option {name} to be a version >= 0 or 'latest', found {raw!r}"
    )


def _json_object(name: str, raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise InvalidArgumentError(
            f"expected option {name} to be a JSON object of fsspec settings, found {raw!r}; "
            f"for example .option({name!r}, json.dumps({{'anon': True}}))"
        )
    return value


def _json_names(name: str, raw: str) -> tuple[str, ...]:
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise InvalidArgumentError(
            f"expected option {name} to be a JSON list of column names, found {raw!r}; "
            f"for example .option({name!r}, json.dumps(['id', 'day']))"
        )
    return tuple(value)


def _comma_names(name: str, raw: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in raw.split(",") if c.strip())


def _partition_fields(name: str, raw: str) -> tuple[str, ...]:
    """Comma-separated columns or partition transforms: a comma inside parentheses
    (``bucket(16, id)``) belongs to its field."""
    out: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(raw):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(raw[start:i])
            start = i + 1
    out.append(raw[start:])
    return tuple(f.strip() for f in out if f.strip())


def _choice(*values: str) -> Parser:
    def parse(name: str, raw: str) -> str:
        text = raw.strip().lower()
        if text not in values:
            raise InvalidArgumentError(
                f"expected option {name} to be one of {', '.join(map(repr, values))}, found {raw!r}"
            )
        return text

    return parse


def _paths(name: str, raw: str) -> str:
    """Spark's ``paths`` (``load([a, b])``): a table is one location."""
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        return value[0]
    raise InvalidArgumentError(
        f"expected one table location, such as load('/data/t'), found {raw}; a lakelog "
        f"table is one folder: load each table and union them."
    )


# -- the registry ----------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One option of an entry point."""

    name: str
    """Its name (the spelling messages use)."""
    parse: Parser
    values: str
    """What it takes, for the documentation."""
    default: str
    """Its default, for the documentation."""
    doc: str
    aliases: tuple[str, ...] = ()
    """Other spellings accepted (case-insensitive, as the name)."""
    spark: bool = False
    """Set by Spark itself (``path``...), not by the caller."""
    refused: str | None = None
    """Known here but meaningless: given, it is refused with this reason."""

    @property
    def spellings(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


@dataclass(frozen=True)
class Registry:
    """The options of one entry point."""

    entry: str
    """The entry point as its caller writes it, for messages."""
    options: tuple[Option, ...]
    properties: bool = False
    """Names beginning with ``lakelog.`` are table properties (for a table it creates)."""
    _by_name: dict[str, Option] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name: dict[str, Option] = {}
        for opt in self.options:
            for spelling in opt.spellings:
                if spelling.lower() in by_name:
                    raise ValueError(f"option {spelling!r} declared twice in {self.entry}")
                by_name[spelling.lower()] = opt
        object.__setattr__(self, "_by_name", by_name)

    @property
    def names(self) -> tuple[str, ...]:
        """Every accepted spelling, each option's name first."""
        return tuple(s for o in self.options if o.refused is None for s in o.spellings)

    def option(self, name: str) -> Option | None:
        """The option a name (any case, any spelling) refers to, or None."""
        return self._by_name.get(name.lower())

    def unknown(self, name: str) -> UnknownOptionError:
        """The error of a name this entry point does not know."""
        valid = self.names
        listed = [o.name for o in self.options if o.refused is None]
        by_lower = {n.lower(): n for n in valid}
        near = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
        closest = by_lower[near[0]] if near else None
        hint = f"did you mean {closest!r}? " if closest else ""
        for r in REGISTRIES:
            known = r.option(name)
            if r is not self and known is not None and known.refused is None:
                hint += f"{known.name!r} is an option of {r.entry}. "
        extra = ", or a table property lakelog.<name>" if self.properties else ""
        return UnknownOptionError(
            f"expected an option of {self.entry}, found {name!r}; {hint}Options of "
            f"{self.entry}: {', '.join(listed)}{extra} (case-insensitive; docs/spark.md "
            f"lists them with their other spellings). Nothing was read or written.",
            option=name,
            entry_point=self.entry,
            valid=valid,
            closest=closest,
        )

    def resolve(self, given: Mapping[str, Any]) -> Resolved:
        """Check every name of ``given`` and parse every value: unknown names, options
        refused here and two spellings of one option are errors."""
        values: dict[str, Any] = {}
        said: dict[str, str] = {}
        properties: dict[str, str] = {}
        for key, raw in given.items():
            name = str(key)
            if raw is None:
                continue
            if self.properties and name.lower().startswith(PREFIX):
                properties[name] = str(raw)
                continue
            opt = self.option(name)
            if opt is None:
                raise self.unknown(name)
            if opt.refused is not None:
                raise InvalidArgumentError(
                    f"expected no option {opt.name!r} on {self.entry}, found {raw!r}; "
                    f"{opt.refused}."
                )
            if opt.name in values:
                raise InvalidArgumentError(
                    f"expected option {opt.name!r} once on {self.entry}, found it as "
                    f"{said[opt.name]!r} and as {name!r}; give one."
                )
            spelled = next((s for s in opt.spellings if s.lower() == name.lower()), opt.name)
            said[opt.name] = spelled
            values[opt.name] = opt.parse(spelled, str(raw))
        # table properties are refused by name (and value), whatever the table
        checked = validate_properties(properties) if properties else {}
        return Resolved(self, values, said, checked)


@dataclass(frozen=True)
class Resolved:
    """The options given to an entry point, parsed, by their names."""

    registry: Registry
    values: Mapping[str, Any]
    said: Mapping[str, str]
    """Each given option's name, as the caller spelled it."""
    properties: Mapping[str, str]

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def has(self, name: str) -> bool:
        return name in self.values

    def name(self, name: str) -> str:
        return self.said.get(name, name)

    def only_with(self, names: tuple[str, ...], condition: str, advice: str) -> None:
        """Refuse any of ``names`` given when ``condition`` does not hold."""
        extra = [self.name(n) for n in names if self.has(n)]
        if extra:
            raise InvalidArgumentError(
                f"expected option {extra[0]!r} only with {condition} on "
                f"{self.registry.entry}, found it without; {advice}"
            )

    def one_of(self, a: str, b: str) -> None:
        if self.has(a) and self.has(b):
            raise InvalidArgumentError(
                f"expected option {self.name(a)} or {self.name(b)} on {self.registry.entry}, "
                f"found both; give one of them"
            )

    def location(self) -> str:
        path = self.get("path")
        paths = self.get("paths")
        if path and paths and path != paths:
            raise InvalidArgumentError(
                f"expected one table location on {self.registry.entry}, found {path!r} and "
                f"{paths!r}"
            )
        where = path or paths
        if not where:
            raise InvalidArgumentError(
                f"expected a table location: {self.registry.entry}...load('/data/t') (or "
                f"save/start, or option('path', ...)), found none"
            )
        return str(where)


# -- the options of each entry point -----------------------------------------------------

_PATH = Option(
    "path", _text, "a table location", "-", "Set by Spark from `load`/`save`/`start`.", spark=True
)
_PATHS = Option(
    "paths", _paths, "one location", "-", "Set by Spark from `load([path])`.", spark=True
)
_STORAGE = Option(
    "storageOptions",
    _json_object,
    "a JSON object",
    "none",
    "fsspec settings of the table's filesystem (`s3://` needs no Hadoop filesystem).",
)
_PARTITION_BYTES = Option(
    "maxPartitionBytes",
    _whole(1, str(PARTITION_BYTES)),
    "bytes > 0",
    "128 MiB",
    "Bytes of files per read task (each file counts 4 MiB more, as in Spark's reader).",
)
_CHANGE_FEED = Option(
    "readChangeFeed",
    _flag,
    "`true`, `false`",
    "`false`",
    "Read the change feed: rows with `_change_type`, `_commit_version`, `_commit_timestamp`.",
)
_STARTING_TIMESTAMP = Option(
    "startingTimestamp",
    _timestamp,
    "ISO 8601",
    "none",
    "The first version committed at or after it. Not with `startingVersion`.",
)

READ = Registry(
    "spark.read.format('lakelog')",
    (
        _PATH,
        _PATHS,
        _STORAGE,
        Option(
            "versionAsOf",
            _whole(0, "3"),
            "a version >= 0",
            "the latest",
            "Time travel: read this version.",
        ),
        Option(
            "timestampAsOf",
            _timestamp,
            "ISO 8601",
            "none",
            "Time travel: the latest version committed at or before it.",
        ),
        _PARTITION_BYTES,
        _CHANGE_FEED,
        Option(
            "startingVersion",
            _whole(0, "0"),
            "a version >= 0",
            "none",
            "With `readChangeFeed`: the first version of the range.",
        ),
        Option(
            "startingTimestamp",
            _timestamp,
            "ISO 8601",
            "none",
            "With `readChangeFeed`: the first version committed at or after it.",
        ),
        Option(
            "endingVersion",
            _whole(0, "5"),
            "a version >= 0",
            "the latest",
            "With `readChangeFeed`: the last version of the range.",
        ),
        Option(
            "endingTimestamp",
            _timestamp,
            "ISO 8601",
            "none",
            "With `readChangeFeed`: the last version committed at or before it.",
        ),
        Option(
            "columns",
            _json_names,
            "a JSON list of columns",
            "all",
            "With `readChangeFeed`: the table's columns to return, in order.",
        ),
        Option(
            "filter",
            _text,
            "a lakelog filter",
            "none",
            "With `readChangeFeed`: skips files and keeps the matching rows.",
        ),
    ),
)

_MERGE_SCHEMA = Option(
    "mergeSchema",
    _flag,
    "`true`, `false`",
    "`false`",
    "`true` is `schema_mode='merge'`: new columns are added, wider types widen.",
    aliases=("merge_schema",),
)
_SCHEMA_MODE = Option(
    "schema_mode",
    _choice("strict", "merge"),
    "`strict`, `merge`",
    "`strict`",
    "As `lakelog.spark.write(schema_mode=...)`.",
    aliases=("schemaMode",),
)
_PARTITION_BY = Option(
    "partitionBy",
    _partition_fields,
    "comma-separated columns or transforms",
    "none",
    "Partitioning of a table the write creates: columns, or transforms such as "
    "`day(ts),bucket(16, id)` (Spark does not hand `.partitionBy(...)` to a Python data "
    "source).",
    aliases=("partition_by",),
)
_APP_ID = Option(
    "txnAppId",
    _text,
    "a name",
    "none",
    "With `txnVersion`: exactly-once writes (`app_id=`).",
    aliases=("app_id", "appId"),
)
_PER_BATCH = "the micro-batch id is the app version"
_COMPLETE = "outputMode('complete') replaces the whole table"
_FOREACH = "use foreachBatch with lakelog.spark.write(replace_where=...)"
_OPTIMIZE_WRITE = Option(
    "optimizeWrite",
    _flag,
    "",
    "",
    "",
    aliases=("optimize_write",),
    refused="Spark gives a Python data source no way to shuffle the rows before its tasks "
    "write them; use lakelog.spark.write(df, path, optimize_write=True) (in foreachBatch "
    "for a stream; the table property lakelog.optimize_write=true does the same), or "
    "df.repartition(*partition columns) before writing",
)

WRITE = Registry(
    "df.write.format('lakelog')",
    (
        _PATH,
        _STORAGE,
        Option(
            "replaceWhere",
            _text,
            "a lakelog filter",
            "none",
            "With mode `overwrite`: replace exactly the rows matching it (`replace_where=`).",
            aliases=("replace_where",),
        ),
        Option(
            "partitionOverwriteMode",
            _choice("static", "dynamic"),
            "`static`, `dynamic`",
            "`static`",
            "With mode `overwrite`: `dynamic` replaces only the partitions written.",
            aliases=("partition_overwrite",),
        ),
        _MERGE_SCHEMA,
        _SCHEMA_MODE,
        _APP_ID,
        Option(
            "txnVersion",
            _whole(0, "12"),
            "a whole number >= 0",
            "none",
            "With `txnAppId`: the batch number (`app_version=`).",
            aliases=("app_version", "appVersion"),
        ),
        _PARTITION_BY,
        _OPTIMIZE_WRITE,
    ),
    properties=True,
)

STREAM_READ = Registry(
    "spark.readStream.format('lakelog')",
    (
        _PATH,
        _PATHS,
        _STORAGE,
        Option(
            "startingVersion",
            _stream_start,
            "a version >= 0, `latest`",
            "the snapshot, then each commit",
            "Stream the commits from this version on (`latest`: those after the start).",
        ),
        _STARTING_TIMESTAMP,
        Option(
            "maxFilesPerTrigger",
            _whole(1, "100"),
            "a whole number >= 1",
            f"{DEFAULT_MAX_FILES}",
            "Files per micro-batch at most (no default when only `maxBytesPerTrigger` is set).",
        ),
        Option(
            "maxBytesPerTrigger",
            _whole(1, str(1 << 30)),
            "bytes >= 1",
            "none",
            "Bytes per micro-batch, a soft bound (the file crossing it is the last).",
        ),
        Option(
            "skipChangeCommits",
            _flag,
            "`true`, `false`",
            "`false`",
            "Pass over commits that removed rows (delete, update, merge, overwrite).",
        ),
        _CHANGE_FEED,
        _PARTITION_BYTES,
    ),
)

STREAM_WRITE = Registry(
    "df.writeStream.format('lakelog')",
    (
        _PATH,
        Option(
            "checkpointLocation",
            _text,
            "a folder",
            "the session's",
            "Set by Spark: the query's checkpoint.",
            spark=True,
        ),
        Option("queryName", _text, "a name", "none", "Set by Spark: the query's name.", spark=True),
        _STORAGE,
        _MERGE_SCHEMA,
        _SCHEMA_MODE,
        _PARTITION_BY,
        Option(
            "txnAppId",
            _text,
            "a name",
            "the query's id",
            "Replaces the query's id as the app id of each micro-batch's commit.",
            aliases=("app_id", "appId"),
        ),
        Option(
            "txnVersion",
            _text,
            "",
            "",
            "",
            aliases=("app_version", "appVersion"),
            refused=_PER_BATCH,
        ),
        Option("replaceWhere", _text, "", "", "", aliases=("replace_where",), refused=_FOREACH),
        Option(
            "partitionOverwriteMode",
            _text,
            "",
            "",
            "",
            aliases=("partition_overwrite",),
            refused=_COMPLETE,
        ),
        _OPTIMIZE_WRITE,
    ),
    properties=True,
)

REGISTRIES = (READ, WRITE, STREAM_READ, STREAM_WRITE)
"""Every entry point's registry, in the order docs/spark.md lists them."""

LOAD = Registry(
    "spark.read.format('lakelog') or spark.readStream.format('lakelog')",
    tuple({o.name: o for o in (*READ.options, *STREAM_READ.options)}.values()),
)
"""Both readers' options: Spark asks a source for its schema before it says whether it
streams (:func:`load_options`)."""


def markdown_table(registry: Registry) -> str:
    """The documentation table of an entry point's options (``docs/spark.md``)."""
    lines = ["| option | values | default | meaning |", "| --- | --- | --- | --- |"]
    for o in registry.options:
        if o.refused is not None:
            continue
        names = " / ".join(f"`{s}`" for s in o.spellings)
        lines.append(f"| {names} | {o.values} | {o.default} | {o.doc} |")
    refused = [o for o in registry.options if o.refused is not None]
    for o in refused:
        names = " / ".join(f"`{s}`" for s in o.spellings)
        lines.append(f"| {names} | refused | - | Refused: {o.refused}. |")
    if registry.properties:
        lines.append(
            "| `lakelog.<property>` | a table property | - | A property of a table the "
            "write creates ([format](format.md)); checked by name and value. |"
        )
    return "\n".join(lines)
