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
by the same index. Deleted episodes are masked out;
:func:`~memmachine.indexing.index_snapshot.compacted` makes a new index without them once they
are many.

Snapshots (flat arrays of the living rows, and an index opened on them, e.g. on a mapped
file) are :mod:`memmachine.indexing.index_snapshot`; the storage underneath is
:mod:`memmachine.indexing.index_columns`.

Concurrency: one writer (``add`` / ``remove`` from the event loop) and any number of
readers, including readers in worker threads. A reader works on the mask (and so the row
count) it took when it started; writers only append past that count, replace arrays
instead of resizing them under a reader, or flip ``alive`` flags. Row numbers never change
inside one index: compaction makes a new one.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from memmachine.indexing.episode_payloads import Payloads, decode_episode, encode_episode
from memmachine.indexing.index_columns import (
    SIMD,
    TF_MAX,
    Codes,
    Column,
    Floats,
    Ids,
    Mask,
    Matrix,
    Postings,
    Rows,
    SessionOrder,
    dot,
    quantize,
    unit_vector,
)
from memmachine.indexing.joined_rows import JoinedRows
from memmachine.indexing.page_advice import will_need
from memmachine.indexing.terms import BM25_B, BM25_K1
from memmachine.models import Episode, IndexEntry, Scope

__all__ = ["Mask", "ScopeIndex"]

