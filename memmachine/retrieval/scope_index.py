"""An in-process search index over one user's episodes.

:class:`ScopeIndex` holds what episode search needs of every episode of one user (tenant,
org, project, user): its unit vector and sentence vectors, its full-text terms as postings,
and its place in its session. It answers the searches of the
:class:`~memmachine.ports.EpisodeStore` contract exactly as the graph stores compute them
(cosine best-of-own-and-derivatives, BM25 with k1 = 1.2 and b = 0.75 over the searched
scope's own statistics, the nearest in-scope turns of a session) but in memory, so a search
costs a few matrix products instead of a scan in the database. It returns episode ids; the
episodes themselves stay in the store.

Narrowing (agent, session, group) is a row mask, so any scope within the user is searched
by the same index. Deleted episodes are masked out; :meth:`ScopeIndex.compacted` makes a
new index without them once they are many.

Snapshots: :meth:`ScopeIndex.snapshot` gives the living rows as flat arrays
(:class:`IndexSnapshot`), and :meth:`ScopeIndex.from_snapshot` builds an index on such arrays
without copying the large ones (the vectors and their int8 codes), so they can be pages of a
file mapped into memory: opening a user's index then costs milliseconds however large it is.
Rows added afterwards go to in-memory tails; ids, postings and session order keep the
snapshot's sorted tables and look them up by binary search, materialising only what a
write touches.

Concurrency: one writer (``add`` / ``remove`` from the event loop) and any number of
readers, including readers in worker threads. A reader works on the mask (and so the row
count) it took when it started; writers only append past that count, replace arrays
instead of resizing them under a reader, or flip ``alive`` flags. Row numbers never change
inside one index: compaction makes a new one.
"""

from __future__ import annotations

import bisect
import json
import math
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from memmachine.models import Episode, IndexEntry, Scope
from memmachine.retrieval.terms import BM25_B, BM25_K1

try:  # SIMD int8 dot products; without them every search is a float32 scan
    import simsimd as _simsimd
except ImportError:  # pragma: no cover - a platform without wheels
    _simsimd = None  # type: ignore[assignment]

__all__ = ["IndexSnapshot", "ScopeIndex"]

Floats = npt.NDArray[np.float32]
Mask = npt.NDArray[np.bool_]
Rows = npt.NDArray[np.int64]

_NO_CODE = -1
_TF_MAX = 65535
#: Compact once this many rows are dead and they outnumber the living.
_COMPACT_AFTER = 1024
#: From this many vectors (own and sentence) on, vector search first scores the int8 codes
#: and rescores in float32 only the episodes that can still be among the best.
_QUANTIZED_FROM = 20_000
#: Slack for float rounding on top of the quantisation error bound.
_ROUNDING = 1e-5
#: Rows per block when a snapshot's matrices are copied out.
_BLOCK_ROWS = 8192


class _Column:
    """A growable 1-D array; ``view(n)`` is its first ``n`` values."""

    def __init__(self, dtype: Any, capacity: int = 64) -> None:
        self.data: npt.NDArray[Any] = np.zeros(capacity, dtype=dtype)

    @classmethod
    def of(cls, values: npt.NDArray[Any], dtype: Any, *, copy: bool = False) -> _Column:
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
class _Layout:
    """Where a matrix's rows are: read-only chunks (rows ``0..frozen``), then ``tail``."""

    chunks: tuple[npt.NDArray[Any], ...]
    ends: tuple[int, ...]
    frozen: int
    tail: npt.NDArray[Any]


