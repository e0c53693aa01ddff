"""How extracted facts live on, through the public API with a scripted model: confidence
rises with corroboration and falls with weaker contradictions (down to invalidation), a
stronger contradiction replaces the value, deleting the episode a fact rested on removes or
restores it, custom topics bound what is extracted, and consolidation sees the similar
facts however many the user has."""

from __future__ import annotations

import json
import time
from typing import Any

from fastapi.testclient import TestClient

from memmachine.config import ExtractionSettings, JobSettings, LlmSettings
from memmachine.models import ExtractionTopic
from tests.fakes.llm_fixtures import llm_server  # noqa: F401  (the fixture)
from tests.fakes.llm_server import ScriptedChatServer
from tests.server.conftest import AppFactory

USER = "lena"
CITY = {"tag": "personal_info", "feature": "home_city"}


def _app(app_factory: AppFactory, llm: ScriptedChatServer, **extraction: Any) -> TestClient:
    return app_factory(
        llm=LlmSettings(base_url=llm.base_url, model="x", max_retries=0),
        jobs=JobSettings(
            backoff_base_seconds=0.0,
            backoff_max_seconds=0.0,
            poll_interval_seconds=0.02,
            max_attempts=1,
        ),
        extraction=ExtractionSettings(**extraction),
    )


def _say(api: TestClient, text: str, *replies: str) -> list[str]:
    """Add one user message and wait until its extraction job has finished."""
    before = len(_extract_jobs(api))
    response = api.post(
        "/v1/memories",
        json={"user_id": USER, "session_id": "s1", "messages": [{"content": text}]},
    )
    assert response.status_code == 201, response.text
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        jobs = _extract_jobs(api)
        if len(jobs) > before and all(job["status"] in ("done", "dead") for job in jobs):
            assert jobs[0]["status"] == "done", jobs[0]
            break
        time.sleep(0.02)
    ids: list[str] = response.json()["episode_ids"]
    return ids


def _extract_jobs(api: TestClient) -> list[dict[str, Any]]:
    listed = api.get("/v1/jobs", params={"user_id": USER}).json()["jobs"]
    return [job for job in listed if job["kind"] == "extract"]


def _facts(*facts: dict[str, Any]) -> str:
    return json.dumps({"facts": list(facts)})


def _decide(action: str, fact_id: str | None = None) -> str:
    return json.dumps({"decisions": [{"index": 0, "action": action, "fact_id": fact_id}]})


def _profile(api: TestClient) -> list[dict[str, Any]]:
    facts: list[dict[str, Any]] = api.get("/v1/profile", params={"user_id": USER}).json()["facts"]
    return facts


