"""FalkorDB builds an index over existing nodes in the background: a store must not answer
from an index that is still being built."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memmachine.adapters.falkordb.falkordb_episode_store import FalkorDBEpisodeStore
from memmachine.models import EpisodeRecord, Scope

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WORDS = [
    "river",
    "stone",
    "lamp",
    "orchard",
    "violin",
    "harbour",
    "pepper",
    "window",
    "lantern",
    "meadow",
]


def _record(n: int) -> EpisodeRecord:
    text = " ".join(WORDS[(n * 7 + i) % len(WORDS)] for i in range(6))
    if n == 4321:
        text += " zeppelin"
    return EpisodeRecord(
        id=f"e{n}",
        role="user",
        producer=None,
        content=text,
        timestamp=T0 + timedelta(seconds=n),
        search_text=text,
    )


async def test_a_store_opened_on_existing_episodes_finds_them_on_its_first_search(
    falkordb_server_url: str, unique: str
) -> None:
    """A store that creates its indexes on a graph already full of episodes (a graph from
    before an index existed; simulated by dropping them) must not leave its first searches
    blind while FalkorDB fills the indexes in the background."""
    graph = f"indexes-{unique}"
    scope = Scope(tenant="t", org_id="o", project_id="p", user_id="u", session_id="s")
    writer = FalkorDBEpisodeStore(falkordb_server_url, graph_name=graph)
    await writer.start()
    try:
        for first in range(0, 6000, 1000):
            await writer.add_episodes(scope, [_record(n) for n in range(first, first + 1000)])
        await writer._run("CALL db.idx.fulltext.drop('Episode')")
        for prop in ("id", "user_id", "session_id"):
            await writer._run(f"DROP INDEX FOR (n:Episode) ON (n.{prop})")
    finally:
        await writer.close()

    reader = FalkorDBEpisodeStore(falkordb_server_url, graph_name=graph)
    await reader.start()
    try:
        hits = await reader.fulltext_search(scope.user_scope(), "zeppelin", 5)
        assert [episode.id for episode, _ in hits] == ["e4321"]
    finally:
        await reader._run("MATCH (n) DETACH DELETE n")
        await reader.close()
