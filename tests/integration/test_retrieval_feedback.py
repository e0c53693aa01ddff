"""Pseudo-relevance feedback on the real embedded stores: a turn that shares no word with the
question, only with the turns the question found, is found once the stage is on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from memmachine import Scope, open_manager
from memmachine.config import EmbeddingSettings, RetrievalSettings, Settings
from memmachine.models import NewMessage
from memmachine.retrieval.feedback import feedback_terms

T0 = datetime(2024, 3, 10, 18, 0, tzinfo=UTC)

#: Full text alone decides, so the test reads off what the stage adds.
LEXICAL_ONLY = {"lexical_context": 0, "neighbour_weight": 0.0, "second_neighbour_weight": 0.0}

QUESTION = "Which dogs get walked at the park?"
FOUND = [
    ("Ann", "I walk my dogs Pepper and Panda at the park."),
    ("Ann", "Pepper and Panda, my dogs, walk the park loop daily."),
]
ELSEWHERE = [
    ("Bo", "The park was crowded today."),
    ("Bo", "My neighbour's dogs bark all night."),
    ("Ann", "The park cafe closed early."),
]
#: The evidence the question cannot reach: no word in common with it.
EVIDENCE = ("Ann", "Pepper and Panda are Lab mixes.")
UNRELATED = ("Bo", "Lost my job at the bank.")


def say(turns: list[tuple[str, str]], start: int) -> list[NewMessage]:
    return [
        NewMessage(content=text, producer=who, timestamp=T0 + timedelta(seconds=start + n))
        for n, (who, text) in enumerate(turns)
    ]


def test_feedback_words_are_those_the_best_hits_share_more_than_the_other_candidates() -> None:
    sources = [text for _, text in FOUND]
    pool = [*sources, *(text for _, text in ELSEWHERE)]
    # "dogs", "walk" and "park" are the question's own; "loop" and "daily" are in one source
    assert feedback_terms(QUESTION, sources, pool, 10) == ["pepper", "panda"]
    assert feedback_terms(QUESTION, sources, pool, 1) == ["pepper"]
    # every candidate says them as often as the best hits do: nothing stands out
    assert feedback_terms(QUESTION, sources, sources, 10) == []


async def test_a_turn_that_shares_words_only_with_the_found_turns_is_found(
    tmp_path: Path,
) -> None:
    settings = Settings(
        data_dir=tmp_path,
        embedding=EmbeddingSettings(provider="none"),
        retrieval=RetrievalSettings(**LEXICAL_ONLY, feedback_sources=2),
    )
    async with open_manager(settings) as memory:
        scope = Scope(user_id="u", session_id="s1")
        await memory.add_messages(scope, say([*FOUND, *ELSEWHERE], 0), working=False)
        later = Scope(user_id="u", session_id="s2")
        await memory.add_messages(later, say([EVIDENCE, UNRELATED], 10), working=False)
        off = await memory.search_episodes(Scope(user_id="u"), QUESTION, top_k=8)
        memory.retrieval = memory.retrieval.model_copy(update={"feedback_weight": 0.3})
        on = await memory.search_episodes(Scope(user_id="u"), QUESTION, top_k=8)
    said = [hit.episode.content for hit in on]
    assert EVIDENCE[1] not in [hit.episode.content for hit in off]
    assert EVIDENCE[1] in said
    assert UNRELATED[1] not in said  # it shares nothing with the question or the found turns
    evidence = next(hit for hit in on if hit.episode.content == EVIDENCE[1])
    assert set(evidence.ranks) == {"feedback"}
    assert all(0.0 < hit.score <= 1.0 for hit in on)
    # the turns the question found keep their lead
    assert {hit.episode.content for hit in on[:2]} == {text for _, text in FOUND}
