"""The format registry (``lakelog.log.format``) against the spec and the code.

The registry's features, current version and new-table version are those of
``docs/format.md``; every reader path refuses a newer version with the one message
shape; commits, ``metadata`` actions and manifests declare the versions the spec's
"Versioning" section gives; the fields a manifest header carries go both ways; and no
other module writes a format version down.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

import lakelog
from lakelog.errors import InvalidArgumentError, UnsupportedFormatError
from lakelog.log import format as fmt
from lakelog.log.actions import (
    Action,
    AddFile,
    AppTransaction,
    ChangeFile,
    ClaimGroup,
    DeletionVector,
    ExpireVersions,
    Metadata,
    PlanClaim,
    PlanRelease,
    RemoveFile,
    encode_schema,
)
from lakelog.log.checkpoint import header_for
from lakelog.log.commits import commit_path, list_log, read_commit, read_header
from lakelog.log.files import ReplayState
from lakelog.log.leaves import CACHE, Leaf, load_leaves, plans_path
from lakelog.log.manifests import (
    ManifestHeader,
    Root,
    carry_into_state,
    encode_root,
    manifest_path,
    read_manifest,
    read_manifest_header,
)
from lakelog.log.snapshot import load_snapshot
from lakelog.storage import Storage

ROOT = Path(__file__).resolve().parents[2]
SPEC = (ROOT / "docs" / "format.md").read_text()
SCHEMA = pa.schema([("id", pa.int64())])
NEWER = fmt.CURRENT + 1
REFUSED = f"<= {fmt.CURRENT}, found {NEWER}"
UPGRADE = "; upgrade lakelog to read this table."


# -- the registry and the spec ----------------------------------------------------------


def _versioning_table() -> list[tuple[str, int, str]]:
    section = SPEC.split("\n## Versioning\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| (\d+) \| (.+?) \|$", section, flags=re.MULTILINE)
    return [(name, int(version), what) for name, version, what in rows]


def test_the_features_are_those_of_the_spec() -> None:
    assert _versioning_table() == [(f.name, f.version, f.description) for f in fmt.FEATURES]
    assert [f.version for f in fmt.FEATURES] == sorted(f.version for f in fmt.FEATURES)
    title = re.search(r"^# The lakelog table format, version (\d+)$", SPEC, flags=re.MULTILINE)
    assert title is not None and int(title.group(1)) == fmt.CURRENT
    assert max(f.version for f in fmt.FEATURES) == fmt.CURRENT
    assert fmt.BASE == 1
    prose = " ".join(SPEC.split())
    assert f"new tables are created at {fmt.NEW_TABLE}" in prose
    assert fmt.NEW_TABLE == fmt.CLAIMS.version == 3


def test_each_feature_has_its_section_and_each_marked_section_a_feature() -> None:
    headings = re.findall(r"^#+ (.+)$", SPEC, flags=re.MULTILINE)
    for f in fmt.FEATURES:
        marked = f"{f.section} (version {f.version})"
        assert marked in headings or (f.version == fmt.BASE and f.section in headings), f
    known = {(f.section, f.version) for f in fmt.FEATURES}
    for h in headings:
        m = re.fullmatch(r"(.+) \(version (\d+)\)", h)
        if m is not None:
            assert (m.group(1), int(m.group(2))) in known, h


def test_features_by_name() -> None:
    assert fmt.feature("deletion_vectors") is fmt.DELETION_VECTORS
    assert fmt.DELETION_VECTORS.declared_by(5) and not fmt.DELETION_VECTORS.declared_by(4)
    with pytest.raises(InvalidArgumentError, match="format features"):
        fmt.feature("row_tracking")


def test_no_other_module_writes_a_format_version_down() -> None:
    """Adding a version is a change of the registry: elsewhere, versions are named
    (``fmt.CLAIMS.version``), never numbers. Saved maintenance plans have their own
    ``plan_format``, which is not a table format version."""
    constant = re.compile(r"^\s*[A-Z_]*FORMAT[A-Z_]*\s*(:[^=]+)?=\s*\d", flags=re.MULTILINE)
    compared = re.compile(r"format_version\s*(==|[<>]=?)\s*\d|\d\s*(==|[<>]=?)\s*\S*format_version")
    found = []
    for path in (ROOT / "lakelog").rglob("*.py"):
        if path.name == "format.py" and path.parent.name == "log":
            continue
        text = path.read_text()
        for m in [*constant.finditer(text), *compared.finditer(text)]:
            line = m.group(0).strip()
            if not line.startswith(("PLAN_FORMAT", "CLUSTER_PLAN_FORMAT")):
                found.append(f"{path.relative_to(ROOT)}: {line}")
    assert found == []


# -- one check for every reader ---------------------------------------------------------


@given(version=st.integers(0, 20), reader=st.integers(1, 20), what=st.sampled_from(["log", "x"]))
def test_check_readable_refuses_exactly_the_newer_versions(
    version: int, reader: int, what: str
) -> None:
    assert fmt.readable(version, reader_version=reader) == (version <= reader)
    if version <= reader:
        fmt.check_readable(version, what=what, where="f", reader_version=reader)
        return
    with pytest.raises(UnsupportedFormatError) as info:
        fmt.check_readable(version, what=what, where="f", reader_version=reader)
    assert str(info.value) == (
        f"expected {what} format version <= {reader}, found {version} in f{UPGRADE}"
    )


COW = {"lakelog.deletion_vectors": "false"}
"""New tables have deletion vectors on (version 5) unless created with this."""


def _table(tmp_path: Path, **props: Any) -> lakelog.Table:
    """Versions 0..3, a manifest (a root, unless in ``writing_manifests(1)``) at each;
    without deletion vectors (``COW``), so the versions are those of their features."""
    properties = {"lakelog.manifest_interval": 1, **COW, **props}
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA, properties=properties)
    for i in range(3):
        t.append(pa.table({"id": [i]}))
    return t


def _file(t: lakelog.Table, rel: str) -> Path:
    return Path(t.storage.full(rel))


def _rewrite_root(t: lakelog.Table, **fields: Any) -> str:
    root = read_manifest(t.storage, t.version)
    assert isinstance(root, Root)
    header = msgspec.structs.replace(root.header, **fields)
    t.storage.write_bytes(manifest_path(t.version), encode_root(header, root.entries))
    return manifest_path(t.version)


def _rewrite_parquet_header(path: Path, **fields: Any) -> None:
    table = pq.read_table(path)
    header = json.loads(table.schema.metadata[b"lakelog"])
    header.update(fields)
    pq.write_table(table.replace_schema_metadata({b"lakelog": json.dumps(header)}), path)


def _newer_commit(t: lakelog.Table) -> tuple[Callable[[], object], str]:
    path = _file(t, commit_path(t.version))
    doc = json.loads(path.read_bytes())
    doc["header"]["format_version"] = NEWER
    path.write_bytes(json.dumps(doc).encode())
    return lambda: read_commit(
        t.storage, t.version
    ), f"log format version {REFUSED} in commit {t.version}"


def _newer_metadata(t: lakelog.Table) -> tuple[Callable[[], object], str]:
    path = _file(t, commit_path(0))
    doc = json.loads(path.read_bytes())
    doc["actions"][0]["format_version"] = NEWER
    path.write_bytes(json.dumps(doc).encode())
    for v in list_log(t.storage).manifests:  # else the versions resolve from them
        _file(t, manifest_path(v)).unlink()
    return lambda: load_snapshot(Storage(t.uri)), f"table format version {REFUSED}"


def _newer_root(t: lakelog.Table) -> tuple[Callable[[], object], str]:
    where = _rewrite_root(t, format_version=NEWER)
    return lambda: read_manifest(
        t.storage, t.version
    ), f"manifest format version {REFUSED} in {where}"


def _newer_flat_manifest(t: lakelog.Table) -> tuple[Callable[[], object], str]:
    where = manifest_path(t.version)
    _rewrite_parquet_header(_file(t, where), format_version=NEWER)
    return lambda: read_manifest(
        t.storage, t.version
    ), f"manifest format version {REFUSED} in {where}"


def _newer_leaf(t: lakelog.Table) -> tuple[Callable[[], object], str]:
    root = read_manifest(t.storage, t.version)
    assert isinstance(root, Root)
    leaf = root.leaves[-1]
    _rewrite_parquet_header(_file(t, leaf), format_version=NEWER)
    CACHE.clear()
    return lambda: load_leaves(
        t.storage, [leaf]
    ), f"manifest leaf format version {REFUSED} in {leaf}"


@pytest.mark.parametrize(
    "newer",
    [_newer_commit, _newer_metadata, _newer_root, _newer_flat_manifest, _newer_leaf],
    ids=["commit", "metadata", "root", "flat-manifest", "leaf"],
)
def test_every_reader_path_refuses_a_newer_version(
    tmp_path: Path, newer: Callable[[lakelog.Table], tuple[Callable[[], object], str]]
) -> None:
    with fmt.writing_manifests(1 if newer is _newer_flat_manifest else 2):
        t = _table(tmp_path)
    read, message = newer(t)
    with pytest.raises(UnsupportedFormatError) as info:
        read()
    assert str(info.value) == f"expected {message}{UPGRADE}"


def test_older_readers_refuse_what_they_do_not_know(tmp_path: Path) -> None:
    """``reader_version`` on each reader: what a reader of that version would do."""
    t = _table(tmp_path)
    root = read_manifest(t.storage, t.version)
    assert isinstance(root, Root) and root.header.format_version == 2
    with pytest.raises(UnsupportedFormatError, match="manifest format version <= 1, found 2"):
        read_manifest(t.storage, t.version, reader_version=1)
    leaf = root.leaves[0]
    data = t.storage.read_bytes(leaf)
    assert len(Leaf.decode(data, leaf, reader_version=2)) >= 1
    with pytest.raises(UnsupportedFormatError, match="manifest leaf format version <= 1, found 2"):
        Leaf.decode(data, leaf, reader_version=1)
    # claims: a commit declaring 3 is refused by version-2 readers
    assert read_header(t.storage, 0).format_version == fmt.NEW_TABLE
    with pytest.raises(
        UnsupportedFormatError, match="log format version <= 2, found 3 in commit 0"
    ):
        read_commit(t.storage, 0, reader_version=2)
    read_commit(t.storage, 1, reader_version=1)  # a plain append: version-1 readers read it
    # a plans file: the root that names it says 4, refused by version-3 readers
    plans = plans_path(t.version)
    t.storage.write_bytes(plans, b"{}")
    said = fmt.manifest_version(layout=2, declared=3, plans_file=True)
    where = _rewrite_root(t, plans_file=plans, format_version=said)
    with pytest.raises(UnsupportedFormatError) as info:
        read_manifest(t.storage, t.version, reader_version=3)
    assert str(info.value) == f"expected manifest format version <= 3, found 4 in {where}{UPGRADE}"
    got = read_manifest(t.storage, t.version)
    assert isinstance(got, Root) and got.header.plans_file == plans


# -- what writers declare ---------------------------------------------------------------

_META = Metadata(table_id="t", schema=encode_schema(SCHEMA))
_ADD = AddFile(path="a.parquet", size_bytes=1, num_rows=2)
_ACTIONS: list[tuple[Action, int]] = [
    (_ADD, 1),
    (RemoveFile(path="a.parquet", deletion_ms=1), 1),
    (ExpireVersions(oldest_version=3), 1),
    (msgspec.structs.replace(_ADD, deleted=DeletionVector(1, "AA==")), 5),
    (AppTransaction(app_id="a", app_version=1), 2),
    (
        PlanClaim(
            plan_id="p",
            operation="COMPACT",
            owner="o",
            lease_id="l",
            claimed_ms=1,
            groups=[ClaimGroup(group_id="g", paths=["a.parquet"])],
        ),
        3,
    ),
    (PlanRelease(plan_id="p", done=True), 3),
    (ChangeFile(path="_change_data/c.parquet", size_bytes=1, num_rows=1), 6),
    *[(msgspec.structs.replace(_META, format_version=v), v) for v in range(1, 7)],
]


@given(st.lists(st.sampled_from(_ACTIONS), max_size=6))
def test_a_commit_declares_the_highest_version_its_actions_need(
    picked: list[tuple[Action, int]],
) -> None:
    """The numbers of the spec's "Versioning" section: add, remove and expire 1, an add
    with a deletion vector 5, app_txn 2, claim and release 3, cdc 6, metadata what it
    declares."""
    want = max([1] + [need for _, need in picked])
    assert fmt.commit_version([a for a, _ in picked]) == want


def test_commits_on_the_log_declare_those_versions(tmp_path: Path) -> None:
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA, properties=COW)
    assert t.snapshot().metadata.format_version == fmt.NEW_TABLE
    t.append(pa.table({"id": [1]}))
    t.append(pa.table({"id": [2]}), app_id="a", app_version=0)
    t.set_properties({"lakelog.deletion_vectors": "true"})
    t.set_properties({"lakelog.deletion_vectors": "false"})
    said = [read_header(t.storage, v).format_version for v in range(t.version + 1)]
    assert said == [3, 1, 2, 5, 5]
    raw = _file(t, commit_path(1)).read_bytes()
    assert b"format_version" not in raw.split(b'"actions"')[0]  # 1 is omitted
    assert t.snapshot().metadata.format_version == 5  # turning them off keeps 5


@given(declared=st.integers(1, 6), vectors=st.booleans(), feed=st.booleans())
def test_a_metadata_action_declares_5_with_deletion_vectors_and_6_with_the_feed(
    declared: int, vectors: bool, feed: bool
) -> None:
    got = fmt.metadata_version(declared, deletion_vectors=vectors, change_data_feed=feed)
    assert got == max(declared, 6 if feed else 5 if vectors else declared)


def test_turning_the_change_data_feed_on_declares_6(tmp_path: Path) -> None:
    """Readers of version 5 refuse the table from the ``metadata`` action that turns the
    feed on (they would miss its change files); turning it off keeps 6."""
    t = lakelog.create_table(str(tmp_path / "t"), SCHEMA, properties=COW)
    t.append(pa.table({"id": [1]}))
    t.set_properties({"lakelog.change_data_feed": "true"})
    t.set_properties({"lakelog.change_data_feed": "false"})
    said = [read_header(t.storage, v).format_version for v in range(t.version + 1)]
    assert said == [3, 1, 6, 6]
    assert t.snapshot().metadata.format_version == 6
    read_commit(t.storage, 1, reader_version=5)
    with pytest.raises(UnsupportedFormatError, match="<= 5, found 6"):
        read_commit(t.storage, 2, reader_version=5)


@given(
    layout=st.sampled_from([1, 2]),
    declared=st.integers(1, 5),
    plans=st.booleans(),
    plans_file=st.booleans(),
)
def test_a_manifest_declares_its_layout_content_and_deletion_vectors(
    layout: int, declared: int, plans: bool, plans_file: bool
) -> None:
    got = fmt.manifest_version(layout=layout, declared=declared, plans=plans, plans_file=plans_file)
    if layout == 1:
        assert got == 1
        return
    content = 4 if plans_file else 3 if plans else 2
    assert got == (max(content, 5) if declared == 5 else content)


def test_manifests_on_the_log_declare_those_versions(tmp_path: Path) -> None:
    t = _table(tmp_path)
    assert read_manifest_header(t.storage, t.version).format_version == 2  # type: ignore[union-attr]
    t.set_properties({"lakelog.deletion_vectors": "true"})
    assert read_manifest_header(t.storage, t.version).format_version == 5  # type: ignore[union-attr]
    with fmt.writing_manifests(1):
        t.append(pa.table({"id": [9]}))
    assert read_manifest_header(t.storage, t.version).format_version == 1  # type: ignore[union-attr]


def test_writing_manifests_reaches_commits_and_expiry_and_ends_with_its_block(
    tmp_path: Path,
) -> None:
    assert fmt.manifest_layout() == 2
    with fmt.writing_manifests(1):
        assert fmt.manifest_layout() == 1
        t = _table(tmp_path, **{"lakelog.manifest_interval": 2})  # manifests at 0 and 2
        t.append(pa.table({"id": [4]}))  # 4: a manifest
        t.append(pa.table({"id": [5]}))  # 5: none
        report = t.expire_snapshots(older_than=dt.timedelta(0), retain_last=1)
        assert report.oldest_version == 5  # the expiry wrote the manifest at 5
    manifests = list_log(t.storage).manifests
    assert 5 in manifests
    headers = [read_manifest_header(t.storage, v) for v in manifests]
    assert {h.format_version for h in headers if h is not None} == {1}
    assert fmt.manifest_layout() == 2
    while t.version % 2:
        t.append(pa.table({"id": [t.version]}))
    t.append(pa.table({"id": [0]}))
    t.append(pa.table({"id": [0]}))  # a manifest: a root again
    assert read_manifest_header(t.storage, t.version).format_version == 2  # type: ignore[union-attr]
    with pytest.raises(InvalidArgumentError, match="manifest layout"), fmt.writing_manifests(3):
        pass


# -- the fields a manifest header carries -----------------------------------------------

_OWN = {"metadata", "version", "timestamp_ms", "oldest_version", "plans", "plans_file"}
"""Set by ``header_for`` and the reader from the state's own fields (and plans, which
stay JSON until asked)."""
_CARRIED = {"app_versions": {"a": 4, "b": 0}, "app_commits": {"a": 5, "b": 6}}
"""A value unlike the default for every field a header carries."""


def test_every_field_a_header_shares_with_the_state_is_carried_both_ways() -> None:
    """A field added to both :class:`ReplayState` and :class:`ManifestHeader` must be
    carried (``header_for`` and ``carry_into_state``) and listed here; a renamed one no
    longer matches and fails here (and in mypy, which checks both functions)."""
    shared = set(ReplayState.__struct_fields__) & set(ManifestHeader.__struct_fields__)
    assert shared - _OWN == set(_CARRIED)
    meta = msgspec.structs.replace(_META, format_version=3)
    state = ReplayState.start(meta, None, 7, 1000, 2)
    for name, value in _CARRIED.items():
        setattr(state, name, value)
    header = header_for(state, num_files=0)
    back = ReplayState.start(meta, None, header.version, header.timestamp_ms, 2)
    carry_into_state(msgspec.json.decode(msgspec.json.encode(header), type=ManifestHeader), back)
    for name, value in _CARRIED.items():
        assert getattr(header, name) == value and getattr(back, name) == value, name
