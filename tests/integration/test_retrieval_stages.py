"""Each search stage of the manager, on the real embedded stores, switched on and off.

Most tests run lexical-only (no embedder) so the fused order is fully determined by BM25 and
the stage under test; the sentence test uses the shared MiniLM model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memmachine import Scope, open_manager
from memmachine.config import EmbeddingSettings, RetrievalSettings, Settings
from memmachine.manager import MemoryManager
from memmachine.models import EpisodeHit, NewMessage

T0 = datetime(2024, 3, 10, 18, 0, tzinfo=UTC)
ALL_OFF = {
    "fusion": "rrf",
    "sentence_derivatives": False,
    "context_window": 0,
    "lexical_context": 0,
    "speaker_boost": 0.0,
    "time_boost": 0.0,
    "when_boost": 0.0,
    "neighbour_weight": 0.0,
    "second_neighbour_weight": 0.0,
    "distinct_evidence": False,
    "speaker_focus_weight": 0.0,
}

Open = Callable[..., AbstractAsyncContextManager[MemoryManager]]


@pytest.fixture
def open_memory(tmp_path: Path) -> Open:
    def opener(
        embedding: EmbeddingSettings | None = None, **retrieval: Any
    ) -> AbstractAsyncContextManager[MemoryManager]:
        settings = Settings(
            data_dir=tmp_path,
            embedding=embedding or EmbeddingSettings(provider="none"),
            retrieval=RetrievalSettings(**{**ALL_OFF, **retrieval}),
        )
        return open_manager(settings)

    return opener


def say(speaker: str, content: str, when: datetime = T0) -> NewMessage:
    return NewMessage(content=content, producer=speaker, timestamp=when)


def contents(hits: Sequence[EpisodeHit]) -> list[str]:
    return [hit.episode.content for hit in hits]


async def store(memory: MemoryManager, session: str, *messages: NewMessage) -> None:
    await memory.add_messages(Scope(user_id="u", session_id=session), messages, working=False)


USER = Scope(user_id="u")


async def test_a_named_speaker_ranks_their_own_turns_first(open_memory: Open) -> None:
    messages = [
        say("Melanie", "Caroline, Caroline, I painted a lake too", T0 + timedelta(minutes=1)),
        say("Caroline", "I painted a lake at sunrise", T0),
    ]
    async with open_memory() as memory:
        await store(memory, "s1", *messages)
        off = await memory.search_episodes(USER, "Which lake did Caroline paint?", top_k=2)
        memory.retrieval = memory.retrieval.model_copy(update={"speaker_boost": 0.5})
        on = await memory.search_episodes(USER, "Which lake did Caroline paint?", top_k=2)
    assert [hit.episode.producer for hit in off] == ["Melanie", "Caroline"]
    assert [hit.episode.producer for hit in on] == ["Caroline", "Melanie"]
    assert all(0.0 < hit.score <= 1.0 for hit in on)


async def test_a_time_named_in_the_query_prefers_turns_from_then(open_memory: Open) -> None:
    may = datetime(2024, 5, 20, tzinfo=UTC)
    june = datetime(2024, 6, 5, tzinfo=UTC)
    query = "which kettle did I get last month?"
    async with open_memory(time_boost=0.5) as memory:
        await store(memory, "may", say("ann", "bought a red kettle", may))
        await store(memory, "june", say("ann", "bought a blue kettle", june))
        # relative times are read against the newest memory (June 2024): May
        on = await memory.search_episodes(USER, query)
        memory.retrieval = memory.retrieval.model_copy(update={"time_boost": 0.0})
        off = await memory.search_episodes(USER, query)
    assert contents(on) == ["bought a red kettle", "bought a blue kettle"]
    # without the boost equal matches come newest first
    assert contents(off) == ["bought a blue kettle", "bought a red kettle"]


async def test_the_turn_after_a_matching_question_is_found(open_memory: Open) -> None:
    session = [
        say("Melanie", "Have you chosen a topic to research?"),
        say("Caroline", "Yes: adoption agencies for single parents.", T0 + timedelta(seconds=1)),
        say("Melanie", "Nice. The weather is lovely today.", T0 + timedelta(seconds=2)),
        say("Caroline", "Unrelated words about gardening tomatoes.", T0 + timedelta(seconds=3)),
    ]
    async with open_memory(neighbour_weight=0.5) as memory:
        await store(memory, "s1", *session)
        on = await memory.search_episodes(USER, "Which topic to research?", top_k=3)
        memory.retrieval = memory.retrieval.model_copy(update={"neighbour_weight": 0.0})
        off = await memory.search_episodes(USER, "Which topic to research?", top_k=3)
    assert contents(off) == ["Have you chosen a topic to research?"]
    assert contents(on)[:1] == ["Have you chosen a topic to research?"]
    answer = on[1]
    assert answer.episode.content == "Yes: adoption agencies for single parents."
    assert answer.ranks == {"neighbour": 1}
    assert not answer.context  # a result of its own, not an expansion
    assert 0.0 < answer.score < on[0].score
    # only the neighbours of matches join: nothing two turns away
    assert "Unrelated words about gardening tomatoes." not in contents(on)


async def test_the_turn_two_away_is_found_with_a_smaller_share(open_memory: Open) -> None:
    session = [
        say("Caroline", "I started to research a topic for my studies!"),
        say("Melanie", "Oh nice, what is it?", T0 + timedelta(seconds=1)),
        say("Caroline", "Adoption agencies for single parents.", T0 + timedelta(seconds=2)),
        say("Melanie", "Unrelated words about gardening tomatoes.", T0 + timedelta(seconds=3)),
    ]
    query = "Which topic to research?"
    async with open_memory(neighbour_weight=0.5, second_neighbour_weight=0.3) as memory:
        await store(memory, "s1", *session)
        on = await memory.search_episodes(USER, query, top_k=5)
        memory.retrieval = memory.retrieval.model_copy(update={"second_neighbour_weight": 0.0})
        off = await memory.search_episodes(USER, query, top_k=5)
    assert contents(off) == [session[0].content, session[1].content]
    assert contents(on) == [session[0].content, session[1].content, session[2].content]
    # the speaker's next turn, two away, gets a share of its own, smaller than the next turn's
    assert on[2].ranks == {"neighbour": 1}
    assert 0.0 < on[2].score < on[1].score < on[0].score


async def test_neighbours_never_cross_the_scope(open_memory: Open) -> None:
    async with open_memory(neighbour_weight=0.5) as memory:
        await store(
            memory,
            "s1",
            say("ann", "where is the tram stop"),
            say("ann", "left of the bakery", T0 + timedelta(seconds=1)),
        )
        other = Scope(user_id="v", session_id="s1")
        await memory.add_messages(other, [say("v", "tram tickets are sold here")], working=False)
        hits = await memory.search_episodes(Scope(user_id="v"), "tram", top_k=5)
    assert contents(hits) == ["tram tickets are sold here"]


async def test_each_sentence_of_a_long_message_is_searchable(
    open_memory: Open, model_dir: Path
) -> None:
    message = (
        "We spent the whole weekend repainting the kitchen cabinets in a pale green. "
        "Also, my sister Jane finally got married in Lisbon!"
    )
    local = EmbeddingSettings(provider="local", model=str(model_dir))
    async with open_memory(local, sentence_derivatives=True) as memory:
        await store(memory, "s1", say("ann", message))
        assert memory.embedder is not None
        (query,) = await memory.embedder.embed(["Where did Jane get married?"])
        with_sentences = await memory.episodes.vector_search(USER, query, 1)
        whole_only = await memory.episodes.vector_search(USER, query, 1, derivatives=False)
        memory.retrieval = memory.retrieval.model_copy(update={"sentence_derivatives": False})
        await store(memory, "s2", say("ann", message.replace("Jane", "Joan")))
        (joan,) = await memory.embedder.embed(["Where did Joan get married?"])
        plain = await memory.episodes.vector_search(Scope(user_id="u", session_id="s2"), joan, 1)
        plain_off = await memory.episodes.vector_search(
            Scope(user_id="u", session_id="s2"), joan, 1, derivatives=False
        )
    # the episode scores its best sentence, above the blurred whole message
    assert with_sentences[0][1] > whole_only[0][1] + 0.03
    # with the stage off no sentence vectors are written
    assert plain[0][1] == pytest.approx(plain_off[0][1], abs=1e-6)


async def test_full_text_finds_other_forms_of_a_word(open_memory: Open) -> None:
    async with open_memory() as memory:
        await store(memory, "s1", say("ann", "I painted the fence blue"))
        await store(memory, "s2", say("ann", "We went hiking in the hills"))
        painted = await memory.search_episodes(USER, "What did they paint?")
        hikes = await memory.search_episodes(USER, "Who likes hikes?")
    assert contents(painted) == ["I painted the fence blue"]
    assert contents(hikes) == ["We went hiking in the hills"]


async def test_a_reply_is_found_by_the_words_of_what_it_answers(open_memory: Open) -> None:
    question = say("Melanie", "Have you chosen a topic to research?")
    reply = say("Caroline", "Yes: adoption agencies for single parents.", T0 + timedelta(1))
    async with open_memory(lexical_context=1) as memory:
        # stored by two calls: the reply's context is read back from the store
        await store(memory, "s1", question)
        await store(memory, "s1", reply)
        memory.retrieval = memory.retrieval.model_copy(update={"lexical_context": 0})
        await store(memory, "s2", question, reply)
        on = await memory.search_episodes(Scope(user_id="u", session_id="s1"), "research topic")
        off = await memory.search_episodes(Scope(user_id="u", session_id="s2"), "research topic")
        other = await memory.search_episodes(USER, "adoption agencies")
    assert contents(on) == [
        "Have you chosen a topic to research?",
        "Yes: adoption agencies for single parents.",
    ]
    assert on[1].ranks == {"fulltext": 2}
    assert contents(off) == ["Have you chosen a topic to research?"]
    # a message's own words still find it, with or without context
    assert set(contents(other)) == {"Yes: adoption agencies for single parents."}
    assert len(other) == 2


async def test_a_reply_is_embedded_with_the_messages_before_it(
    open_memory: Open, model_dir: Path
) -> None:
    question = say("Melanie", "What did you name the new puppy?")
    reply = say("Caroline", "Biscuit, after my grandma's cookies!", T0 + timedelta(1))
    local = EmbeddingSettings(provider="local", model=str(model_dir))
    async with open_memory(local, sentence_derivatives=True, context_window=2) as memory:
        # pooled from one run over the window (the default with the local model); the
        # reply's context is read back from the store
        await store(memory, "pooled", question)
        await store(memory, "pooled", reply)
        memory.retrieval = memory.retrieval.model_copy(update={"context_pooling": False})
        await store(memory, "texts", question, reply)
        memory.retrieval = memory.retrieval.model_copy(update={"context_window": 0})
        await store(memory, "alone", question, reply)
        assert memory.embedder is not None
        (query,) = await memory.embedder.embed(["What is Caroline's puppy called?"])

        async def reply_score(session: str, derivatives: bool = True) -> float:
            scope = Scope(user_id="u", session_id=session)
            hits = await memory.episodes.vector_search(scope, query, 2, derivatives=derivatives)
            return next(score for episode, score in hits if episode.content == reply.content)

        pooled, pooled_own = await reply_score("pooled"), await reply_score("pooled", False)
        texts, texts_own = await reply_score("texts"), await reply_score("texts", False)
        alone = await reply_score("alone")
    # read after the question, the reply is closer to the query than alone: pooled, its own
    # vector is (0.43 against 0.39; a one-sentence reply has no other vector) ...
    assert pooled > alone + 0.02
    assert pooled_own == pytest.approx(pooled, abs=1e-6)
    # ... embedded as a text, the window is a derivative vector beside the unchanged own one
    assert texts > alone + 0.1
    assert texts_own == pytest.approx(alone, abs=1e-6)


async def test_a_long_context_never_pushes_the_message_out_of_its_window(
    open_memory: Open, model_dir: Path
) -> None:
    """Messages before that would overflow the model's window are left out of it, oldest
    first, so the message itself is always read whole."""
    rambling = say("Melanie", " ".join(["we talked about the weather and the garden"] * 60))
    reply = say("Caroline", "Biscuit is the name of my new puppy.", T0 + timedelta(1))
    local = EmbeddingSettings(provider="local", model=str(model_dir))
    async with open_memory(local, context_window=2) as memory:
        await store(memory, "long", rambling, reply)
        memory.retrieval = memory.retrieval.model_copy(update={"context_window": 0})
        await store(memory, "alone", reply)
        assert memory.embedder is not None
        (query,) = await memory.embedder.embed(["What is the puppy called?"])
        hits = await memory.episodes.vector_search(USER, query, 3)
    scores = {
        episode.scope.session_id: score
        for episode, score in hits
        if episode.content == reply.content
    }
    # the rambling message did not fit beside the reply, so the reply was read alone
    assert scores["long"] == pytest.approx(scores["alone"], abs=1e-5)


async def test_a_when_question_prefers_turns_that_say_when(open_memory: Open) -> None:
    vague = say("ann", "Adopting the cat was a big decision, the cat is lovely")
    dated = say(
        "ann",
        "I adopted a cat yesterday after a long afternoon at the shelter with my sister",
        T0 + timedelta(seconds=1),
    )
    async with open_memory(when_boost=1.0) as memory:
        await store(memory, "s1", vague, dated)
        on = await memory.search_episodes(USER, "When did Ann adopt the cat?")
        statement = await memory.search_episodes(USER, "Did Ann adopt the cat?")
        memory.retrieval = memory.retrieval.model_copy(update={"when_boost": 0.0})
        off = await memory.search_episodes(USER, "When did Ann adopt the cat?")
    assert contents(off) == [vague.content, dated.content]
    assert contents(on) == [dated.content, vague.content]
    # only a question asking when is boosted
    assert contents(statement) == contents(off)
    assert all(0.0 < hit.score <= 1.0 for hit in on)


async def test_score_fusion_keeps_near_ties_close(open_memory: Open) -> None:
    messages = [
        say("ann", "the red kettle whistles"),
        say("ann", "the red kettle whistles loudly", T0 + timedelta(seconds=1)),
        say("ann", "kettle", T0 + timedelta(seconds=2)),
        say("ann", "a note about a red bicycle and a kettle of fish", T0 + timedelta(seconds=3)),
    ]
    async with open_memory(fusion="score") as memory:
        await store(memory, "s1", *messages)
        by_score = await memory.search_episodes(USER, "red kettle whistles")
        memory.retrieval = memory.retrieval.model_copy(update={"fusion": "rrf"})
        by_rank = await memory.search_episodes(USER, "red kettle whistles")
    assert contents(by_score) == contents(by_rank)
    assert contents(by_score)[:2] == [messages[0].content, messages[1].content]
    # BM25 barely separates the first two and leaves the last two far behind: fused scores
    # follow those gaps, while rank fusion spaces the hits by rank alone
    assert by_score[1].score > 0.9 * by_score[0].score
    assert by_score[-1].score < 0.25 * by_score[0].score
    assert by_rank[-1].score > 0.75 * by_rank[0].score


class Stages:
    """A stage observer that notes the name of each stage it is told of."""

    def __init__(self) -> None:
        self.names: list[str] = []

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self.names.append(name)
        yield


async def test_a_search_reports_each_stage_that_ran_in_order(open_memory: Open) -> None:
    question = "Which lake did Caroline paint?"
    messages = [say("Caroline", "I painted a lake at sunrise"), say("Mel", "a lake, nice")]
    traces: dict[str, list[str]] = {}
    async with open_memory() as memory:
        await store(memory, "s1", *messages)
        for label, tuning in (
            ("all off", memory.retrieval),
            (
                "speaker and neighbours",
                memory.retrieval.model_copy(update={"speaker_boost": 0.5, "neighbour_weight": 0.3}),
            ),
        ):
            memory.retrieval = tuning
            observer = Stages()
            traced = await memory.episodic_service.search(
                USER, question, top_k=2, observer=observer
            )
            assert contents(traced) == contents(
                await memory.search_episodes(USER, question, top_k=2)
            )
            traces[label] = observer.names
    assert traces["all off"] == ["candidates", "fusion", "boosts", "ranking"]
    assert traces["speaker and neighbours"] == [
        "candidates",
        "fusion",
        "speaker_boost",
        "boosts",
        "neighbourhood",
        "ranking",
    ]