#: Compact once this many rows are dead and they outnumber the living.
_COMPACT_AFTER = 1024
#: From this many vectors (own and sentence) on, vector search first scores the int8 codes
#: and rescores in float32 only the episodes that can still be among the best.
_QUANTIZED_FROM = 20_000
#: Slack for float rounding on top of the quantisation error bound.
_ROUNDING = 1e-5


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
        self._ids = Ids()
        self._alive = Column(np.bool_)
        self._session = Column(np.int32)
        self._agent = Column(np.int32)
        self._group = Column(np.int32)
        self._sequence = Column(np.int64)
        self._timestamp = Column(np.int64)
        self._length = Column(np.int32)
        self._has_vector = Column(np.bool_)
        self._sessions = Codes()
        self._agents = Codes()
        self._groups = Codes()
        self._order = SessionOrder()
        self._postings = Postings()
        self._payloads = Payloads()
        width = dimensions or 1
        self._vectors = Matrix(width)
        self._parts = Matrix(width)
        #: Sentence vectors' owner rows, in increasing order (parts are appended with their
        #: episode, and rows only grow), so an episode's parts are one contiguous run.
        self._part_owner = Column(np.int32)
        self._m = 0
        #: int8 codes of the unit vectors (code / scale ≈ vector) for the fast first pass,
        #: and the largest distance between a vector and its decoded code.
        self._codes = Matrix(width, np.int8)
        self._scales = Column(np.float32)
        self._part_codes = Matrix(width, np.int8)
        self._part_scales = Column(np.float32)
        #: Per episode, how far its int8 code can be from its vector (``_row_error``), and
        #: the largest of that and its sentence vectors' weighted errors
        #: (``_row_error_parts``): the first pass rescores fewer rows with its own bound.
        self._row_error = Column(np.float32)
        self._row_error_parts = Column(np.float32)
        #: How much each sentence / window vector's similarity counts, and the largest.
        self._part_weights = Column(np.float32)
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
            self._row_error,
            self._row_error_parts,
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
        return SIMD and self._n + self._m >= self._quantized_from

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
        self._row_error.reserve(end)
        self._row_error_parts.reserve(end)
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
                self._postings.append(term, row, min(count, TF_MAX))
            if self.dimensions is not None:
                if entry.embedding is not None:
                    unit = unit_vector(entry.embedding)
                    self._vectors.row(row)[:] = unit
                    self._scales.data[row], own = self._encode(unit, self._codes.row(row))
                    self._has_vector.data[row] = True
                else:
                    self._scales.data[row], own = 1.0, 0.0  # zero code, never read as a score
                self._row_error.data[row] = worst = own
                weights = entry.derivative_weights or (1.0,) * len(entry.derivatives)
                for vector, weight in zip(entry.derivatives, weights, strict=True):
                    unit = unit_vector(vector)
                    self._parts.row(m)[:] = unit
                    self._part_scales.data[m], error = self._encode(unit, self._part_codes.row(m))
                    worst = max(worst, weight * error)
                    self._part_weights.data[m] = weight
                    self._max_weight = max(self._max_weight, weight)
                    self._part_owner.data[m] = row
                    m += 1
                self._row_error_parts.data[row] = worst
            self._ids.append(entry.id)
            self._payloads.append(encode_episode(entry.episode))
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

    def _encode(self, unit: Floats, into: npt.NDArray[np.int8]) -> tuple[float, float]:
        """Write the int8 code of ``unit`` into ``into``; returns its scale and coding error,
        and keeps the largest coding error seen."""
        scale, error = quantize(unit, into)
        self._max_error = max(self._max_error, error)
        return scale, error

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
            will_need(column.view(n))  # a column of a mapped file: read it in large requests
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
        q = unit_vector(np.asarray(query, dtype=np.float32))
        m = self._m if derivatives else 0
        owners = self._part_owner.view(m)
        m = int(np.searchsorted(owners, n))  # parts of rows added after the mask was taken
        owners = owners[:m]
        has_vector = mask & self._has_vector.view(n)
        if not SIMD or n + m < self._quantized_from:
            scores = np.where(has_vector, self._vectors.dot(n, q), -np.inf)
            if m:
                inside = mask[owners]
                part_scores = self._parts.dot(m, q) * self._part_weights.view(m)
                np.maximum.at(scores, owners[inside], part_scores[inside])
            return self._best(scores, k, by_time=False)
        approx, bound = self._first_pass(q, mask, has_vector, owners)
        finite = np.flatnonzero(np.isfinite(approx))
        if len(finite) <= k:
            exact = self._rescore(finite, q, has_vector, owners)
            return self._best_of(finite, exact, k, by_time=False)
        values = approx[finite]
        first = np.sort(finite[np.argpartition(-values, k - 1)[:k]])
        first_exact = self._rescore(first, q, has_vector, owners)
        floor = float(first_exact.min())
        reach = values + bound[finite]
        rest = np.setdiff1d(finite[reach >= floor], first, assume_unique=True)
        rest_exact = self._rescore(rest, q, has_vector, owners)
        rows = np.concatenate([first, rest])
        return self._best_of(rows, np.concatenate([first_exact, rest_exact]), k, by_time=False)

    def _first_pass(
        self, q: Floats, mask: Mask, has_vector: Mask, owners: npt.NDArray[np.int32]
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Each row's approximate best (weighted) score from the int8 codes (``-inf`` where
        none), and a bound on how far it can be from the exact one (``owners``: the sorted
        owners of the sentence vectors searched)."""
        n, m = len(mask), len(owners)
        # First pass on int8 codes: every episode's (weighted) best approximate score is
        # within its own bound of the exact one: its codes' largest (weighted) error, plus
        # the query code's error times the largest weight (a vector's code is within
        # ``_max_error`` of it, so its length at most 1 + that). The k best approximate
        # episodes are rescored in float32 first: the lowest of their exact scores is a
        # floor under the k-th best exact score, so only episodes whose approximate best
        # plus their bound reaches the floor can be among the best k; those are rescored
        # too. (Measured at 100k episodes: a quarter of the rows that the k-th approximate
        # best minus twice the largest bound let through, and each is a scattered read
        # when the index's file is not in the page cache.)
        q_codes = np.zeros(len(q), dtype=np.int8)
        q_scale, q_error = quantize(q, q_codes)
        widest = max(1.0, self._max_weight) if m else 1.0
        slack = (1.0 + self._max_error) * q_error * widest + _ROUNDING
        errors = (self._row_error_parts if m else self._row_error).view(n)
        bound: npt.NDArray[np.float64] = errors.astype(np.float64) + slack
        own = self._codes.dot(n, q_codes) / (self._scales.view(n) * q_scale)
        approx = np.where(has_vector, own, -np.inf)
        if m:
            inside = mask[owners]
            parts = self._part_codes.dot(m, q_codes)
            parts *= self._part_weights.view(m) / (self._part_scales.view(m) * q_scale)
            np.maximum.at(approx, owners[inside], parts[inside])
        return approx, bound

    def _rescore(
        self,
        rows: Rows,
        q: Floats,
        has_vector: Mask,
        owners: npt.NDArray[np.int32],
    ) -> npt.NDArray[np.float64]:
        """Exact best cosine of each of ``rows`` (own vector and its parts among
        ``owners``, the sorted owners of the parts searched)."""
        first = np.searchsorted(owners, rows, side="left")
        counts = np.searchsorted(owners, rows, side="right") - first
        chunks = self._vectors.layout.chunks
        if len(chunks) == 1 and isinstance(chunks[0], JoinedRows):
            # an index file's vectors, each beside its sentence vectors: one read apiece
            inside = rows < len(chunks[0])
            chunks[0].will_need(rows[inside], counts[inside])
        exact = np.where(has_vector[rows], dot(self._vectors.take(rows), q), -np.inf)
        if len(owners):
            total = int(counts.sum())
            if total:
                starts = np.repeat(first - (np.cumsum(counts) - counts), counts)
                picked = np.arange(total) + starts
                positions = np.repeat(np.arange(len(rows)), counts)
                weighted = dot(self._parts.take(picked), q) * self._part_weights.data[picked]
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
        self._postings.will_need(terms)
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
        return decode_episode(episode_id, payload, user) if payload else None

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
        ids.will_need(rows)  # pages of a mapped file: start reading them all at once
        if by_time:
            will_need(timestamps, rows)
        pairs = [
            (row, score, ids[row])
            for row, score in zip(rows.tolist(), scores.tolist(), strict=True)
        ]
        if by_time:
            pairs.sort(key=lambda pair: (-pair[1], -int(timestamps[pair[0]]), pair[2]))
        else:
            pairs.sort(key=lambda pair: (-pair[1], pair[2]))
        # the episodes of the hits are read next
        self._payloads.will_need(np.array([row for row, _, _ in pairs[:k]], dtype=np.int64))
        return [(key, score) for _, score, key in pairs[:k]]

    @property
    def wants_compaction(self) -> bool:
        """Whether deleted rows are many enough to be worth ``compacted``."""
        return self._dead >= _COMPACT_AFTER and self._dead > self._n - self._dead
