"""The extraction and consolidation prompts post-check the model's answer against their
inputs (scripted model on loopback)."""

from __future__ import annotations

import json

from memmachine.adapters.openai.openai_language_model import OpenAILanguageModel
from memmachine.config import ExtractionSettings
from memmachine.prompting.llm import (
    CandidateFact,
    ExistingFact,
    PromptMessage,
    decide_consolidation,
    extract_candidates,
)
from tests.fakes.llm_fixtures import llm_server  # noqa: F401  (the fixture)
from tests.fakes.llm_server import ScriptedChatServer

MESSAGES = [
    PromptMessage(id="e1", role="user", content="My anniversary is October 26"),
    PromptMessage(id="e2", role="user", content="I prefer window seats"),
]
KNOWN = [ExistingFact(id="f1", tag="preferences", feature="seat", value="Aisle seats")]


def candidate(value: str) -> CandidateFact:
    return CandidateFact(tag="preferences", feature="seat", value=value, kind="explicit")


async def test_extraction_keeps_known_topics_and_cited_messages(
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    llm_server.reply(
        json.dumps(
            {
                "facts": [
                    {
                        "tag": "personal_info",
                        "feature": "anniversary",
                        "value": "Anniversary on October 26",
                        "kind": "explicit",
                        "episode_ids": ["e1", "made-up"],
                    },
                    {
                        "tag": "preferences",
                        "feature": "seat",
                        "value": "Window",
                        "kind": "implicit",
                    },
                    {"tag": "gossip", "feature": "x", "value": "y", "kind": "implicit"},
                ]
            }
        )
    )
    topics = ExtractionSettings(topics=["travel"]).all_topics
    async with OpenAILanguageModel(llm_server.base_url, "m", api_key=None) as model:
        facts = await extract_candidates(model, MESSAGES, topics, KNOWN)
    assert [(f.feature, f.kind, f.episode_ids) for f in facts] == [
        ("anniversary", "explicit", ["e1"]),
        ("seat", "implicit", ["e1", "e2"]),  # none cited: every message
    ]
    sent = llm_server.completions[0].last_user_content
    assert "travel" in sent
    assert "Aisle seats" in sent


async def test_consolidation_falls_back_for_unknown_ids_and_missing_answers(
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    llm_server.reply(
        json.dumps(
            {
                "decisions": [
                    {"index": 0, "action": "UPDATE", "fact_id": "f1"},
                    {"index": 1, "action": "UPDATE", "fact_id": "nope"},
                    {"index": 2, "action": "INVALIDATE", "fact_id": "nope"},
                    {"index": 9, "action": "NONE"},
                ]
            }
        )
    )
    candidates = [candidate("Window"), candidate("Front"), candidate("Back"), candidate("Any")]
    async with OpenAILanguageModel(llm_server.base_url, "m", api_key=None) as model:
        decisions = await decide_consolidation(model, candidates, KNOWN)
        # Nothing stored yet: everything is new and the model is not asked.
        fresh = await decide_consolidation(model, candidates[:1], [])
    assert [(d.action, d.fact_id) for d in decisions] == [
        ("UPDATE", "f1"),
        ("CREATE", None),
        ("NONE", None),
        ("CREATE", None),
    ]
    assert [d.action for d in fresh] == ["CREATE"]
    assert len(llm_server.completions) == 1
