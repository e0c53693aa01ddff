"""Speaker focus fuses a named speaker's deep dense list the same on every path.

The embedded FalkorDB store scores cosine with ``vec.cosineDistance`` and the in-process index
with its own float32 dot product; the two differ by up to ~1e-6 per score. When the dense
focus list was fused by rank, hits tied up to 1e-6 shared a rank, so a pair of cosines about
1e-6 apart was one tie on one path and two ranks on the other, and a hit's fused score moved
by a whole rank's share (~1e-3): test_search_paths_agree failed on a LoCoMo question. Here
the named speaker's turns come in pairs exactly 1e-6 apart, the tie tolerance, so rounding
decides every pair, and each path must still give every hit the same share to float32
rounding.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from memmachine.adapters.falkordb.falkordb_episode_store import FalkorDBEpisodeStore
from memmachine.adapters.indexed.indexed_episode_store import IndexedEpisodeStore
from memmachine.config import RetrievalSettings
from memmachine.models import Episode, EpisodeRecord, Scope
from memmachine.ports import EpisodeStore
from memmachine.retrieval.focus import SpeakerFocus
from memmachine.retrieval.pipeline import Search
from tests.integration.test_indexed_episode_store import graph, server

DIMENSIONS = 384  # MiniLM's: long enough for the engines' float32 sums to round apart
MODEL = "focus-paths-model"
T0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)
SCOPE = Scope(tenant="t", user_id="mel", session_id="s0")
QUERY = "What activities does Melanie enjoy?"
#: The old tie tolerance (relative and absolute): each pair of Melanie's turns is this far
#: apart in cosine before the stores round it.
GAP = 1e-6
#: A share may differ between the paths by about the cosines' own rounding; a rank's share
#: at this depth is ~1e-3.
ROUNDING = 1e-5

__all__ = ["graph", "server"]  # the embedded FalkorDB and a graph of its own per test


def at_cosine(query: np.ndarray, cosine: float, rng: np.random.Generator) -> list[float]:
    """A unit vector whose cosine with the unit ``query`` is ``cosine``."""
    other = rng.normal(size=DIMENSIONS)
    other -= other.dot(query) * query
    other /= np.linalg.norm(other)
    return [float(x) for x in cosine * query + math.sqrt(1 - cosine**2) * other]


def turns(query: np.ndarray) -> list[EpisodeRecord]:
    """Melanie's turns in pairs ``GAP`` apart in cosine, spread over 0.2-0.6 like a real
    deep list; Caroline's turns in between (so the query names one speaker of two)."""
    rng = np.random.default_rng(22)
    said: list[tuple[str, str, float]] = []
    for pair in range(40):
        cosine = 0.6 - pair * 0.01
        said += [("Melanie", f"a walk on day {pair}", cosine)]
        said += [("Melanie", f"a walk at dusk {pair}", cosine - GAP)]
        said += [("Caroline", f"a note {pair}", cosine - 0.005)]
    return [
        EpisodeRecord(
            id=f"e{number}",
            role="user",
            producer=speaker,
            content=text,
            timestamp=T0 + timedelta(minutes=number),
            search_text=text,
            embedding=at_cosine(query, cosine, rng),
        )
        for number, (speaker, text, cosine) in enumerate(said)
    ]


async def focus_shares(store: EpisodeStore, query: list[float], first: Episode) -> dict[str, float]:
    """What the speaker-focus stage adds to each hit's fused score, searched on ``store``."""
    search = Search(
        scope=SCOPE,
        query=QUERY,
        top_k=10,
        expand_context=0,
        query_vector=query,
        store=store,
        embedder=None,
        reranker=None,
        tuning=RetrievalSettings(speaker_focus_weight=0.25, distinct_evidence=False),
    )
    search.by_id[first.id], search.scores[first.id] = first, 1.0  # one candidate found
    stage = SpeakerFocus()
    assert stage.applies(search)
    await stage.run(search)
    return {key: score - (1.0 if key == first.id else 0.0) for key, score in search.scores.items()}


async def test_store_scan_and_index_fuse_the_focus_list_alike(server: str, graph: str) -> None:
    rng = np.random.default_rng(7)
    query = rng.normal(size=DIMENSIONS)
    query /= np.linalg.norm(query)
    plain = FalkorDBEpisodeStore(
        server, graph_name=graph, embedding_dimensions=DIMENSIONS, embedding_model=MODEL
    )
    await plain.start()
    index = IndexedEpisodeStore(plain, min_episodes=0, load_inline=10**9)
    await index.start()
    try:
        stored = await plain.add_episodes(SCOPE, turns(query))
        caroline = next(e for e in stored if e.producer == "Caroline")
        vector = [float(x) for x in query]
        by_store = await focus_shares(plain, vector, caroline)
        by_index = await focus_shares(index, vector, caroline)
    finally:
        await index.close()
    melanie = [e.id for e in stored if e.producer == "Melanie"]
    assert set(by_store) == set(by_index) == {caroline.id, *melanie}
    for key in melanie:
        assert by_index[key] == pytest.approx(by_store[key], abs=ROUNDING), key
    # the list is fused by how close each of Melanie's turns is to the question: her first
    # pair gets the weight, the last next to nothing, Caroline's turns nothing
    assert by_store[melanie[0]] == pytest.approx(0.25, abs=ROUNDING)
    assert by_store[melanie[0]] > by_store[melanie[40]] > by_store[melanie[-1]]
    assert by_store[caroline.id] == 0.0
