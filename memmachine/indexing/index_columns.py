"""Storage of the in-process search index (:mod:`memmachine.indexing.scope_index`).

Growable columns and matrices that can also sit on a snapshot's arrays (pages of a mapped
file) and grow past them in memory; the lookup tables of ids, narrowing values, session order
and postings, sorted for binary search when they come from a snapshot; and the vector
arithmetic (unit vectors, int8 codes, single-threaded SIMD dot products).

Concurrency as the index's: one writer appends past what readers look at, or replaces
arrays instead of resizing them under a reader.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from memmachine.indexing.joined_rows import JoinedRows
from memmachine.indexing.page_advice import will_need

try:  # SIMD int8 dot products; without them every search is a float32 scan
    import simsimd as _simsimd
except ImportError:  # pragma: no cover - a platform without wheels
    _simsimd = None  # type: ignore[assignment]

__all__ = [
    "NO_CODE",
    "SIMD",
    "TF_MAX",
    "Codes",
    "Column",
    "Floats",
    "Ids",
    "Layout",
    "Mask",
    "Matrix",
    "Postings",
    "Rows",
    "SessionOrder",
    "dot",
    "quantize",
    "table",
    "unit_vector",
]

Floats = npt.NDArray[np.float32]
Mask = npt.NDArray[np.bool_]
Rows = npt.NDArray[np.int64]
#: A matrix's frozen rows: an array, or rows of a joined array (an index file's vectors).
Chunk = npt.NDArray[Any] | JoinedRows

#: Whether simsimd's int8 kernels are there (the quantised first pass needs them).
SIMD = _simsimd is not None
NO_CODE = -1
TF_MAX = 65535
#: Rows per block when a snapshot's matrices are copied out.
_BLOCK_ROWS = 8192


class Column:
    """A growable 1-D array; ``view(n)`` is its first ``n`` values."""

    def __init__(self, dtype: Any, capacity: int = 64) -> None:
        self.data: npt.NDArray[Any] = np.zeros(capacity, dtype=dtype)

    @classmethod
    def of(cls, values: npt.NDArray[Any], dtype: Any, *, copy: bool = False) -> Column:
        """A column holding ``values`` as they are (they may be read-only: the column only
        writes past them, growing into a new array first), or a copy of them."""
        column = cls(dtype, 0)
        column.data = np.array(values, dtype=dtype) if copy else values.astype(dtype, copy=False)
        return column

    def reserve(self, size: int) -> None:
        if size > len(self.data):
            grown = np.zeros(max(size, len(self.data) * 3 // 2), dtype=self.data.dtype)
            grown[: len(self.data)] = self.data
            self.data = grown  # readers keep the old array until they finish

    def view(self, n: int) -> npt.NDArray[Any]:
        return self.data[:n]


@dataclass(frozen=True)
class Layout:
    """Where a matrix's rows are: read-only chunks (rows ``0..frozen``), then ``tail``."""

    chunks: tuple[Chunk, ...]
    ends: tuple[int, ...]
    frozen: int
    tail: npt.NDArray[Any]


