"""``FilterLike`` names every form of filter ``parse_filter`` takes, and is public."""

from __future__ import annotations

import typing
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lakelog
from lakelog.filters import FilterLike, PartitionFilterLike, parse_filter
from lakelog.filters.tree import NODES

SCHEMA = pa.schema([("x", pa.int64()), ("day", pa.string())])


def test_exported_from_lakelog() -> None:
    assert lakelog.FilterLike is FilterLike
    assert "FilterLike" in lakelog.__all__


def test_names_expressions_strings_dnf_predicates_and_none() -> None:
    args = set(typing.get_args(FilterLike))
    assert {pc.Expression, str, type(None)} <= args
    assert set(NODES) <= args  # a parsed predicate is a filter too
    sequences = [a for a in args if typing.get_origin(a) is Sequence]
    assert len(sequences) == 2  # DNF terms, and lists of them (OR-ed)


def test_partition_filters_take_no_strings() -> None:
    args = set(typing.get_args(PartitionFilterLike))
    assert str not in args
    assert {pc.Expression, type(None)} <= args


@pytest.mark.parametrize(
    "filter",
    [
        "x > 1 and day = 'a'",
        pc.field("x") > 1,
        [("x", ">", 1), ("day", "=", "a")],
        [[("x", ">", 1)], [("day", "=", "a")]],
        None,
    ],
    ids=["string", "expression", "dnf", "dnf-or", "none"],
)
def test_every_form_parses(filter: FilterLike) -> None:
    pred = parse_filter(filter, SCHEMA)
    assert (pred is None) == (filter is None)
    assert parse_filter(pred, SCHEMA) == pred  # a predicate is accepted as it is