def test_weaker_contradictions_lower_confidence_until_the_fact_is_invalidated(
    app_factory: AppFactory,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    api = _app(app_factory, llm_server, min_confidence=0.3)
    porto = {**CITY, "value": "Porto", "kind": "explicit", "confidence": 0.9}
    llm_server.reply(_facts(porto))
    _say(api, "I live in Porto")
    [fact] = _profile(api)

    hint = {**CITY, "value": "Lisbon", "kind": "implicit", "confidence": 0.5}
    llm_server.reply(_facts(hint), _decide("UPDATE", fact["id"]))
    _say(api, "Took the morning train from Lisbon again")
    [weakened] = _profile(api)
    assert (weakened["id"], weakened["value"]) == (fact["id"], "Porto")  # not replaced
    assert 0.44 < weakened["confidence"] < 0.46  # 0.9 * (1 - 0.5)

    llm_server.reply(_facts({**hint, "confidence": 0.4}), _decide("UPDATE", fact["id"]))
    _say(api, "Lisbon traffic was bad today")
    assert _profile(api) == []  # 0.45 * 0.6 = 0.27 < 0.3: invalidated
    body = api.get("/v1/profile/history", params={"user_id": USER, **CITY}).json()
    [version] = body["history"]
    assert version["value"] == "Porto"
    assert version["reason"] == "contradicted by a later conversation"


def test_a_stronger_contradiction_replaces_the_value_and_keeps_the_old_one(
    app_factory: AppFactory,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    api = _app(app_factory, llm_server)
    llm_server.reply(_facts({**CITY, "value": "Porto", "kind": "implicit", "confidence": 0.6}))
    _say(api, "Porto is lovely in spring")
    [fact] = _profile(api)
    moved = {**CITY, "value": "Lisbon", "kind": "explicit", "confidence": 0.95}
    llm_server.reply(_facts(moved), _decide("UPDATE", fact["id"]))
    _say(api, "Remember that I moved to Lisbon")
    [now] = _profile(api)
    assert (now["id"], now["value"], now["source"]) == (fact["id"], "Lisbon", "user-explicit")
    assert now["confidence"] == 0.95
    history = api.get("/v1/profile/history", params={"user_id": USER, **CITY}).json()
    assert [v["value"] for v in history["history"]] == ["Porto"]


def test_deleting_the_episode_a_fact_rested_on_restores_or_removes_it(
    app_factory: AppFactory,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    api = _app(app_factory, llm_server)
    llm_server.reply(_facts({**CITY, "value": "Porto", "kind": "explicit", "confidence": 0.9}))
    porto = _say(api, "I live in Porto")
    [fact] = _profile(api)
    lisbon = {**CITY, "value": "Lisbon", "kind": "explicit", "confidence": 0.95}
    llm_server.reply(_facts(lisbon), _decide("UPDATE", fact["id"]))
    moved = _say(api, "I moved to Lisbon last month")
    assert _profile(api)[0]["value"] == "Lisbon"

    # The message about moving is deleted: the fact goes back to what Porto backs.
    assert api.delete(f"/v1/memories/{moved[0]}", params={"user_id": USER}).status_code == 204
    [restored] = _profile(api)
    assert (restored["id"], restored["value"]) == (fact["id"], "Porto")
    assert restored["source_episode_ids"] == porto
    # The restored value is searchable again.
    hits = api.post("/v1/profile/search", json={"user_id": USER, "query": "Porto"}).json()
    assert [hit["value"] for hit in hits["facts"]] == ["Porto"]

    # Then the message about Porto: nothing backs the fact any more.
    assert api.delete(f"/v1/memories/{porto[0]}", params={"user_id": USER}).status_code == 204
    assert _profile(api) == []
    history = api.get("/v1/profile/history", params={"user_id": USER, **CITY}).json()
    assert history == {"current": None, "history": []}


def test_a_custom_topic_schema_bounds_what_is_extracted(
    app_factory: AppFactory,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    risk = ExtractionTopic(
        name="risk_profile",
        description="How much investment risk the client accepts",
        schema={"properties": {"tolerance": {"enum": ["low", "medium", "high"]}}},
        examples=[
            {
                "message": "I can't sleep when stocks fall",
                "facts": [{"feature": "tolerance", "value": "low"}],
            }
        ],
    )
    api = _app(app_factory, llm_server, topics=[risk])
    llm_server.reply(
        _facts(
            {"tag": "risk_profile", "feature": "tolerance", "value": "high", "kind": "explicit"},
            {"tag": "risk_profile", "feature": "tolerance", "value": "yolo", "kind": "explicit"},
            {"tag": "risk_profile", "feature": "favourite_stock", "value": "X", "kind": "implicit"},
        )
    )
    _say(api, "I'm fine with big swings, put it all in growth funds")
    prompt = llm_server.completions[0].last_user_content
    assert "How much investment risk the client accepts" in prompt
    assert "I can't sleep when stocks fall" in prompt
    assert [(f["tag"], f["feature"], f["value"]) for f in _profile(api)] == [
        ("risk_profile", "tolerance", "high")
    ]


def test_consolidation_sees_the_similar_fact_among_hundreds(
    app_factory: AppFactory,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    api = _app(app_factory, llm_server)
    filler = [
        {
            "tag": "conversation_details",
            "feature": f"topic_{n:03d}",
            "value": f"chatted about item {n}",
        }
        for n in range(250)
    ]
    zebra = {"tag": "preferences", "feature": "zoo_animal", "value": "loves zebras"}
    response = api.post("/v1/profile", json={"user_id": USER, "facts": [*filler, zebra]})
    assert response.status_code in (200, 201), response.text
    zebra_id = next(f["id"] for f in _profile(api) if f["feature"] == "zoo_animal")
    candidate = {
        **zebra,
        "value": "loves zebras and okapis",
        "kind": "explicit",
        "confidence": 1.0,  # as sure as the fact set by hand, so it may replace it
    }
    llm_server.reply(_facts(candidate), _decide("UPDATE", zebra_id))
    _say(api, "Zebras and okapis are my favourite animals")
    consolidation = llm_server.completions[-1].last_user_content
    assert zebra_id in consolidation  # sorted last of 251, yet shown to the model
    assert consolidation.count('"id"') <= 60  # and not the whole profile
    assert next(f for f in _profile(api) if f["id"] == zebra_id)["value"] == (
        "loves zebras and okapis"
    )


def test_a_fact_can_be_invalidated_by_hand_and_its_history_stays(
    app_factory: AppFactory,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    api = _app(app_factory, llm_server)
    response = api.post(
        "/v1/profile",
        json={"user_id": USER, "facts": [{**CITY, "value": "Porto"}]},
    )
    [fact] = response.json()["facts"]
    url = f"/v1/profile/facts/{fact['id']}/invalidate"
    # Another user cannot close it, nor learn that it exists.
    assert api.post(url, json={"user_id": "someone-else"}).status_code == 404
    assert api.post(url, json={"user_id": USER, "reason": ""}).status_code == 422
    closed = api.post(url, json={"user_id": USER, "reason": "moved away"})
    assert closed.status_code == 200, closed.text
    body = closed.json()
    assert body["current"] is None
    assert [(v["value"], v["reason"]) for v in body["history"]] == [("Porto", "moved away")]
    assert _profile(api) == []
    assert api.post(url, json={"user_id": USER}).status_code == 404  # already closed


def test_facts_carry_their_source_type(
    app_factory: AppFactory,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    api = _app(app_factory, llm_server)
    seeded = api.post("/v1/profile", json={"user_id": USER, "facts": [{**CITY, "value": "Porto"}]})
    assert seeded.json()["facts"][0]["source"] == "bootstrapped"

    # A note the agent saved with the remember tool becomes a fact marked "tool".
    before = len(_extract_jobs(api))
    asked = len(llm_server.completions)
    llm_server.reply(
        _facts(
            {"tag": "preferences", "feature": "seat", "value": "Aisle seat", "kind": "explicit"}
        ),
        _decide("CREATE"),
    )
    tool_call = {
        "id": "call_1",
        "type": "function",
        "function": {
            "name": "remember",
            "arguments": json.dumps(
                {"content": "Lena always wants an aisle seat", "session_id": "s1"}
            ),
        },
    }
    response = api.post("/v1/tools/execute", json={"user_id": USER, "tool_call": tool_call})
    assert response.status_code == 200, response.text
    deadline = time.monotonic() + 20
    while len([j for j in _extract_jobs(api) if j["status"] in ("done", "dead")]) <= before:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert "memory-tool" in llm_server.completions[asked].last_user_content  # the extraction
    seat = next(f for f in _profile(api) if f["feature"] == "seat")
    assert (seat["value"], seat["source"]) == ("Aisle seat", "tool")