class Matrix:
    """A growable matrix of rows (float32 unit vectors, or their int8 codes): frozen chunks
    (a snapshot's arrays, possibly pages of a mapped file), then an in-memory tail that
    grows. Readers take :attr:`layout` once; writers replace it."""

    def __init__(self, dimensions: int, dtype: Any = np.float32, capacity: int = 64) -> None:
        self.dimensions = dimensions
        self.dtype = np.dtype(dtype)
        self.layout = Layout((), (), 0, np.zeros((capacity, dimensions), dtype=dtype))

    @classmethod
    def over(cls, frozen: Chunk, dimensions: int, dtype: Any) -> Matrix:
        """A matrix whose first rows are ``frozen`` (kept as it is, not copied)."""
        matrix = cls(dimensions, dtype, 0)
        if len(frozen):
            matrix.layout = Layout((frozen,), (len(frozen),), len(frozen), matrix.layout.tail)
        return matrix

    def reserve(self, size: int) -> None:
        """Room for rows up to ``size`` (global row numbers)."""
        layout = self.layout
        wanted = size - layout.frozen
        if wanted > len(layout.tail):
            shape = (max(wanted, len(layout.tail) * 3 // 2), self.dimensions)
            grown = np.zeros(shape, self.dtype)
            grown[: len(layout.tail)] = layout.tail
            self.layout = Layout(layout.chunks, layout.ends, layout.frozen, grown)

    def row(self, row: int) -> npt.NDArray[Any]:
        """The writable tail row ``row`` (global number; must be past the frozen rows)."""
        layout = self.layout
        tail: npt.NDArray[Any] = layout.tail[row - layout.frozen]
        return tail

    def shrink(self, size: int) -> None:
        layout = self.layout
        keep = size - layout.frozen
        if len(layout.tail) > keep:
            tail = layout.tail[:keep].copy()
            self.layout = Layout(layout.chunks, layout.ends, layout.frozen, tail)

    def freeze(self, size: int, keep: Callable[[npt.NDArray[Any]], npt.NDArray[Any]]) -> None:
        """Make the tail rows up to ``size`` a frozen chunk: ``keep`` gets them and returns
        the array to hold instead (for instance the same rows mapped from a file)."""
        layout = self.layout
        count = size - layout.frozen
        if count <= 0:
            return
        chunk = keep(layout.tail[:count])
        rest = layout.tail[count:].copy()
        self.layout = Layout((*layout.chunks, chunk), (*layout.ends, size), size, rest)

    @property
    def tail_bytes(self) -> int:
        return int(self.layout.tail.nbytes)

    @property
    def frozen_bytes(self) -> int:
        return sum(int(chunk.nbytes) for chunk in self.layout.chunks)

    def dot(self, n: int, vector: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
        """``rows[:n] @ vector`` as float64, chunk by chunk (see :func:`_dot`)."""
        layout = self.layout
        parts: list[npt.NDArray[np.float64]] = []
        start = 0
        for chunk, end in zip(layout.chunks, layout.ends, strict=True):
            if start >= n:
                break
            parts.append(dot(chunk[: min(end, n) - start], vector))
            start = end
        if n > layout.frozen:
            parts.append(dot(layout.tail[: n - layout.frozen], vector))
        if not parts:
            return np.zeros(0, dtype=np.float64)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def take(self, rows: Rows) -> npt.NDArray[Any]:
        """The rows ``rows`` (global numbers, any order) as one array."""
        layout = self.layout
        if not layout.chunks:
            return layout.tail[rows]
        start = 0
        for chunk, end in zip(layout.chunks, layout.ends, strict=True):
            if isinstance(chunk, np.ndarray):  # pages of a mapped file: start reading them all
                will_need(chunk, rows[(rows >= start) & (rows < end)] - start)
            start = end
        if len(layout.chunks) == 1 and len(rows) and int(rows.max()) < layout.frozen:
            return layout.chunks[0][rows]
        out = np.empty((len(rows), self.dimensions), dtype=self.dtype)
        start = 0
        for chunk, end in zip(layout.chunks, layout.ends, strict=True):
            inside = (rows >= start) & (rows < end)
            if inside.any():
                out[inside] = chunk[rows[inside] - start]
            start = end
        beyond = rows >= layout.frozen
        if beyond.any():
            out[beyond] = layout.tail[rows[beyond] - layout.frozen]
        return out

    def blocks(self, rows: Rows) -> Iterator[npt.NDArray[Any]]:
        """The rows ``rows`` in order, a block of at most ``_BLOCK_ROWS`` at a time."""
        for start in range(0, len(rows), _BLOCK_ROWS):
            yield self.take(rows[start : start + _BLOCK_ROWS])


def _key(value: str) -> bytes:
    """``value`` as stored in a fixed-width table: UTF-8 and a closing 0xFF byte, which
    UTF-8 never contains, so no value ends in the NUL bytes numpy strips and no value is
    another's prefix once stored. Lookups encode the same way, so order is consistent."""
    return value.encode() + b"\xff"


def _unkey(stored: Any) -> str:
    return bytes(stored)[:-1].decode()


def table(values: Iterable[str]) -> npt.NDArray[Any]:
    """``values`` as a fixed-width bytes array of :func:`_key` s."""
    keys = [_key(value) for value in values]
    return np.array(keys or [b""], dtype=np.bytes_)[: len(keys)]


def _sorted_table(values: Sequence[str]) -> tuple[npt.NDArray[Any], npt.NDArray[np.int32]]:
    """``values`` as sorted keys, and each sorted key's position in ``values``: a lookup
    table for :func:`_find`."""
    encoded = table(values)
    order = np.argsort(encoded, kind="stable").astype(np.int32)
    return encoded[order], order


def _find(key: str, table: npt.NDArray[Any], positions: npt.NDArray[Any]) -> int | None:
    """The position stored for ``key`` in a :func:`_sorted_table`, or ``None``."""
    if not len(table):
        return None
    encoded = _key(key)
    if len(encoded) > table.dtype.itemsize:  # numpy would truncate it when comparing
        return None
    at = int(np.searchsorted(table, encoded))
    if at < len(table) and bytes(table[at]) == encoded:
        return int(positions[at])
    return None


class Ids:
    """Episode ids by row: a snapshot's tables (rows ``0..frozen``) and a list after."""

    def __init__(
        self,
        by_row: npt.NDArray[Any] | None = None,
        by_id: npt.NDArray[Any] | None = None,
        rows: npt.NDArray[Any] | None = None,
    ) -> None:
        empty = np.zeros(0, dtype="S1")
        self.frozen_by_row = empty if by_row is None else by_row
        self.frozen_by_id = empty if by_id is None else by_id
        self.frozen_rows = np.zeros(0, dtype=np.int32) if rows is None else rows
        self.frozen = len(self.frozen_by_row)
        self.added: list[str] = []
        self.added_rows: dict[str, int] = {}

    def __len__(self) -> int:
        return self.frozen + len(self.added)

    def __getitem__(self, row: int) -> str:
        if row < self.frozen:
            return _unkey(self.frozen_by_row[row])
        return self.added[row - self.frozen]

    def row(self, episode_id: str) -> int | None:
        found = self.added_rows.get(episode_id)
        if found is not None:
            return found
        return _find(episode_id, self.frozen_by_id, self.frozen_rows)

    def will_need(self, rows: Rows) -> None:
        """Start reading the ids of ``rows`` (when they are pages of a mapped file)."""
        will_need(self.frozen_by_row, rows[rows < self.frozen])

    def append(self, episode_id: str) -> None:
        self.added_rows[episode_id] = len(self)
        self.added.append(episode_id)

    def table(self, rows: Rows) -> npt.NDArray[Any]:
        """The ids of ``rows`` (increasing) as a :func:`_table`."""
        split = int(np.searchsorted(rows, self.frozen))
        frozen = self.frozen_by_row[rows[:split]]
        added = table(self.added[row - self.frozen] for row in rows[split:].tolist())
        if not len(added):
            return np.array(frozen)
        return np.concatenate([frozen, added]) if len(frozen) else added

    @property
    def nbytes(self) -> int:
        """Memory of the ids added since the snapshot (the snapshot's stay in its file)."""
        return len(self.added) * 160


class Codes:
    """Small integer codes for the values of one narrowing field (agent, session, group):
    a snapshot's (codes ``0..frozen``, looked up in its sorted table) and a dict after."""

    def __init__(
        self,
        by_code: npt.NDArray[Any] | None = None,
        table: npt.NDArray[Any] | None = None,
        positions: npt.NDArray[Any] | None = None,
    ) -> None:
        self.frozen_values = np.zeros(0, dtype="S1") if by_code is None else by_code
        if table is None or positions is None:
            table, positions = _sorted_table([_unkey(value) for value in self.frozen_values])
        self.table, self.positions = table, positions
        self.frozen = len(self.frozen_values)
        self.added: dict[str, int] = {}
        self.added_values: list[str] = []

    def __len__(self) -> int:
        return self.frozen + len(self.added_values)

    def value(self, code: int) -> str:
        if code < self.frozen:
            return _unkey(self.frozen_values[code])
        return self.added_values[code - self.frozen]

    def of(self, value: str | None) -> int:
        if value is None:
            return NO_CODE
        code = self.find(value)
        if code is None:
            code = len(self)
            self.added_values.append(value)
            self.added[value] = code
        return code

    def find(self, value: str) -> int | None:
        code = self.added.get(value)
        if code is None and self.frozen:
            code = _find(value, self.table, self.positions)
        return code


class SessionOrder:
    """Per session code: its rows and their sequence numbers, in sequence order. A
    snapshot's sessions stay in its flat table until a write or a read needs one."""

    def __init__(
        self,
        rows: npt.NDArray[Any] | None = None,
        offsets: npt.NDArray[Any] | None = None,
        sequences: npt.NDArray[Any] | None = None,
    ) -> None:
        self.frozen_rows = np.zeros(0, dtype=np.int32) if rows is None else rows
        self.frozen_offsets = np.zeros(1, dtype=np.int64) if offsets is None else offsets
        self.frozen_sequences = sequences
        self.frozen = len(self.frozen_offsets) - 1
        self.sessions: dict[int, tuple[list[int], list[int]]] = {}

    def get(self, session: int) -> tuple[list[int], list[int]]:
        found = self.sessions.get(session)
        if found is None:
            rows: list[int] = []
            sequences: list[int] = []
            if 0 <= session < self.frozen and self.frozen_sequences is not None:
                start, end = self.frozen_offsets[session], self.frozen_offsets[session + 1]
                picked = self.frozen_rows[start:end]
                rows = picked.tolist()
                sequences = self.frozen_sequences[picked].tolist()
            found = self.sessions.setdefault(session, (rows, sequences))
        return found

    def place(self, session: int, row: int, sequence: int) -> None:
        rows, sequences = self.get(session)
        if not sequences or sequence > sequences[-1]:
            rows.append(row)
            sequences.append(sequence)
            return
        at = bisect.bisect_right(sequences, sequence)
        rows.insert(at, row)
        sequences.insert(at, sequence)

    @property
    def nbytes(self) -> int:
        return sum(len(rows) * 16 for rows, _ in self.sessions.values())


class Postings:
    """Per term: the rows holding it and how often each holds it. A snapshot's postings
    stay in its flat tables; a term is copied out only when a write adds to it."""

    def __init__(
        self,
        terms: npt.NDArray[Any] | None = None,
        offsets: npt.NDArray[Any] | None = None,
        rows: npt.NDArray[Any] | None = None,
        tfs: npt.NDArray[Any] | None = None,
    ) -> None:
        self.frozen_terms = np.zeros(0, dtype="S1") if terms is None else terms
        self.frozen_offsets = np.zeros(1, dtype=np.int64) if offsets is None else offsets
        self.frozen_rows = np.zeros(0, dtype=np.int32) if rows is None else rows
        self.frozen_tfs = np.zeros(0, dtype=np.uint16) if tfs is None else tfs
        self.positions = np.arange(len(self.frozen_terms), dtype=np.int32)
        self.added: dict[str, tuple[array[int], array[int]]] = {}
        self.added_count = 0

    def will_need(self, terms: Iterable[str]) -> None:
        """Start reading the postings of ``terms`` (when they are pages of a mapped file)."""
        found = [at for term in terms if (at := self._at(term)) is not None]
        if found:
            where = np.array(found, dtype=np.int64)
            starts, ends = self.frozen_offsets[where], self.frozen_offsets[where + 1]
            will_need(self.frozen_rows, starts, ends)
            will_need(self.frozen_tfs, starts, ends)

    def _at(self, term: str) -> int | None:
        return None if term in self.added else _find(term, self.frozen_terms, self.positions)

    def _frozen(self, term: str) -> tuple[npt.NDArray[Any], npt.NDArray[Any]] | None:
        at = _find(term, self.frozen_terms, self.positions)
        if at is None:
            return None
        start, end = self.frozen_offsets[at], self.frozen_offsets[at + 1]
        return self.frozen_rows[start:end], self.frozen_tfs[start:end]

    def get(self, term: str) -> tuple[Rows, npt.NDArray[np.float64]] | None:
        """The term's rows and term frequencies, or ``None``."""
        added = self.added.get(term)
        if added is not None:
            return np.array(added[0], dtype=np.int64), np.array(added[1], dtype=np.float64)
        frozen = self._frozen(term)
        if frozen is None:
            return None
        return frozen[0].astype(np.int64), frozen[1].astype(np.float64)

    def append(self, term: str, row: int, tf: int) -> None:
        found = self.added.get(term)
        if found is None:
            rows, tfs = array("i"), array("H")
            frozen = self._frozen(term)
            if frozen is not None:
                rows.frombytes(frozen[0].astype(np.int32).tobytes())
                tfs.frombytes(frozen[1].astype(np.uint16).tobytes())
            found = self.added[term] = (rows, tfs)
        found[0].append(row)
        found[1].append(tf)
        self.added_count += 1

    def items(self) -> Iterator[tuple[str, Rows, npt.NDArray[np.uint16]]]:
        """Every term with its rows and frequencies."""
        for at in range(len(self.frozen_terms)):
            term = _unkey(self.frozen_terms[at])
            if term in self.added:
                continue
            start, end = self.frozen_offsets[at], self.frozen_offsets[at + 1]
            yield (
                term,
                self.frozen_rows[start:end].astype(np.int64),
                self.frozen_tfs[start:end].astype(np.uint16),
            )
        for term, (rows, tfs) in list(self.added.items()):
            yield term, np.array(rows, dtype=np.int64), np.array(tfs, dtype=np.uint16)

    @property
    def nbytes(self) -> int:
        total = sum(len(rows) * 6 for rows, _ in self.added.values())
        return total + len(self.added) * 120


def quantize(unit: Floats, into: npt.NDArray[np.int8]) -> tuple[float, float]:
    """Write the int8 code of ``unit`` (largest component to ±127) into ``into``; returns
    ``(scale, error)``: code / scale approximates ``unit`` to within ``error`` (L2)."""
    peak = float(np.abs(unit).max())
    scale = 127.0 / peak if peak > 0 else 1.0
    np.rint(unit * scale, out=into, casting="unsafe")
    error = float(np.linalg.norm(unit - into / scale))
    return scale, error


def unit_vector(vector: Floats) -> Floats:
    values = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(values))
    unit: Floats = values / norm if norm > 0 else values
    return unit


def dot(rows: npt.NDArray[Any], vector: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    """``rows @ vector`` as float64 (int8 codes exactly), with single-threaded SIMD kernels
    when simsimd is there: BLAS would fan a product out to threads that keep spinning
    afterwards, taking the CPU the query's embedding needs next (measured: +12 CPU ms per
    search at 100k episodes)."""
    if _simsimd is None or len(rows) == 0:
        product: npt.NDArray[np.float64] = (rows @ vector).astype(np.float64)
        return product
    scores: npt.NDArray[np.float64] = np.asarray(
        _simsimd.cdist(vector[None, :], rows, metric="dot"), dtype=np.float64
    )[0]
    return scores
