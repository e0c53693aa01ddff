"""Speaker focus on the real embedded stores: a question asking for several things one
speaker did is also searched among that speaker's turns alone, deeper than the candidate
lists, so turns that share little but the speaker with the question still reach the results."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memmachine import Scope, open_manager
from memmachine.config import EmbeddingSettings, RetrievalSettings, Settings
from memmachine.manager import MemoryManager
from memmachine.models import NewMessage
from memmachine.retrieval.focus import asks_for_several, asks_to_infer, focus_speakers

T0 = datetime(2024, 3, 10, 18, 0, tzinfo=UTC)

#: Full text alone decides, lists five deep (top_k 5): the test reads off what the stage adds.
SHALLOW = {
    "lexical_context": 0,
    "neighbour_weight": 0.0,
    "second_neighbour_weight": 0.0,
    "min_candidates": 3,
    "candidates_per_result": 1,
}

Open = Callable[..., AbstractAsyncContextManager[MemoryManager]]

#: Caroline's turns say the question's words and the name; Melanie's tell what she does and
#: share one word with the question.
ASKING = [
    ("Caroline", "Melanie, which activities do you enjoy most?"),
    ("Caroline", "Melanie, activities with kids are what you enjoy, right?"),
    ("Caroline", "Tell me, Melanie, do you enjoy outdoor activities?"),
    ("Caroline", "Melanie, I enjoy the same activities as you do!"),
    ("Caroline", "So many activities, Melanie; which do you enjoy?"),
    ("Caroline", "Melanie, enjoy your activities this weekend."),
]
TELLING = [
    ("Melanie", "I signed up for a pottery class yesterday, I enjoy it."),
    ("Melanie", "We went camping at the beach last weekend; the kids enjoy it."),
]


@pytest.fixture
def open_memory(tmp_path: Path) -> Open:
    def opener(**retrieval: Any) -> AbstractAsyncContextManager[MemoryManager]:
        settings = Settings(
            data_dir=tmp_path,
            embedding=EmbeddingSettings(provider="none"),
            retrieval=RetrievalSettings(**{**SHALLOW, **retrieval}),
        )
        return open_manager(settings)

    return opener


async def store_conversation(memory: MemoryManager) -> None:
    turns = [*ASKING, *TELLING]
    messages = [
        NewMessage(content=text, producer=speaker, timestamp=T0 + timedelta(seconds=n))
        for n, (speaker, text) in enumerate(turns)
    ]
    await memory.add_messages(Scope(user_id="u", session_id="s1"), messages, working=False)


async def search(memory: MemoryManager, question: str, **change: Any) -> list[str]:
    memory.retrieval = memory.retrieval.model_copy(update=change)
    hits = await memory.search_episodes(Scope(user_id="u"), question, top_k=5)
    return [hit.episode.content for hit in hits]


async def on_and_off(open_memory: Open, question: str) -> tuple[list[str], list[str]]:
    """The results of ``question`` over the conversation with speaker focus on, then off."""
    async with open_memory() as memory:
        await store_conversation(memory)
        on = await search(memory, question, speaker_focus_weight=1.0)
        off = await search(memory, question, speaker_focus_weight=0.0)
    return on, off


def test_which_questions_ask_for_several_things() -> None:
    for question in (
        "What activities does Melanie partake in?",
        "Which books has Caroline read?",
        "What do Jon and Gina both have in common?",
        "How many children does Melanie have?",
        "What types of pottery have Melanie and her kids made?",
    ):
        assert asks_for_several(question), question
    for question in (
        "What is Caroline's identity?",
        "What does Melanie do to destress?",
        "When did Caroline go to the support group?",
        "Where has Melanie camped?",
    ):
        assert not asks_for_several(question), question


def test_which_questions_ask_for_an_inference() -> None:
    for question in (
        "Would Caroline likely have Dr. Seuss books on her bookshelf?",
        "What might John's degree be in?",
        "Would Melanie be considered an ally to the transgender community?",
        "Is it likely that Nate has friends besides Joanna?",
    ):
        assert asks_to_infer(question), question
    for question in ("What did Caroline research?", "When did Melanie paint a sunrise?"):
        assert not asks_to_infer(question), question


async def test_an_inference_about_a_speaker_is_focused(open_memory: Open) -> None:
    on, off = await on_and_off(open_memory, "Would Melanie enjoy activities outdoors?")
    assert not set(off) & {text for _, text in TELLING}
    assert {text for _, text in TELLING} <= set(on)


def test_only_a_question_singling_out_a_speaker_is_focused() -> None:
    speakers = {"Caroline Smith", "Melanie"}
    assert focus_speakers("What activities does Melanie like?", speakers) == {"Melanie"}
    assert focus_speakers("What do Caroline's friends do?", speakers) == {"Caroline Smith"}
    assert focus_speakers("What do Caroline and Melanie both paint?", speakers) == set()
    assert focus_speakers("What activities are fun?", speakers) == set()


async def test_the_named_speakers_turns_reach_the_results(open_memory: Open) -> None:
    question = "What activities does Melanie enjoy?"
    async with open_memory() as memory:
        await store_conversation(memory)
        off = await search(memory, question, speaker_focus_weight=0.0)
        on = await search(memory, question, speaker_focus_weight=1.0)
        hits = await memory.search_episodes(Scope(user_id="u"), question, top_k=5)
    telling = {text for _, text in TELLING}
    # five deep, the list holds only Caroline's questions: the name and the words match
    assert set(off) <= {text for _, text in ASKING}
    assert len(off) == 5
    assert telling <= set(on)
    assert set(on) - telling <= set(off)  # nothing else comes in
    focused = [hit for hit in hits if hit.episode.content in telling]
    assert all("speaker_fulltext" in hit.ranks for hit in focused)
    assert all(0.0 < hit.score <= 1.0 for hit in hits)


async def test_a_single_fact_question_is_left_alone(open_memory: Open) -> None:
    question = "What does Melanie enjoy doing?"  # one thing: not a list
    async with open_memory() as memory:
        await store_conversation(memory)
        gated = await search(memory, question, speaker_focus_weight=1.0)
        off = await search(memory, question, speaker_focus_weight=0.0)
        every = await search(
            memory, question, speaker_focus_weight=1.0, speaker_focus_lists_only=False
        )
    assert gated == off
    assert {text for _, text in TELLING} <= set(every)


async def test_a_question_naming_both_speakers_is_left_alone(open_memory: Open) -> None:
    on, off = await on_and_off(open_memory, "What activities do Caroline and Melanie enjoy?")
    assert on == off
