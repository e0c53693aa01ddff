"""A graph whose full-text terms came from an older analyser is analysed again on start."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import redis.asyncio as aioredis

from memmachine.adapters.falkordb.embedded_falkordb import EmbeddedFalkorDBServer
from memmachine.adapters.falkordb.falkordb_episode_store import FalkorDBEpisodeStore
from memmachine.models import EpisodeRecord, Scope

T0 = datetime(2024, 1, 1, tzinfo=UTC)
SCOPE = Scope(user_id="ann", session_id="s1")
OTHER = Scope(tenant="other", user_id="ann", session_id="s1")


def record(episode_id: str, content: str) -> EpisodeRecord:
    return EpisodeRecord(
        id=episode_id,
        role="user",
        producer="ann",
        content=content,
        timestamp=T0,
        search_text=content,
    )


async def query(server: EmbeddedFalkorDBServer, cypher: str) -> list[list[object]]:
    client = aioredis.Redis(unix_socket_path=str(server.socket_path), decode_responses=True)
    try:
        reply = await client.execute_command("GRAPH.QUERY", "episodes", cypher)
    finally:
        await client.aclose()
    return [list(row) for row in reply[1]] if len(reply) > 2 else []


async def test_terms_of_an_older_analyser_are_analysed_again(tmp_path: Path) -> None:
    server = EmbeddedFalkorDBServer(tmp_path / "data")
    async with server:
        async with FalkorDBEpisodeStore(server.url, graph_name="episodes") as store:
            await store.add_episodes(SCOPE, [record("a", "We went hiking in the hills")])
            await store.add_episodes(OTHER, [record("a", "Hiking boots for sale")])
        # what analyser 1 stored: words as written, plurals folded; schema 1
        await query(
            server,
            "MATCH (e:Episode) SET e.search_terms = CASE e.tenant WHEN 'other' "
            "THEN ' hiking  boot  sale ' ELSE ' went  hiking  hill ' END, e.term_count = 3",
        )
        await query(server, "MATCH (m:MemMachineMeta) SET m.schema_version = 1")
        async with FalkorDBEpisodeStore(server.url, graph_name="episodes") as store:
            found = await store.fulltext_search(Scope(user_id="ann"), "Who likes to hike?", 5)
            theirs = await store.fulltext_search(Scope(tenant="other", user_id="ann"), "hike", 5)
        meta = await query(server, "MATCH (m:MemMachineMeta) RETURN m.schema_version")
        terms = await query(
            server, "MATCH (e:Episode) RETURN e.tenant, e.search_terms ORDER BY e.tenant"
        )
        # a second start finds nothing left to do and changes nothing
        async with FalkorDBEpisodeStore(server.url, graph_name="episodes"):
            pass
        again = await query(
            server, "MATCH (e:Episode) RETURN e.tenant, e.search_terms ORDER BY e.tenant"
        )
    assert [episode.content for episode, _ in found] == ["We went hiking in the hills"]
    assert [episode.content for episode, _ in theirs] == ["Hiking boots for sale"]
    assert meta == [[4]]  # the current schema
    assert terms == [["default", " went  hike  hill "], ["other", " hike  boot  sale "]]
    assert again == terms


async def test_chinese_and_russian_terms_of_analyser_2_are_analysed_again(tmp_path: Path) -> None:
    """A graph written before the analyser read other languages (schema 3, analyser 2: a
    Chinese sentence one term, Russian words unstemmed) opens with every episode re-analysed:
    a Chinese memory is found by two of its words typed without spaces, a Russian one by its
    word in another case, and nothing is lost."""
    server = EmbeddedFalkorDBServer(tmp_path / "data")
    chinese = "我养了一只叫豆豆的柯基犬"
    russian = "Я катаюсь на лыжах каждую зиму"
    async with server:
        async with FalkorDBEpisodeStore(server.url, graph_name="episodes") as store:
            await store.add_episodes(
                SCOPE, [record("zh", chinese), record("ru", russian), record("en", "Hiking boots")]
            )
        # what analyser 2 stored for them, and schema 3
        await query(
            server,
            "MATCH (e:Episode) SET e.search_terms = CASE e.id "
            f"WHEN 'zh' THEN ' {chinese} ' WHEN 'ru' THEN ' я  катаюсь  на  лыжах  каждую  зиму ' "
            "ELSE ' hike  boot ' END, e.term_count = 2, e.terms_version = null",
        )
        await query(server, "MATCH (m:MemMachineMeta) SET m.schema_version = 3")
        async with FalkorDBEpisodeStore(server.url, graph_name="episodes") as store:
            dog = await store.fulltext_search(Scope(user_id="ann"), "柯基豆豆", 5)
            skiing = await store.fulltext_search(Scope(user_id="ann"), "лыжи", 5)
            boots = await store.fulltext_search(Scope(user_id="ann"), "boot", 5)
            kept = await store.get_episodes(SCOPE, ["zh", "ru", "en"])
        meta = await query(server, "MATCH (m:MemMachineMeta) RETURN m.schema_version")
    assert [episode.content for episode, _ in dog] == [chinese]
    assert [episode.content for episode, _ in skiing] == [russian]
    assert [episode.content for episode, _ in boots] == ["Hiking boots"]
    assert sorted(episode.content for episode in kept) == sorted([chinese, russian, "Hiking boots"])
    assert meta == [[4]]
