"""Bad input: a clear 4xx naming the field, nothing half-stored, never a traceback."""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.server.conftest import AppFactory


def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert "Traceback" not in response.text
    assert 'File "' not in response.text
    body: dict[str, Any] = response.json()["error"]
    return body


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"session_id": "s", "messages": [{"content": "x"}]}, "user_id"),
        ({"user_id": "u", "messages": [{"content": "x"}]}, "session_id"),
        ({"user_id": "u", "session_id": "s", "messages": []}, "messages"),
        ({"user_id": "u", "session_id": "s", "messages": [{"content": ""}]}, "messages.0.content"),
        (
            {"user_id": "u", "session_id": "s", "messages": [{"content": "x", "role": "robot"}]},
            "messages.0.role",
        ),
        (
            {
                "user_id": "u",
                "session_id": "s",
                "messages": [{"content": "x", "timestamp": "soon"}],
            },
            "messages.0.timestamp",
        ),
        (
            {"user_id": "u", "session_id": "s", "messages": [{"content": "x"}], "colour": "red"},
            "colour",
        ),
        ({"user_id": "has space", "session_id": "s", "messages": [{"content": "x"}]}, "user_id"),
        ({"user_id": "a:b", "session_id": "s", "messages": [{"content": "x"}]}, "user_id"),
        ({"user_id": "u", "session_id": "x" * 129, "messages": [{"content": "x"}]}, "session_id"),
    ],
)
def test_add_rejects_bad_input_naming_the_field(
    api: TestClient, payload: dict[str, Any], field: str
) -> None:
    error = error_of(api.post("/v1/memories", json=payload), 422)
    assert error["field"] == field
    assert error["code"] == "invalid_input"


def test_one_bad_message_stores_nothing_of_the_batch(api: TestClient) -> None:
    messages = [{"content": "fine"}, {"content": "also fine"}, {"content": "   "}]
    response = api.post(
        "/v1/memories", json={"user_id": "batch-u", "session_id": "s", "messages": messages}
    )
    assert error_of(response, 422)["field"] == "messages.2.content"
    assert api.get("/v1/memories", params={"user_id": "batch-u"}).json()["total"] == 0
    assert api.get("/v1/sessions/s/working", params={"user_id": "batch-u"}).json()["version"] == 0


def test_oversized_message_is_413_and_stores_nothing(app_factory: AppFactory) -> None:
    app = app_factory(limits={"max_message_chars": 50, "max_request_bytes": 10_000})
    payload = {
        "user_id": "big-u",
        "session_id": "s",
        "messages": [{"content": "short"}, {"content": "y" * 51}],
    }
    error = error_of(app.post("/v1/memories", json=payload), 413)
    assert error["field"] == "messages.1.content"
    assert app.get("/v1/memories", params={"user_id": "big-u"}).json()["total"] == 0

    huge = {"user_id": "big-u", "session_id": "s", "messages": [{"content": "z" * 20_000}]}
    assert error_of(app.post("/v1/memories", json=huge), 413)["code"] == "payload_too_large"


