"""Search indexes kept on disk: a user not in memory is opened from their file with the very
answers the store gives, files follow the store (writes and deletions made elsewhere, a
store recreated), and deleted episodes do not outlive their deletion on disk."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from memmachine.adapters.indexed.indexed_episode_store import IndexedEpisodeStore
from memmachine.adapters.indexed.search_index_files import SearchIndexFiles
from memmachine.models import Scope
from memmachine.ports import EpisodeStore
from tests.integration.test_indexed_episode_store import (
    ANN,
    WORDS,
    fill,
    plain,
    ranked,
    records,
    scopes,
    server,
    vector,
)

__all__ = ["server"]  # the module-scoped embedded FalkorDB, shared with that file


@pytest.fixture
async def graph(server: str, unique: str) -> AsyncIterator[str]:
    name = f"files-{unique}"
    yield name
    client = aioredis.Redis.from_url(server)
    try:
        await client.execute_command("GRAPH.DELETE", name)
    except ResponseError:
        pass  # the test never created the graph
    finally:
        await client.aclose()


def on_disk(server: str, graph: str, directory: Path, **options: int) -> IndexedEpisodeStore:
    settings = {"min_episodes": 0, "load_inline": 10**9, "sweep_seconds": 0, **options}
    return IndexedEpisodeStore(plain(server, graph), index_dir=directory, **settings)


async def same_answers(store: EpisodeStore, fast: IndexedEpisodeStore, rng: random.Random) -> None:
    """Every kind of search in every scope of :func:`scopes` agrees with the plain store."""
    for scope in scopes():
        for _ in range(3):
            query = vector(rng)
            for derivatives in (True, False):
                want = await store.vector_search(scope, query, 7, derivatives=derivatives)
                got = await fast.vector_search(scope, query, 7, derivatives=derivatives)
                assert ranked(got) == ranked(want)
            text = " ".join(rng.sample(WORDS, 3))
            want = await store.fulltext_search(scope, text, 9)
            got = await fast.fulltext_search(scope, text, 9)
            assert ranked(got) == ranked(want)
        sample = [f"e{rng.randint(0, 120)}" for _ in range(10)]
        assert await fast.adjacent(scope, sample) == await store.adjacent(scope, sample)
        for key in sample[:3]:
            assert await fast.neighbours(scope, key, before=2, after=3) == (
                await store.neighbours(scope, key, before=2, after=3)
            )


async def test_a_user_not_in_memory_is_opened_from_disk_with_the_same_answers(
    server: str, graph: str, tmp_path: Path
) -> None:
    rng = random.Random(21)
    async with on_disk(server, graph, tmp_path) as first:
        await fill(first, rng)
        assert await first.warm(ANN)
    assert len(indexes_in(tmp_path)) == 1  # Ann's; Bob was never searched

    # a new process (or a replica sharing the directory): nothing in memory, no store scan
    async with plain(server, graph) as store, on_disk(server, graph, tmp_path) as second:
        await same_answers(store, second, rng)
        assert second.paths.opened == 1
        assert second.paths.by_store == 0
        assert second.paths.loaded == 0  # nothing read back from the store
        # its own writes join the mapped index and are searched at once
        await second.add_episodes(ANN.for_session("s9"), records(rng, "new", 30))
        await same_answers(store, second, rng)
        found = await second.fulltext_search(ANN.for_session("s9"), " ".join(WORDS), 100)
        assert {episode.id for episode, _ in found} == {f"new{i}" for i in range(30)}


async def test_writes_made_elsewhere_after_the_file_are_caught_up(
    server: str, graph: str, tmp_path: Path
) -> None:
    rng = random.Random(22)
    async with on_disk(server, graph, tmp_path) as first:
        await fill(first, rng)
        await first.warm(ANN)
    async with plain(server, graph) as store:
        await store.add_episodes(ANN.for_session("late"), records(rng, "late", 12))
        async with on_disk(server, graph, tmp_path) as second:
            await same_answers(store, second, rng)
            found = await second.fulltext_search(ANN.for_session("late"), " ".join(WORDS), 50)
            assert len(found) == 12
            assert second.paths.opened == 1
            assert second.paths.by_store == 0


async def test_deleted_episodes_do_not_stay_on_disk(
    server: str, graph: str, tmp_path: Path
) -> None:
    rng = random.Random(23)
    async with on_disk(server, graph, tmp_path) as store:
        await fill(store, rng)
        await store.warm(ANN)
        await store.settled()
        files = SearchIndexFiles(tmp_path, plain_identity(store))
        assert files.path(ANN.user_key).exists()
        assert files.path(ANN.user_key).stat().st_mode & 0o077 == 0  # private to the process
        assert files.directory.stat().st_mode & 0o077 == 0
        # a deletion through the store: the file goes at once
        assert await store.delete_episode(ANN.user_scope(), "e20")
        assert not files.path(ANN.user_key).exists()
        hits = await store.fulltext_search(ANN.user_scope(), " ".join(WORDS), 500)
        assert "e20" not in {episode.id for episode, _ in hits}
        # written again when it leaves memory, without the deleted episode
        await store.close()
    async with on_disk(server, graph, tmp_path) as reopened:
        await reopened.warm(ANN)  # from the store (no file), then written
        await reopened.close()
    async with plain(server, graph) as elsewhere:
        # another process forgets a session: this directory's file is now out of step
        assert await elsewhere.delete_episodes(ANN.for_session("s2")) > 0
        async with on_disk(server, graph, tmp_path) as third:
            assert third._files is not None
            assert third._files.path(ANN.user_key).exists()
            assert await third.sweep() == 1
            assert not third._files.path(ANN.user_key).exists()
            await same_answers(elsewhere, third, rng)  # loaded from the store instead
            assert third.paths.opened == 0


async def test_a_stale_file_found_when_opening_is_removed(
    server: str, graph: str, tmp_path: Path
) -> None:
    rng = random.Random(24)
    async with on_disk(server, graph, tmp_path) as store:
        await fill(store, rng)
        await store.warm(ANN)
    async with plain(server, graph) as elsewhere:
        assert await elsewhere.delete_episode(ANN.user_scope(), "e1")
        async with on_disk(server, graph, tmp_path) as fresh:
            hits = await fresh.fulltext_search(ANN.user_scope(), " ".join(WORDS), 500)
            assert "e1" not in {episode.id for episode, _ in hits}
            assert fresh.paths.opened == 0
            await same_answers(elsewhere, fresh, rng)


async def test_a_large_build_spills_its_vectors_and_ends_on_the_mapped_file(
    server: str, graph: str, tmp_path: Path
) -> None:
    rng = random.Random(25)
    async with plain(server, graph) as store:
        for start in range(0, 600, 100):
            await store.add_episodes(ANN.for_session(f"b{start}"), records(rng, "e", 100, start))
        async with on_disk(server, graph, tmp_path, spill_rows=64) as fast:
            assert await fast.warm(ANN)
            built = fast._slots[ANN.user_key].index
            assert built is not None
            assert built.tail_rows < 64 + 500  # vectors written out while reading
            await fast.settled()
            await same_answers(store, fast, rng)
            swapped = fast._slots[ANN.user_key].index
            assert swapped is not None
            assert swapped.tail_rows == 0  # now answered from the mapped file
        async with on_disk(server, graph, tmp_path) as fast:
            await same_answers(store, fast, rng)
            slot = fast._slots[ANN.user_key]
            assert slot.index is not None
            assert slot.index.frozen_rows == 600  # every vector in the mapped file


async def test_users_leaving_the_budget_come_back_from_disk(
    server: str, graph: str, tmp_path: Path
) -> None:
    rng = random.Random(26)
    users = [ANN.model_copy(update={"user_id": f"u{i}"}) for i in range(4)]
    async with on_disk(server, graph, tmp_path) as first:
        for user in users:
            await first.add_episodes(user, records(rng, "e", 60))
            await first.warm(user)
        await first.settled()
        mapped = first._slots[users[0].user_key].index
        assert mapped is not None
        assert mapped.frozen_rows == 60
        budget = int(mapped.nbytes * 2.5)  # room for two users' indexes, not four
    async with on_disk(server, graph, tmp_path, memory_budget=budget) as fast:
        for _ in range(3):
            for user in users:
                found = await fast.fulltext_search(user, " ".join(WORDS), 100)
                assert len(found) == 60
        held = sum(slot.index is not None for slot in fast._slots.values())
        assert held < len(users)  # the budget holds only some at a time
        assert fast.paths.loaded == 0  # never read back from the store
        assert fast.paths.opened >= len(users) * 3 // 2
        assert fast.paths.by_store == 0


async def test_files_of_another_store_or_a_recreated_one_are_never_used(
    server: str, graph: str, tmp_path: Path
) -> None:
    rng = random.Random(27)
    async with on_disk(server, graph, tmp_path) as store:
        await fill(store, rng)
        await store.warm(ANN)
        before = plain_identity(store)
    client = aioredis.Redis.from_url(server)
    try:
        await client.execute_command("GRAPH.DELETE", graph)
    finally:
        await client.aclose()
    async with on_disk(server, graph, tmp_path) as recreated:
        assert plain_identity(recreated) != before
        await recreated.add_episodes(ANN, records(rng, "other", 5))
        found = await recreated.fulltext_search(ANN.user_scope(), " ".join(WORDS), 100)
        assert {episode.id for episode, _ in found} == {f"other{i}" for i in range(5)}
        assert recreated.paths.opened == 0


async def test_an_unreadable_file_is_removed_and_the_store_answers(
    server: str, graph: str, tmp_path: Path
) -> None:
    rng = random.Random(28)
    async with on_disk(server, graph, tmp_path) as store:
        await fill(store, rng)
        await store.warm(ANN)
        path = SearchIndexFiles(tmp_path, plain_identity(store)).path(ANN.user_key)
    path.write_bytes(path.read_bytes()[:200])  # torn
    async with plain(server, graph) as truth, on_disk(server, graph, tmp_path) as fresh:
        await same_answers(truth, fresh, rng)
        assert fresh.paths.opened == 0


def indexes_in(directory: Path) -> list[Path]:
    return list(directory.rglob("*.idx"))


def plain_identity(store: IndexedEpisodeStore) -> str:
    identity = getattr(store.inner, "identity", None)
    assert isinstance(identity, str)
    return identity


def test_scope_keys_name_different_files(tmp_path: Path) -> None:
    files = SearchIndexFiles(tmp_path, "falkordb:abc")
    other = SearchIndexFiles(tmp_path, "falkordb:def")
    ann, bob = Scope(user_id="ann").user_key, Scope(user_id="bob").user_key
    assert files.path(ann) != files.path(bob)
    assert files.path(ann).parent != other.path(ann).parent
    assert files.open(ann) is None
