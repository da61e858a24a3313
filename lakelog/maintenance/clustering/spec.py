"""Clustering specs: how rows map to a ``uint64`` key, and where a spec is stored.

A :class:`ClusterSpec` fixes how rows map to a ``uint64`` key: the columns,
the curve (``hilbert``, ``zorder``, or ``linear`` for ``sort_by``) and each
column's quantile boundaries. The spec is written, as JSON, into the footer
of every file clustered with it, and its fingerprint (``spec_id``) plus the
file's key range and tier go into the file's ``AddFile.tags``. Later runs
find the spec from the tags and read the boundaries back from a footer, so
keys of old and new files stay comparable; only a full run
(``incremental=False``), a change of columns or curve, or a table with no
clustered file computes new boundaries.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import InvalidArgumentError
from ...io.writer import WriteOptions
from ...log.actions import DataFile
from ...properties import get_str
from ...storage import Storage
from . import curves
from .curves import ColumnBoundaries
from .sort import Segment
from .tiling import Curve, TiledCurve, Tiling

__all__ = [
    "CLUSTERING_COLUMNS",
    "CLUSTERING_CURVE",
    "CURVES",
    "DeclaredClustering",
    "check_declared",
    "declaration_properties",
    "declared_clustering",
    "FOOTER_KEY",
    "ROW_SAMPLE",
    "TAG_KEY_MAX",
    "TAG_KEY_MIN",
    "TAG_SPEC",
    "TAG_TIER",
    "ClusterSpec",
    "boundaries_from_sample",
    "encoded_row_bytes",
    "find_spec",
    "is_clustered",
    "key_range",
    "load_spec",
    "sized_segments",
    "spec_tags",
    "validate_clustering",
]

TAG_SPEC = "lakelog.clustering.spec"

TAG_COLUMNS = "lakelog.clustering.columns"

TAG_CURVE = "lakelog.clustering.curve"

TAG_TIER = "lakelog.clustering.tier"

TAG_KEY_MIN = "lakelog.clustering.key_min"

TAG_KEY_MAX = "lakelog.clustering.key_max"

FOOTER_KEY = "lakelog.clustering"

CURVES = ("hilbert", "zorder")

MAX_COLUMNS = 8

SPEC_VERSION = 1

TILED_SPEC_VERSION = 2
"""Specs with a tiling are version 2, so an older lakelog refuses them instead of
computing other keys; specs without one stay version 1 (and keep their ``spec_id``)."""

CURVE_BOUNDARIES = 510
"""Boundaries per column for curves: 512 ranks per axis (262,144 cells for two
columns) is far finer than the files of a partition, and keeps the spec small
enough for every footer (a few KiB compressed)."""

LINEAR_BOUNDARIES = 4094


@dataclass(frozen=True)
class ClusterSpec:
    """Columns, curve and boundaries that define the clustering key of a row."""

    columns: tuple[str, ...]
    curve: str
    boundaries: tuple[ColumnBoundaries, ...] = field(repr=False)
    tiling: Tiling | None = field(default=None, repr=False)
    """Tiles of the rank grid (see :mod:`lakelog.maintenance.clustering.tiling`): rows are ordered
    tile by tile, by the curve within a tile. None: by the curve alone."""

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "version": SPEC_VERSION if self.tiling is None else TILED_SPEC_VERSION,
            "columns": list(self.columns),
            "curve": self.curve,
            "boundaries": [b.to_json() for b in self.boundaries],
        }
        if self.tiling is not None:
            d["tiling"] = self.tiling.to_json()
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any], schema: pa.Schema) -> ClusterSpec:
        if int(d.get("version", 0)) > TILED_SPEC_VERSION:
            raise InvalidArgumentError(
                f"expected a clustering spec version <= {TILED_SPEC_VERSION}, found "
                f"{d.get('version')}; it was written by a newer lakelog: upgrade lakelog."
            )
        cols = tuple(str(c) for c in d["columns"])
        bounds = tuple(
            ColumnBoundaries.from_json(b, schema.field(b["column"]).type) for b in d["boundaries"]
        )
        tiling = None
        if d.get("tiling") is not None:
            tiling = Tiling.from_json(d["tiling"], ndim=len(bounds), bits=bounds[0].bits)
        return cls(columns=cols, curve=str(d["curve"]), boundaries=bounds, tiling=tiling)

    def to_footer(self) -> bytes:
        """Compact form for Parquet footers: zlib-compressed JSON, base64."""
        text = json.dumps(self.to_json(), separators=(",", ":")).encode()
        return b"z:" + base64.b64encode(zlib.compress(text, 9))

    def footer_schema(self, file_schema: pa.Schema) -> pa.Schema:
        """``file_schema`` with this spec in its metadata: files written with it carry the
        spec in their Parquet footer (read back by :func:`load_spec`)."""
        return file_schema.with_metadata({FOOTER_KEY.encode(): self.to_footer()})

    @classmethod
    def from_footer(cls, raw: bytes, schema: pa.Schema) -> ClusterSpec:
        if raw.startswith(b"z:"):
            raw = zlib.decompress(base64.b64decode(raw[2:]))
        return cls.from_json(json.loads(raw), schema)

    @cached_property
    def spec_id(self) -> str:
        """Fingerprint of the spec: equal ids mean comparable keys."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def bits(self) -> int:
        return self.boundaries[0].bits

    @property
    def key_bits(self) -> int:
        """Bits the key uses: keys are below ``2**key_bits``."""
        if self.tiling is not None:
            return self.tiling.key_bits
        return sum(b.bits for b in self.boundaries)

    def with_tiling(self, tiling: Tiling | None) -> ClusterSpec:
        return dataclasses.replace(self, tiling=tiling)

    def ranks(self, batch: pa.RecordBatch | pa.Table) -> list[npt.NDArray[np.uint64]]:
        """Each clustering column's rank of every row."""
        return [curves.rank_keys(batch.column(b.column), b) for b in self.boundaries]

    @property
    def curve_fn(self) -> Curve:
        """The curve over ranks (for tiled specs)."""
        return curves.hilbert_keys if self.curve == "hilbert" else curves.morton_keys

    def keys(self, batch: pa.RecordBatch | pa.Table) -> npt.NDArray[np.uint64]:
        """The ``uint64`` key of every row (vectorized)."""
        if self.curve == "linear":
            out = np.zeros(batch.num_rows, dtype=np.uint64)
            for b in self.boundaries:
                out <<= np.uint64(b.bits)
                out |= curves.rank_keys(batch.column(b.column), b)
            return out
        if self.tiling is None:
            keys: npt.NDArray[np.uint64] = curves.curve_keys(
                batch,
                self.boundaries,
                self.curve,  # type: ignore[arg-type]
            ).to_numpy()
            return keys
        tiled = TiledCurve(tiling=self.tiling, curve=self.curve_fn)
        return curves.grid_keys(self.ranks(batch), self.bits, tiled)


