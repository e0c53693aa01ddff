"""Every path that can answer a search gives the same ranking, on real data.

Two LoCoMo conversations (../shared/bench, 788 turns) are ingested through the real
manager, embedded by the real MiniLM model, into each episode store: embedded FalkorDB, a
FalkorDB server and Neo4j. Each of their 231 questions is then asked of every path that
can answer a search, on every store:

* the store's own scans (what a user whose index is not ready gets);
* the in-process index (a user searched recently);
* the index opened from its file (a user whose index left memory: every question starts
  with it dropped).

The store-level searches (dense with derivatives, full-text, k = 60) must give the same ids
in the same order on every path of a store, with the same scores to float32 rounding, and
the manager's whole search (fusion, boosts, graph neighbourhood) the same top 20 on every
path of every store, so recall measured on one path holds for all. The one latitude is
float32 rounding itself: each engine computes cosine in its own arithmetic (FalkorDB's
``vec.cosineDistance``, Neo4j's rescaled ``vector.similarity.cosine``, the index's SIMD dot
product), which differ in the seventh digit, so two hits whose scores are equal within
``TIE`` may come in either order. Every other difference fails the test.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from pydantic import SecretStr
from redis.exceptions import ResponseError

from memmachine.adapters.indexed.indexed_episode_store import IndexedEpisodeStore
from memmachine.bootstrap import build_manager
from memmachine.bootstrap.embedders import build_embedder
from memmachine.config import EmbeddingSettings, SearchIndexSettings, Settings
from memmachine.manager import MemoryManager
from memmachine.models import Episode, NewMessage, Scope
from memmachine.ports import EpisodeStore
from tests.conftest import REPO_ROOT, Neo4jTarget
from tests.unit.test_bench_scale import _load

CONVERSATIONS = 2
#: Scores closer than this are equal within the engines' float32 arithmetic.
TIE = 2e-6
#: Hits compared per store-level search (the manager asks 60 of each signal for top 20).
DEPTH = 60
TOP_K = 20
LOCOMO = REPO_ROOT.parent / "shared" / "bench"


def assert_same_ranking(
    got: Sequence[tuple[str, float]], want: Sequence[tuple[str, float]], where: str
) -> None:
    """``got`` ranks as ``want``: the same ids in the same order, scores equal to float32
    rounding, except that a run of hits whose scores are all within ``TIE`` of each other
    may come in another order (and, at the end of the list, be cut elsewhere)."""
    assert len(got) == len(want), where
    assert [score for _, score in got] == pytest.approx([score for _, score in want], abs=TIE), (
        where
    )
    position = 0
    while position < len(want):
        end = position + 1
        while end < len(want) and abs(want[end][1] - want[position][1]) <= TIE:
            end += 1
        mine = {key for key, _ in got[position:end]}
        theirs = {key for key, _ in want[position:end]}
        if end < len(want):
            assert mine == theirs, f"{where}: ranks {position + 1}-{end} differ"
        position = end


class CachedEmbedder:
    """The real embedder, remembering every answer: each store is written the very same
    vectors while the model runs once per text."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name, self.model, self.dimensions = inner.name, inner.model, inner.dimensions
        self.pools_spans = getattr(inner, "pools_spans", False)
        self.max_tokens = getattr(inner, "max_tokens", 256)
        self.memo: dict[Any, Any] = {}

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        key = ("embed", tuple(texts))
        if key not in self.memo:
            self.memo[key] = await self.inner.embed(texts)
        return list(self.memo[key])

    async def count_tokens(self, texts: Sequence[str]) -> list[int]:
        key = ("count", tuple(texts))
        if key not in self.memo:
            self.memo[key] = await self.inner.count_tokens(texts)
        return list(self.memo[key])

    async def embed_spans(self, texts: Sequence[str], spans: Any) -> Any:
        key = ("spans", tuple(texts), repr(spans))
        if key not in self.memo:
            self.memo[key] = await self.inner.embed_spans(texts, spans)
        return self.memo[key]


class ColdIndexedEpisodeStore(IndexedEpisodeStore):
    """Every search starts with the user's index out of memory: opened from its file."""

    async def vector_search(
        self, scope: Scope, embedding: Sequence[float], k: int, *, derivatives: bool = True
    ) -> list[tuple[Episode, float]]:
        await self.settled()
        self.evict(scope)
        return await super().vector_search(scope, embedding, k, derivatives=derivatives)

    async def fulltext_search(
        self, scope: Scope, query: str, k: int
    ) -> list[tuple[Episode, float]]:
        await self.settled()
        self.evict(scope)
        return await super().fulltext_search(scope, query, k)


@pytest.fixture(scope="module")
def locomo() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    if not (LOCOMO / "locomo_public.json").is_file():
        pytest.skip("LoCoMo data not in ../shared/bench")
    turns, questions = _load("locomo_recall").load(LOCOMO, CONVERSATIONS)
    return turns, questions


@pytest.fixture(scope="module")
async def embedder(model_dir: Path) -> AsyncIterator[CachedEmbedder]:
    real = build_embedder(EmbeddingSettings(provider="local", model=str(model_dir)))
    assert real is not None
    await real.start()
    try:
        yield CachedEmbedder(real)
    finally:
        await real.close()


