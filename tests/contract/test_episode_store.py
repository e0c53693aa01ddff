"""The ``EpisodeStore`` contract (``memmachine/ports.py``), checked against every adapter.

Each test gets an empty store of its own (``episode_store`` in ``conftest.py``, one run per
backend) and works under its own tenant, so even a backend shared by tests cannot leak
between them. Every tenant a test writes under contains the test's ``unique`` token: on a
backend whose tests share one database (Neo4j) that is how the suite cleans up after it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import pytest

from memmachine.errors import ConfigurationError, ConflictError, InvalidInputError
from memmachine.models import Episode, EpisodeRecord, IndexEntry, IndexState, Scope, utc_now
from memmachine.ports import EpisodeStore
from tests.contract.conftest import (
    DIMENSIONS,
    MODEL,
    USER_IDS_IN_ORDER,
    OpenEpisodeStore,
    check_project_listing,
    check_user_listing,
    projects_of,
)

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)


def record(
    episode_id: str,
    content: str = "",
    *,
    minutes: float = 0,
    embedding: Sequence[float] | None = None,
    search_text: str | None = None,
    metadata: dict[str, object] | None = None,
    producer: str | None = "ann",
) -> EpisodeRecord:
    return EpisodeRecord(
        id=episode_id,
        role="user",
        producer=producer,
        content=content,
        timestamp=T0 + timedelta(minutes=minutes),
        metadata=metadata or {},
        search_text=content if search_text is None else search_text,
        embedding=list(embedding) if embedding is not None else None,
    )


def unit(values: Iterable[float]) -> list[float]:
    array = np.asarray(list(values), dtype=float)
    return [float(x) for x in array / np.linalg.norm(array)]


def ids(episodes: Iterable[Episode]) -> list[str]:
    return [episode.id for episode in episodes]


def hit_ids(hits: Iterable[tuple[Episode, float]]) -> list[str]:
    return [episode.id for episode, _ in hits]


@pytest.fixture
def ann(unique: str) -> Scope:
    """Ann's first session, under this test's own tenant."""
    return Scope(
        tenant=f"t{unique}", org_id="acme", project_id="crm", user_id="ann", session_id="s1"
    )


@pytest.fixture
def bob(ann: Scope) -> Scope:
    """Another user of the same tenant, org and project, with a same-named session."""
    return ann.model_copy(update={"user_id": "bob"})


# ---------------------------------------------------------------------- basics


async def test_store_implements_the_port(episode_store: EpisodeStore) -> None:
    assert isinstance(episode_store, EpisodeStore)
    assert episode_store.name == "episodic"
    assert (await episode_store.health()).status == "ok"


async def test_close_is_idempotent_and_health_never_raises(
    open_episode_store: OpenEpisodeStore,
) -> None:
    store = await open_episode_store()
    await store.close()
    await store.close()
    health = await store.health()
    assert health.status == "down"
    assert health.name == "episodic"


async def test_store_keeps_episodes_across_a_restart(
    open_episode_store: OpenEpisodeStore, ann: Scope
) -> None:
    first = await open_episode_store()
    await first.add_episodes(ann, [record("e1", "kept", embedding=unit([1, 0, 0, 0]))])
    await first.close()
    second = await open_episode_store()
    assert ids(await second.list_episodes(ann)) == ["e1"]
    assert hit_ids(await second.vector_search(ann, unit([1, 0, 0, 0]), 1)) == ["e1"]


# ---------------------------------------------------------------------- add


async def test_add_numbers_episodes_in_session_order_across_batches(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    first = await episode_store.add_episodes(ann, [record("a"), record("b"), record("c")])
    second = await episode_store.add_episodes(ann, [record("d"), record("e")])
    other = await episode_store.add_episodes(ann.for_session("s2"), [record("x")])

    assert ids(first) == ["a", "b", "c"]
    assert [e.sequence for e in first + second] == [1, 2, 3, 4, 5]
    assert [e.sequence for e in other] == [1]
    assert all(e.scope == ann for e in first + second)
    assert other[0].scope.session_id == "s2"
    # linked in order, across batch boundaries
    around = await episode_store.neighbours(ann, "c", before=2, after=2)
    assert ids(around) == ["a", "b", "d", "e"]


async def test_add_returns_what_get_returns(episode_store: EpisodeStore, ann: Scope) -> None:
    (added,) = await episode_store.add_episodes(ann, [record("a", "hello", producer=None)])
    assert await episode_store.get_episode(ann, "a") == added
    assert added.producer is None
    assert added.role == "user"


async def test_add_needs_a_session(episode_store: EpisodeStore, ann: Scope) -> None:
    with pytest.raises(InvalidInputError):
        await episode_store.add_episodes(ann.user_scope(), [record("a")])


async def test_add_of_nothing_stores_nothing(episode_store: EpisodeStore, ann: Scope) -> None:
    assert await episode_store.add_episodes(ann, []) == []
    assert await episode_store.count_episodes(ann) == 0


async def test_a_duplicate_id_inside_a_batch_stores_nothing(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    with pytest.raises(ConflictError):
        await episode_store.add_episodes(ann, [record("a"), record("b"), record("a")])
    assert await episode_store.count_episodes(ann.user_scope()) == 0


async def test_an_existing_id_stores_nothing_of_the_batch(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    await episode_store.add_episodes(ann, [record("a"), record("b")])
    with pytest.raises(ConflictError):
        await episode_store.add_episodes(ann.for_session("s2"), [record("new"), record("b")])
    assert ids(await episode_store.list_episodes(ann.user_scope())) == ["a", "b"]
    assert await episode_store.get_episode(ann.user_scope(), "new") is None
    (later,) = await episode_store.add_episodes(ann, [record("c")])
    assert later.sequence == 3


async def test_ids_belong_to_their_user(
    episode_store: EpisodeStore, ann: Scope, bob: Scope
) -> None:
    """The same id under another user is another episode (no conflict across scopes)."""
    await episode_store.add_episodes(ann, [record("same", "ann's")])
    await episode_store.add_episodes(bob, [record("same", "bob's")])
    ann_episode = await episode_store.get_episode(ann, "same")
    bob_episode = await episode_store.get_episode(bob, "same")
    assert ann_episode is not None
    assert bob_episode is not None
    assert (ann_episode.content, bob_episode.content) == ("ann's", "bob's")


async def test_a_bad_embedding_stores_nothing(episode_store: EpisodeStore, ann: Scope) -> None:
    with pytest.raises(InvalidInputError):
        await episode_store.add_episodes(
            ann, [record("a", embedding=unit([1, 0, 0, 0])), record("b", embedding=[1.0, 0.0])]
        )
    assert await episode_store.count_episodes(ann) == 0


async def test_concurrent_adds_to_one_session_all_land_in_order(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    batches = [[record(f"e{i}-{j}") for j in range(3)] for i in range(8)]
    results = await asyncio.gather(*(episode_store.add_episodes(ann, b) for b in batches))
    for batch in results:  # each batch is contiguous
        sequences = [e.sequence for e in batch]
        assert sequences == list(range(sequences[0], sequences[0] + 3))
    stored = await episode_store.list_episodes(ann)
    assert sorted(e.sequence for e in stored) == list(range(1, 25))


async def test_of_concurrent_adds_of_one_id_exactly_one_stores_it(
    open_episode_store: OpenEpisodeStore, ann: Scope
) -> None:
    stores = [await open_episode_store() for _ in range(2)]
    adds = [store.add_episodes(ann, [record("same", "hello")]) for store in stores * 3]
    results = await asyncio.gather(*adds, return_exceptions=True)
    stored = [result for result in results if isinstance(result, list)]
    assert len(stored) == 1
    assert all(isinstance(result, ConflictError) for result in results if result not in stored)
    assert await stores[0].count_episodes(ann) == 1
    assert await stores[0].delete_episode(ann, "same")
    assert ids(await stores[1].add_episodes(ann, [record("same", "hello")])) == ["same"]


# ---------------------------------------------------------------------- round trips


async def test_metadata_round_trips_as_nested_json(episode_store: EpisodeStore, ann: Scope) -> None:
    metadata: dict[str, object] = {
        "nested": {"list": [1, 2.5, None, True, "x"], "deeper": {"k": [{"a": {}}]}},
        "unicode": "日本語 😀",
        "quote": 'a"b\\c\n',
        "none": None,
        "key with spaces": -3,
    }
    await episode_store.add_episodes(ann, [record("a", metadata=metadata)])
    stored = await episode_store.get_episode(ann, "a")
    assert stored is not None
    assert stored.metadata == metadata


async def test_timestamps_round_trip_as_aware_utc(episode_store: EpisodeStore, ann: Scope) -> None:
    plus_two = timezone(timedelta(hours=2))
    local = datetime(2024, 6, 1, 14, 30, 5, 123456, tzinfo=plus_two)
    naive = datetime(2023, 1, 2, 3, 4, 5, 6)
    # model_copy skips the record's own UTC conversion: the store must cope with both
    records = [
        record("local").model_copy(update={"timestamp": local}),
        record("naive").model_copy(update={"timestamp": naive, "role": "tool"}),
    ]
    before = utc_now()
    added = await episode_store.add_episodes(ann, records)
    after = utc_now()
    for episode in [*added, *(await episode_store.list_episodes(ann))]:
        assert episode.timestamp.tzinfo is not None
        assert episode.timestamp.utcoffset() == timedelta(0)
        assert episode.created_at.utcoffset() == timedelta(0)
        assert before - timedelta(seconds=1) <= episode.created_at <= after + timedelta(seconds=1)
    stored = {e.id: e for e in await episode_store.list_episodes(ann)}
    assert stored["local"].timestamp == local
    assert stored["local"].timestamp.hour == 12
    assert stored["local"].timestamp.microsecond == 123456
    assert stored["naive"].timestamp == naive.replace(tzinfo=UTC)
    assert stored["naive"].role == "tool"


async def test_content_with_query_syntax_round_trips(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    content = 'he said "hi" \\ then\nCYPHER x=1 $p {a: 1} ]) // MATCH (n) DETACH DELETE n; 😀 \t'
    await episode_store.add_episodes(ann, [record("a", content)])
    stored = await episode_store.get_episode(ann, "a")
    assert stored is not None
    assert stored.content == content


# ---------------------------------------------------------------------- get / list / count


async def test_get_only_inside_the_scope(episode_store: EpisodeStore, ann: Scope) -> None:
    with_agent = ann.model_copy(update={"agent_id": "crm-bot", "group_id": "g1"})
    await episode_store.add_episodes(with_agent, [record("a")])

    assert await episode_store.get_episode(ann.user_scope(), "a") is not None
    assert await episode_store.get_episode(with_agent, "a") is not None
    for outside in [
        ann.model_copy(update={"user_id": "bob"}),
        ann.model_copy(update={"tenant": "elsewhere"}),
        ann.model_copy(update={"org_id": "other"}),
        ann.model_copy(update={"project_id": "other"}),
        ann.for_session("s2"),
        ann.model_copy(update={"agent_id": "other-bot"}),
        ann.model_copy(update={"group_id": "g2"}),
    ]:
        assert await episode_store.get_episode(outside, "a") is None
    assert await episode_store.get_episode(ann, "missing") is None


async def test_list_orders_by_timestamp_then_sequence(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    await episode_store.add_episodes(
        ann, [record("e1", minutes=0), record("e2", minutes=5), record("e3", minutes=5)]
    )
    await episode_store.add_episodes(ann.for_session("s2"), [record("f1", minutes=5)])
    await episode_store.add_episodes(ann, [record("e4", minutes=-10)])
    user = ann.user_scope()

    oldest_first = ["e4", "e1", "f1", "e2", "e3"]
    assert ids(await episode_store.list_episodes(user)) == oldest_first
    assert ids(await episode_store.list_episodes(user, newest_first=True)) == oldest_first[::-1]
    assert ids(await episode_store.list_episodes(user, limit=2, offset=1)) == ["e1", "f1"]
    assert ids(await episode_store.list_episodes(user, limit=2, newest_first=True)) == [
        "e3",
        "e2",
    ]
    assert await episode_store.list_episodes(user, offset=5) == []
    assert ids(await episode_store.list_episodes(ann)) == ["e4", "e1", "e2", "e3"]


async def test_count_follows_every_narrowing(episode_store: EpisodeStore, ann: Scope) -> None:
    agent = ann.model_copy(update={"agent_id": "bot"})
    group = ann.for_session("s2").model_copy(update={"group_id": "family"})
    await episode_store.add_episodes(ann, [record("a"), record("b")])
    await episode_store.add_episodes(agent, [record("c")])
    await episode_store.add_episodes(group, [record("d"), record("e"), record("f")])

    assert await episode_store.count_episodes(ann.user_scope()) == 6
    assert await episode_store.count_episodes(ann) == 3
    assert await episode_store.count_episodes(agent.model_copy(update={"session_id": None})) == 1
    assert await episode_store.count_episodes(group.model_copy(update={"session_id": None})) == 3
    assert await episode_store.count_episodes(ann.model_copy(update={"user_id": "bob"})) == 0


# ---------------------------------------------------------------------- delete


async def test_delete_one_episode_relinks_its_neighbours(
    episode_store: EpisodeStore, ann: Scope, bob: Scope
) -> None:
    await episode_store.add_episodes(ann, [record(f"e{i}") for i in range(1, 5)])

    assert await episode_store.delete_episode(bob, "e2") is False
    assert await episode_store.delete_episode(ann.for_session("s2"), "e2") is False
    assert await episode_store.delete_episode(ann, "e2") is True
    assert await episode_store.delete_episode(ann, "e2") is False

    assert await episode_store.get_episode(ann, "e2") is None
    assert ids(await episode_store.neighbours(ann, "e1", before=0, after=1)) == ["e3"]
    assert ids(await episode_store.neighbours(ann, "e3", before=1, after=0)) == ["e1"]
    assert await episode_store.count_episodes(ann) == 3
    # the session goes on after its last remaining episode
    assert await episode_store.delete_episode(ann, "e4") is True
    (added,) = await episode_store.add_episodes(ann, [record("e5")])
    assert added.sequence == 4
    assert ids(await episode_store.neighbours(ann, "e5", before=5, after=5)) == ["e1", "e3"]


async def test_a_delete_given_when_the_episode_was_stored_keeps_one_stored_anew_since(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    (first,) = await episode_store.add_episodes(ann, [record("same", "the old words")])
    assert await episode_store.delete_episode(ann, "same", stored_at=first.created_at) is True
    (anew,) = await episode_store.add_episodes(ann, [record("same", "the old words")])
    assert anew.created_at != first.created_at
    # A delete of the episode as it was read before it was stored anew leaves the new one.
    assert await episode_store.delete_episode(ann, "same", stored_at=first.created_at) is False
    assert (await episode_store.get_episode(ann, "same")) == anew
    assert await episode_store.delete_episode(ann, "same", stored_at=anew.created_at) is True
    assert await episode_store.count_episodes(ann) == 0


async def test_deleting_every_episode_of_a_session_leaves_an_empty_session(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    await episode_store.add_episodes(ann, [record("only")])
    assert await episode_store.delete_episode(ann, "only") is True
    assert await episode_store.list_episodes(ann) == []
    (again,) = await episode_store.add_episodes(ann, [record("again")])
    assert again.sequence == 1


async def test_delete_episodes_of_one_session(
    episode_store: EpisodeStore, ann: Scope, bob: Scope
) -> None:
    await episode_store.add_episodes(ann, [record("a1"), record("a2")])
    await episode_store.add_episodes(ann.for_session("s2"), [record("b1")])
    await episode_store.add_episodes(bob, [record("c1")])

    assert await episode_store.delete_episodes(ann) == 2
    assert await episode_store.delete_episodes(ann) == 0
    assert ids(await episode_store.list_episodes(ann.user_scope())) == ["b1"]
    assert await episode_store.count_episodes(bob) == 1
    (fresh,) = await episode_store.add_episodes(ann, [record("a3")])
    assert fresh.sequence == 1


async def test_delete_episodes_of_a_whole_user(
    episode_store: EpisodeStore, ann: Scope, bob: Scope
) -> None:
    await episode_store.add_episodes(ann, [record("a1"), record("a2")])
    await episode_store.add_episodes(ann.for_session("s2"), [record("b1")])
    await episode_store.add_episodes(bob, [record("c1")])

    assert await episode_store.delete_episodes(ann.user_scope()) == 3
    assert await episode_store.count_episodes(ann.user_scope()) == 0
    assert ids(await episode_store.list_episodes(bob.user_scope())) == ["c1"]


async def test_delete_episodes_of_one_agent_keeps_the_rest_linked(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    bot = ann.model_copy(update={"agent_id": "bot"})
    helper = ann.model_copy(update={"agent_id": "helper"})
    for i in range(3):
        await episode_store.add_episodes(bot, [record(f"bot{i}")])
        await episode_store.add_episodes(helper, [record(f"helper{i}")])

    assert await episode_store.delete_episodes(bot) == 3
    assert ids(await episode_store.list_episodes(ann)) == ["helper0", "helper1", "helper2"]
    around = await episode_store.neighbours(ann, "helper1", before=1, after=1)
    assert ids(around) == ["helper0", "helper2"]
    (next_one,) = await episode_store.add_episodes(helper, [record("helper3")])
    assert next_one.sequence == 7
    assert ids(await episode_store.neighbours(ann, "helper3", before=1, after=0)) == ["helper2"]


# ---------------------------------------------------------------------- neighbours


async def test_neighbours_in_session_order(episode_store: EpisodeStore, ann: Scope) -> None:
    await episode_store.add_episodes(ann, [record(f"e{i}", minutes=-i) for i in range(1, 7)])
    await episode_store.add_episodes(ann.for_session("s2"), [record("other")])

    assert ids(await episode_store.neighbours(ann, "e3", before=1, after=2)) == ["e2", "e4", "e5"]
    assert ids(await episode_store.neighbours(ann, "e3", before=9, after=0)) == ["e1", "e2"]
    assert ids(await episode_store.neighbours(ann, "e1", before=2, after=1)) == ["e2"]
    assert ids(await episode_store.neighbours(ann, "e6", before=0, after=3)) == []
    assert await episode_store.neighbours(ann, "e3", before=0, after=0) == []
    assert ids(await episode_store.neighbours(ann.user_scope(), "e6", before=1, after=1)) == ["e5"]


async def test_neighbours_only_inside_the_scope(
    episode_store: EpisodeStore, ann: Scope, bob: Scope
) -> None:
    bot = ann.model_copy(update={"agent_id": "bot"})
    helper = ann.model_copy(update={"agent_id": "helper"})
    await episode_store.add_episodes(bot, [record("b1")])
    await episode_store.add_episodes(helper, [record("h1")])
    await episode_store.add_episodes(bot, [record("b2")])
    await episode_store.add_episodes(bob, [record("bob1"), record("bob2")])

    assert await episode_store.neighbours(bob, "b1", before=5, after=5) == []
    assert await episode_store.neighbours(ann, "missing", before=5, after=5) == []
    assert await episode_store.neighbours(helper, "b1", before=5, after=5) == []
    assert ids(await episode_store.neighbours(ann, "b1", before=5, after=5)) == ["h1", "b2"]
    assert ids(await episode_store.neighbours(bot, "b1", before=5, after=5)) == ["b2"]


async def test_adjacent_answers_neighbours_for_many_ids_at_once(
    episode_store: EpisodeStore, ann: Scope, bob: Scope
) -> None:
    bot = ann.model_copy(update={"agent_id": "bot"})
    helper = ann.model_copy(update={"agent_id": "helper"})
    await episode_store.add_episodes(bot, [record("b1"), record("b2")])
    await episode_store.add_episodes(helper, [record("h1")])
    await episode_store.add_episodes(bot, [record("b3")])
    await episode_store.add_episodes(ann.for_session("s2"), [record("alone")])
    await episode_store.add_episodes(bob, [record("bob1"), record("bob2")])
    asked = ["b2", "h1", "b1", "alone", "bob1", "missing"]

    found = await episode_store.adjacent(ann.user_scope(), asked)
    assert {key: ids(value) for key, value in found.items()} == {
        "b2": ["b1", "h1"],
        "h1": ["b2", "b3"],
        "b1": ["b2"],
        "alone": [],
    }
    for key in found:  # the same answer as neighbours(before=1, after=1)
        one = await episode_store.neighbours(ann.user_scope(), key, before=1, after=1)
        assert ids(found[key]) == ids(one)
    # narrower scopes skip what lies outside them, and never reveal other users
    narrowed = await episode_store.adjacent(bot, asked)
    assert {key: ids(value) for key, value in narrowed.items()} == {
        "b2": ["b1", "b3"],
        "b1": ["b2"],
    }
    assert await episode_store.adjacent(bob, ["b1", "h1"]) == {}
    assert await episode_store.adjacent(ann, []) == {}


async def test_get_episodes_returns_the_asked_ones_in_order(
    episode_store: EpisodeStore, ann: Scope, bob: Scope
) -> None:
    await episode_store.add_episodes(ann, [record("a", "one"), record("b", "two")])
    await episode_store.add_episodes(ann.for_session("s2"), [record("c", "three")])
    await episode_store.add_episodes(bob, [record("x", "bob's")])

    got = await episode_store.get_episodes(ann.user_scope(), ["c", "x", "missing", "a", "c"])
    assert ids(got) == ["c", "a"]
    assert got[1] == await episode_store.get_episode(ann, "a")
    assert ids(await episode_store.get_episodes(ann, ["a", "b", "c"])) == ["a", "b"]
    assert await episode_store.get_episodes(ann, []) == []


# ---------------------------------------------------------------------- index support


async def entries_of(
    store: EpisodeStore, scope: Scope, since: int | None = None
) -> dict[str, IndexEntry]:
    found: dict[str, IndexEntry] = {}
    async for batch in store.index_entries(scope, since=since):
        for entry in batch:
            assert entry.id not in found, "an episode appears once"
            found[entry.id] = entry
    return found


async def test_index_state_counts_every_write_of_the_user(
    episode_store: EpisodeStore, ann: Scope, bob: Scope
) -> None:
    assert await episode_store.index_state(ann) == IndexState(0, 0, 0)
    await episode_store.add_episodes(ann, [record("a"), record("b")])
    first = await episode_store.index_state(ann.for_session("elsewhere"))
    assert (first.deletions, first.episodes) == (0, 2)
    await episode_store.add_episodes(ann.for_session("s2"), [record("c")])
    await episode_store.add_episodes(bob, [record("x")])  # another user: not Ann's state
    second = await episode_store.index_state(ann)
    assert second.revision > first.revision
    assert (second.deletions, second.episodes) == (0, 3)

    assert await episode_store.delete_episode(ann, "missing") is False
    third = await episode_store.index_state(ann)
    assert third.revision >= second.revision
    assert (third.deletions, third.episodes) == (0, 3)
    assert await episode_store.delete_episode(ann, "a") is True
    fourth = await episode_store.index_state(ann)
    assert fourth.revision > third.revision
    assert (fourth.deletions, fourth.episodes) == (1, 2)
    assert await episode_store.delete_episodes(ann.for_session("s2")) == 1
    fifth = await episode_store.index_state(ann)
    assert (fifth.deletions, fifth.episodes) == (2, 1)
    bobs = await episode_store.index_state(bob)
    assert (bobs.deletions, bobs.episodes) == (0, 1)


async def test_index_entries_carry_what_a_search_index_needs(
    episode_store: EpisodeStore, ann: Scope, bob: Scope
) -> None:
    bot = ann.model_copy(update={"agent_id": "bot", "group_id": "g1"})
    sentence = unit([0, 0, 1, 0])
    first = record("a", "Cats chase mice", embedding=unit([1, 0, 0, 0]), minutes=1)
    first.derivative_embeddings = [sentence, unit([0, 0, 0, 1])]
    first.derivative_weights = [1.0, 0.75]
    await episode_store.add_episodes(bot, [first, record("b", "no vector here")])
    await episode_store.add_episodes(bob, [record("x", "bob's", embedding=unit([1, 1, 0, 0]))])

    found = await entries_of(episode_store, ann)
    assert sorted(found) == ["a", "b"]
    a, b = found["a"], found["b"]
    assert (a.session_id, a.agent_id, a.group_id, a.sequence) == ("s1", "bot", "g1", 1)
    assert a.timestamp == int((T0 + timedelta(minutes=1)).timestamp() * 1_000_000)
    assert a.terms == ("cat", "chase", "mice")
    assert a.embedding is not None
    assert np.allclose(a.embedding, unit([1, 0, 0, 0]), atol=1e-6)
    assert len(a.derivatives) == len(a.derivative_weights) == 2
    weight_of = {
        int(np.argmax(vector)): weight
        for vector, weight in zip(a.derivatives, a.derivative_weights, strict=True)
    }
    assert weight_of == {2: 1.0, 3: 0.75}  # each vector with its own weight
    assert b.embedding is None
    assert b.derivatives == ()
    assert b.sequence == 2
    # the episode itself, as get_episodes returns it
    assert [a.episode, b.episode] == await episode_store.get_episodes(ann, ["a", "b"])
    assert a.episode is not None
    assert (a.episode.content, a.episode.scope) == ("Cats chase mice", bot)


async def test_index_entries_since_a_revision_are_the_later_additions(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    await episode_store.add_episodes(ann, [record("a"), record("b")])
    before = await episode_store.index_state(ann)
    await episode_store.add_episodes(ann, [record("c")])
    await episode_store.add_episodes(ann.for_session("s2"), [record("d")])

    later = await entries_of(episode_store, ann, since=before.revision)
    assert sorted(later) == ["c", "d"]
    assert all(entry.revision > before.revision for entry in later.values())
    assert sorted(await entries_of(episode_store, ann)) == ["a", "b", "c", "d"]
    now = await episode_store.index_state(ann)
    assert await entries_of(episode_store, ann, since=now.revision) == {}


async def test_index_entries_page_through_a_large_session(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    count = 4_500  # more than one batch of one session
    for start in range(0, count, 900):
        await episode_store.add_episodes(
            ann, [record(f"e{i:05d}", f"word{i % 7}") for i in range(start, start + 900)]
        )
    await episode_store.add_episodes(ann.for_session("s2"), [record("other")])
    found = await entries_of(episode_store, ann)
    assert len(found) == count + 1
    assert sorted(entry.sequence for entry in found.values() if entry.session_id == "s1") == list(
        range(1, count + 1)
    )


# ---------------------------------------------------------------------- isolation


async def test_one_scope_never_sees_another(episode_store: EpisodeStore, ann: Scope) -> None:
    """Same user id, session id, words and vectors under other tenants, orgs, projects and
    users: none of it is ever read, counted or changed through Ann's scope."""
    strangers = {
        "bob": ann.model_copy(update={"user_id": "bob"}),
        "tenant": ann.model_copy(update={"tenant": f"{ann.tenant}x"}),
        "org": ann.model_copy(update={"org_id": "other-org"}),
        "project": ann.model_copy(update={"project_id": "other-project"}),
    }
    secret = "the vault code is swordfish"
    vector = unit([0.3, 0.1, 0.9, 0.2])
    for name, scope in strangers.items():
        await episode_store.add_episodes(
            scope, [record(f"{name}-{i}", secret, embedding=vector) for i in range(3)]
        )
    await episode_store.add_episodes(ann, [record("mine", "nothing to see", embedding=vector)])
    user = ann.user_scope()

    assert ids(await episode_store.list_episodes(user)) == ["mine"]
    assert await episode_store.count_episodes(user) == 1
    assert hit_ids(await episode_store.vector_search(user, vector, 10)) == ["mine"]
    assert await episode_store.fulltext_search(user, "vault swordfish", 10) == []
    for name in strangers:
        assert await episode_store.get_episode(user, f"{name}-1") is None
        assert await episode_store.neighbours(user, f"{name}-1", before=3, after=3) == []
        assert await episode_store.delete_episode(user, f"{name}-1") is False
    assert await episode_store.neighbours(user, "mine", before=3, after=3) == []

    assert await episode_store.delete_episodes(user) == 1
    for scope in strangers.values():
        assert await episode_store.count_episodes(scope) == 3
        assert len(await episode_store.fulltext_search(scope, "swordfish", 10)) == 3