def validate_clustering(
    schema: pa.Schema,
    partition_by: Sequence[str],
    *,
    zorder_by: Sequence[str] | str | None,
    sort_by: Sequence[str] | str | None,
    curve: str,
) -> tuple[tuple[str, ...], str]:
    """Check the clustering request against the schema; returns (columns, curve)."""
    if (zorder_by is None) == (sort_by is None):
        raise InvalidArgumentError(
            "expected exactly one of zorder_by=[...] (a space-filling curve over several "
            "columns) or sort_by=[...] (a linear sort), found "
            + ("both" if zorder_by is not None else "neither")
        )
    given = zorder_by if zorder_by is not None else sort_by
    name = "zorder_by" if zorder_by is not None else "sort_by"
    cols = (given,) if isinstance(given, str) else tuple(given or ())
    if not cols:
        raise InvalidArgumentError(f"expected at least one column in {name}, found none")
    if len(cols) > MAX_COLUMNS:
        raise InvalidArgumentError(
            f"expected at most {MAX_COLUMNS} columns in {name}, found {len(cols)}; a curve "
            f"over more columns keeps too few bits per column to help any of them."
        )
    if len(set(cols)) != len(cols):
        raise InvalidArgumentError(f"expected distinct columns in {name}, found {list(cols)}")
    for c in cols:
        if not isinstance(c, str) or c not in schema.names:
            raise InvalidArgumentError(
                f"expected {name} columns of the table {schema.names}, found unknown {c!r}"
            )
        if c in partition_by:
            raise InvalidArgumentError(
                f"expected {name} columns that are not partition columns, found {c!r}; every "
                f"file holds one value of it already, so clustering on it does nothing."
            )
        t = schema.field(c).type
        try:
            curves.compute_boundaries(pa.table({c: pa.array([], t)}), [c])
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"column {c!r} of {name}: {e}") from e
    if zorder_by is not None:
        if curve not in CURVES:
            raise InvalidArgumentError(f"expected curve one of {list(CURVES)}, found {curve!r}")
        return cols, curve
    return cols, "linear"


