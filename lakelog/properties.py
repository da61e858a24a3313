"""Table properties: names, defaults and typed access.

Properties live in the table's ``metadata`` action as strings. Every option
that has a table-wide default reads it from here, so the defaults are listed
in one place (and in ``docs/format.md``).
"""

from __future__ import annotations

from collections.abc import Mapping

from .errors import InvalidArgumentError

__all__ = ["DEFAULTS", "get_bool", "get_float", "get_int", "get_str", "validate_properties"]

MiB = 1024 * 1024

DEFAULTS: dict[str, str] = {
    # log
    "lakelog.manifest_interval": "10",
    "lakelog.commit.max_attempts": "100",
    "lakelog.commit.timeout_seconds": "300",
    # writing data files
    "lakelog.target_file_size": str(128 * MiB),
    "lakelog.row_group_size": str(256 * 1024),
    "lakelog.compression": "zstd",
    # compaction (Iceberg's defaults: candidates are files below 75% of the target)
    "lakelog.compaction.min_file_size_ratio": "0.75",
    "lakelog.compaction.min_input_files": "2",
    "lakelog.compaction.max_concurrent_groups": "2",
    "lakelog.compaction.groups_per_commit": "10",  # with partial_progress
    # clustering (optimize)
    "lakelog.clustering.max_rewrite_ratio": "8",
    "lakelog.clustering.min_delta_file_ratio": str(1 / 64),
    "lakelog.clustering.max_group_bytes": str(1024 * MiB),
    # cleanup
    "lakelog.expire.older_than_seconds": str(7 * 24 * 3600),
    "lakelog.expire.retain_last": "10",
    "lakelog.vacuum.older_than_seconds": str(3 * 24 * 3600),
    "lakelog.vacuum.min_age_seconds": "3600",
}

_POSITIVE_INTS = {
    "lakelog.manifest_interval",
    "lakelog.commit.max_attempts",
    "lakelog.target_file_size",
    "lakelog.row_group_size",
    "lakelog.compaction.min_input_files",
    "lakelog.compaction.max_concurrent_groups",
    "lakelog.compaction.groups_per_commit",
    "lakelog.expire.retain_last",
}


def get_str(props: Mapping[str, str], key: str) -> str:
    return props.get(key, DEFAULTS[key])


def get_int(props: Mapping[str, str], key: str) -> int:
    raw = get_str(props, key)
    try:
        return int(raw)
    except ValueError as e:
        raise InvalidArgumentError(
            f"expected table property {key} to be an integer, found {raw!r}; "
            f"fix it with table.set_properties({{{key!r}: '...'}})."
        ) from e


def get_float(props: Mapping[str, str], key: str) -> float:
    raw = get_str(props, key)
    try:
        return float(raw)
    except ValueError as e:
        raise InvalidArgumentError(
            f"expected table property {key} to be a number, found {raw!r}"
        ) from e


def get_bool(props: Mapping[str, str], key: str) -> bool:
    return get_str(props, key).strip().lower() in ("1", "true", "yes", "on")


def validate_properties(props: Mapping[str, object]) -> dict[str, str]:
    """Properties as strings; known integer properties must be positive."""
    out: dict[str, str] = {}
    for key, value in props.items():
        if not isinstance(key, str) or not key:
            raise InvalidArgumentError(f"expected property names to be strings, found {key!r}")
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if key in _POSITIVE_INTS:
            try:
                ok = int(text) > 0
            except ValueError:
                ok = False
            if not ok:
                raise InvalidArgumentError(
                    f"expected table property {key} to be a positive integer, found {value!r}"
                )
        out[key] = text
    return out