class _Matrix:
    """A growable matrix of rows (float32 unit vectors, or their int8 codes): frozen chunks
    (a snapshot's arrays, possibly pages of a mapped file), then an in-memory tail that
    grows. Readers take :attr:`layout` once; writers replace it."""

    def __init__(self, dimensions: int, dtype: Any = np.float32, capacity: int = 64) -> None:
        self.dimensions = dimensions
        self.dtype = np.dtype(dtype)
        self.layout = _Layout((), (), 0, np.zeros((capacity, dimensions), dtype=dtype))

    @classmethod
    def over(cls, frozen: npt.NDArray[Any], dimensions: int, dtype: Any) -> _Matrix:
        """A matrix whose first rows are ``frozen`` (kept as it is, not copied)."""
        matrix = cls(dimensions, dtype, 0)
        if len(frozen):
            matrix.layout = _Layout((frozen,), (len(frozen),), len(frozen), matrix.layout.tail)
        return matrix

    def reserve(self, size: int) -> None:
        """Room for rows up to ``size`` (global row numbers)."""
        layout = self.layout
        wanted = size - layout.frozen
        if wanted > len(layout.tail):
            shape = (max(wanted, len(layout.tail) * 3 // 2), self.dimensions)
            grown = np.zeros(shape, self.dtype)
            grown[: len(layout.tail)] = layout.tail
            self.layout = _Layout(layout.chunks, layout.ends, layout.frozen, grown)

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
            self.layout = _Layout(layout.chunks, layout.ends, layout.frozen, tail)

    def freeze(self, size: int, keep: Callable[[npt.NDArray[Any]], npt.NDArray[Any]]) -> None:
        """Make the tail rows up to ``size`` a frozen chunk: ``keep`` gets them and returns
        the array to hold instead (for instance the same rows mapped from a file)."""
        layout = self.layout
        count = size - layout.frozen
        if count <= 0:
            return
        chunk = keep(layout.tail[:count])
        rest = layout.tail[count:].copy()
        self.layout = _Layout((*layout.chunks, chunk), (*layout.ends, size), size, rest)

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
            parts.append(_dot(chunk[: min(end, n) - start], vector))
            start = end
        if n > layout.frozen:
            parts.append(_dot(layout.tail[: n - layout.frozen], vector))
        if not parts:
            return np.zeros(0, dtype=np.float64)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def take(self, rows: Rows) -> npt.NDArray[Any]:
        """The rows ``rows`` (global numbers, any order) as one array."""
        layout = self.layout
        if not layout.chunks:
            return layout.tail[rows]
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


def _table(values: Iterable[str]) -> npt.NDArray[Any]:
    """``values`` as a fixed-width bytes array of :func:`_key` s."""
    keys = [_key(value) for value in values]
    return np.array(keys or [b""], dtype=np.bytes_)[: len(keys)]


def _sorted_table(values: Sequence[str]) -> tuple[npt.NDArray[Any], npt.NDArray[np.int32]]:
    """``values`` as sorted keys, and each sorted key's position in ``values``: a lookup
    table for :func:`_find`."""
    encoded = _table(values)
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


class _Ids:
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

    def append(self, episode_id: str) -> None:
        self.added_rows[episode_id] = len(self)
        self.added.append(episode_id)

    def table(self, rows: Rows) -> npt.NDArray[Any]:
        """The ids of ``rows`` (increasing) as a :func:`_table`."""
        split = int(np.searchsorted(rows, self.frozen))
        frozen = self.frozen_by_row[rows[:split]]
        added = _table(self.added[row - self.frozen] for row in rows[split:].tolist())
        if not len(added):
            return np.array(frozen)
        return np.concatenate([frozen, added]) if len(frozen) else added

    @property
    def nbytes(self) -> int:
        """Memory of the ids added since the snapshot (the snapshot's stay in its file)."""
        return len(self.added) * 160


class _Codes:
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
            return _NO_CODE
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


class _Order:
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


class _Postings:
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


class _Payloads:
    """Each row's episode, encoded (:func:`_encode_episode`; empty when the entry had
    none): a snapshot's blob and offsets (rows ``0..frozen``), then a list."""

    def __init__(
        self, blob: npt.NDArray[Any] | None = None, offsets: npt.NDArray[Any] | None = None
    ) -> None:
        self.frozen_blob = np.zeros(0, dtype=np.uint8) if blob is None else blob
        self.frozen_offsets = np.zeros(1, dtype=np.int64) if offsets is None else offsets
        self.frozen = len(self.frozen_offsets) - 1
        self.added: list[bytes] = []
        self.added_bytes = 0

    def __getitem__(self, row: int) -> bytes:
        if row < self.frozen:
            start, end = self.frozen_offsets[row], self.frozen_offsets[row + 1]
            return self.frozen_blob[start:end].tobytes()
        return self.added[row - self.frozen]

    def append(self, payload: bytes) -> None:
        self.added.append(payload)
        self.added_bytes += len(payload)

    def table(self, rows: Rows) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
        """The payloads of ``rows`` as one blob and its offsets."""
        pieces = [self[row] for row in rows.tolist()]
        sizes = np.fromiter((len(piece) for piece in pieces), dtype=np.int64, count=len(pieces))
        offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        return np.frombuffer(b"".join(pieces), dtype=np.uint8).copy(), offsets

    @property
    def nbytes(self) -> int:
        return self.added_bytes + 40 * len(self.added)


@dataclass
class IndexSnapshot:
    """A :class:`ScopeIndex`'s living rows as flat arrays (rows and parts renumbered from
    0): ``meta`` (sizes, state, quantisation bounds), ``arrays`` (everything but the four
    matrices) and ``matrices``: each of ``vectors`` / ``codes`` (one row per episode) and
    ``parts`` / ``part_codes`` (one per sentence vector) as an iterator of row blocks, or
    an array when the snapshot was opened from one."""

    meta: dict[str, Any]
    arrays: dict[str, npt.NDArray[Any]]
    matrices: dict[str, Callable[[], Iterator[npt.NDArray[Any]]]] = field(default_factory=dict)

    #: The names and dtypes of the matrices, in file order.
    MATRICES = (
        ("vectors", np.float32, "n"),
        ("codes", np.int8, "n"),
        ("parts", np.float32, "m"),
        ("part_codes", np.int8, "m"),
    )

    def matrix(self, name: str) -> npt.NDArray[Any]:
        """A whole matrix as one array (copied out of its blocks)."""
        dtype = dict((key, kind) for key, kind, _ in self.MATRICES)[name]
        rows = self.meta["n"] if name in ("vectors", "codes") else self.meta["m"]
        width = self.meta["dimensions"] or 1
        blocks = list(self.matrices[name]())
        if not blocks:
            return np.zeros((rows, width), dtype=dtype)
        return np.concatenate(blocks).astype(dtype, copy=False)


class ScopeIndex:
    """Vectors, postings and session order of one user's episodes (see the module doc).

    ``dimensions`` is the vector size, or ``None`` for a lexical-only store. ``revision``
    and ``deletions`` record which :class:`~memmachine.models.IndexState` of the store the
    index reflects; the owner keeps them current.
    """

    def __init__(self, dimensions: int | None, *, quantized_from: int = _QUANTIZED_FROM) -> None:
        self.dimensions = dimensions
        self.revision = 0
        self.deletions = 0
        self._n = 0
        self._dead = 0
        self._ids = _Ids()
        self._alive = _Column(np.bool_)
        self._session = _Column(np.int32)
        self._agent = _Column(np.int32)
        self._group = _Column(np.int32)
        self._sequence = _Column(np.int64)
        self._timestamp = _Column(np.int64)
        self._length = _Column(np.int32)
        self._has_vector = _Column(np.bool_)
        self._sessions = _Codes()
        self._agents = _Codes()
        self._groups = _Codes()
        self._order = _Order()
        self._postings = _Postings()
        self._payloads = _Payloads()
        width = dimensions or 1
        self._vectors = _Matrix(width)
        self._parts = _Matrix(width)
        #: Sentence vectors' owner rows, in increasing order (parts are appended with their
        #: episode, and rows only grow), so an episode's parts are one contiguous run.
        self._part_owner = _Column(np.int32)
        self._m = 0
        #: int8 codes of the unit vectors (code / scale ≈ vector) for the fast first pass,
        #: and the largest distance between a vector and its decoded code.
        self._codes = _Matrix(width, np.int8)
        self._scales = _Column(np.float32)
        self._part_codes = _Matrix(width, np.int8)
        self._part_scales = _Column(np.float32)
        #: How much each sentence / window vector's similarity counts, and the largest.
        self._part_weights = _Column(np.float32)
        self._max_weight = 1.0
        self._max_error = 0.0
        self._quantized_from = quantized_from
        #: Rows that came from the snapshot the index was opened from (0: built in memory).
        self.frozen_rows = 0
        #: Memory of the lookup tables of a snapshot copied into memory (by compaction).
        self._table_bytes = 0

    # ------------------------------------------------------------------ size

    def __len__(self) -> int:
        """Episodes in the index (deleted ones excluded)."""
        return self._n - self._dead

    def __contains__(self, episode_id: object) -> bool:
        row = self._ids.row(episode_id) if isinstance(episode_id, str) else None
        return row is not None and bool(self._alive.data[row])

    @property
    def nbytes(self) -> int:
        """Roughly the memory a search of the index keeps busy, in bytes: everything held
        in memory, and of a snapshot's arrays those every search reads (the int8 codes, or
        the vectors themselves when the index is small enough to be scanned in float32).
        The float32 vectors of a larger snapshot are read a few rows per search."""
        columns = (
            self._scales,
            self._part_scales,
            self._part_weights,
            self._alive,
            self._session,
            self._agent,
            self._group,
            self._sequence,
            self._timestamp,
            self._length,
            self._has_vector,
            self._part_owner,
        )
        arrays = sum(column.data.nbytes for column in columns)
        arrays += sum(
            matrix.tail_bytes
            for matrix in (self._vectors, self._parts, self._codes, self._part_codes)
        )
        if self._quantized:
            arrays += self._codes.frozen_bytes + self._part_codes.frozen_bytes
        else:
            arrays += self._vectors.frozen_bytes + self._parts.frozen_bytes
        tables = self._postings.nbytes + self._order.nbytes + self._ids.nbytes
        tables += self._payloads.nbytes
        return arrays + tables + self._table_bytes

    @property
    def mapped_nbytes(self) -> int:
        """Bytes of the snapshot's matrices (held outside the process heap when they are
        pages of a mapped file)."""
        return sum(
            matrix.frozen_bytes
            for matrix in (self._vectors, self._parts, self._codes, self._part_codes)
        )

    @property
    def rows(self) -> int:
        """Rows ever added (deleted ones included)."""
        return self._n

    @property
    def added_rows(self) -> int:
        """Rows added since the snapshot the index was opened from (all, without one)."""
        return self._n - self.frozen_rows

    @property
    def tail_rows(self) -> int:
        """Rows whose vectors are held in memory (not in frozen chunks)."""
        return self._n - self._vectors.layout.frozen

    @property
    def _quantized(self) -> bool:
        return _simsimd is not None and self._n + self._m >= self._quantized_from

    # ------------------------------------------------------------------ writes

    def add(self, entries: Iterable[IndexEntry]) -> int:
        """Index ``entries``; an id already in the index is skipped. Returns how many were
        added."""
        fresh = [entry for entry in entries if entry.id not in self]
        unique: dict[str, IndexEntry] = {entry.id: entry for entry in fresh}
        if not unique:
            return 0
        batch = list(unique.values())
        start, end = self._n, self._n + len(batch)
        for column in (
            self._alive,
            self._session,
            self._agent,
            self._group,
            self._sequence,
            self._timestamp,
            self._length,
            self._has_vector,
        ):
            column.reserve(end)
        self._vectors.reserve(end)
        self._codes.reserve(end)
        self._scales.reserve(end)
        parts = sum(len(entry.derivatives) for entry in batch) if self.dimensions else 0
        if parts:
            for matrix in (self._parts, self._part_codes):
                matrix.reserve(self._m + parts)
            for column in (self._part_owner, self._part_scales, self._part_weights):
                column.reserve(self._m + parts)
        m = self._m
        for offset, entry in enumerate(batch):
            row = start + offset
            session = self._sessions.of(entry.session_id)
            self._session.data[row] = session
            self._agent.data[row] = self._agents.of(entry.agent_id)
            self._group.data[row] = self._groups.of(entry.group_id)
            self._sequence.data[row] = entry.sequence
            self._timestamp.data[row] = entry.timestamp
            self._length.data[row] = len(entry.terms)
            for term, count in Counter(entry.terms).items():
                self._postings.append(term, row, min(count, _TF_MAX))
            if self.dimensions is not None:
                if entry.embedding is not None:
                    unit = _unit(entry.embedding)
                    self._vectors.row(row)[:] = unit
                    self._scales.data[row] = self._encode(unit, self._codes.row(row))
                    self._has_vector.data[row] = True
                else:
                    self._scales.data[row] = 1.0  # zero code, never read as a score
                weights = entry.derivative_weights or (1.0,) * len(entry.derivatives)
                for vector, weight in zip(entry.derivatives, weights, strict=True):
                    unit = _unit(vector)
                    self._parts.row(m)[:] = unit
                    self._part_scales.data[m] = self._encode(unit, self._part_codes.row(m))
                    self._part_weights.data[m] = weight
                    self._max_weight = max(self._max_weight, weight)
                    self._part_owner.data[m] = row
                    m += 1
            self._ids.append(entry.id)
            self._payloads.append(_encode_episode(entry.episode))
            self._order.place(session, row, entry.sequence)
        self._alive.data[start:end] = True
        self._m = m
        self._n = end  # publish the rows to new readers last
        return len(batch)

    def finish_loading(self) -> None:
        """Give back the spare room left by growing (after a bulk load)."""
        self._vectors.shrink(self._n)
        self._codes.shrink(self._n)
        self._parts.shrink(self._m)
        self._part_codes.shrink(self._m)

    def freeze(self, keep: Callable[[npt.NDArray[Any]], npt.NDArray[Any]]) -> None:
        """Hand the in-memory rows of the four matrices to ``keep``, which returns the
        arrays to hold instead (the same rows, for instance written to a file and mapped):
        a large index is built without holding all its vectors in memory."""
        self._vectors.freeze(self._n, keep)
        self._codes.freeze(self._n, keep)
        self._parts.freeze(self._m, keep)
        self._part_codes.freeze(self._m, keep)

    def _encode(self, unit: Floats, into: npt.NDArray[np.int8]) -> float:
        """Write the int8 code of ``unit`` into ``into``; returns its scale, and keeps the
        largest coding error seen."""
        scale, error = _quantize(unit, into)
        self._max_error = max(self._max_error, error)
        return scale

    def remove(self, episode_ids: Iterable[str]) -> list[str]:
        """Drop these episodes (unknown ids ignored); returns the ids dropped."""
        dropped = []
        for episode_id in episode_ids:
            row = self._ids.row(episode_id)
            if row is not None and self._alive.data[row]:
                self._alive.data[row] = False
                dropped.append(episode_id)
        self._dead += len(dropped)
        return dropped

    def remove_scope(self, scope: Scope) -> list[str]:
        """Drop every episode inside ``scope`` (its agent/session/group narrowing); returns
        the ids dropped."""
        mask = self.mask(scope)
        if mask is None:
            return []
        rows = np.flatnonzero(mask)
        self._alive.data[rows] = False
        self._dead += len(rows)
        return [self._ids[row] for row in rows.tolist()]

    # ------------------------------------------------------------------ reads

    def mask(self, scope: Scope) -> Mask | None:
        """The rows inside ``scope``'s narrowing, alive only; ``None`` when none can be."""
        n = self._n
        mask: Mask = self._alive.view(n).copy()
        for value, codes, column in (
            (scope.session_id, self._sessions, self._session),
            (scope.agent_id, self._agents, self._agent),
            (scope.group_id, self._groups, self._group),
        ):
            if value is None:
                continue
            code = codes.find(value)
            if code is None:
                return None
            mask &= column.view(n) == code
        return mask if mask.any() else None

    def vector_top(
        self, query: Sequence[float], k: int, mask: Mask, *, derivatives: bool = True
    ) -> list[tuple[str, float]]:
        """The ``k`` rows of ``mask`` whose best cosine similarity (own vector, or with
        ``derivatives`` also their sentence vectors) to ``query`` is highest, best first,
        ties by id; as ``(id, similarity)``."""
        if self.dimensions is None or k <= 0:
            return []
        n = len(mask)
        q = _unit(np.asarray(query, dtype=np.float32))
        m = self._m if derivatives else 0
        owners = self._part_owner.view(m)
        m = int(np.searchsorted(owners, n))  # parts of rows added after the mask was taken
        owners = owners[:m]
        has_vector = mask & self._has_vector.view(n)
        if _simsimd is None or n + m < self._quantized_from:
            scores = np.where(has_vector, self._vectors.dot(n, q), -np.inf)
            if m:
                inside = mask[owners]
                part_scores = self._parts.dot(m, q) * self._part_weights.view(m)
                np.maximum.at(scores, owners[inside], part_scores[inside])
            return self._best(scores, k, by_time=False)
        # First pass on int8 codes: every (weighted) score is within ``bound`` of the exact
        # one, so only episodes whose approximate best reaches the k-th approximate best
        # minus twice the bound can be among the exact best k; those are rescored in float32.
        q_codes = np.zeros(len(q), dtype=np.int8)
        q_scale, q_error = _quantize(q, q_codes)
        error = self._max_error + (1.0 + self._max_error) * q_error
        bound = error * max(1.0, self._max_weight if m else 1.0) + _ROUNDING
        own = self._codes.dot(n, q_codes) / (self._scales.view(n) * q_scale)
        approx = np.where(has_vector, own, -np.inf)
        if m:
            inside = mask[owners]
            parts = self._part_codes.dot(m, q_codes)
            parts *= self._part_weights.view(m) / (self._part_scales.view(m) * q_scale)
            np.maximum.at(approx, owners[inside], parts[inside])
        finite = np.flatnonzero(np.isfinite(approx))
        if len(finite) > k:
            values = approx[finite]
            kth = values[np.argpartition(-values, k - 1)[k - 1]]
            finite = finite[values >= kth - 2.0 * bound]
        exact = self._rescore(finite, q, has_vector, owners)
        return self._best_of(finite, exact, k, by_time=False)

    def _rescore(
        self,
        rows: Rows,
        q: Floats,
        has_vector: Mask,
        owners: npt.NDArray[np.int32],
    ) -> npt.NDArray[np.float64]:
        """Exact best cosine of each of ``rows`` (own vector and its parts among
        ``owners``, the sorted owners of the parts searched)."""
        exact = np.where(has_vector[rows], _dot(self._vectors.take(rows), q), -np.inf)
        if len(owners):
            first = np.searchsorted(owners, rows, side="left")
            counts = np.searchsorted(owners, rows, side="right") - first
            total = int(counts.sum())
            if total:
                starts = np.repeat(first - (np.cumsum(counts) - counts), counts)
                picked = np.arange(total) + starts
                positions = np.repeat(np.arange(len(rows)), counts)
                weighted = _dot(self._parts.take(picked), q) * self._part_weights.data[picked]
                np.maximum.at(exact, positions, weighted)
        return exact.astype(np.float64)

    def bm25_top(self, terms: Sequence[str], k: int, mask: Mask) -> list[tuple[str, float]]:
        """The ``k`` rows of ``mask`` with the highest BM25 score for ``terms`` (any term
        matching; document count and average length from ``mask``'s rows), best first,
        ties newest first then by id; as ``(id, score)``. Only positive scores."""
        n = len(mask)
        documents = int(np.count_nonzero(mask))
        if not terms or k <= 0 or documents == 0:
            return []
        lengths = self._length.view(n)
        average = float(lengths[mask].mean())
        scores = np.zeros(n, dtype=np.float64)
        matched = np.zeros(n, dtype=np.bool_)
        for term in terms:
            postings = self._postings.get(term)
            if postings is None:
                continue
            rows, tfs = postings
            keep = rows < n
            rows, tfs = rows[keep], tfs[keep]
            inside = mask[rows]
            rows, tfs = rows[inside], tfs[inside]
            df = len(rows)
            if df == 0:
                continue
            idf = math.log(1.0 + (documents - df + 0.5) / (df + 0.5))
            norm = BM25_K1 * (1.0 - BM25_B + BM25_B * lengths[rows] / average)
            scores[rows] += idf * tfs * (BM25_K1 + 1.0) / (tfs + norm)
            matched[rows] = True
        return self._best(np.where(matched & (scores > 0), scores, -np.inf), k, by_time=True)

    def episode(self, episode_id: str, user: Scope) -> Episode | None:
        """The stored episode of ``episode_id`` as its entry carried it (``None`` when the
        index does not hold it, or holds no copy of it); ``user`` is the index's user."""
        row = self._ids.row(episode_id)
        if row is None or row >= self._n or not self._alive.data[row]:
            return None
        payload = self._payloads[row]
        return _decode_episode(episode_id, payload, user) if payload else None

    def adjacent(self, episode_ids: Sequence[str], mask: Mask) -> dict[str, list[str]]:
        """For each id inside ``mask``: the ids of the nearest rows of ``mask`` before and
        after it in its session, in session order."""
        return {
            key: around
            for key in dict.fromkeys(episode_ids)
            if (around := self.neighbours(key, 1, 1, mask)) is not None
        }

    def neighbours(self, episode_id: str, before: int, after: int, mask: Mask) -> list[str] | None:
        """Up to ``before``/``after`` ids of ``mask``'s rows around ``episode_id`` in its
        session, in session order; ``None`` when the id is not inside ``mask``."""
        row = self._ids.row(episode_id)
        n = len(mask)
        if row is None or row >= n or not mask[row]:
            return None
        rows, sequences = self._order.get(int(self._session.data[row]))
        at = bisect.bisect_left(sequences, int(self._sequence.data[row]))
        while rows[at] != row:  # equal sequences cannot happen in a session, but be exact
            at += 1
        earlier: list[str] = []
        step = at - 1
        while step >= 0 and len(earlier) < before:
            other = rows[step]
            if other < n and mask[other]:
                earlier.append(self._ids[other])
            step -= 1
        later: list[str] = []
        step = at + 1
        while step < len(rows) and len(later) < after:
            other = rows[step]
            if other < n and mask[other]:
                later.append(self._ids[other])
            step += 1
        return earlier[::-1] + later

    # ------------------------------------------------------------------ internals

    def _best(self, scores: npt.NDArray[Any], k: int, *, by_time: bool) -> list[tuple[str, float]]:
        """The ``k`` best finite ``scores`` (one per row) with the stores' tie-breaks."""
        return self._best_of(np.arange(len(scores)), scores, k, by_time=by_time)

    def _best_of(
        self, rows: npt.NDArray[Any], scores: npt.NDArray[Any], k: int, *, by_time: bool
    ) -> list[tuple[str, float]]:
        """The ``k`` best finite ``scores`` of ``rows`` (paired), best first; ties newest
        first (``by_time``) then by id. Exact at the cut: every row tied with the k-th is
        ordered before cutting."""
        keep = np.isfinite(scores)
        rows, scores = rows[keep], scores[keep]
        if len(rows) > k:
            cut = scores[np.argpartition(-scores, k - 1)[k - 1]]
            keep = scores >= cut
            rows, scores = rows[keep], scores[keep]
        timestamps = self._timestamp.data
        ids = self._ids
        pairs = [
            (row, score, ids[row])
            for row, score in zip(rows.tolist(), scores.tolist(), strict=True)
        ]
        if by_time:
            pairs.sort(key=lambda pair: (-pair[1], -int(timestamps[pair[0]]), pair[2]))
        else:
            pairs.sort(key=lambda pair: (-pair[1], pair[2]))
        return [(key, score) for _, score, key in pairs[:k]]

    @property
    def wants_compaction(self) -> bool:
        """Whether deleted rows are many enough to be worth :meth:`compacted`."""
        return self._dead >= _COMPACT_AFTER and self._dead > self._n - self._dead

    def compacted(self) -> ScopeIndex:
        """A new index holding only the living rows, in memory (this one is left as it
        is, so readers still working on it are unaffected)."""
        snapshot = self.snapshot()
        arrays = {name: snapshot.matrix(name) for name, _, _ in IndexSnapshot.MATRICES}
        return ScopeIndex.from_snapshot(snapshot, arrays, in_memory=True)

    # ------------------------------------------------------------------ snapshots

    def snapshot(self) -> IndexSnapshot:
        """The living rows as flat arrays (see :class:`IndexSnapshot`); rows added while
        the snapshot is taken are left out. The matrices are read block by block when the
        snapshot's ``matrices`` are iterated, so the index must outlive that."""
        n, m = self._n, self._m
        alive = self._alive.view(n).copy()
        keep = np.flatnonzero(alive)
        renumber = np.full(max(n, 1), -1, dtype=np.int64)
        renumber[keep] = np.arange(len(keep))
        owners = self._part_owner.view(m)
        parts = np.flatnonzero(alive[owners]) if m else np.zeros(0, dtype=np.int64)
        arrays: dict[str, npt.NDArray[Any]] = {
            "alive": np.ones(len(keep), dtype=np.bool_),
            "sequence": self._sequence.view(n)[keep],
            "timestamp": self._timestamp.view(n)[keep],
            "length": self._length.view(n)[keep],
            "has_vector": self._has_vector.view(n)[keep],
            "scales": self._scales.view(n)[keep],
            "part_owner": renumber[owners[parts]].astype(np.int32),
            "part_scales": self._part_scales.view(m)[parts],
            "part_weights": self._part_weights.view(m)[parts],
        }
        # narrowing codes renumbered to the values living rows still use
        for name, codes, column in (
            ("session", self._sessions, self._session),
            ("agent", self._agents, self._agent),
            ("group", self._groups, self._group),
        ):
            old = column.view(n)[keep].astype(np.int64)
            used = np.unique(old[old >= 0])
            mapping = np.full(len(codes) + 1, _NO_CODE, dtype=np.int32)
            mapping[used] = np.arange(len(used), dtype=np.int32)
            arrays[name] = np.where(old >= 0, mapping[old], _NO_CODE).astype(np.int32)
            values = _table(codes.value(code) for code in used.tolist())
            order = np.argsort(values, kind="stable").astype(np.int32)
            arrays[f"{name}_values"] = values
            arrays[f"{name}_sorted"], arrays[f"{name}_sorted_codes"] = values[order], order
        arrays["ids"] = self._ids.table(keep)
        arrays["payloads"], arrays["payload_offsets"] = self._payloads.table(keep)
        order = np.argsort(arrays["ids"], kind="stable").astype(np.int32)
        arrays["ids_sorted"], arrays["ids_sorted_rows"] = arrays["ids"][order], order
        # session order: rows sorted by (session, sequence, row)
        sessions = arrays["session"]
        by_session = np.lexsort((np.arange(len(keep)), arrays["sequence"], sessions))
        by_session = by_session[sessions[by_session] >= 0]
        arrays["order_rows"] = by_session.astype(np.int32)
        counts = np.bincount(sessions[sessions >= 0], minlength=len(arrays["session_values"]))
        arrays["order_offsets"] = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        # postings: terms sorted, each term's living rows in row order
        terms: list[str] = []
        rows_out: list[npt.NDArray[np.int32]] = []
        tfs_out: list[npt.NDArray[np.uint16]] = []
        collected: dict[str, tuple[Rows, npt.NDArray[np.uint16]]] = {}
        for term, rows, tfs in self._postings.items():
            collected[term] = (rows, tfs)  # a term copied out meanwhile: the later wins
        for term, (rows, tfs) in collected.items():
            inside = rows < n
            rows, tfs = rows[inside], tfs[inside]
            live = alive[rows]
            if live.any():
                terms.append(term)
                renumbered = renumber[rows[live]].astype(np.int32)
                order_rows = np.argsort(renumbered, kind="stable")
                rows_out.append(renumbered[order_rows])
                tfs_out.append(tfs[live][order_rows])
        keys = _table(terms)
        term_order = np.argsort(keys, kind="stable").tolist()
        arrays["terms"] = keys[term_order]
        sizes = np.array([len(rows_out[i]) for i in term_order], dtype=np.int64)
        arrays["posting_offsets"] = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        arrays["posting_rows"] = (
            np.concatenate([rows_out[i] for i in term_order])
            if terms
            else np.zeros(0, dtype=np.int32)
        )
        arrays["posting_tfs"] = (
            np.concatenate([tfs_out[i] for i in term_order])
            if terms
            else np.zeros(0, dtype=np.uint16)
        )
        meta = {
            "dimensions": self.dimensions,
            "n": len(keep),
            "m": len(parts),
            "revision": self.revision,
            "deletions": self.deletions,
            "max_error": self._max_error,
            "max_weight": self._max_weight,
            "quantized_from": self._quantized_from,
        }
        matrices = {
            "vectors": lambda: self._vectors.blocks(keep),
            "codes": lambda: self._codes.blocks(keep),
            "parts": lambda: self._parts.blocks(parts),
            "part_codes": lambda: self._part_codes.blocks(parts),
        }
        return IndexSnapshot(meta, arrays, matrices)

    @classmethod
    def from_snapshot(
        cls,
        snapshot: IndexSnapshot,
        matrices: dict[str, npt.NDArray[Any]],
        *,
        in_memory: bool = False,
    ) -> ScopeIndex:
        """An index on ``snapshot``'s arrays and the four ``matrices`` (kept as they are,
        not copied: they may be pages of a mapped file). With ``in_memory`` the matrices
        become ordinary growable tails instead (the index owns them)."""
        meta, arrays = snapshot.meta, snapshot.arrays
        index = cls(meta["dimensions"], quantized_from=int(meta["quantized_from"]))
        n, m = int(meta["n"]), int(meta["m"])
        index.revision, index.deletions = int(meta["revision"]), int(meta["deletions"])
        index._max_error = float(meta["max_error"])
        index._max_weight = float(meta["max_weight"])
        index._n, index._m = n, m
        for name, column, dtype in (
            ("alive", "_alive", np.bool_),
            ("session", "_session", np.int32),
            ("agent", "_agent", np.int32),
            ("group", "_group", np.int32),
            ("sequence", "_sequence", np.int64),
            ("timestamp", "_timestamp", np.int64),
            ("length", "_length", np.int32),
            ("has_vector", "_has_vector", np.bool_),
            ("scales", "_scales", np.float32),
            ("part_owner", "_part_owner", np.int32),
            ("part_scales", "_part_scales", np.float32),
            ("part_weights", "_part_weights", np.float32),
        ):
            # ``alive`` is written in place (deletions); the others only grow
            setattr(index, column, _Column.of(arrays[name], dtype, copy=name == "alive"))
        width = meta["dimensions"] or 1
        for name, kind, _ in IndexSnapshot.MATRICES:
            rows = matrices[name]
            if in_memory:
                matrix = _Matrix(width, kind, 0)
                matrix.layout = _Layout((), (), 0, np.array(rows, dtype=kind))
            else:
                matrix = _Matrix.over(rows, width, kind)
            setattr(index, f"_{name}", matrix)
        for name, attribute in (
            ("session", "_sessions"),
            ("agent", "_agents"),
            ("group", "_groups"),
        ):
            codes = _Codes(
                arrays[f"{name}_values"], arrays[f"{name}_sorted"], arrays[f"{name}_sorted_codes"]
            )
            setattr(index, attribute, codes)
        index._ids = _Ids(arrays["ids"], arrays["ids_sorted"], arrays["ids_sorted_rows"])
        index._payloads = _Payloads(arrays["payloads"], arrays["payload_offsets"])
        index._order = _Order(arrays["order_rows"], arrays["order_offsets"], index._sequence.data)
        index._postings = _Postings(
            arrays["terms"],
            arrays["posting_offsets"],
            arrays["posting_rows"],
            arrays["posting_tfs"],
        )
        if in_memory:
            index._table_bytes = sum(int(values.nbytes) for values in arrays.values())
        else:
            index.frozen_rows = n
        return index


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _encode_episode(episode: Episode | None) -> bytes:
    """What an episode holds besides its id and its user, as compact JSON (``b""`` for
    none)."""
    if episode is None:
        return b""
    scope = episode.scope
    fields = [
        scope.agent_id,
        scope.session_id,
        scope.group_id,
        episode.role,
        episode.producer,
        episode.content,
        (episode.timestamp - _EPOCH) // _MICROSECOND,
        episode.metadata,
        episode.sequence,
        (episode.created_at - _EPOCH) // _MICROSECOND,
    ]
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode()


def _decode_episode(episode_id: str, payload: bytes, user: Scope) -> Episode:
    """The episode :func:`_encode_episode` encoded. Its values were validated when it was
    stored, so the models are built without validating them again."""
    (
        agent_id,
        session_id,
        group_id,
        role,
        producer,
        content,
        timestamp,
        metadata,
        sequence,
        created_at,
    ) = json.loads(payload)
    scope = Scope.model_construct(
        tenant=user.tenant,
        org_id=user.org_id,
        project_id=user.project_id,
        user_id=user.user_id,
        agent_id=agent_id,
        session_id=session_id,
        group_id=group_id,
    )
    return Episode.model_construct(
        id=episode_id,
        scope=scope,
        role=role,
        producer=producer,
        content=content,
        timestamp=_EPOCH + timestamp * _MICROSECOND,
        metadata=metadata,
        sequence=sequence,
        created_at=_EPOCH + created_at * _MICROSECOND,
    )


def _quantize(unit: Floats, into: npt.NDArray[np.int8]) -> tuple[float, float]:
    """Write the int8 code of ``unit`` (largest component to ±127) into ``into``; returns
    ``(scale, error)``: code / scale approximates ``unit`` to within ``error`` (L2)."""
    peak = float(np.abs(unit).max())
    scale = 127.0 / peak if peak > 0 else 1.0
    np.rint(unit * scale, out=into, casting="unsafe")
    error = float(np.linalg.norm(unit - into / scale))
    return scale, error


def _unit(vector: Floats) -> Floats:
    values = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(values))
    unit: Floats = values / norm if norm > 0 else values
    return unit


def _dot(rows: npt.NDArray[Any], vector: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
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
