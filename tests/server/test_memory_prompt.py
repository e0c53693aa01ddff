"""POST /v1/memory-prompt through the real app on the embedded stores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memmachine.config import EmbeddingSettings
from memmachine.prompting import estimate_tokens
from tests.server.conftest import AppFactory
from tests.server.test_metrics import scrape, value

QUERY = "Any ideas for the anniversary dinner in Porto?"


def seed(api: TestClient, user: str, session: str, marker: str) -> None:
    facts = [
        {"tag": "food", "feature": "diet", "value": f"vegetarian {marker}", "confidence": 0.95},
        {"tag": "family", "feature": "partner", "value": f"Rui {marker}", "confidence": 0.6},
    ]
    response = api.post("/v1/profile", json={"user_id": user, "facts": facts})
    assert response.status_code == 200, response.text
    response = api.post(
        "/v1/memories",
        json={
            "user_id": user,
            "session_id": "last-year",
            "working": False,
            "messages": [
                {
                    "content": f"We loved the anniversary dinner at the tasca in Porto {marker}",
                    "producer": user,
                    "timestamp": "2023-06-12T20:00:00Z",
                }
            ],
        },
    )
    assert response.status_code == 201, response.text
    response = api.post(
        f"/v1/sessions/{session}/working/messages",
        json={
            "user_id": user,
            "messages": [
                {"role": "user", "content": f"Our anniversary is next Friday {marker}"},
                {"role": "assistant", "content": f"Congratulations! How can I help {marker}?"},
            ],
        },
    )
    assert response.status_code == 200, response.text
    response = api.put(
        f"/v1/sessions/{session}/working",
        json={"user_id": user, "summary": f"Planning an anniversary surprise {marker}"},
    )
    assert response.status_code == 200, response.text


def prompt(api: TestClient, **body: Any) -> dict[str, Any]:
    response = api.post("/v1/memory-prompt", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def test_every_kind_of_memory_lands_in_its_section(api: TestClient) -> None:
    seed(api, "mp-ana", "chat", "ANA")
    seed(api, "mp-bob", "chat", "BOB")
    body = prompt(api, user_id="mp-ana", session_id="chat", query=QUERY)
    assert body["format"] == "openai"
    messages = body["messages"]
    system = messages[0]
    assert system["role"] == "system"
    text = system["content"]
    facts, rest = text.split("## Relevant past episodes")
    episodes, summary = rest.split("## Session summary")
    assert "## Profile facts" in facts
    assert facts.index("vegetarian ANA (confidence 0.95)") < facts.index("Rui ANA")
    assert "[2023-06-12 20:00 UTC] mp-ana: We loved the anniversary dinner" in episodes
    assert "Planning an anniversary surprise ANA" in summary
    assert messages[1:] == [
        {"role": "user", "content": "Our anniversary is next Friday ANA"},
        {"role": "assistant", "content": "Congratulations! How can I help ANA?"},
        {"role": "user", "content": QUERY},
    ]
    assert len(body["fact_ids"]) == 2
    assert len(body["episode_ids"]) == 1
    assert body["message_count"] == 2
    assert body["summary_included"] is True
    assert body["token_count"] <= body["max_tokens"] == 2000
    # another user's memories never appear
    everything = str(body)
    assert "BOB" not in everything
    assert "mp-bob" not in everything


def test_budget_is_respected_through_the_api(api: TestClient) -> None:
    seed(api, "mp-cy", "chat", "CY")
    full = prompt(api, user_id="mp-cy", session_id="chat", query=QUERY)
    for budget in (20, 40, 60, 90, full["token_count"] - 1):
        body = prompt(api, user_id="mp-cy", session_id="chat", query=QUERY, max_tokens=budget)
        assert body["token_count"] <= budget
        texts = [m["content"] for m in body["messages"]]
        assert body["token_count"] == sum(4 + estimate_tokens(t) for t in texts)
        assert body["tokenizer"] == "estimate"
        assert texts[-1] == QUERY
    smallest = prompt(api, user_id="mp-cy", session_id="chat", query=QUERY, max_tokens=20)
    assert smallest["messages"] == [{"role": "user", "content": QUERY}]
    assert smallest["dropped"] == {"facts": 2, "episodes": 1, "summary": 1, "messages": 2}
    too_small = api.post(
        "/v1/memory-prompt",
        json={"user_id": "mp-cy", "session_id": "chat", "query": QUERY, "max_tokens": 5},
    )
    assert too_small.status_code == 413
    assert too_small.json()["error"]["field"] == "query"


@pytest.mark.parametrize("format", ["anthropic", "gemini"])
def test_provider_formats_through_the_api(api: TestClient, format: str) -> None:
    seed(api, f"mp-{format}", "chat", "DEE")
    body = prompt(api, user_id=f"mp-{format}", session_id="chat", query=QUERY, format=format)
    assert body["format"] == format
    if format == "anthropic":
        assert list(body["body"]) == ["system", "messages"]
        assert body["body"]["system"] == body["system"]
        assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    else:
        assert list(body["body"]) == ["system_instruction", "contents"]
        assert body["body"]["system_instruction"] == {"parts": [{"text": body["system"]}]}
        assert [m["role"] for m in body["messages"]] == ["user", "model", "user"]
        assert body["messages"][-1] == {"role": "user", "parts": [{"text": QUERY}]}


def test_without_a_session_there_is_no_conversation(api: TestClient) -> None:
    seed(api, "mp-eve", "chat", "EVE")
    body = prompt(api, user_id="mp-eve", query=QUERY)
    assert "## Session summary" not in body["system"]
    assert "vegetarian EVE" in body["system"]
    assert body["messages"][1:] == [{"role": "user", "content": QUERY}]


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"format": "cohere"}, "format"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"query": "   "}, "query"),
        ({"user_id": None}, "user_id"),
        ({"recent_messages": -1}, "recent_messages"),
    ],
)
def test_bad_requests_are_422_naming_the_field(
    api: TestClient, patch: dict[str, Any], field: str
) -> None:
    body = {"user_id": "mp-bad", "session_id": "s", "query": QUERY, **patch}
    body = {key: value for key, value in body.items() if value is not None}
    response = api.post("/v1/memory-prompt", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == field


def test_a_memory_prompt_embeds_its_query_once_for_memories_and_procedures(
    app_factory: AppFactory, model_dir: Path
) -> None:
    """The query's vector is computed once and shared by the memory search and the
    procedure search (each embedding is a model call on the request's path)."""
    app = app_factory(embedding=EmbeddingSettings(provider="local", model=str(model_dir)))
    made = app.post(
        "/v1/procedures", json={"goal": "Book a dinner table", "steps": ["Ask for the date"]}
    )
    assert made.status_code == 201, made.text
    seed(app, "embed-once", "s1", "m1")

    def embedded() -> float:
        texts = scrape(app)["memmachine_embedded_texts"]
        return value(texts, "memmachine_embedded_texts_total")

    before = embedded()
    prompt = app.post(
        "/v1/memory-prompt",
        json={"user_id": "embed-once", "session_id": "s1", "query": QUERY},
    )
    assert prompt.status_code == 200, prompt.text
    assert prompt.json()["procedure_ids"] == [made.json()["id"]]
    assert "tasca in Porto" in prompt.json()["system"]
    assert embedded() - before == 1
