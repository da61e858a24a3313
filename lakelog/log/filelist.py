"""The live files a snapshot returns: typed columns, with :class:`DataFile` values built on access.

A version's live files are held as blocks of typed file entries (manifest leaves and the
tail's adds) with the positions that are live. :class:`FileList` is the sequence
``Snapshot.files()`` returns over those blocks: its length, paths and sizes come from
the columns, and a :class:`DataFile` is built only for the entries a caller takes
(``files[i]``, or a chunk at a time while iterating). So the full file list of a million
files costs the columns already in memory, not a million Python objects held at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np
import pyarrow as pa

from .actions import DataFile
from .leaves import Leaf

__all__ = ["FileList"]

_CHUNK = 4096
"""Entries turned into :class:`DataFile` values at a time while iterating."""


class FileList(Sequence[DataFile]):
    """Live data files (immutable): a :class:`~collections.abc.Sequence` of
    :class:`DataFile` over typed entry blocks.

    Compares equal to any sequence of the same :class:`DataFile` values in the same
    order (a list included). :meth:`paths` and :attr:`total_bytes` read the columns
    without building a :class:`DataFile`.
    """

    __slots__ = ("_blocks", "_ends", "_positions")

    def __init__(self, parts: Sequence[tuple[Leaf, np.ndarray | None]] = ()) -> None:
        """``parts``: blocks with the positions of their entries in the list (None: all)."""
        blocks: list[Leaf] = []
        positions: list[np.ndarray] = []
        for block, pos in parts:
            if pos is None:
                pos = np.arange(len(block), dtype=np.int64)
            if len(pos):
                blocks.append(block)
                positions.append(np.asarray(pos, dtype=np.int64))
        self._blocks = blocks
        self._positions = positions
        self._ends = np.cumsum([len(p) for p in positions], dtype=np.int64)

    @classmethod
    def of(cls, block: Leaf, mask: np.ndarray | None) -> FileList:
        """The entries of ``block`` where the boolean ``mask`` is true (None: all)."""
        return cls([(block, None if mask is None else np.flatnonzero(mask))])

    @classmethod
    def of_entries(cls, entries: pa.Table) -> FileList:
        """The files of a table of typed entries (the leaf schema), e.g. a filtered
        ``Snapshot.entries``."""
        return cls([(Leaf(entries), None)])

    @classmethod
    def concat(cls, lists: Sequence[FileList]) -> FileList:
        out = cls()
        for part in lists:
            out._blocks.extend(part._blocks)
            out._positions.extend(part._positions)
        out._ends = np.cumsum([len(p) for p in out._positions], dtype=np.int64)
        return out

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    @overload
    def __getitem__(self, index: int) -> DataFile: ...

    @overload
    def __getitem__(self, index: slice) -> list[DataFile]: ...

    def __getitem__(self, index: int | slice) -> DataFile | list[DataFile]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("file list index out of range")
        b = int(np.searchsorted(self._ends, index, side="right"))
        start = int(self._ends[b - 1]) if b else 0
        at = int(self._positions[b][index - start])
        return Leaf(self._blocks[b].table.slice(at, 1)).data_files()[0]

    def __iter__(self) -> Iterator[DataFile]:
        for block, pos in zip(self._blocks, self._positions, strict=True):
            n = len(block)
            if len(pos) == n and n <= _CHUNK:
                yield from block.data_files()
                continue
            for lo in range(0, len(pos), _CHUNK):
                yield from block.data_files(_mask(n, pos[lo : lo + _CHUNK]))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        if len(other) != len(self):
            return False
        return all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"FileList({len(self)} files)"

    def take(self, indices: Sequence[int]) -> FileList:
        """The files at ``indices`` (ascending), as a list over the same blocks."""
        at = np.asarray(indices, dtype=np.int64)
        seg = np.searchsorted(self._ends, at, side="right")
        starts = np.concatenate([[0], self._ends[:-1]]) if len(self._ends) else self._ends
        parts: list[tuple[Leaf, np.ndarray | None]] = []
        for b in np.unique(seg).tolist():
            local = at[seg == b] - starts[b]
            parts.append((self._blocks[b], self._positions[b][local]))
        return FileList(parts)

    def paths(self) -> list[str]:
        """Root-relative paths, in order (no :class:`DataFile` is built)."""
        out: list[str] = []
        for arr in self._columns("path"):
            out.extend(arr.to_pylist())
        return out

    def tag_texts(self) -> list[str | None]:
        """The files' tags as the log stores them (JSON objects; None for none), in
        order, without building :class:`DataFile` objects: what pruning by recorded
        partition transform values reads."""
        out: list[str | None] = []
        for arr in self._columns("tags"):
            out.extend(arr.to_pylist())
        return out

    @property
    def total_bytes(self) -> int:
        """Bytes of every file in the list."""
        return int(sum(int(np.asarray(a).sum()) for a in self._columns("size_bytes")))

    def _columns(self, name: str) -> Iterator[pa.Array]:
        """Column ``name`` of the listed entries, block by block."""
        for block, pos in zip(self._blocks, self._positions, strict=True):
            col = block.paths() if name == "path" else block.column(name)
            yield col if len(pos) == len(block) else col.take(pa.array(pos))


def _mask(n: int, positions: np.ndarray) -> np.ndarray:
    """A boolean mask of length ``n`` true at ``positions`` (sorted ascending)."""
    mask = np.zeros(n, dtype=bool)
    mask[positions] = True
    return mask
