"""Multi-evidence search on the real embedded stores: duplicate-aware selection (a message
stored twice, by a retry or a re-import, takes one result slot), question decomposition and
the second hop, each switched on and off."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memmachine import Scope, open_manager
from memmachine.config import EmbeddingSettings, RetrievalSettings, Settings
from memmachine.manager import MemoryManager
from memmachine.models import EpisodeHit, NewMessage
from memmachine.retrieval.hops import clauses

T0 = datetime(2024, 3, 10, 18, 0, tzinfo=UTC)

#: Full text alone decides, so the test reads off what each stage adds.
LEXICAL_ONLY = {"lexical_context": 0, "neighbour_weight": 0.0, "second_neighbour_weight": 0.0}

Open = Callable[..., AbstractAsyncContextManager[MemoryManager]]


@pytest.fixture
def open_memory(tmp_path: Path) -> Open:
    def opener(
        model: Path | None = None, **retrieval: Any
    ) -> AbstractAsyncContextManager[MemoryManager]:
        embedding = (
            EmbeddingSettings(provider="local", model=str(model))
            if model
            else EmbeddingSettings(provider="none")
        )
        settings = Settings(
            data_dir=tmp_path, embedding=embedding, retrieval=RetrievalSettings(**retrieval)
        )
        return open_manager(settings)

    return opener


def say(speaker: str, content: str, seconds: int = 0) -> NewMessage:
    return NewMessage(content=content, producer=speaker, timestamp=T0 + timedelta(seconds=seconds))


def contents(hits: Sequence[EpisodeHit]) -> list[str]:
    return [hit.episode.content for hit in hits]


async def store(memory: MemoryManager, user: str, session: str, *messages: NewMessage) -> None:
    scope = Scope(user_id=user, session_id=session)
    await memory.add_messages(scope, messages, working=False)


async def test_a_retried_message_takes_one_slot_and_the_original_is_kept(
    open_memory: Open,
) -> None:
    question = "Where did Ann hike with her dog?"
    first = say("Ann", "I hiked Mount Tam with my dog Biscuit.")
    # a client retry stamped when it was sent again: another message to the write path
    retry = say("Ann", "I hiked Mount Tam with my dog Biscuit.", 3)
    others = [say("Ann", "My dog loves the beach.", 1), say("Bo", "I hiked alone last year.", 2)]
    async with open_memory() as memory:
        await store(memory, "u", "s1", first, *others)
        await store(memory, "u", "s1", retry)
        on = await memory.search_episodes(Scope(user_id="u"), question, top_k=3)
        memory.retrieval = memory.retrieval.model_copy(update={"distinct_evidence": False})
        off = await memory.search_episodes(Scope(user_id="u"), question, top_k=3)
    assert contents(off).count(first.content) == 2  # the copy takes a second slot
    assert contents(on).count(first.content) == 1
    assert sorted(contents(on)) == sorted([first.content, *(m.content for m in others)])
    kept = next(hit for hit in on if hit.episode.content == first.content)
    copies = [hit.episode for hit in off if hit.episode.content == first.content]
    assert kept.episode.id == min(copies, key=lambda e: (e.created_at, e.sequence)).id


async def test_near_duplicates_collapse_but_other_speakers_words_do_not(
    open_memory: Open,
) -> None:
    messages = [
        say("Ann", "Thanks, the pottery class was great!"),
        say("Ann", "thanks -- the  pottery class was GREAT", 1),  # a re-import's spacing
        say("Bo", "Thanks, the pottery class was great!", 2),  # another speaker said it too
    ]
    async with open_memory() as memory:
        await store(memory, "u", "s1", *messages)
        hits = await memory.search_episodes(Scope(user_id="u"), "pottery class", top_k=5)
    assert [hit.episode.producer for hit in hits].count("Ann") == 1
    assert [hit.episode.producer for hit in hits].count("Bo") == 1


async def test_duplicates_do_not_shorten_the_candidate_lists(open_memory: Open) -> None:
    # two candidates per signal: without the deeper second look the copy of the best match
    # would fill the list and the second match would never be seen
    tuning = {"min_candidates": 2, "candidates_per_result": 1}
    best = say("Ann", "kayak kayak trip on the lake")
    async with open_memory(**tuning) as memory:
        await store(memory, "u", "s1", best, say("Ann", "a kayak in the shed", 1))
        await store(memory, "u", "s2", best)
        hits = await memory.search_episodes(Scope(user_id="u"), "kayak", top_k=2)
    assert contents(hits) == [best.content, "a kayak in the shed"]


CONVERSATION = [
    say("Caroline", "I went to a support group for adoption yesterday.", 0),
    say("Melanie", "That sounds meaningful. How did it go?", 1),
    say("Caroline", "Great, I am researching adoption agencies now.", 2),
    say("Melanie", "I painted a lake at sunrise last week.", 3),
    say("Caroline", "Your painting is lovely, Melanie!", 4),
    say("Melanie", "Thanks! I am taking the kids camping in June.", 5),
    say("Caroline", "Camping sounds fun, enjoy the mountains.", 6),
    say("Melanie", "We will hike and roast marshmallows.", 7),
    say("Caroline", "Bring a warm jacket, the nights are cold.", 8),
    say("Melanie", "Good idea, and the kids want to go swimming.", 9),
]
QUESTIONS = [
    "What is Caroline researching?",
    "What did Melanie paint?",
    "Where is Melanie taking the kids?",
    "How did the support group go?",
    "What will they do while camping?",
    "What should Melanie bring?",
]


# a re-import into other sessions, and a retry of the whole session into the same session
# stamped a minute later, after the first copy: there the copy's first turns are indexed
# with the first copy's last turns as their context, so they rank otherwise than their
# originals, and a copy must never stand in for its original at the copy's rank; an exact
# retry (same timestamps) is not stored at all (memmachine/memory/repeats.py)
@pytest.mark.parametrize(
    ("again", "later"), [("s1-again", 0), ("s1", 60), ("s1", 0)], ids=["import", "later", "exact"]
)
async def test_a_conversation_stored_twice_ranks_as_stored_once(
    open_memory: Open, model_dir: Path, again: str, later: int
) -> None:
    # CONVERSATION's turns are one second apart
    copy = [say(m.producer or "", m.content, n + later) for n, m in enumerate(CONVERSATION)]
    async with open_memory(model_dir) as memory:
        await store(memory, "once", "s1", *CONVERSATION)
        await store(memory, "twice", "s1", *CONVERSATION)
        await store(memory, "twice", again, *copy)
        _, stored = await memory.list_episodes(Scope(user_id="twice"), limit=1)
        assert stored == (10 if (again, later) == ("s1", 0) else 20)
        for question in QUESTIONS:
            once = await memory.search_episodes(Scope(user_id="once"), question, top_k=6)
            twice = await memory.search_episodes(Scope(user_id="twice"), question, top_k=6)
            assert contents(twice) == contents(once), question
            assert len(set(contents(twice))) == 6


async def test_a_second_hop_finds_what_the_first_hits_talk_about(open_memory: Open) -> None:
    question = "Where did Jon open his studio?"
    found = say("Jon", "I finally opened my dance studio downtown!", 0)
    onward = say("Gina", "The dance classes downtown are packed every evening.", 1)
    unrelated = say("Gina", "Lost my job at the bank.", 2)
    async with open_memory(**LEXICAL_ONLY) as memory:
        await store(memory, "u", "s1", found, unrelated)
        await store(memory, "u", "s2", onward)
        off = await memory.search_episodes(Scope(user_id="u"), question, top_k=3)
        memory.retrieval = memory.retrieval.model_copy(
            update={"second_hop_weight": 0.3, "second_hop_sources": 1}
        )
        on = await memory.search_episodes(Scope(user_id="u"), question, top_k=3)
    # the question shares no word with the onward turn; the first hit does
    assert contents(off) == [found.content]
    assert contents(on) == [found.content, onward.content]
    assert on[1].ranks == {"second_hop": 1}
    assert 0.0 < on[1].score < on[0].score <= 1.0


async def test_each_clause_of_a_question_is_searched_on_its_own(open_memory: Open) -> None:
    assert clauses("What does Ann paint, and where does she hike?") == [
        "What does Ann paint",
        "where does she hike?",
    ]
    assert clauses("What does Ann paint?") == ["What does Ann paint?"]
    question = "Which lake at dawn did Ann paint in watercolors, and which trail did she hike?"
    messages = [
        say("Ann", "I painted the lake at dawn in watercolors.", 0),
        say("Ann", "Watercolors of the lake at dawn are what I paint.", 1),
        say("Ann", "Dawn at the lake: my favourite watercolor to paint.", 2),
        say("Ann", "The trail was steep.", 3),
        *(say("Ann", f"Filler number {n} about groceries.", 4 + n) for n in range(6)),
    ]
    async with open_memory(**LEXICAL_ONLY) as memory:
        await store(memory, "u", "s1", *messages)
        off = await memory.search_episodes(Scope(user_id="u"), question, top_k=2)
        memory.retrieval = memory.retrieval.model_copy(update={"decomposition_weight": 0.5})
        on = await memory.search_episodes(Scope(user_id="u"), question, top_k=2)
    assert messages[3].content not in contents(off)
    assert messages[3].content in contents(on)
    assert [hit.ranks.get("clause") for hit in on].count(1) == 2  # one best turn per clause


async def test_diversity_spreads_the_slots_over_sessions(open_memory: Open) -> None:
    question = "What did Ann bake for the party?"
    party = [
        say("Ann", "I baked a cake for the party.", 0),
        say("Ann", "The party cake I baked was chocolate.", 1),
        say("Ann", "Baked cookies too, for the party.", 2),
    ]
    later = say("Ann", "For the party I also baked bread.", 10)
    async with open_memory(**LEXICAL_ONLY) as memory:
        await store(memory, "u", "s1", *party)
        await store(memory, "u", "s2", later)
        off = await memory.search_episodes(Scope(user_id="u"), question, top_k=4)
        memory.retrieval = memory.retrieval.model_copy(update={"diversity_weight": 1.0})
        on = await memory.search_episodes(Scope(user_id="u"), question, top_k=4)
    sessions_off = [hit.episode.scope.session_id for hit in off]
    sessions_on = [hit.episode.scope.session_id for hit in on]
    assert sorted(contents(on)) == sorted(contents(off))  # the same hits, reordered
    assert sessions_off.index("s2") > 1
    assert sessions_on[:2] == ["s1", "s2"]
    assert [hit.score for hit in on] == sorted((hit.score for hit in on), reverse=True)
