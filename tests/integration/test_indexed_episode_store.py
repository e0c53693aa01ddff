"""Searches answered by the in-process index agree with the store, and stay in step with it.

The contract suite runs every clause of the port against ``IndexedEpisodeStore`` too; this
file checks what only a cache can get wrong: the same answers as the store on a busy random
graph, writes and deletes made by another process (another replica on the same graph),
reading one's own writes, loading in the background, and the memory budget.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from memmachine.adapters.falkordb.embedded_falkordb import EmbeddedFalkorDBServer
from memmachine.adapters.falkordb.falkordb_episode_store import FalkorDBEpisodeStore
from memmachine.adapters.indexed.indexed_episode_store import IndexedEpisodeStore
from memmachine.indexing.scope_index import ScopeIndex
from memmachine.models import Episode, EpisodeRecord, Scope

DIMENSIONS = 8
MODEL = "index-test-model"
T0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)
WORDS = ["cat", "dog", "hike", "paint", "river", "garden", "guitar", "bake", "coffee"]
WORDS += ["rain", "beach", "book", "movie"]
ANN = Scope(tenant="t", user_id="ann", session_id="s0")


@pytest.fixture(scope="module")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    async with EmbeddedFalkorDBServer(tmp_path_factory.mktemp("indexed")) as embedded:
        yield embedded.url


@pytest.fixture
async def graph(server: str, unique: str) -> AsyncIterator[str]:
    name = f"indexed-{unique}"
    yield name
    client = aioredis.Redis.from_url(server)
    try:
        await client.execute_command("GRAPH.DELETE", name)
    except ResponseError:
        pass  # the test never created the graph
    finally:
        await client.aclose()


def plain(server: str, graph: str, dimensions: int | None = DIMENSIONS) -> FalkorDBEpisodeStore:
    return FalkorDBEpisodeStore(
        server, graph_name=graph, embedding_dimensions=dimensions, embedding_model=MODEL
    )


def indexed(server: str, graph: str, **options: int) -> IndexedEpisodeStore:
    settings = {"min_episodes": 0, "load_inline": 10**9, **options}
    return IndexedEpisodeStore(plain(server, graph), **settings)


def vector(rng: random.Random) -> list[float]:
    values = np.array([rng.gauss(0, 1) for _ in range(DIMENSIONS)])
    return [float(x) for x in values / np.linalg.norm(values)]


def records(rng: random.Random, prefix: str, count: int, start: int = 0) -> list[EpisodeRecord]:
    out = []
    for i in range(start, start + count):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
        out.append(
            EpisodeRecord(
                id=f"{prefix}{i}",
                role="user",
                producer="ann",
                content=text,
                timestamp=T0 + timedelta(minutes=rng.randint(0, 5000)),
                search_text=text,
                embedding=vector(rng) if rng.random() < 0.9 else None,
                derivative_embeddings=(
                    parts := [vector(rng) for _ in range(rng.choice([0, 0, 1, 3]))]
                ),
                derivative_weights=[rng.choice([1.0, 0.995, 0.8]) for _ in parts],
            )
        )
    return out


async def fill(store: IndexedEpisodeStore | FalkorDBEpisodeStore, rng: random.Random) -> None:
    """Ann in four sessions, two agents and a group; Bob with the same words."""
    count = 0
    for session in range(4):
        for agent in ("bot", "helper", None):
            scope = ANN.model_copy(
                update={
                    "session_id": f"s{session}",
                    "agent_id": agent,
                    "group_id": "g" if session == 2 else None,
                }
            )
            batch = records(rng, "e", rng.randint(3, 12), count)
            count += len(batch)
            await store.add_episodes(scope, batch)
    bob = ANN.model_copy(update={"user_id": "bob"})
    await store.add_episodes(bob, records(rng, "e", 40))


class Ranking:
    """Hits compared by their ids in order and their scores to within float32 rounding."""

    def __init__(self, hits: list[tuple[Episode, float]]) -> None:
        self.ids = [episode.id for episode, _ in hits]
        self.scores = [score for _, score in hits]

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Ranking)
            and self.ids == other.ids
            and self.scores == pytest.approx(other.scores, abs=1e-5)
        )

    def __repr__(self) -> str:
        return repr(list(zip(self.ids, self.scores, strict=True)))


def ranked(hits: list[tuple[Episode, float]]) -> Ranking:
    return Ranking(hits)


def scopes() -> list[Scope]:
    user = ANN.user_scope()
    return [
        user,
        ANN,
        ANN.for_session("s2"),
        user.model_copy(update={"agent_id": "bot"}),
        user.model_copy(update={"group_id": "g"}),
        user.model_copy(update={"agent_id": "helper", "session_id": "s3"}),
        user.model_copy(update={"session_id": "nowhere"}),
    ]


async def test_the_index_answers_exactly_as_the_store_does(server: str, graph: str) -> None:
    rng = random.Random(11)
    async with plain(server, graph) as store, indexed(server, graph) as fast:
        await fill(fast, rng)
        for scope in scopes():
            for _ in range(4):
                query = vector(rng)
                for derivatives in (True, False):
                    want = await store.vector_search(scope, query, 7, derivatives=derivatives)
                    got = await fast.vector_search(scope, query, 7, derivatives=derivatives)
                    assert ranked(got) == ranked(want)
                text = " ".join(rng.sample(WORDS, 3))
                want = await store.fulltext_search(scope, text, 9)
                got = await fast.fulltext_search(scope, text, 9)
                assert ranked(got) == ranked(want)
                assert [e for e, _ in got] == [e for e, _ in want]  # whole episodes
            sample = [f"e{rng.randint(0, 120)}" for _ in range(10)]
            assert await fast.adjacent(scope, sample) == await store.adjacent(scope, sample)
            for key in sample[:4]:
                for before, after in ((1, 1), (3, 0), (2, 5)):
                    assert await fast.neighbours(
                        scope, key, before=before, after=after
                    ) == await store.neighbours(scope, key, before=before, after=after)
        assert "search indexes: 1 users" in ((await fast.health()).detail or "")


async def test_writes_of_another_replica_are_seen_at_the_next_search(
    server: str, graph: str
) -> None:
    rng = random.Random(5)
    async with indexed(server, graph) as one, indexed(server, graph) as two:
        await one.add_episodes(ANN, records(rng, "a", 5))
        assert len(await two.fulltext_search(ANN, " ".join(WORDS), 50)) == 5  # loaded
        await one.add_episodes(ANN.for_session("s9"), records(rng, "b", 3))
        found = {e.id for e, _ in await two.fulltext_search(ANN.user_scope(), " ".join(WORDS), 50)}
        assert {"b0", "b1", "b2"} <= found
        assert len(found) == 8

        # a deletion by the other replica: this one rebuilds rather than serve the dead
        assert await one.delete_episode(ANN, "a2")
        assert await one.delete_episodes(ANN.for_session("s9")) == 3
        query = " ".join(WORDS)
        found = {e.id for e, _ in await two.fulltext_search(ANN.user_scope(), query, 50)}
        assert found == {"a0", "a1", "a3", "a4"}
        a3 = next(r for r in records(random.Random(5), "a", 5) if r.id == "a3")
        hits = await two.vector_search(ANN.user_scope(), a3.embedding or vector(rng), 10)
        assert "a2" not in {e.id for e, _ in hits}
        # and its own deletions apply to its index at once
        assert await two.delete_episode(ANN, "a0")
        found = {e.id for e, _ in await two.fulltext_search(ANN.user_scope(), query, 50)}
        assert found == {"a1", "a3", "a4"}
        assert await two.adjacent(ANN, ["a1"]) == await one.inner.adjacent(ANN, ["a1"])


async def test_a_search_after_a_write_sees_it_even_under_concurrent_searches(
    server: str, graph: str
) -> None:
    rng = random.Random(3)
    async with indexed(server, graph) as store:

        async def write_then_read(i: int) -> set[str]:
            await store.add_episodes(ANN.for_session(f"w{i}"), records(rng, f"w{i}-", 2))
            found = await store.fulltext_search(ANN.user_scope(), " ".join(WORDS), 500)
            return {episode.id for episode, _ in found}

        async def keep_searching() -> None:
            for _ in range(20):
                await store.vector_search(ANN.user_scope(), vector(rng), 5)

        for first in (0, 12, 24):  # a cold index, then a warm one, twice
            writers = range(first, first + 12)
            results = await asyncio.gather(
                *(write_then_read(i) for i in writers), *(keep_searching() for _ in range(3))
            )
            for i, found in zip(writers, results, strict=False):
                assert {f"w{i}-0", f"w{i}-1"} <= found


async def test_a_write_made_while_the_index_loads_is_seen_by_the_writer(
    server: str, graph: str
) -> None:
    """One search starts loading a big index; meanwhile another task writes and searches:
    it must not be handed the index being loaded without what it wrote."""
    rng = random.Random(12)
    async with plain(server, graph) as store:
        for start in range(0, 3_000, 500):
            await store.add_episodes(ANN, records(rng, "old", 500, start))
    async with indexed(server, graph) as fast:
        everything = " ".join(WORDS)

        async def writer() -> set[str]:
            await asyncio.sleep(0.02)  # the first search is loading by now
            await fast.add_episodes(ANN.for_session("late"), records(rng, "late", 1))
            found = await fast.fulltext_search(ANN.for_session("late"), everything, 10)
            return {episode.id for episode, _ in found}

        _, seen = await asyncio.gather(fast.fulltext_search(ANN, everything, 5), writer())
        assert seen == {"late0"}


async def test_a_large_user_is_searched_in_the_store_until_loaded(server: str, graph: str) -> None:
    rng = random.Random(8)
    async with plain(server, graph) as store, indexed(server, graph, load_inline=10) as lazy:
        await fill(store, rng)
        query = vector(rng)
        want = ranked(await store.vector_search(ANN.user_scope(), query, 10))
        # the first search starts loading and is answered by the store, just as well
        assert ranked(await lazy.vector_search(ANN.user_scope(), query, 10)) == want
        for _ in range(200):
            if "search indexes: 1 users" in ((await lazy.health()).detail or ""):
                break
            await asyncio.sleep(0.02)
        else:
            pytest.fail("the index never finished loading")
        assert ranked(await lazy.vector_search(ANN.user_scope(), query, 10)) == want
        # many new episodes written elsewhere: caught up in the background, same answers
        await store.add_episodes(ANN.for_session("bulk"), records(rng, "bulk", 40))
        want = ranked(await store.vector_search(ANN.user_scope(), query, 10))
        assert ranked(await lazy.vector_search(ANN.user_scope(), query, 10)) == want
        await asyncio.sleep(0.3)
        assert ranked(await lazy.vector_search(ANN.user_scope(), query, 10)) == want


async def test_over_the_memory_budget_the_store_answers(server: str, graph: str) -> None:
    rng = random.Random(2)
    async with plain(server, graph) as store, indexed(server, graph, memory_budget=1) as tight:
        await fill(store, rng)
        query = vector(rng)
        for scope in scopes()[:3]:
            want = ranked(await store.vector_search(scope, query, 5))
            assert ranked(await tight.vector_search(scope, query, 5)) == want
        assert "search indexes: 0 users" in ((await tight.health()).detail or "")


async def test_least_recently_searched_users_leave_the_budget_first(
    server: str, graph: str
) -> None:
    rng = random.Random(4)
    users = [ANN.model_copy(update={"user_id": f"u{i}"}) for i in range(3)]
    async with plain(server, graph) as store:
        for user in users:
            await store.add_episodes(user, records(rng, "e", 30))
        one = ScopeIndex(DIMENSIONS)
        async for entries in store.index_entries(users[0]):
            one.add(entries)
        one.finish_loading()
    # room for two users' indexes, not three
    async with indexed(server, graph, memory_budget=int(one.nbytes * 2.5)) as store:
        for user in users:
            assert len(await store.fulltext_search(user, " ".join(WORDS), 100)) == 30
        assert "search indexes: 2 users" in ((await store.health()).detail or "")
        # every user still gets complete answers, the evicted one reloaded
        for user in users:
            assert len(await store.fulltext_search(user, " ".join(WORDS), 100)) == 30
        assert "search indexes: 2 users" in ((await store.health()).detail or "")


async def test_a_lexical_store_indexes_terms_only(server: str, graph: str) -> None:
    rng = random.Random(9)
    lexical = IndexedEpisodeStore(plain(server, graph, None), min_episodes=0)
    async with plain(server, graph, None) as store, lexical:
        await lexical.add_episodes(ANN, records(rng, "e", 25))
        assert await lexical.vector_search(ANN, vector(rng), 5) == []
        want = await store.fulltext_search(ANN, "cat river", 10)
        assert ranked(await lexical.fulltext_search(ANN, "cat river", 10)) == ranked(want)


async def test_episodes_stored_before_ledgers_existed_are_indexed(
    tmp_path: Path,
) -> None:
    """A graph written before schema 3 (no ledgers, no revisions) is given ledgers on start
    and its old episodes are searched by the index."""
    rng = random.Random(6)
    async with EmbeddedFalkorDBServer(tmp_path / "data") as embedded:
        async with plain(embedded.url, "old") as store:
            await store.add_episodes(ANN, records(rng, "old", 12))
        client = aioredis.Redis.from_url(embedded.url, decode_responses=True)
        try:
            await client.execute_command(
                "GRAPH.QUERY",
                "old",
                "MATCH (l:UserLedger) DELETE l WITH 1 AS done "
                "MATCH (n) WHERE n:Episode OR n:Session REMOVE n.revision",
            )
            await client.execute_command(
                "GRAPH.QUERY", "old", "MATCH (m:MemMachineMeta) SET m.schema_version = 2"
            )
        finally:
            await client.aclose()
        async with indexed(embedded.url, "old") as store:
            state = await store.index_state(ANN)
            assert (state.revision, state.episodes) == (0, 12)
            found = await store.fulltext_search(ANN, " ".join(WORDS), 50)
            assert len(found) == 12
            await store.add_episodes(ANN, records(rng, "new", 2))
            assert len(await store.fulltext_search(ANN, " ".join(WORDS), 50)) == 14
            assert (await store.index_state(ANN)).episodes == 14
