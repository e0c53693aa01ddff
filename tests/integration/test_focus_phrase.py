"""Speaker focus's opt-in dense lists on the real embedded store and the real MiniLM model:
the phrase a list question asks for ("activities") finds the named speaker's turns that
paraphrase it and share no word with the question, and the names come out of the query the
focus stage's dense list is asked with."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from memmachine import Scope, open_manager
from memmachine.config import EmbeddingSettings, RetrievalSettings, Settings
from memmachine.manager import MemoryManager
from memmachine.models import NewMessage
from memmachine.retrieval.focus import asked_for
from memmachine.retrieval.speakers import without_names

T0 = datetime(2024, 3, 10, 18, 0, tzinfo=UTC)
QUESTION = "What activities does Melanie partake in?"

#: Melanie's activity shares no word with the question; her other turns say "partake".
SWIMMING = "Went swimming and hiking with the kids this morning."
TURNS = [
    ("Caroline", "Melanie, are you there? Melanie!"),
    ("Caroline", "Hey Melanie, how was your week, Melanie?"),
    ("Caroline", "Good morning Melanie, Melanie dear."),
    ("Melanie", "I do not partake in gossip."),
    ("Melanie", "What does it matter what I partake in?"),
    ("Melanie", "I took part in the meeting at work."),
    ("Melanie", "My cousin's car broke down again."),
    ("Melanie", SWIMMING),
    ("Caroline", "Oh Melanie, Melanie, Melanie."),
]

#: Each message's own vector and words (no context window), no neighbourhood: only what a
#: list finds is a hit.
PLAIN = {
    "context_window": 0,
    "lexical_context": 0,
    "neighbour_weight": 0.0,
    "second_neighbour_weight": 0.0,
    "min_candidates": 3,
    "candidates_per_result": 1,
}


def test_the_phrase_a_list_question_asks_for() -> None:
    assert asked_for(QUESTION) == "activities"
    assert asked_for("What kind of indoor activities has Andrew pursued?") == "indoor activities"
    assert asked_for("Which US cities does John mention visiting?") == "US cities"
    assert asked_for("How many turtles does Nate have?") == "turtles"
    assert asked_for("How many times has John injured his ankle?") is None
    assert asked_for("What is Caroline's identity?") is None
    assert asked_for("When did Melanie paint a sunrise?") is None


def test_names_are_taken_out_of_the_query() -> None:
    assert without_names(QUESTION, ["Melanie"]) == "What activities does partake in?"
    assert without_names("What might John's degree be in?", ["John Smith"]) == (
        "What might degree be in?"
    )
    assert without_names("Did Johnny call?", ["John"]) == "Did Johnny call?"


async def search(memory: MemoryManager, **change: object) -> dict[str, float]:
    memory.retrieval = RetrievalSettings(**{**PLAIN, **change})
    hits = await memory.search_episodes(Scope(user_id="u"), QUESTION, top_k=5)
    return {hit.episode.content: hit.score for hit in hits}


async def test_the_asked_for_phrase_finds_a_turn_the_question_misses(
    model_dir: Path, tmp_path: Path
) -> None:
    settings = Settings(
        data_dir=tmp_path,
        embedding=EmbeddingSettings(provider="local", model=str(model_dir)),
        retrieval=RetrievalSettings(**PLAIN),
    )
    async with open_manager(settings) as memory:
        messages = [
            NewMessage(content=text, producer=speaker, timestamp=T0 + timedelta(seconds=n))
            for n, (speaker, text) in enumerate(TURNS)
        ]
        await memory.add_messages(Scope(user_id="u", session_id="s1"), messages, working=False)
        off = await search(memory)
        on = await search(memory, speaker_focus_phrase_weight=0.25)
        unnamed = await search(memory, speaker_focus_phrase_weight=0.25, speaker_focus_unnamed=True)
    assert SWIMMING not in off  # the top 5 hold the turns saying "partake" or "Melanie"
    assert SWIMMING in on
    # without "Melanie" in the focus list's query, Melanie's own turns are ranked by the rest
    assert SWIMMING in unnamed
    assert unnamed[SWIMMING] > on[SWIMMING]
