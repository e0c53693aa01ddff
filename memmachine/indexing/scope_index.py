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

Concurrency: one writer (``add`` / ``remove`` from the event loop) and any number of
readers, including readers in worker threads. A reader works on the mask (and so the row
count) it took when it started; writers only append past that count, replace arrays
instead of resizing them under a reader, or flip ``alive`` flags. Row numbers never change
inside one index: compaction makes a new one.
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from memmachine.indexing.terms import BM25_B, BM25_K1
from memmachine.models import IndexEntry, Scope

try:  # SIMD int8 dot products; without them every search is a float32 scan
    import simsimd as _simsimd
except ImportError:  # pragma: no cover - a platform without wheels
    _simsimd = None  # type: ignore[assignment]

__all__ = ["ScopeIndex"]

Floats = npt.NDArray[np.float32]
Mask = npt.NDArray[np.bool_]

_NO_CODE = -1
_TF_MAX = 65535
#: Compact once this many rows are dead and they outnumber the living.
_COMPACT_AFTER = 1024
#: From this many vectors (own and sentence) on, vector search first scores the int8 codes
#: and rescores in float32 only the episodes that can still be among the best.
_QUANTIZED_FROM = 20_000
#: Slack for float rounding on top of the quantisation error bound.
_ROUNDING = 1e-5


