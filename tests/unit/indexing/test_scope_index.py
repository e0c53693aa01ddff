"""The in-process index's own guarantees, on random data (its agreement with the stores is
checked in ``tests/integration/test_indexed_episode_store.py`` and the contract suite)."""

from __future__ import annotations

import numpy as np
import pytest

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
    smaller = index.compacted()
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