def spec_bits(columns: Sequence[str], curve: str) -> int:
    """Bits per column: just enough for the boundaries (fewer bits, faster curves)."""
    cap = LINEAR_BOUNDARIES if curve == "linear" else CURVE_BOUNDARIES
    need = (cap + 2).bit_length() - 1  # 2**bits - 2 >= cap
    if curve == "linear":
        return min(need, curves.MAX_COLUMN_BITS, 64 // len(columns))
    return min(need, curves.default_bits(len(columns)))


def boundaries_from_sample(sample: pa.Table, columns: Sequence[str], curve: str) -> ClusterSpec:
    """A new spec from a sample of the rows (see :func:`curves.compute_boundaries`)."""
    cap = LINEAR_BOUNDARIES if curve == "linear" else CURVE_BOUNDARIES
    bits = spec_bits(columns, curve)
    bounds = curves.compute_boundaries(
        sample, list(columns), bits=bits, max_boundaries=min(cap, (1 << bits) - 2)
    )
    return ClusterSpec(columns=tuple(columns), curve=curve, boundaries=tuple(bounds))


def spec_tags(spec: ClusterSpec, *, tier: str, key_min: int, key_max: int) -> dict[str, str]:
    return {
        TAG_SPEC: spec.spec_id,
        TAG_COLUMNS: ",".join(spec.columns),
        TAG_CURVE: spec.curve,
        TAG_TIER: tier,
        TAG_KEY_MIN: str(key_min),
        TAG_KEY_MAX: str(key_max),
    }


def is_clustered(f: DataFile, spec_id: str) -> bool:
    t = f.tags
    return t.get(TAG_SPEC) == spec_id and TAG_KEY_MIN in t and TAG_KEY_MAX in t


def key_range(f: DataFile) -> tuple[int, int]:
    return int(f.tags[TAG_KEY_MIN]), int(f.tags[TAG_KEY_MAX])


def find_spec(files: Sequence[DataFile], columns: Sequence[str], curve: str) -> DataFile | None:
    """A file clustered with the spec holding the most bytes for these columns and curve."""
    want_cols, best, best_bytes = ",".join(columns), None, -1
    by_spec: dict[str, tuple[int, DataFile]] = {}
    for f in files:
        t = f.tags
        if t.get(TAG_COLUMNS) == want_cols and t.get(TAG_CURVE) == curve and TAG_SPEC in t:
            total, first = by_spec.get(t[TAG_SPEC], (0, f))
            by_spec[t[TAG_SPEC]] = (total + f.size_bytes, first)
    for total, first in by_spec.values():
        if total > best_bytes:
            best, best_bytes = first, total
    return best


ROW_SAMPLE = 65_536
"""Rows encoded to estimate the size of a clustered row."""

TILE_FILL = (0.7, 1.1)
"""A full partition is cut into one file per tile when its tiles would hold this share
of the target size (the tiling was made for the file count of the largest partition)."""


def encoded_row_bytes(sample: pa.Table | None, spec: ClusterSpec, options: WriteOptions) -> float:
    """Bytes per row of ``sample`` ordered by key and encoded as the output will be
    (0 when the sample is too small to tell)."""
    if sample is None or sample.num_rows < 1000:
        return 0.0
    ordered = sample.take(pa.array(np.argsort(spec.keys(sample), kind="stable")))
    sink = pa.BufferOutputStream()
    codec = options.compression
    use_dict = options.use_dictionary
    pq.write_table(
        ordered,
        sink,
        compression=None if codec == "none" else codec,
        use_dictionary=list(use_dict) if isinstance(use_dict, tuple) else use_dict,
        row_group_size=options.row_group_size,
    )
    size: int = sink.getvalue().size
    return size / int(sample.num_rows)


def sized_segments(
    segments: Sequence[Segment], row_bytes: float, target: int, spec: ClusterSpec
) -> list[Segment]:
    """Base segments re-counted in files of at most the target size, by the encoded size
    of a row. With a tiling, tiles about the target size become one file each, and
    larger ones (grown by appends) the same number of equal files each, so the cuts
    fall on the tiles' edges and halves (:func:`lakelog.maintenance.clustering.sort.file_cuts`)."""
    if row_bytes <= 0:
        return list(segments)
    out = []
    for s in segments:
        if s.tier != "base":
            out.append(s)
            continue
        nbytes = s.rows * row_bytes
        files = max(1, math.ceil(nbytes / target))
        if spec.tiling is not None:
            tiles = spec.tiling.tiles_between(s.key_start, s.key_end)
            per_tile = nbytes / tiles
            if per_tile > TILE_FILL[1] * target:
                files = tiles * math.ceil(per_tile / target)
            elif per_tile >= TILE_FILL[0] * target:
                files = tiles
        out.append(msgspec.structs.replace(s, files=files))
    return out


def load_spec(storage: Storage, f: DataFile, schema: pa.Schema) -> ClusterSpec | None:
    """The spec stored in the footer of a clustered file (None if unreadable)."""
    try:
        with storage.arrow_filesystem().open_input_file(storage.full(f.path)) as src:
            meta = pq.read_metadata(src).metadata or {}
        raw = meta.get(FOOTER_KEY.encode())
        if raw is None:
            return None
        return ClusterSpec.from_footer(raw, schema)
    except (OSError, ValueError, KeyError, zlib.error, pa.ArrowException):
        return None


# -- the table's declared clustering (``Table.set_clustering``) -------------------------

CLUSTERING_COLUMNS = "lakelog.clustering.columns"
CLUSTERING_CURVE = "lakelog.clustering.curve"


@dataclass(frozen=True)
class DeclaredClustering:
    """How the table says it is clustered: ``optimize()`` with no columns keeps it."""

    columns: tuple[str, ...]
    curve: str
    """``hilbert`` or ``zorder`` (a curve over ``columns``), or ``linear`` (a sort)."""

    def optimize_arguments(self) -> dict[str, Any]:
        """The ``optimize`` arguments this declaration stands for."""
        if self.curve == "linear":
            return {"zorder_by": None, "sort_by": list(self.columns), "curve": "hilbert"}
        return {"zorder_by": list(self.columns), "sort_by": None, "curve": self.curve}

    def describe(self) -> str:
        cols = ", ".join(self.columns)
        return f"sorted by {cols}" if self.curve == "linear" else f"{self.curve} curve over {cols}"


def declared_clustering(props: Mapping[str, str]) -> DeclaredClustering | None:
    """The clustering the table properties declare, None if none."""
    names = (c.strip() for c in get_str(props, CLUSTERING_COLUMNS).split(","))
    columns = tuple(dict.fromkeys(c for c in names if c))
    if not columns:
        return None
    return DeclaredClustering(columns, get_str(props, CLUSTERING_CURVE))


def declaration_properties(
    schema: pa.Schema,
    partition_by: Sequence[str],
    *,
    zorder_by: Sequence[str] | str | None,
    sort_by: Sequence[str] | str | None,
    curve: str,
) -> dict[str, str]:
    """The properties declaring this clustering (checked against the schema as
    ``optimize`` checks it); neither ``zorder_by`` nor ``sort_by``: no declaration."""
    if zorder_by is None and sort_by is None:
        return {CLUSTERING_COLUMNS: "", CLUSTERING_CURVE: "hilbert"}
    columns, curve_name = validate_clustering(
        schema, partition_by, zorder_by=zorder_by, sort_by=sort_by, curve=curve
    )
    return {CLUSTERING_COLUMNS: ",".join(columns), CLUSTERING_CURVE: curve_name}


def check_declared(
    props: Mapping[str, str], schema: pa.Schema, partition_by: Sequence[str]
) -> None:
    """Refuse a declared clustering the table cannot have (unknown or partition columns,
    types no curve can rank): checked whenever the properties are set."""
    declared = declared_clustering(props)
    if declared is None:
        return
    args = declared.optimize_arguments()
    try:
        validate_clustering(schema, partition_by, **args)
    except InvalidArgumentError as e:
        raise InvalidArgumentError(
            f"{CLUSTERING_COLUMNS}={','.join(declared.columns)!r} "
            f"({CLUSTERING_CURVE}={declared.curve!r}): {e}"
        ) from e
