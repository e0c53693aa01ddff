"""A message sent again is stored once (``memmachine/memory/repeats.py``), on every store.

The episodic service derives a timestamped message's episode id from the message and its
scope; what makes that hold is each store's own write (an id exists once per user, checked
inside the write), so the suite runs against every adapter of ``conftest.py``: the same
message twice, from two writers at once, after a restart and after forgetting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from memmachine.config import RetrievalSettings
from memmachine.config.sections import LimitSettings, SafetySettings
from memmachine.errors import StoreError
from memmachine.memory.episodic import EpisodicService
from memmachine.memory.repeats import Added
from memmachine.models import Episode, NewMessage, Scope
from memmachine.ports import EpisodeStore
from memmachine.safety.gate import WriteGate
from tests.contract.conftest import OpenEpisodeStore
from tests.fakes.clock import ManualClock

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)


def service(store: EpisodeStore) -> EpisodicService:
    return EpisodicService(
        store=store,
        gate=WriteGate(SafetySettings(), LimitSettings()),
        embedder=None,
        reranker=None,
        retrieval=RetrievalSettings(),
    )


def said(content: str = "we moved to Lisbon in May", **fields: Any) -> NewMessage:
    return NewMessage(
        **{"role": "user", "producer": "ann", "timestamp": T0, "content": content, **fields}
    )


@pytest.fixture
def ann(unique: str) -> Scope:
    return Scope(
        tenant=f"t{unique}", org_id="acme", project_id="crm", user_id="ann", session_id="s1"
    )


async def test_the_same_messages_sent_again_answer_the_stored_episodes(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    memory = service(episode_store)
    batch = [said(), said("and the cat came too", timestamp=T0 + timedelta(minutes=1))]
    first = await memory.add_new(ann, batch)
    again = await memory.add_new(ann, batch)
    assert [e.id for e in again.episodes] == [e.id for e in first.episodes]
    assert [e.sequence for e in again.episodes] == [1, 2]
    assert len(first.new) == 2
    assert again.new == []
    assert await episode_store.count_episodes(ann) == 2


async def test_a_batch_with_a_new_message_after_a_repeat_stores_only_the_new_one(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    memory = service(episode_store)
    stored = await memory.add(ann, [said()])
    later = said("the flat has a view", timestamp=T0 + timedelta(minutes=5))
    both = await memory.add_new(ann, [said(), later])
    assert both.episodes[0].id == stored[0].id
    assert [e.content for e in both.new] == ["the flat has a view"]
    assert [e.content for e in await episode_store.list_episodes(ann)] == [
        "we moved to Lisbon in May",
        "the flat has a view",
    ]


async def test_the_same_message_twice_in_one_batch_is_stored_once(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    added = await service(episode_store).add_new(ann, [said(), said()])
    assert added.episodes[0].id == added.episodes[1].id
    assert len(added.new) == 1
    assert await episode_store.count_episodes(ann) == 1


async def test_two_writers_sending_the_same_message_at_once_store_it_once(
    open_episode_store: OpenEpisodeStore, ann: Scope
) -> None:
    writers = [service(await open_episode_store()) for _ in range(2)]
    batch = [said(f"turn {n}", timestamp=T0 + timedelta(seconds=n)) for n in range(5)]
    answers = await asyncio.gather(*(w.add_new(ann, batch) for w in writers for _ in range(2)))
    assert len({tuple(e.id for e in added.episodes) for added in answers}) == 1
    assert sum(len(added.new) for added in answers) == 5
    assert await writers[0].store.count_episodes(ann) == 5


async def test_a_message_sent_again_after_a_restart_is_still_the_stored_one(
    open_episode_store: OpenEpisodeStore, ann: Scope
) -> None:
    before = await service(await open_episode_store()).add(ann, [said()])
    reopened = await open_episode_store()
    after = await service(reopened).add_new(ann, [said()])
    assert after.episodes[0].id == before[0].id
    assert after.new == []
    assert await reopened.count_episodes(ann) == 1


@pytest.mark.parametrize(
    "other",
    [
        {"timestamp": T0 + timedelta(microseconds=1)},
        {"producer": "bob"},
        {"role": "assistant"},
        {"content": "we moved to Porto in May"},
        {"metadata": {"source": "import"}},
    ],
    ids=["timestamp", "producer", "role", "content", "metadata"],
)
async def test_a_message_that_differs_in_anything_is_another_message(
    episode_store: EpisodeStore, ann: Scope, other: dict[str, Any]
) -> None:
    memory = service(episode_store)
    first = await memory.add(ann, [said()])
    second = await memory.add_new(ann, [said(**other)])
    assert second.episodes[0].id != first[0].id
    assert len(second.new) == 1
    assert await episode_store.count_episodes(ann) == 2


@pytest.mark.parametrize("field", ["session_id", "agent_id", "group_id"])
async def test_the_same_message_in_another_session_agent_or_group_is_another_message(
    episode_store: EpisodeStore, ann: Scope, field: str
) -> None:
    memory = service(episode_store)
    await memory.add(ann, [said()])
    elsewhere = ann.model_copy(update={field: "other"})
    added = await memory.add_new(elsewhere, [said()])
    assert len(added.new) == 1
    assert await episode_store.count_episodes(ann.user_scope()) == 2


async def test_messages_without_a_timestamp_are_stored_every_time(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    memory = service(episode_store)
    first = await memory.add(ann, [said("ok", timestamp=None)])
    second = await memory.add_new(ann, [said("ok", timestamp=None), said("ok", timestamp=None)])
    assert len(second.new) == 2
    assert first[0].id not in [e.id for e in second.new]
    assert await episode_store.count_episodes(ann) == 3


async def test_a_message_is_compared_as_the_write_gate_stores_it(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    memory = service(episode_store)
    first = await memory.add(ann, [said("mail me at ann@example.com")])
    assert "ann@example.com" not in first[0].content
    again = await memory.add_new(ann, [said("mail me at ann@example.com")])
    assert again.episodes[0].id == first[0].id
    assert again.new == []


@pytest.mark.parametrize("forget", ["session", "user", "episode"])
async def test_after_forgetting_the_message_can_be_stored_again(
    episode_store: EpisodeStore, ann: Scope, forget: str
) -> None:
    memory = service(episode_store)
    first = await memory.add(ann, [said()])
    if forget == "episode":
        await memory.delete(ann, first[0].id)
    else:
        await memory.forget(ann if forget == "session" else ann.user_scope())
    assert await episode_store.count_episodes(ann) == 0
    again = await memory.add_new(ann, [said()])
    assert len(again.new) == 1
    assert await episode_store.count_episodes(ann) == 1


# ---------------------------------------------------------------- an expired repeat


def clocked(store: EpisodeStore, clock: ManualClock) -> EpisodicService:
    memory = service(store)
    memory.clock = clock
    return memory


@pytest.mark.parametrize("ttl", [None, 60], ids=["no-expiry", "new-expiry"])
async def test_a_message_sent_again_after_it_expired_is_stored_and_found_again(
    episode_store: EpisodeStore, ann: Scope, ttl: int | None
) -> None:
    clock = ManualClock()
    memory = clocked(episode_store, clock)
    [first] = await memory.add(ann, [said(ttl_seconds=5)])
    clock.advance(5)  # expired, and the retention sweep has not run
    assert [hit.episode.id for hit in await memory.search(ann, "Lisbon")] == []

    again = await memory.add_new(ann, [said(ttl_seconds=ttl)])
    assert [e.id for e in again.new] == [first.id]  # the same message, under its id
    assert again.episodes == again.new
    assert again.new[0].metadata.get("expires_at") == (
        None if ttl is None else (clock.now() + timedelta(seconds=ttl)).isoformat()
    )
    assert (await memory.get(ann, first.id)).content == "we moved to Lisbon in May"
    assert [e.id for e in (await memory.page(ann))[0]] == [first.id]
    assert [hit.episode.id for hit in await memory.search(ann, "Lisbon")] == [first.id]
    assert await episode_store.count_episodes(ann) == 1  # the expired one is gone

    if ttl is not None:  # the new expiry holds: it expires again, and comes back again
        clock.advance(ttl)
        assert (await memory.page(ann))[0] == []
        assert len((await memory.add_new(ann, [said()])).new) == 1


async def test_a_batch_stores_the_expired_repeat_and_answers_the_live_one(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    clock = ManualClock()
    memory = clocked(episode_store, clock)
    later = said("the flat has a view", timestamp=T0 + timedelta(minutes=5))
    [short, kept] = await memory.add(ann, [said(ttl_seconds=5), later])
    clock.advance(10)
    again = await memory.add_new(ann, [said(), later, said()])
    assert [e.id for e in again.episodes] == [short.id, kept.id, short.id]
    assert [e.id for e in again.new] == [short.id]
    assert again.episodes[1] == kept
    assert await episode_store.count_episodes(ann) == 2


async def test_two_writers_sending_an_expired_message_again_at_once_store_it_once(
    open_episode_store: OpenEpisodeStore, ann: Scope
) -> None:
    clock = ManualClock()
    writers = [clocked(await open_episode_store(), clock) for _ in range(2)]
    [first] = await writers[0].add(ann, [said(ttl_seconds=5)])
    clock.advance(5)
    answers = await asyncio.gather(*(w.add_new(ann, [said()]) for w in writers for _ in range(2)))
    assert {added.episodes[0].id for added in answers} == {first.id}
    assert sum(len(added.new) for added in answers) >= 1
    assert await writers[1].store.count_episodes(ann) == 1
    assert (await writers[1].get(ann, first.id)).content == "we moved to Lisbon in May"


class _Undeletable:
    """The store, except that removing an episode fails."""

    def __init__(self, store: EpisodeStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def delete_episode(self, scope: Scope, episode_id: str, **_: Any) -> bool:
        raise StoreError("the graph went away", store="episodes")


async def test_when_the_expired_repeat_cannot_be_removed_nothing_is_stored_and_a_retry_works(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    clock = ManualClock()
    memory = clocked(episode_store, clock)
    [first] = await memory.add(ann, [said(ttl_seconds=5)])
    clock.advance(5)
    memory.store = cast(EpisodeStore, _Undeletable(episode_store))
    with pytest.raises(StoreError):
        await memory.add_new(ann, [said(), said("and the cat came too", timestamp=None)])
    memory.store = episode_store
    assert await episode_store.count_episodes(ann) == 1  # only the expired one
    assert (await memory.page(ann))[0] == []
    again = await memory.add_new(ann, [said()])
    assert [e.id for e in again.new] == [first.id]
    assert [e.id for e in (await memory.page(ann))[0]] == [first.id]


class _Listings:
    """The store, counting the listings of a session's episodes (the last messages an add
    reads as the context of what it stores)."""

    def __init__(self, store: EpisodeStore) -> None:
        self._store = store
        self.count = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def list_episodes(self, scope: Scope, **options: Any) -> list[Episode]:
        self.count += 1
        return await self._store.list_episodes(scope, **options)


async def test_an_add_of_repeats_only_does_not_read_the_session_it_stores_nothing_in(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    memory = service(episode_store)
    batch = [said(), said("and the cat came too", timestamp=T0 + timedelta(minutes=1))]
    await memory.add(ann, batch)
    listings = _Listings(episode_store)
    memory.store = cast(EpisodeStore, listings)
    assert (await memory.add_new(ann, batch)).new == []
    assert listings.count == 0
    # Something to store (a new message, or one without a timestamp): the context is read.
    later = said("the flat has a view", timestamp=T0 + timedelta(minutes=5))
    assert len((await memory.add_new(ann, [*batch, later])).new) == 1
    assert len((await memory.add_new(ann, [said("ok", timestamp=None)])).new) == 1
    assert listings.count == 2


class _RacedAfterReading:
    """The store, except that right after the first lookup of episodes by id another
    writer's add runs (it reads what the lookup read, then the other add goes first)."""

    def __init__(self, store: EpisodeStore, other: Callable[[], Awaitable[object]]) -> None:
        self._store, self._other = store, other
        self.raced = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def get_episodes(self, scope: Scope, episode_ids: Sequence[str]) -> list[Episode]:
        found = await self._store.get_episodes(scope, episode_ids)
        if not self.raced:
            self.raced = True
            await self._other()
        return found


async def test_a_re_send_that_read_the_expired_episode_keeps_the_one_another_stored_anew(
    open_episode_store: OpenEpisodeStore, ann: Scope
) -> None:
    clock = ManualClock()
    writer = clocked(await open_episode_store(), clock)
    [first] = await writer.add(ann, [said(ttl_seconds=5)])
    clock.advance(5)
    other: list[Added] = []

    async def sent_again_by_the_other() -> None:
        other.append(await writer.add_new(ann, [said()]))

    late = clocked(await open_episode_store(), clock)
    late.store = cast(EpisodeStore, _RacedAfterReading(late.store, sent_again_by_the_other))
    answer = await late.add_new(ann, [said()])
    assert [e.id for e in other[0].new] == [first.id]  # the other stored it anew
    assert answer.new == []  # and this add found that one: nothing removed, nothing stored
    assert answer.episodes == other[0].new
    assert await writer.get(ann, first.id) == other[0].new[0]
    assert await writer.store.count_episodes(ann) == 1