def test_invalid_json_and_wrong_types(api: TestClient) -> None:
    response = api.post(
        "/v1/memories", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    error_of(response, 422)
    error = error_of(
        api.post("/v1/memories/search", json={"user_id": "u", "query": "q", "top_k": "many"}), 422
    )
    assert error["field"] == "top_k"
    error = error_of(
        api.post("/v1/memories/search", json={"user_id": "u", "query": "q", "top_k": 100_000}), 422
    )
    assert error["field"] == "top_k"
    error = error_of(
        api.post("/v1/memories/search", json={"user_id": "u", "query": "q", "types": ["dreams"]}),
        422,
    )
    assert error["field"].startswith("types")


def test_bad_profile_facts(api: TestClient) -> None:
    error = error_of(
        api.post(
            "/v1/profile",
            json={
                "user_id": "p",
                "facts": [
                    {"tag": "t", "feature": "f", "value": "v"},
                    {"tag": "t", "feature": "f2", "value": "v", "confidence": 1.5},
                ],
            },
        ),
        422,
    )
    assert error["field"] == "facts.1.confidence"
    assert api.get("/v1/profile", params={"user_id": "p"}).json()["facts"] == []
    error = error_of(
        api.post("/v1/profile", json={"user_id": "p", "facts": [{"tag": "t", "value": "v"}]}), 422
    )
    assert error["field"] == "facts.0.feature"


def test_missing_things_are_404_with_an_error_body(api: TestClient) -> None:
    assert (
        error_of(api.get("/v1/memories/nope", params={"user_id": "u"}), 404)["code"] == "not_found"
    )
    assert error_of(api.get("/v1/profile/facts/nope", params={"user_id": "u"}), 404)
    assert error_of(api.get("/v1/no-such-route"), 404)


def test_working_memory_bad_version_and_state(app_factory: AppFactory) -> None:
    app = app_factory(limits={"max_state_bytes": 100})
    base = "/v1/sessions/s/working"
    error = error_of(app.put(base, json={"user_id": "u", "expected_version": -1}), 422)
    assert error["field"] == "expected_version"
    error = error_of(app.put(base, json={"user_id": "u", "state": {"k": "v" * 200}}), 413)
    assert error["field"] == "state"
    assert error_of(app.get(base, params={"user_id": "u", "last_n": -3}), 422)["field"] == "last_n"


def test_a_dead_store_is_a_503_without_internals(app_factory: AppFactory) -> None:
    app = app_factory()
    manager = app.app.state.memmachine.manager  # type: ignore[attr-defined]
    embedded = manager._resources[0]
    os.kill(embedded.pid, signal.SIGKILL)
    time.sleep(0.2)
    response = app.post(
        "/v1/memories", json={"user_id": "u", "session_id": "s", "messages": [{"content": "x"}]}
    )
    error = error_of(response, 503)
    assert "unavailable" in error["message"]
    assert "sock" not in response.text
    assert "redis" not in response.text.lower()
    health = app.get("/health").json()
    assert health["status"] == "degraded"


def test_api_keys_authenticate_and_separate_tenants(app_factory: AppFactory) -> None:
    app = app_factory(api_keys="key-a=tenant-a,key-b=tenant-b")
    body = {
        "user_id": "same-user",
        "session_id": "s",
        "messages": [{"content": "the vault code is 1234"}],
    }
    assert error_of(app.post("/v1/memories", json=body), 401)["code"] == "unauthenticated"
    wrong = app.post("/v1/memories", json=body, headers={"Authorization": "Bearer nope"})
    error_of(wrong, 401)
    ok = app.post("/v1/memories", json=body, headers={"Authorization": "Bearer key-a"})
    assert ok.status_code == 201

    query = {"user_id": "same-user", "query": "vault code"}
    as_a = app.post("/v1/memories/search", json=query, headers={"Authorization": "Bearer key-a"})
    as_b = app.post("/v1/memories/search", json=query, headers={"X-API-Key": "key-b"})
    assert len(as_a.json()["episodic"]) == 1
    assert as_b.json()["episodic"] == []
    assert app.get("/health").status_code == 200


def test_a_body_field_named_query_is_named_in_the_error(api: TestClient) -> None:
    error = error_of(api.post("/v1/memories/search", json={"user_id": "u", "query": ""}), 422)
    assert error["field"] == "query"
    error = error_of(api.get("/v1/memories", params={"user_id": "u", "limit": "many"}), 422)
    assert error["field"] == "limit"


@pytest.mark.parametrize(
    ("path", "payload", "field"),
    [
        (
            "/v1/memories",
            {"user_id": "u", "session_id": "s", "messages": [{"content": "a\u0000b"}]},
            "messages.0.content",
        ),
        (
            "/v1/memories",
            {
                "user_id": "u",
                "session_id": "s",
                "messages": [{"content": "x", "metadata": {"note": "\ud800"}}],
            },
            "messages.0.metadata",
        ),
        (
            "/v1/profile",
            {"user_id": "u", "facts": [{"tag": "t", "feature": "f", "value": "v\u0000"}]},
            "facts.0.value",
        ),
    ],
)
def test_strings_no_store_can_hold_are_refused_naming_the_field(
    api: TestClient, path: str, payload: dict[str, Any], field: str
) -> None:
    body = json.dumps(payload)  # keeps the lone surrogate as an escape
    response = api.post(path, content=body, headers={"content-type": "application/json"})
    error = error_of(response, 422)
    assert error["field"] == field
    listed = api.get("/v1/memories", params={"user_id": "u"}).json()
    assert listed["total"] == 0


def test_state_nested_too_deeply_is_refused(api: TestClient) -> None:
    state: dict[str, Any] = {}
    inner = state
    for _ in range(80):
        inner["next"] = {}
        inner = inner["next"]
    response = api.put("/v1/sessions/s/working", json={"user_id": "u", "state": state})
    error = error_of(response, 422)
    assert error["field"] == "state"
    assert api.get("/v1/sessions/s/working", params={"user_id": "u"}).json()["state"] == {}


@pytest.mark.parametrize("body", [b"{not json", b'{"user_id": "u",', b"\x80\x81 not utf-8"])
def test_a_body_that_is_not_json_is_a_422_naming_the_body(api: TestClient, body: bytes) -> None:
    """JSON that does not parse and bytes that are not even UTF-8 are the same mistake: a
    422 that names the body, never a 400 or a character position posing as a field."""
    for route in ("/v1/memories", "/v1/memories/search", "/v1/profile"):
        response = api.post(route, content=body, headers={"Content-Type": "application/json"})
        assert error_of(response, 422)["field"] == "body"
