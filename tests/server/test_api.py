"""The REST API end to end on the embedded stores: what an agent sends and gets back."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import shared_model_dir

needs_model = pytest.mark.skipif(shared_model_dir() is None, reason="no local ONNX model")


def add(api: TestClient, user: str, session: str, *texts: str, **extra: Any) -> list[str]:
    response = api.post(
        "/v1/memories",
        json={
            "user_id": user,
            "session_id": session,
            "messages": [{"content": text, "producer": user} for text in texts],
            **extra,
        },
    )
    assert response.status_code == 201, response.text
    ids: list[str] = response.json()["episode_ids"]
    return ids


def search(api: TestClient, user: str, query: str, **extra: Any) -> dict[str, Any]:
    response = api.post("/v1/memories/search", json={"user_id": user, "query": query, **extra})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def contents(body: dict[str, Any]) -> list[str]:
    return [hit["content"] for hit in body["episodic"]]


def test_health_reports_every_store_and_the_search_mode(api: TestClient) -> None:
    body = api.get("/health").json()
    assert body["status"] == "ok"
    assert {"episodic", "profile", "working"} <= set(body["stores"])
    assert all(store["status"] == "ok" for store in body["stores"].values())
    if shared_model_dir() is not None:
        assert body["mode"] == "hybrid"
        assert body["embedder"]["dimensions"] == 384


def test_openapi_describes_the_v1_routes(api: TestClient) -> None:
    paths = api.get("/openapi.json").json()["paths"]
    for path in ("/v1/memories", "/v1/memories/search", "/v1/profile", "/health"):
        assert path in paths
    assert api.get("/docs").status_code == 200


@needs_model
def test_search_finds_by_meaning_and_by_keyword_and_never_across_users(api: TestClient) -> None:
    add(
        api,
        "alice-s1",
        "s1",
        "I adopted a golden retriever puppy last weekend",
        "My sister lives in Lisbon and works as an architect",
        "The quarterly invoice number is INV-20931",
    )
    add(
        api,
        "bob-s1",
        "s1",
        "I have a cat named Whiskers who hates the vet",
        "My dentist appointment got moved to Thursday",
    )

    by_meaning = search(api, "alice-s1", "what pet does she have?", top_k=1)
    assert contents(by_meaning) == ["I adopted a golden retriever puppy last weekend"]

    by_keyword = search(api, "alice-s1", "INV-20931", top_k=1)
    assert contents(by_keyword) == ["The quarterly invoice number is INV-20931"]

    bob = search(api, "bob-s1", "pet animal dog puppy golden retriever", top_k=10)
    assert contents(bob)
    assert all("retriever" not in text for text in contents(bob))
    assert {hit["user_id"] for hit in bob["episodic"]} == {"bob-s1"}


def test_search_hit_carries_score_timestamp_scope_and_metadata(api: TestClient) -> None:
    response = api.post(
        "/v1/memories",
        json={
            "user_id": "carol-meta",
            "session_id": "trip",
            "agent_id": "travel-bot",
            "messages": [
                {
                    "role": "assistant",
                    "producer": "travel-bot",
                    "content": "Your flight to Osaka leaves at 09:40 from gate B12",
                    "timestamp": "2024-03-05T09:00:00+01:00",
                    "metadata": {"booking": {"ref": "XK42", "legs": [1, 2]}},
                }
            ],
        },
    )
    assert response.status_code == 201
    hit = search(api, "carol-meta", "Osaka flight gate")["episodic"][0]
    assert hit["content"].startswith("Your flight to Osaka")
    assert 0 < hit["score"] <= 1
    assert hit["timestamp"] == "2024-03-05T08:00:00Z"
    assert (hit["session_id"], hit["agent_id"], hit["role"]) == ("trip", "travel-bot", "assistant")
    assert hit["metadata"] == {"booking": {"ref": "XK42", "legs": [1, 2]}}


def test_expand_context_returns_the_neighbouring_turns(api: TestClient) -> None:
    add(
        api,
        "dan-ctx",
        "s",
        "Where should we eat tonight?",
        "How about the ramen place on 5th?",
        "Sounds good, book it for eight",
    )
    body = search(api, "dan-ctx", "ramen", top_k=1, expand_context=1, types=["episodic"])
    texts = contents(body)
    assert texts[0] == "How about the ramen place on 5th?"
    assert set(texts[1:]) == {"Where should we eat tonight?", "Sounds good, book it for eight"}
    assert [hit["context"] for hit in body["episodic"]] == [False, True, True]


def test_ids_may_come_from_headers(api: TestClient) -> None:
    headers = {"X-User-ID": "erin-h", "X-Session-ID": "hs", "X-Agent-ID": "crm"}
    response = api.post(
        "/v1/memories", json={"messages": [{"content": "Renewal is due in May"}]}, headers=headers
    )
    assert response.status_code == 201
    listed = api.get("/v1/memories", headers={"X-User-ID": "erin-h"}).json()
    assert listed["total"] == 1
    episode = listed["episodes"][0]
    assert (episode["session_id"], episode["agent_id"]) == ("hs", "crm")
    # the body wins over a header
    response = api.post(
        "/v1/memories/search",
        json={"query": "renewal", "user_id": "someone-else"},
        headers={"X-User-ID": "erin-h"},
    )
    assert response.json()["episodic"] == []


def test_list_get_and_delete_episodes(api: TestClient) -> None:
    ids = add(api, "fay-crud", "s1", "one", "two", "three")
    add(api, "fay-crud", "s2", "four")
    page = api.get("/v1/memories", params={"user_id": "fay-crud", "session_id": "s1"}).json()
    assert [e["content"] for e in page["episodes"]] == ["one", "two", "three"]
    sequences = [e["sequence"] for e in page["episodes"]]
    assert sequences == list(range(sequences[0], sequences[0] + 3))
    newest = api.get(
        "/v1/memories", params={"user_id": "fay-crud", "order": "newest", "limit": 1}
    ).json()
    assert newest["total"] == 4
    assert len(newest["episodes"]) == 1

    got = api.get(f"/v1/memories/{ids[1]}", params={"user_id": "fay-crud"})
    assert got.status_code == 200
    assert got.json()["content"] == "two"
    # another user cannot read it, nor delete it
    assert api.get(f"/v1/memories/{ids[1]}", params={"user_id": "mallory"}).status_code == 404
    assert api.delete(f"/v1/memories/{ids[1]}", params={"user_id": "mallory"}).status_code == 404

    assert api.delete(f"/v1/memories/{ids[1]}", params={"user_id": "fay-crud"}).status_code == 204
    assert api.get(f"/v1/memories/{ids[1]}", params={"user_id": "fay-crud"}).status_code == 404
    assert api.delete(f"/v1/memories/{ids[1]}", params={"user_id": "fay-crud"}).status_code == 404
    page = api.get("/v1/memories", params={"user_id": "fay-crud", "session_id": "s1"}).json()
    assert [e["content"] for e in page["episodes"]] == ["one", "three"]


def test_profile_facts_set_update_list_search_delete(api: TestClient) -> None:
    user = "gus-profile"
    response = api.post(
        "/v1/profile",
        json={
            "user_id": user,
            "facts": [
                {"tag": "preferences", "feature": "drink", "value": "oolong tea"},
                {"tag": "work", "feature": "employer", "value": "Acme Corp", "confidence": 0.7},
            ],
        },
    )
    assert response.status_code == 200, response.text
    first = {f["feature"]: f for f in response.json()["facts"]}
    assert first["employer"]["confidence"] == 0.7

    updated = api.post(
        "/v1/profile",
        json={
            "user_id": user,
            "facts": [{"tag": "work", "feature": "employer", "value": "Globex"}],
        },
    ).json()["facts"][0]
    assert updated["id"] == first["employer"]["id"]
    assert updated["value"] == "Globex"
    assert updated["created_at"] == first["employer"]["created_at"]
    assert updated["updated_at"] >= first["employer"]["updated_at"]

    facts = api.get("/v1/profile", params={"user_id": user}).json()["facts"]
    assert {(f["tag"], f["feature"], f["value"]) for f in facts} == {
        ("preferences", "drink", "oolong tea"),
        ("work", "employer", "Globex"),
    }
    assert api.get("/v1/profile", params={"user_id": "nobody"}).json()["facts"] == []

    found = api.post("/v1/profile/search", json={"user_id": user, "query": "tea"}).json()
    assert found["facts"][0]["feature"] == "drink"
    combined = search(api, user, "which company does he work for", types=["profile"])
    assert combined["profile"]
    assert combined["episodic"] == []

    fact_id = first["drink"]["id"]
    assert api.delete(f"/v1/profile/facts/{fact_id}", params={"user_id": "x"}).status_code == 404
    assert api.delete(f"/v1/profile/facts/{fact_id}", params={"user_id": user}).status_code == 204
    left = api.delete("/v1/profile", params={"user_id": user, "tag": "work"}).json()
    assert left == {"deleted": 1}
    assert api.get("/v1/profile", params={"user_id": user}).json()["facts"] == []


def test_working_memory_versions_window_and_conflicts(api: TestClient) -> None:
    base = "/v1/sessions/w1/working"
    user = {"user_id": "hal-working"}
    empty = api.get(base, params=user).json()
    assert (empty["version"], empty["messages"], empty["state"]) == (0, [], {})

    created = api.put(base, json={**user, "state": {"step": 1}, "expected_version": 0}).json()
    assert created["version"] == 1
    again = api.put(base, json={**user, "state": {"step": 9}, "expected_version": 0})
    assert again.status_code == 409
    assert again.json()["error"]["current_version"] == 1

    appended = api.post(
        f"{base}/messages",
        json={**user, "messages": [{"content": f"m{i}"} for i in range(5)]},
    ).json()
    assert (appended["version"], appended["message_count"]) == (2, 5)

    stale = api.put(base, json={**user, "state": {"step": 2}, "expected_version": 1})
    assert stale.status_code == 409
    ok = api.put(
        base, json={**user, "state": {"step": 2}, "summary": "talked", "expected_version": 2}
    )
    assert ok.status_code == 200
    assert ok.json()["version"] == 3

    window = api.get(base, params={**user, "last_n": 2}).json()
    assert [m["content"] for m in window["messages"]] == ["m3", "m4"]
    assert window["message_count"] == 5
    assert window["state"] == {"step": 2}
    assert window["summary"] == "talked"
    assert window["ttl_seconds"] is not None
    assert window["ttl_seconds"] > 0

    # the same session id under another user is another session
    assert api.get(base, params={"user_id": "ivy-working"}).json()["version"] == 0

    assert api.delete(base, params=user).status_code == 204
    assert api.get(base, params=user).json()["version"] == 0
    assert api.delete(base, params=user).status_code == 404


def test_working_memory_pages_with_offset_and_limit(api: TestClient) -> None:
    base = "/v1/sessions/long/working"
    user = {"user_id": "pat-paging"}
    api.post(
        f"{base}/messages", json={**user, "messages": [{"content": f"t{i}"} for i in range(7)]}
    )
    page = api.get(base, params={**user, "offset": 3, "limit": 2}).json()
    assert [m["content"] for m in page["messages"]] == ["t3", "t4"]
    assert (page["first_index"], page["message_count"]) == (3, 7)
    response = api.get(base, params={**user, "offset": 3, "last_n": 2})
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "last_n"


def test_added_messages_also_land_in_working_memory(api: TestClient) -> None:
    add(api, "jay-wm", "chat", "hello there", "general kenobi")
    memory = api.get("/v1/sessions/chat/working", params={"user_id": "jay-wm"}).json()
    assert [m["content"] for m in memory["messages"]] == ["hello there", "general kenobi"]
    body = search(api, "jay-wm", "hello", session_id="chat")
    assert body["working"]["message_count"] == 2


def test_forget_session_removes_it_from_all_three_stores(api: TestClient) -> None:
    user = "kim-forget"
    add(api, user, "gone", "my locker code is 4411")
    add(api, user, "kept", "my bike is blue")
    api.post(
        "/v1/profile",
        json={
            "user_id": user,
            "session_id": "gone",
            "facts": [{"tag": "t", "feature": "locker", "value": "4411"}],
        },
    )
    api.post(
        "/v1/profile",
        json={"user_id": user, "facts": [{"tag": "t", "feature": "bike", "value": "blue"}]},
    )

    report = api.delete("/v1/sessions/gone", params={"user_id": user}).json()
    assert report == {"episodes_deleted": 1, "facts_deleted": 1, "sessions_deleted": 1}
    assert "my locker code is 4411" not in contents(search(api, user, "locker code 4411"))
    assert api.get("/v1/sessions/gone/working", params={"user_id": user}).json()["version"] == 0
    assert [
        f["feature"] for f in api.get("/v1/profile", params={"user_id": user}).json()["facts"]
    ] == ["bike"]
    assert api.get("/v1/memories", params={"user_id": user}).json()["total"] == 1


def test_forget_user_removes_everything_and_only_that_user(api: TestClient) -> None:
    for user in ("lee-forget", "max-keep"):
        add(api, user, "s", f"{user} likes sailing")
        api.post(
            "/v1/profile",
            json={"user_id": user, "facts": [{"tag": "t", "feature": "hobby", "value": "sail"}]},
        )
    report = api.delete("/v1/users/lee-forget").json()
    assert report == {"episodes_deleted": 1, "facts_deleted": 1, "sessions_deleted": 1}
    assert api.get("/v1/memories", params={"user_id": "lee-forget"}).json()["total"] == 0
    assert api.get("/v1/profile", params={"user_id": "lee-forget"}).json()["facts"] == []
    assert (
        api.get("/v1/sessions/s/working", params={"user_id": "lee-forget"}).json()["version"] == 0
    )
    assert api.get("/v1/memories", params={"user_id": "max-keep"}).json()["total"] == 1
    assert len(api.get("/v1/profile", params={"user_id": "max-keep"}).json()["facts"]) == 1