# ---------------------------------------------------------------------- vector search


async def test_vector_search_is_exact_within_the_scope(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    """Ann's best matches are found even when other scopes hold many closer vectors."""
    rng = np.random.default_rng(7)
    query = unit(rng.standard_normal(DIMENSIONS))
    mine = {f"m{i}": unit(rng.standard_normal(DIMENSIONS)) for i in range(24)}
    items = list(mine.items())
    await episode_store.add_episodes(ann, [record(k, embedding=v) for k, v in items[:12]])
    await episode_store.add_episodes(
        ann.for_session("s2"), [record(k, embedding=v) for k, v in items[12:]]
    )
    for user in ("bob", "carol", "dave"):
        crowd = ann.model_copy(update={"user_id": user})
        near = [unit(np.asarray(query) + rng.normal(0, 0.01, DIMENSIONS)) for _ in range(80)]
        await episode_store.add_episodes(
            crowd, [record(f"{user}{i}", embedding=v) for i, v in enumerate(near)]
        )

    def expected(names: Iterable[str], k: int) -> list[tuple[str, float]]:
        scored = [(name, float(np.dot(mine[name], query))) for name in names]
        return sorted(scored, key=lambda item: -item[1])[:k]

    for scope, names in [(ann.user_scope(), list(mine)), (ann.for_session("s2"), list(mine)[12:])]:
        hits = await episode_store.vector_search(scope, query, 5)
        want = expected(names, 5)
        assert hit_ids(hits) == [name for name, _ in want]
        for (_, got), (_, similarity) in zip(hits, want, strict=True):
            assert got == pytest.approx(similarity, abs=1e-5)


async def test_vector_similarity_is_cosine_best_first(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    await episode_store.add_episodes(
        ann,
        [
            record("same", embedding=unit([1, 0, 0, 0])),
            record("opposite", embedding=unit([-1, 0, 0, 0])),
            record("orthogonal", embedding=unit([0, 1, 0, 0])),
            record("diagonal", embedding=unit([1, 1, 0, 0])),
            record("no-vector"),
        ],
    )
    hits = await episode_store.vector_search(ann, [2.0, 0.0, 0.0, 0.0], 10)
    assert hit_ids(hits) == ["same", "diagonal", "orthogonal", "opposite"]
    scores = [score for _, score in hits]
    assert scores == pytest.approx([1.0, 2**-0.5, 0.0, -1.0], abs=1e-5)
    assert hit_ids(await episode_store.vector_search(ann, unit([1, 0, 0, 0]), 2)) == [
        "same",
        "diagonal",
    ]
    assert await episode_store.vector_search(ann, unit([1, 0, 0, 0]), 0) == []


async def test_vector_search_refuses_a_wrong_sized_query(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    with pytest.raises(InvalidInputError):
        await episode_store.vector_search(ann, [1.0, 0.0], 3)


def with_sentences(base: EpisodeRecord, *vectors: Sequence[float]) -> EpisodeRecord:
    return base.model_copy(update={"derivative_embeddings": [list(v) for v in vectors]})


async def test_an_episode_scores_the_best_of_its_sentences_once(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    await episode_store.add_episodes(
        ann,
        [
            with_sentences(
                record("mixed", embedding=unit([1, 0, 0, 0])),
                unit([0, 1, 0, 0]),
                unit([0, 1, 1, 0]),
            ),
            record("whole", embedding=unit([3, 4, 0, 0])),
        ],
    )
    hits = await episode_store.vector_search(ann, unit([0, 1, 0, 0]), 10)
    assert hit_ids(hits) == ["mixed", "whole"]
    assert [score for _, score in hits] == pytest.approx([1.0, 0.8], abs=1e-5)
    # the episode's own vector still counts when it is the better match
    assert hit_ids(await episode_store.vector_search(ann, unit([1, 0, 0, 0]), 1)) == ["mixed"]
    plain = await episode_store.vector_search(ann, unit([0, 1, 0, 0]), 10, derivatives=False)
    assert hit_ids(plain) == ["whole", "mixed"]
    assert [score for _, score in plain] == pytest.approx([0.8, 0.0], abs=1e-5)


async def test_a_derivative_counts_as_much_as_its_weight(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    """A context window holding the words of the message before counts a little less than
    that message's own vector: the message wins the tie."""
    said = record("said", embedding=unit([1, 0, 0, 0]))
    reply = record("reply", embedding=unit([0, 1, 0, 0])).model_copy(
        update={"derivative_embeddings": [unit([1, 0, 0, 0])], "derivative_weights": [0.995]}
    )
    half = record("half", embedding=unit([0, 0, 1, 0])).model_copy(
        update={"derivative_embeddings": [unit([1, 0, 0, 0])], "derivative_weights": [0.5]}
    )
    await episode_store.add_episodes(ann, [reply, half, said])
    hits = await episode_store.vector_search(ann, unit([1, 0, 0, 0]), 3)
    assert hit_ids(hits) == ["said", "reply", "half"]
    assert [score for _, score in hits] == pytest.approx([1.0, 0.995, 0.5], abs=1e-5)
    # without derivatives only the own vectors count
    plain = await episode_store.vector_search(ann, unit([1, 0, 0, 0]), 1, derivatives=False)
    assert hit_ids(plain) == ["said"]


@pytest.mark.parametrize("weights", [[1.0, 1.0], [0.0], [-1.0], [float("nan")]])
async def test_bad_derivative_weights_store_nothing(
    episode_store: EpisodeStore, ann: Scope, weights: list[float]
) -> None:
    bad = record("b", embedding=unit([1, 0, 0, 0])).model_copy(
        update={"derivative_embeddings": [unit([0, 1, 0, 0])], "derivative_weights": weights}
    )
    with pytest.raises(InvalidInputError) as raised:
        await episode_store.add_episodes(ann, [record("a"), bad])
    assert raised.value.field == "records.1.derivative_weights"
    assert await episode_store.count_episodes(ann) == 0


async def test_an_episode_with_many_close_sentences_does_not_crowd_out_the_next(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    # "chatty" has twelve sentences, all closer to the query than "terse"'s one.
    close = [unit([1, 0.01 * n, 0, 0]) for n in range(12)]
    await episode_store.add_episodes(
        ann,
        [
            with_sentences(record("chatty", embedding=unit([0, 0, 0, 1])), *close),
            with_sentences(record("terse", embedding=unit([0, 0, 1, 0])), unit([1, 0.5, 0, 0])),
            record("far", embedding=unit([0, 0, 1, 1])),
        ],
    )
    hits = await episode_store.vector_search(ann, unit([1, 0, 0, 0]), 2)
    assert hit_ids(hits) == ["chatty", "terse"]
    assert hits[1][1] == pytest.approx(1 / (1.25**0.5), abs=1e-5)


async def test_a_bad_sentence_vector_stores_nothing(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    bad = with_sentences(record("b", embedding=unit([1, 0, 0, 0])), [1.0, 0.0])
    with pytest.raises(InvalidInputError) as raised:
        await episode_store.add_episodes(ann, [record("a"), bad])
    assert raised.value.field == "records.1.derivative_embeddings"
    assert await episode_store.count_episodes(ann) == 0


async def test_sentences_are_searched_only_inside_the_scope(
    episode_store: EpisodeStore, ann: Scope, bob: Scope
) -> None:
    sentence = unit([0, 0, 0, 1])
    await episode_store.add_episodes(
        ann, [with_sentences(record("secret", embedding=unit([1, 0, 0, 0])), sentence)]
    )
    await episode_store.add_episodes(bob, [record("public", embedding=unit([0, 1, 0, 0]))])
    assert hit_ids(await episode_store.vector_search(bob, sentence, 5)) == ["public"]
    assert hit_ids(await episode_store.vector_search(ann, sentence, 5)) == ["secret"]


async def test_deleting_episodes_deletes_their_sentences(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    sentence = unit([0, 1, 0, 0])
    batch = [
        with_sentences(record(f"e{i}", embedding=unit([1, 0, 0, 0])), sentence) for i in range(3)
    ]
    await episode_store.add_episodes(ann, batch)
    other = with_sentences(record("x0", embedding=unit([1, 0, 0, 0])), sentence)
    await episode_store.add_episodes(ann.for_session("s2"), [other])
    assert await episode_store.delete_episode(ann, "e0") is True
    assert await episode_store.delete_episodes(ann.model_copy(update={"session_id": None})) == 3
    # the same id written again without sentences does not inherit the old ones
    await episode_store.add_episodes(ann, [record("e1", embedding=unit([1, 0, 0, 0]))])
    hits = await episode_store.vector_search(ann, sentence, 5)
    assert [score for _, score in hits] == pytest.approx([0.0], abs=1e-5)
    run = getattr(episode_store, "_run", None)
    if run is not None:  # graph stores: no sentence node outlives its episode
        rows = await run("MATCH (d:Derivative) WHERE NOT ()-[:HAS_DERIVATIVE]->(d) RETURN count(d)")
        assert rows[0][0] == 0


async def test_a_lexical_store_has_no_vector_search(
    open_episode_store: OpenEpisodeStore, ann: Scope
) -> None:
    store = await open_episode_store(dimensions=None, model=None)
    await store.add_episodes(ann, [record("a", "words", embedding=unit([1, 0, 0, 0]))])
    assert await store.vector_search(ann, unit([1, 0, 0, 0]), 5) == []
    assert hit_ids(await store.fulltext_search(ann, "words", 5)) == ["a"]


async def test_other_vector_settings_are_refused_on_restart(
    open_episode_store: OpenEpisodeStore, ann: Scope
) -> None:
    first = await open_episode_store(dimensions=DIMENSIONS, model=MODEL)
    await first.add_episodes(ann, [record("a", embedding=unit([1, 0, 0, 0]))])
    await first.close()

    with pytest.raises(ConfigurationError, match="dimension"):
        await open_episode_store(dimensions=DIMENSIONS * 2, model=MODEL)
    with pytest.raises(ConfigurationError, match="other-model"):
        await open_episode_store(dimensions=DIMENSIONS, model="other-model")
    same = await open_episode_store(dimensions=DIMENSIONS, model=MODEL)
    assert hit_ids(await same.vector_search(ann, unit([1, 0, 0, 0]), 1)) == ["a"]


# ---------------------------------------------------------------------- full-text search


@pytest.fixture
async def library(episode_store: EpisodeStore, ann: Scope) -> EpisodeStore:
    texts = {
        "cat": "The cat sat on the mat.",
        "dog": "Dogs bark at the mailman.",
        "both": "My cat and my dog are friends.",
        "bird": "A bird sings at dawn.",
        "japanese": "日本語のテキスト",
        "cafe": "Un café crème, s'il vous plaît",
        "email": "Write to user@example.com about C++ and C# (urgent!)",
        "flight": "Flight 2024 leaves from gate 3b on the 1st",
    }
    await episode_store.add_episodes(ann, [record(k, v) for k, v in texts.items()])
    return episode_store


async def test_fulltext_matches_any_term_case_and_punctuation_blind(
    library: EpisodeStore, ann: Scope
) -> None:
    assert set(hit_ids(await library.fulltext_search(ann, "CAT? dog!!!", 10))) == {
        "cat",
        "dog",
        "both",
    }
    assert hit_ids(await library.fulltext_search(ann, "sings", 10)) == ["bird"]
    assert hit_ids(await library.fulltext_search(ann, "EXAMPLE", 10)) == ["email"]
    assert hit_ids(await library.fulltext_search(ann, "CAFÉ", 10)) == ["cafe"]
    assert hit_ids(await library.fulltext_search(ann, "日本語のテキスト", 10)) == ["japanese"]
    for term in ("2024", "3B", "1st"):
        assert hit_ids(await library.fulltext_search(ann, term, 10)) == ["flight"]


#: Memories in Chinese, Russian and mixed text, each with a query a user would type for it:
#: Chinese without spaces and in other word order, Russian in another grammatical case.
MULTILINGUAL = {
    "corgi": "我养了一只叫豆豆的柯基犬",
    "coffee": "我每天早上都喝一杯黑咖啡",
    "skiing": "Я катаюсь на лыжах каждую зиму в Сочи",
    "brother": "Мой брат работает врачом в Москве",
    "phone": "我昨天买了新的iPhone手机",
    "server": "Сервер prod-db01 упал ночью из-за диска",
    "english": "Dogs bark at the mailman",
}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("豆豆柯基", "corgi"),
        ("咖啡", "coffee"),
        ("早上喝什么", "coffee"),
        ("лыжи", "skiing"),
        ("Кто из братьев врач?", "brother"),
        ("в Москву", "brother"),
        ("iphone", "phone"),
        ("手机", "phone"),
        ("prod-db01", "server"),
        ("сервера", "server"),
        ("barking dog", "english"),
    ],
)
async def test_fulltext_reads_each_language_in_its_own_words(
    episode_store: EpisodeStore, ann: Scope, query: str, expected: str
) -> None:
    """A Chinese memory is found by two of its characters typed without spaces, a Russian one
    by its word in another case, and mixed text keeps both its parts, on every store."""
    await episode_store.add_episodes(ann, [record(k, v) for k, v in MULTILINGUAL.items()])
    hits = await episode_store.fulltext_search(ann, query, 10)
    assert hit_ids(hits)[:1] == [expected]
    assert all(score > 0 for _, score in hits)


async def test_fulltext_ranks_more_and_rarer_terms_higher(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    await episode_store.add_episodes(
        ann,
        [
            record("fox-and-dog", "a fox met a dog"),
            *(record(f"dog{i}", f"a dog number {i}") for i in range(4)),
            record("fox", "a fox alone"),
            *(record(f"filler{i}", "nothing here at all") for i in range(4)),
        ],
    )
    hits = await episode_store.fulltext_search(ann, "fox dog", 10)
    assert hit_ids(hits)[:2] == ["fox-and-dog", "fox"]
    assert set(hit_ids(hits)[2:]) == {f"dog{i}" for i in range(4)}
    scores = [score for _, score in hits]
    assert all(score > 0 for score in scores)
    assert scores == sorted(scores, reverse=True)


@pytest.fixture
async def languages(episode_store: EpisodeStore, ann: Scope) -> EpisodeStore:
    texts = {
        "zh-hike": "我周末喜欢去爬山。上个月去了黄山",
        "zh-tea": "我每天早上喝一杯绿茶",
        "ru-hike": "Я люблю походы в горы, летом ездил на Эльбрус",
        "ru-sister": "Моя сестра живёт в Казани и работает врачом",
        "zh-en": "我昨天用iPhone拍了很多照片",
        "ru-id": "Ключ api_key лежит в config.yaml на сервере",
        "en": "I went hiking in the Alps last summer",
    }
    await episode_store.add_episodes(ann, [record(k, v) for k, v in texts.items()])
    return episode_store


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("爬山", "zh-hike"),  # a Chinese word inside a sentence written without spaces
        ("黄山爬山", "zh-hike"),  # two words typed without a space
        ("绿茶", "zh-tea"),
        ("походах", "ru-hike"),  # Russian in another grammatical case
        ("сестрой", "ru-sister"),
        ("iPhone", "zh-en"),  # the English part of a Chinese sentence
        ("照片", "zh-en"),  # and its Chinese part
        ("config.yaml", "ru-id"),  # a Latin identifier inside Russian
        ("ключа", "ru-id"),
        ("hikes", "en"),
    ],
)
async def test_fulltext_finds_chinese_russian_and_mixed_words(
    languages: EpisodeStore, ann: Scope, query: str, expected: str
) -> None:
    hits = await languages.fulltext_search(ann, query, 10)
    assert hit_ids(hits)[:1] == [expected]
    assert all(score > 0 for _, score in hits)


async def test_fulltext_ranks_chinese_and_russian_as_english(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    """The same documents in three languages rank the same way for the same query."""
    for language, docs, query in [
        ("en", ["a fox met a dog", "a dog alone", "a fox alone", "nothing here"], "fox dog"),
        ("zh", ["狐狸遇见了小狗", "只有小狗", "只有狐狸", "这里什么都没有"], "狐狸小狗"),
        (
            "ru",
            ["лиса встретила собаку", "одна собака", "одна лиса", "здесь ничего"],
            "лиса собака",
        ),
    ]:
        await episode_store.add_episodes(
            ann, [record(f"{language}{i}", doc) for i, doc in enumerate(docs)]
        )
        hits = await episode_store.fulltext_search(ann, query, 10)
        assert hit_ids(hits)[0] == f"{language}0", language
        assert set(hit_ids(hits)) == {f"{language}0", f"{language}1", f"{language}2"}, language


async def test_fulltext_respects_k(library: EpisodeStore, ann: Scope) -> None:
    assert len(await library.fulltext_search(ann, "cat dog bird", 2)) == 2
    assert await library.fulltext_search(ann, "cat", 0) == []


@pytest.mark.parametrize(
    "query",
    [
        '"cat"',
        "'cat'",
        "@cat",
        "cat|",
        "|cat",
        "cat*",
        "-cat",
        "~cat",
        "(cat",
        "cat)",
        "{cat}",
        "[cat]",
        "@text:cat",
        "$cat",
        "%cat%",
        "cat\\",
        "cat; MATCH (n) DETACH DELETE n",
        "cat\n\t",
        "cat OR mailman",
        "cat -dog",
    ],
)
async def test_fulltext_survives_query_syntax_in_user_text(
    library: EpisodeStore, ann: Scope, query: str
) -> None:
    found = hit_ids(await library.fulltext_search(ann, query, 10))
    assert "cat" in found
    assert "bird" not in found


@pytest.mark.parametrize(
    "query", ["", "   ", "!!!", "@|*-()[]{}~\"'\\%$:;", "the of and", "a", "\u2026\u2014\u2013"]
)
async def test_fulltext_without_a_usable_term_is_empty(
    library: EpisodeStore, ann: Scope, query: str
) -> None:
    assert await library.fulltext_search(ann, query, 10) == []


async def test_fulltext_finds_text_containing_query_syntax(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    nasty = 'he said "hi" | @field:{x} (a|b) -not ~maybe *wild* \\ end'
    await episode_store.add_episodes(ann, [record("nasty", nasty), record("plain", "hi there")])
    assert set(hit_ids(await episode_store.fulltext_search(ann, "wild", 5))) == {"nasty"}
    assert set(hit_ids(await episode_store.fulltext_search(ann, "hi", 5))) == {"nasty", "plain"}


# ---------------------------------------------------------------------- inspection


async def test_list_users_counts_each_users_episodes_and_sessions(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    """The inspector's user list: one row per user of the project, with counts."""
    started = utc_now()
    await episode_store.add_episodes(ann, [record("a1"), record("a2")])
    await episode_store.add_episodes(ann.for_session("s2"), [record("a3")])
    bob = ann.model_copy(update={"user_id": "bob"})
    await episode_store.add_episodes(bob, [record("b1")])
    other_project = ann.model_copy(update={"project_id": "ops", "user_id": "carl"})
    await episode_store.add_episodes(other_project, [record("c1")])
    other_tenant = ann.model_copy(update={"tenant": f"{ann.tenant}x", "user_id": "dan"})
    await episode_store.add_episodes(other_tenant, [record("d1")])

    users = await episode_store.list_users(ann.project_scope())

    assert [(u.user_id, u.episodes, u.sessions) for u in users] == [("ann", 3, 2), ("bob", 1, 1)]
    assert all(
        u.last_active is not None and u.last_active >= started - timedelta(seconds=5) for u in users
    )
    assert [u.user_id for u in await episode_store.list_users(other_project.project_scope())] == [
        "carl"
    ]
    assert [u.user_id for u in await episode_store.list_users(other_tenant.project_scope())] == [
        "dan"
    ]


async def test_list_users_pages_by_user_id_in_code_point_order(
    episode_store: EpisodeStore, ann: Scope
) -> None:
    for name in reversed(USER_IDS_IN_ORDER):
        await episode_store.add_episodes(
            ann.model_copy(update={"user_id": name}), [record(f"e-{name}")]
        )
    await check_user_listing(episode_store.list_users, ann.project_scope())


async def test_list_users_leaves_out_users_whose_episodes_are_all_deleted(
    episode_store: EpisodeStore, ann: Scope, bob: Scope
) -> None:
    await episode_store.add_episodes(ann, [record("a1"), record("a2")])
    await episode_store.add_episodes(bob, [record("b1")])

    await episode_store.delete_episodes(bob.user_scope())
    await episode_store.delete_episode(ann, "a1")

    users = await episode_store.list_users(ann.project_scope())
    assert [(u.user_id, u.episodes, u.sessions) for u in users] == [("ann", 1, 1)]


async def test_list_sessions_newest_first_with_counts_and_times(
    episode_store: EpisodeStore, ann: Scope, bob: Scope
) -> None:
    await episode_store.add_episodes(ann, [record("a1", minutes=0), record("a2", minutes=5)])
    await episode_store.add_episodes(ann.for_session("s2"), [record("a3", minutes=60)])
    await episode_store.add_episodes(ann.for_session("s3"), [record("a4", minutes=90)])
    await episode_store.add_episodes(ann, [record("a5", minutes=10)])  # s1 written last
    await episode_store.add_episodes(bob.for_session("s9"), [record("b1")])

    sessions = await episode_store.list_sessions(ann)

    assert [(s.session_id, s.episodes) for s in sessions] == [("s1", 3), ("s3", 1), ("s2", 1)]
    assert sessions[0].first_at == T0
    assert sessions[0].last_at == T0 + timedelta(minutes=10)
    assert sessions[0].updated_at >= sessions[1].updated_at >= sessions[2].updated_at
    paged = await episode_store.list_sessions(ann, limit=1, offset=1)
    assert [s.session_id for s in paged] == ["s3"]
    assert [s.session_id for s in await episode_store.list_sessions(bob)] == ["s9"]
    with pytest.raises(InvalidInputError):
        await episode_store.list_sessions(ann, offset=-1)


async def test_episode_timeline_counts_episodes_per_bucket(
    episode_store: EpisodeStore, ann: Scope, bob: Scope
) -> None:
    day = 24 * 60
    await episode_store.add_episodes(
        ann,
        [record("a1", minutes=0), record("a2", minutes=30), record("a3", minutes=2 * day)],
    )
    await episode_store.add_episodes(ann.for_session("s2"), [record("a4", minutes=2 * day + 1)])
    await episode_store.add_episodes(bob, [record("b1", minutes=day)])
    midnight = T0.replace(hour=0)

    timeline = await episode_store.episode_timeline(ann.user_scope())
    hourly = await episode_store.episode_timeline(ann, bucket_seconds=3600)

    assert [(b.start, b.count) for b in timeline] == [
        (midnight, 2),
        (midnight + timedelta(days=2), 2),
    ]
    assert [(b.start, b.count) for b in hourly] == [
        (T0, 2),
        (T0 + timedelta(days=2), 1),
    ]
    with pytest.raises(InvalidInputError):
        await episode_store.episode_timeline(ann, bucket_seconds=0)


async def test_list_projects_lists_every_project_holding_episodes_in_order(
    episode_store: EpisodeStore, unique: str
) -> None:
    for index, project in enumerate(reversed(projects_of(unique))):
        session = project.user(f"u{index}").for_session("s1")
        await episode_store.add_episodes(session, [record(f"e{index}")])
    await check_project_listing(episode_store.list_projects, unique)
    emptied = projects_of(unique)[0].user("u3")
    for episode in await episode_store.list_episodes(emptied):
        await episode_store.delete_episode(emptied, episode.id)
    assert projects_of(unique)[0] not in await episode_store.list_projects(limit=10_000)
