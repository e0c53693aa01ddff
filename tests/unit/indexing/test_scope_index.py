"""The in-process index's own guarantees, on random data (its agreement with the stores is
checked in ``tests/integration/test_indexed_episode_store.py`` and the contract suite)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from memmachine.indexing.index_snapshot import (
    IndexSnapshot,
    compacted,
    index_from_snapshot,
    snapshot_of,
)
from memmachine.indexing.scope_index import ScopeIndex
from memmachine.models import IndexEntry, Scope

DIMENSIONS = 48
USER = Scope(user_id="ann")


def entries(rng: np.random.Generator, count: int, start: int = 0) -> list[IndexEntry]:
    """Clustered vectors (so many near ties), a third with sentence vectors."""
    centres = rng.standard_normal((8, DIMENSIONS)).astype(np.float32)
    out = []
    for i in range(start, start + count):
        centre = centres[i % len(centres)]

        def near(centre: np.ndarray = centre) -> np.ndarray:
            return (centre + 0.3 * rng.standard_normal(DIMENSIONS)).astype(np.float32)

        out.append(
            IndexEntry(
                id=f"e{i:06d}",
                session_id=f"s{i % 13}",
                agent_id="bot" if i % 3 == 0 else None,
                group_id=None,
                sequence=i,
                timestamp=1_700_000_000_000_000 + i,
                revision=1,
                terms=("word",),
                embedding=near() if i % 17 else None,
                derivatives=tuple(near() for _ in range(i % 3)),
                derivative_weights=(1.0, 0.9)[: i % 3],
            )
        )
    return out


@pytest.mark.parametrize("derivatives", [True, False])
def test_the_int8_first_pass_returns_exactly_the_float_scan(derivatives: bool) -> None:
    rng = np.random.default_rng(5)
    data = entries(rng, 3_000)
    exact = ScopeIndex(DIMENSIONS, quantized_from=10**9)
    fast = ScopeIndex(DIMENSIONS, quantized_from=0)
    for index in (exact, fast):
        index.add(data[:2_000])
        index.add(data[2_000:])
        index.remove(["e000010", "e000011"])
    for scope in (USER, USER.model_copy(update={"agent_id": "bot"}), USER.for_session("s4")):
        mask = exact.mask(scope)
        assert mask is not None
        for _ in range(20):
            query = rng.standard_normal(DIMENSIONS).astype(np.float32)
            for k in (1, 10, 60):
                want = exact.vector_top(query, k, mask, derivatives=derivatives)
                got = fast.vector_top(query, k, mask, derivatives=derivatives)
                assert [key for key, _ in got] == [key for key, _ in want]
                assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-6)


def test_compaction_keeps_the_answers_and_frees_the_rows() -> None:
    rng = np.random.default_rng(8)
    index = ScopeIndex(DIMENSIONS, quantized_from=0)
    index.add(entries(rng, 3_000))
    dropped = index.remove([f"e{i:06d}" for i in range(3_000) if i % 3] + ["missing"])
    assert len(dropped) == 2_000
    assert index.wants_compaction
    smaller = compacted(index)
    assert len(smaller) == len(index) == 1_000
    assert smaller.nbytes < index.nbytes
    mask, small_mask = index.mask(USER), smaller.mask(USER)
    assert mask is not None
    assert small_mask is not None
    query = rng.standard_normal(DIMENSIONS).astype(np.float32)
    assert smaller.vector_top(query, 25, small_mask) == index.vector_top(query, 25, mask)
    assert smaller.bm25_top(["word"], 9, small_mask) == index.bm25_top(["word"], 9, mask)
    assert smaller.adjacent(["e000006"], small_mask) == index.adjacent(["e000006"], mask)
    assert smaller.adjacent(["e000006"], small_mask) == {"e000006": ["e000045"]}
    assert "e000004" not in smaller
    assert "e000006" in smaller


def with_terms(data: list[IndexEntry], seed: int) -> list[IndexEntry]:
    """The same entries with varied terms, sessions and episodes to carry."""
    import random
    from dataclasses import replace
    from datetime import UTC, datetime

    from memmachine.models import Episode

    rng = random.Random(seed)
    words = ["cat", "dog", "river", "paint", "hike", "book", "movie", "rain", "beach", "ñandú"]
    out = []
    for entry in data:
        session = f"s{rng.randint(0, 40)}"
        scope = USER.model_copy(update={"session_id": session, "agent_id": entry.agent_id})
        episode = Episode(
            id=entry.id,
            scope=scope,
            role="user",
            producer="ann",
            content=f"said {entry.id} — ünïcode",
            timestamp=datetime(2024, 1, 1, tzinfo=UTC),
            metadata={"n": entry.sequence},
            sequence=entry.sequence,
            created_at=datetime(2024, 1, 2, tzinfo=UTC),
        )
        out.append(
            replace(
                entry,
                terms=tuple(rng.choice(words) for _ in range(rng.randint(0, 6))),
                session_id=session,
                episode=episode,
            )
        )
    return out


@pytest.mark.parametrize("quantized_from", [0, 10**9])
def test_an_index_opened_from_its_snapshot_answers_as_the_one_it_was_taken_from(
    quantized_from: int,
) -> None:
    rng = np.random.default_rng(11)
    data = with_terms(entries(rng, 3_000), 11)
    # ids a fixed-width table could mangle: a trailing NUL, a prefix of another, non-ASCII
    data[5] = replace_id(data[5], "e000005\0")
    data[6] = replace_id(data[6], "e00000")
    data[7] = replace_id(data[7], "é")
    built = ScopeIndex(DIMENSIONS, quantized_from=quantized_from)
    built.add(data[:2_000])
    built.remove(["e000010", "e000500"])
    snapshot = snapshot_of(built)
    assert snapshot.meta["n"] == 1_998  # deleted rows are not in a snapshot
    assert b"e000010\xff" not in snapshot.arrays["ids"].tolist()
    matrices = {name: snapshot.matrix(name) for name, _, _ in IndexSnapshot.MATRICES}
    for values in (*matrices.values(), *snapshot.arrays.values()):
        values.setflags(write=False)  # as pages of a read-only mapped file
    opened = index_from_snapshot(snapshot, matrices)
    assert opened.frozen_rows == 1_998
    later = data[2_000:]
    for index in (built, opened):  # both go on receiving writes and deletions
        index.add(later)
        index.remove(["e002100", "e000020"])
    assert len(opened) == len(built)
    for present in ("e000005\0", "e00000", "é"):
        assert present in opened
    for absent in ("e000005", "e000010"):
        assert absent not in opened
    episode = opened.episode("é", USER)
    assert episode is not None
    assert (episode.id, episode.content) == ("é", "said e000007 — ünïcode")
    assert episode == built.episode("é", USER)
    for scope in (
        USER,
        USER.model_copy(update={"agent_id": "bot"}),
        USER.for_session("s4"),
        USER.for_session("nowhere"),
    ):
        want_mask, got_mask = built.mask(scope), opened.mask(scope)
        assert (want_mask is None) == (got_mask is None)
        if want_mask is None or got_mask is None:
            continue
        for _ in range(8):
            query = rng.standard_normal(DIMENSIONS).astype(np.float32)
            for derivatives in (True, False):
                want = built.vector_top(query, 30, want_mask, derivatives=derivatives)
                got = opened.vector_top(query, 30, got_mask, derivatives=derivatives)
                assert [key for key, _ in got] == [key for key, _ in want]
                assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-6)
            terms = ["cat", "river", "ñandú"]
            assert opened.bm25_top(terms, 20, got_mask) == built.bm25_top(terms, 20, want_mask)
        ids = [entry.id for entry in data[::37]]
        assert opened.adjacent(ids, got_mask) == built.adjacent(ids, want_mask)
        for key in ids[:8]:
            assert opened.neighbours(key, 3, 2, got_mask) == built.neighbours(key, 3, 2, want_mask)
    # compacting an opened index gives an ordinary one, with the same answers
    smaller = compacted(opened)
    mask = smaller.mask(USER)
    assert mask is not None
    query = rng.standard_normal(DIMENSIONS).astype(np.float32)
    assert smaller.vector_top(query, 25, mask) == built.vector_top(query, 25, built.mask(USER))


def replace_id(entry: IndexEntry, new_id: str) -> IndexEntry:
    from dataclasses import replace

    episode = entry.episode.model_copy(update={"id": new_id}) if entry.episode else None
    return replace(entry, id=new_id, episode=episode)


@pytest.mark.parametrize("derivatives", [True, False])
def test_rows_whose_codes_are_coarser_are_still_ranked_exactly(derivatives: bool) -> None:
    # a vector with one large component gets a coarse int8 code (its step is set by that
    # component): each episode's bound is its own, so such rows must still be rescored
    rng = np.random.default_rng(23)
    data = entries(rng, 3_000)
    spiky = []
    for i, entry in enumerate(data):
        if i % 5 == 0 and entry.embedding is not None:
            vector = entry.embedding.copy()
            vector[i % DIMENSIONS] += 12.0 * float(np.abs(vector).max())
            entry = replace(entry, embedding=vector)
        spiky.append(entry)
    exact = ScopeIndex(DIMENSIONS, quantized_from=10**9)
    fast = ScopeIndex(DIMENSIONS, quantized_from=0)
    for index in (exact, fast):
        index.add(spiky)
    assert fast._row_error.view(len(spiky)).max() > 3 * np.median(fast._row_error.view(3_000))
    mask = exact.mask(USER)
    assert mask is not None
    bases = [entry.embedding for entry in spiky[::35] if entry.embedding is not None]
    for base in bases[:40]:  # near spiky rows and ordinary ones
        query = (base + 0.2 * rng.standard_normal(DIMENSIONS)).astype(np.float32)
        for k in (1, 10, 60):
            want = exact.vector_top(query, k, mask, derivatives=derivatives)
            got = fast.vector_top(query, k, mask, derivatives=derivatives)
            assert [key for key, _ in got] == [key for key, _ in want]
            assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-6)


@pytest.mark.parametrize("derivatives", [True, False])
def test_each_rows_first_pass_bound_holds_and_is_tighter_than_the_largest(
    derivatives: bool,
) -> None:
    # the proof behind the first pass: no row's exact score is above its approximation
    # plus its bound, so a row whose approximation plus bound is below the floor (an exact
    # score of k rows) cannot be among the k best
    rng = np.random.default_rng(29)
    data = entries(rng, 2_000)
    for i, entry in enumerate(data):
        if i % 7 == 0 and entry.embedding is not None:
            vector = entry.embedding.copy()
            vector[i % DIMENSIONS] += 10.0 * float(np.abs(vector).max())
            data[i] = replace(entry, embedding=vector)
    index = ScopeIndex(DIMENSIONS, quantized_from=0)
    index.add(data)
    everything = ScopeIndex(DIMENSIONS, quantized_from=10**9)
    everything.add(data)
    mask = index.mask(USER)
    assert mask is not None
    m = index._m if derivatives else 0
    owners = index._part_owner.view(m)
    has_vector = mask & index._has_vector.view(len(mask))
    # random queries, and queries along a coarse row's own coding error (its worst case)
    queries = [rng.standard_normal(DIMENSIONS).astype(np.float32) for _ in range(6)]
    for row in (21, 42, 63, 84):  # coarse, without sentence vectors
        error = index._vectors.take(np.array([row]))[0]
        error -= index._codes.take(np.array([row]))[0] / index._scales.data[row]
        queries.append(error.astype(np.float32))
    widest = 0.0
    for query in queries:
        q = query / np.linalg.norm(query)
        approx, bound = index._first_pass(q, mask, has_vector, owners)
        exact = dict(everything.vector_top(query, 2_000, mask, derivatives=derivatives))
        rows = np.flatnonzero(np.isfinite(approx))
        assert len(rows) == len(exact)
        truth = np.array([exact[index._ids[row]] for row in rows.tolist()])
        gap = np.abs(truth - approx[rows])
        assert np.all(gap <= bound[rows])
        widest = max(widest, float((gap - bound[rows].min()).max()))
    # the coarse rows need their larger bound: the smallest would not hold for them
    assert widest > 0