async def ingest(manager: MemoryManager, tenant: str, turns: dict[str, Any]) -> None:
    """Every turn, one message each, session by session in batches of 32 (as the LoCoMo
    bench does)."""
    for sample_id, conversation in turns.items():
        sessions: dict[int, list[Any]] = {}
        for turn in conversation:
            sessions.setdefault(turn.session, []).append(turn)
        for number, session in sessions.items():
            scope = Scope(tenant=tenant, user_id=sample_id, session_id=f"session-{number}")
            for start in range(0, len(session), 32):
                batch = session[start : start + 32]
                await manager.add_messages(
                    scope,
                    [
                        NewMessage(
                            content=turn.content,
                            producer=turn.speaker,
                            timestamp=turn.timestamp,
                            metadata={"dia_id": turn.dia_id},
                        )
                        for turn in batch
                    ],
                    working=False,
                )


async def on_store(
    name: str,
    settings: Settings,
    embedder: CachedEmbedder,
    tenant: str,
    locomo: tuple[dict[str, Any], list[dict[str, Any]]],
    vectors: dict[str, list[float]],
    index_dir: Path,
) -> dict[str, list[list[tuple[str, float]]]]:
    """Ingest into the store of ``settings``, then ask every question on every path; the
    manager's rankings per path (and assert the store-level agreement on the way)."""
    turns, questions = locomo
    manager = await build_manager(settings)
    await manager.start()
    try:
        manager.embedder = embedder
        await ingest(manager, tenant, turns)
        store = manager.episodes
        inner: EpisodeStore = store.inner if isinstance(store, IndexedEpisodeStore) else store
        in_memory = IndexedEpisodeStore(inner, load_inline=10**9)
        from_file = ColdIndexedEpisodeStore(
            inner, load_inline=10**9, index_dir=index_dir, sweep_seconds=0
        )
        await in_memory.start()
        await from_file.start()
        paths: dict[str, EpisodeStore] = {
            "store": inner,
            "in-memory index": in_memory,
            "index from its file": from_file,
        }
        rankings: dict[str, list[list[tuple[str, float]]]] = {path: [] for path in paths}
        for question in questions:
            scope = Scope(tenant=tenant, user_id=question["sample_id"])
            text, vector = question["question"], vectors[question["question"]]
            dense = {p: await s.vector_search(scope, vector, DEPTH) for p, s in paths.items()}
            lexical = {p: await s.fulltext_search(scope, text, DEPTH) for p, s in paths.items()}
            for found in (dense, lexical):
                want = [(e.id, score) for e, score in found["store"]]
                for path, hits in found.items():
                    where = f"{name}, {path}: {text!r}"
                    assert_same_ranking([(e.id, score) for e, score in hits], want, where)
                    episodes = {e.id: e for e, _ in found["store"]}
                    assert all(e == episodes.get(e.id, e) for e, _ in hits), where
            for path, searched in paths.items():
                manager.episodes = manager.episodic_service.store = searched
                hits = await manager.search_episodes(scope, text, top_k=TOP_K, query_vector=vector)
                rankings[path].append([(hit.episode.metadata["dia_id"], hit.score) for hit in hits])
            manager.episodes = manager.episodic_service.store = store
        assert from_file.paths.opened >= len(questions)  # each question opened the file
        assert from_file.paths.by_store == 0
        return rankings
    finally:
        await manager.close()


async def test_every_path_on_every_store_ranks_alike(
    locomo: tuple[dict[str, Any], list[dict[str, Any]]],
    embedder: CachedEmbedder,
    model_dir: Path,
    tmp_path: Path,
    falkordb_server_url: str,
    neo4j_database: Neo4jTarget,
) -> None:
    _, questions = locomo
    assert len(questions) >= 200  # a few hundred real queries (231)
    texts = [question["question"] for question in questions]
    vectors = dict(zip(texts, await embedder.embed(texts), strict=True))
    tenant = f"agree{uuid.uuid4().hex[:10]}"
    base = {
        "embedding": EmbeddingSettings(provider="local", model=str(model_dir)),
        "search_index": SearchIndexSettings(on_disk=False),
    }
    graph = f"agree-{tenant}"
    stores = {
        "embedded FalkorDB": Settings(data_dir=tmp_path / "embedded", **base),
        "FalkorDB server": Settings(
            data_dir=tmp_path / "server",
            episode_store_url=SecretStr(falkordb_server_url.replace("redis://", "falkordb://")),
            graph_name=graph,
            **base,
        ),
        "Neo4j": Settings(
            data_dir=tmp_path / "neo4j",
            episode_store_url=SecretStr(neo4j_database.url),
            episode_store_user=neo4j_database.user,
            episode_store_password=(
                SecretStr(neo4j_database.password) if neo4j_database.password else None
            ),
            **base,
        ),
    }
    results: dict[str, dict[str, list[list[tuple[str, float]]]]] = {}
    try:
        for name, settings in stores.items():
            results[name] = await on_store(
                name, settings, embedder, tenant, locomo, vectors, tmp_path / f"index-{name}"
            )
    finally:  # (Neo4j is emptied by its fixture)
        client = aioredis.Redis.from_url(falkordb_server_url)
        try:
            await client.execute_command("GRAPH.DELETE", graph)
        except ResponseError:
            pass  # never created
        finally:
            await client.aclose()
    first = results["embedded FalkorDB"]["store"]
    assert sum(len(ranking) for ranking in first) > 0
    for name, by_path in results.items():
        for path, rankings in by_path.items():
            for number, (want, got) in enumerate(zip(first, rankings, strict=True)):
                assert_same_ranking(got, want, f"{name}, {path}: question {number}")