class _Column:
    """A growable 1-D array; ``view(n)`` is its first ``n`` values."""

    def __init__(self, dtype: Any, capacity: int = 64) -> None:
        self.data: npt.NDArray[Any] = np.zeros(capacity, dtype=dtype)

    def reserve(self, size: int) -> None:
        if size > len(self.data):
            grown = np.zeros(max(size, len(self.data) * 3 // 2), dtype=self.data.dtype)
            grown[: len(self.data)] = self.data
            self.data = grown  # readers keep the old array until they finish

    def view(self, n: int) -> npt.NDArray[Any]:
        return self.data[:n]


class _Matrix:
    """A growable matrix (float32 unit rows, or their int8 codes)."""

    def __init__(self, dimensions: int, dtype: Any = np.float32, capacity: int = 64) -> None:
        self.data: npt.NDArray[Any] = np.zeros((capacity, dimensions), dtype=dtype)

    def reserve(self, size: int) -> None:
        if size > len(self.data):
            shape = (max(size, len(self.data) * 3 // 2), self.data.shape[1])
            grown = np.zeros(shape, self.data.dtype)
            grown[: len(self.data)] = self.data
            self.data = grown

    def shrink(self, size: int) -> None:
        if len(self.data) > size:
            self.data = self.data[:size].copy()


class _Codes:
    """Small integer codes for the values of one narrowing field (agent, session, group)."""

    def __init__(self) -> None:
        self.code: dict[str, int] = {}

    def of(self, value: str | None) -> int:
        if value is None:
            return _NO_CODE
        return self.code.setdefault(value, len(self.code))

    def find(self, value: str) -> int | None:
        return self.code.get(value)


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
        self._ids: list[str] = []
        self._row: dict[str, int] = {}
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
        #: Per session code: its rows and their sequence numbers, in sequence order.
        self._order: dict[int, tuple[list[int], list[int]]] = {}
        #: Per term: the rows holding it and how often each holds it.
        self._postings: dict[str, tuple[array[int], array[int]]] = {}
        self._postings_count = 0
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

    # ------------------------------------------------------------------ size

    def __len__(self) -> int:
        """Episodes in the index (deleted ones excluded)."""
        return self._n - self._dead

    def __contains__(self, episode_id: object) -> bool:
        row = self._row.get(episode_id) if isinstance(episode_id, str) else None
        return row is not None and bool(self._alive.data[row])

    @property
    def nbytes(self) -> int:
        """Roughly the memory the index holds, in bytes."""
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
        arrays += self._vectors.data.nbytes + self._parts.data.nbytes
        arrays += self._codes.data.nbytes + self._part_codes.data.nbytes
        postings = self._postings_count * 6 + len(self._postings) * 120
        ids = self._n * 160  # the id string, its dict entry and its session-order slot
        return arrays + postings + ids

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
            for growing in (
                self._parts,
                self._part_codes,
                self._part_owner,
                self._part_scales,
                self._part_weights,
            ):
                growing.reserve(self._m + parts)
        touched: set[int] = set()
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
                rows, tfs = self._postings.setdefault(term, (array("i"), array("H")))
                rows.append(row)
                tfs.append(min(count, _TF_MAX))
            self._postings_count += len(set(entry.terms))
            if self.dimensions is not None:
                if entry.embedding is not None:
                    unit = _unit(entry.embedding)
                    self._vectors.data[row] = unit
                    self._scales.data[row] = self._encode(unit, self._codes.data[row])
                    self._has_vector.data[row] = True
                else:
                    self._scales.data[row] = 1.0  # zero code, never read as a score
                weights = entry.derivative_weights or (1.0,) * len(entry.derivatives)
                for vector, weight in zip(entry.derivatives, weights, strict=True):
                    unit = _unit(vector)
                    self._parts.data[m] = unit
                    self._part_scales.data[m] = self._encode(unit, self._part_codes.data[m])
                    self._part_weights.data[m] = weight
                    self._max_weight = max(self._max_weight, weight)
                    self._part_owner.data[m] = row
                    m += 1
            self._ids.append(entry.id)
            self._row[entry.id] = row
            self._place(session, row, entry.sequence)
            touched.add(session)
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
            row = self._row.get(episode_id)
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
            scores = np.where(has_vector, _dot(self._vectors.data[:n], q), -np.inf)
            if m:
                inside = mask[owners]
                part_scores = _dot(self._parts.data[:m], q) * self._part_weights.view(m)
                np.maximum.at(scores, owners[inside], part_scores[inside])
            return self._best(scores, k, by_time=False)
        # First pass on int8 codes: every (weighted) score is within ``bound`` of the exact
        # one, so only episodes whose approximate best reaches the k-th approximate best
        # minus twice the bound can be among the exact best k; those are rescored in float32.
        q_codes = np.zeros(len(q), dtype=np.int8)
        q_scale, q_error = _quantize(q, q_codes)
        error = self._max_error + (1.0 + self._max_error) * q_error
        bound = error * max(1.0, self._max_weight if m else 1.0) + _ROUNDING
        own = _dot(self._codes.data[:n], q_codes) / (self._scales.view(n) * q_scale)
        approx = np.where(has_vector, own, -np.inf)
        if m:
            inside = mask[owners]
            parts = _dot(self._part_codes.data[:m], q_codes)
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
        rows: npt.NDArray[np.int64],
        q: Floats,
        has_vector: Mask,
        owners: npt.NDArray[np.int32],
    ) -> npt.NDArray[np.float64]:
        """Exact best cosine of each of ``rows`` (own vector and its parts among
        ``owners``, the sorted owners of the parts searched)."""
        exact = np.where(has_vector[rows], _dot(self._vectors.data[rows], q), -np.inf)
        if len(owners):
            first = np.searchsorted(owners, rows, side="left")
            counts = np.searchsorted(owners, rows, side="right") - first
            total = int(counts.sum())
            if total:
                starts = np.repeat(first - (np.cumsum(counts) - counts), counts)
                picked = np.arange(total) + starts
                positions = np.repeat(np.arange(len(rows)), counts)
                weighted = _dot(self._parts.data[picked], q) * self._part_weights.data[picked]
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
            rows = np.array(postings[0], dtype=np.int64)
            tfs = np.array(postings[1], dtype=np.float64)
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
        row = self._row.get(episode_id)
        n = len(mask)
        if row is None or row >= n or not mask[row]:
            return None
        rows, sequences = self._order[int(self._session.data[row])]
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

    def _place(self, session: int, row: int, sequence: int) -> None:
        rows, sequences = self._order.setdefault(session, ([], []))
        if not sequences or sequence > sequences[-1]:
            rows.append(row)
            sequences.append(sequence)
            return
        at = bisect.bisect_right(sequences, sequence)
        rows.insert(at, row)
        sequences.insert(at, sequence)

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
        pairs = list(zip(rows.tolist(), scores.tolist(), strict=True))
        if by_time:
            pairs.sort(key=lambda pair: (-pair[1], -int(timestamps[pair[0]]), ids[pair[0]]))
        else:
            pairs.sort(key=lambda pair: (-pair[1], ids[pair[0]]))
        return [(ids[row], score) for row, score in pairs[:k]]

    @property
    def wants_compaction(self) -> bool:
        """Whether deleted rows are many enough to be worth :meth:`compacted`."""
        return self._dead >= _COMPACT_AFTER and self._dead > self._n - self._dead

    def compacted(self) -> ScopeIndex:
        """A new index holding only the living rows (this one is left as it is, so readers
        still working on it are unaffected)."""
        n, m = self._n, self._m
        alive = self._alive.view(n)
        keep = np.flatnonzero(alive)
        renumber = np.full(max(n, 1), -1, dtype=np.int64)
        renumber[keep] = np.arange(len(keep))
        new = ScopeIndex(self.dimensions, quantized_from=self._quantized_from)
        new.revision, new.deletions = self.revision, self.deletions
        for mine, theirs in (
            (self._session, new._session),
            (self._agent, new._agent),
            (self._group, new._group),
            (self._sequence, new._sequence),
            (self._timestamp, new._timestamp),
            (self._length, new._length),
            (self._has_vector, new._has_vector),
        ):
            theirs.data = mine.data[:n][keep].copy()
        new._alive.data = np.ones(len(keep), dtype=np.bool_)
        new._vectors.data = self._vectors.data[:n][keep].copy()
        new._codes.data = self._codes.data[:n][keep].copy()
        new._scales.data = self._scales.data[:n][keep].copy()
        owners = self._part_owner.view(m)
        parts = np.flatnonzero(alive[owners]) if m else np.zeros(0, dtype=np.int64)
        new._parts.data = self._parts.data[:m][parts].copy()
        new._part_codes.data = self._part_codes.data[:m][parts].copy()
        new._part_scales.data = self._part_scales.data[:m][parts].copy()
        new._part_weights.data = self._part_weights.data[:m][parts].copy()
        new._max_weight = self._max_weight
        new._part_owner.data = renumber[owners[parts]].astype(np.int32)
        new._m = len(parts)
        new._max_error, new._quantized_from = self._max_error, self._quantized_from
        for term, (rows, tfs) in self._postings.items():
            old = np.array(rows, dtype=np.int64)
            live = alive[old]
            if live.any():
                new._postings[term] = (
                    array("i", renumber[old[live]].astype(np.int32).tobytes()),
                    array("H", np.array(tfs, dtype=np.uint16)[live].tobytes()),
                )
                new._postings_count += int(live.sum())
        new._ids = [self._ids[row] for row in keep.tolist()]
        new._row = {key: row for row, key in enumerate(new._ids)}
        new._sessions, new._agents, new._groups = self._sessions, self._agents, self._groups
        for session, (members, sequences) in self._order.items():
            pairs = [(int(renumber[r]), q) for r, q in zip(members, sequences, strict=True)]
            pairs = [(r, q) for r, q in pairs if r >= 0]
            if pairs:
                new._order[session] = ([r for r, _ in pairs], [q for _, q in pairs])
        new._n = len(keep)
        return new


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
